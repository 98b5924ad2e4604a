//! On-disk cache of built program binaries, keyed by source, build options,
//! device, driver and platform, so a warm start skips the OpenCL compiler.
//! Any failure (missing, stale or corrupt file) falls back to building from
//! source; the cache never changes results.

use super::device::Device;
use crate::config;
use crate::log;
use opencl3::program::Program;
use std::path::PathBuf;

fn key(device: &Device, source: &str, options: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let driver = device.cl.driver_version().unwrap_or_default();
    for part in [
        source,
        options,
        &device.description,
        &device.vendor,
        &driver,
    ] {
        for b in part.bytes().chain([0xff]) {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}.bin")
}

fn path(device: &Device, source: &str, options: &str) -> Option<PathBuf> {
    config::get()
        .program_cache_dir
        .as_ref()
        .map(|d| d.join(key(device, source, options)))
}

/// A program built from a cached binary, if one is there and still loads.
pub fn load(device: &Device, source: &str, options: &str) -> Option<Program> {
    let p = path(device, source, options)?;
    let bin = std::fs::read(&p).ok()?;
    let id = device.cl.id();
    // SAFETY: the binary was produced by this device's driver (the key covers
    // device, driver and source); a stale one makes the build fail, not crash.
    let mut program =
        unsafe { Program::create_from_binary(&device.context, &[id], &[&bin]) }.ok()?;
    match program.build(&[id], options) {
        Ok(()) => Some(program),
        Err(_) => {
            let _ = std::fs::remove_file(&p);
            None
        }
    }
}

/// Saves `program`'s binary for the next start (best effort).
pub fn store(device: &Device, source: &str, options: &str, program: &Program) {
    let Some(p) = path(device, source, options) else {
        return;
    };
    let Ok(bins) = program.get_binaries() else {
        return;
    };
    let Some(bin) = bins.into_iter().find(|b| !b.is_empty()) else {
        return;
    };
    let write = || -> std::io::Result<()> {
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &bin)?;
        std::fs::rename(&tmp, &p)
    };
    if let Err(e) = write() {
        log::debug(&format!("program cache: cannot write {}: {e}", p.display()));
    }
}
