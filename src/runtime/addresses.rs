//! Buffers passed to the decode kernels by device address (on by default
//! where the device allows it; `POLYCL_BUFFER_ADDRESSES=0` turns it off,
//! `reads` keeps the buffers a kernel writes as arguments). NVIDIA's
//! clEnqueueNDRangeKernel costs the host ~0.4 us for each buffer argument a
//! kernel takes and ~0.05 us for each ulong (scripts/probe/enqueue-args.c,
//! docs/perf.md steps 46-47), and a decode kernel takes 3-16 buffers; a 1B
//! model's decode step, ~110 launches, is bound by the host's enqueues.
//! The packed kernels of the programs in program.rs `BY_ADDRESS` are built
//! with POLYCL_ADDR (common.cl `PK_SIG`): each of their buffers (with
//! `reads`, each buffer they only read) is a ulong argument, its device
//! address, which `resolve` reads back from the device once when a plan
//! binds the launch. The addresses come from a kernel given the buffers as
//! arguments (`kernel_pk_addresses`), so each is the one the driver itself
//! gives kernels.
//!
//! On the H200 (docs/perf.md step 48) this took the 1B's host enqueue time
//! a token from ~790-1050 us to ~620-775 and left the GPU's time as it was:
//! the 7B ran at 446 t/s against 444 with buffer arguments. The addresses
//! in slots of the scalar buffer instead (steps 46-47) had made a 7B token
//! ~7% longer and the attention kernels 207 registers instead of 168.
//!
//! OpenCL does not promise that a buffer keeps one address: a driver may
//! move a buffer between the devices of a context, and it would not know
//! that a kernel reaches a buffer it was not given. So this is only ever on
//! for a device alone in its context, after a kernel that reads and writes
//! through addresses gave the right results there.

use super::device::Device;
use super::executor::enqueue_without_event;
use super::program::{BuildTarget, ProgramBuild};
use crate::config::BufferAddresses;
use crate::error::{ClContext, Error, Result};
use crate::log;
use opencl3::command_queue as cq;
use opencl3::kernel::Kernel;
use opencl3::memory::ClMem;
use opencl3::types::cl_mem;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

const SOURCE: &str = include_str!("kernels/addresses.cl");
/// Buffer arguments of one `kernel_pk_addresses` launch.
const PER_LAUNCH: usize = 16;

/// The device's kernel that writes buffers' addresses into a buffer, where
/// kernels take buffers by address; its arguments are set and enqueued under
/// the lock.
pub(crate) struct Patcher {
    kernel: Mutex<Kernel>,
    mode: BufferAddresses,
}

/// Which buffers `device`'s packed kernels take by address: decided once,
/// before the first program that holds them is built.
pub fn mode(device: &Device) -> BufferAddresses {
    patcher(device).map_or(BufferAddresses::Off, |p| p.mode)
}

/// Whether `device`'s packed kernels take any buffer by address.
pub fn on(device: &Device) -> bool {
    patcher(device).is_some()
}

/// The build options of a program whose packed kernels take buffers by
/// address in `mode` (common.cl PK_SIG); empty for `Off`.
pub fn build_defines(mode: BufferAddresses) -> &'static str {
    match mode {
        BufferAddresses::Off => "",
        BufferAddresses::All => "-DPOLYCL_ADDR=1",
        BufferAddresses::Reads => "-DPOLYCL_ADDR=1 -DPOLYCL_ADDR_READS=1",
    }
}

/// The mode a program was built in, from its build options: what its packed
/// kernels take by address, wherever the program came from.
pub fn mode_of_options(options: &str) -> BufferAddresses {
    if !options.contains("-DPOLYCL_ADDR=1") {
        BufferAddresses::Off
    } else if options.contains("-DPOLYCL_ADDR_READS=1") {
        BufferAddresses::Reads
    } else {
        BufferAddresses::All
    }
}

fn patcher(device: &Device) -> Option<&Patcher> {
    device
        .addresses
        .get_or_init(|| {
            let asked = crate::config::get().buffer_addresses;
            let mode = asked.unwrap_or_default();
            if mode == BufferAddresses::Off {
                return None;
            }
            // Said as a warning only where POLYCL_BUFFER_ADDRESSES asked for
            // addresses; by default, buffer arguments are a quiet fallback.
            let fallback = |why: String| {
                let line = format!("{}: buffers stay kernel arguments: {why}", device.name);
                if asked.is_some() {
                    log::warn(&line)
                } else {
                    log::debug(&line)
                }
            };
            if asked.is_none() && device.is_rusticl {
                fallback(
                    "Mesa's rusticl, whose decode kernels reached wrong memory through \
                     addresses though the address check passed"
                        .into(),
                );
                return None;
            }
            if device.context.devices().len() != 1 {
                fallback(
                    "the device shares its OpenCL context with others, where a driver may \
                     move buffers between them"
                        .into(),
                );
                return None;
            }
            match check(device) {
                Ok(kernel) => {
                    log::debug(&format!(
                        "{}: decode kernels take their buffers by address ({mode:?})",
                        device.name
                    ));
                    Some(Patcher {
                        kernel: Mutex::new(kernel),
                        mode,
                    })
                }
                Err(e) => {
                    fallback(format!("the address check failed: {e}"));
                    None
                }
            }
        })
        .as_ref()
}

thread_local! {
    /// The addresses `resolve` found while a `BindScope` lives: (device,
    /// buffer) -> address.
    static BOUND: RefCell<Option<HashMap<(usize, usize), u64>>> = const { RefCell::new(None) };
}

/// While one lives, `resolve` on this thread asks the device only for
/// buffers it has not resolved yet. A plan binds ~110 launches of a handful
/// of buffers, and each round trip waits for the queue: one a launch made a
/// 1B's new plan (every 256 cached positions) ~5 ms longer on PoCL. Only for
/// the span of one plan's binding, while every buffer its launches take is
/// held: a handle released and created again could name another buffer.
/// One begun inside another starts empty and gives the outer one back.
pub struct BindScope(Option<HashMap<(usize, usize), u64>>);

impl BindScope {
    pub fn begin() -> BindScope {
        BindScope(BOUND.with(|b| b.borrow_mut().replace(HashMap::new())))
    }
}

impl Drop for BindScope {
    fn drop(&mut self) {
        let outer = self.0.take();
        BOUND.with(|b| *b.borrow_mut() = outer);
    }
}

/// Round trips `resolve` has made to the device (a test counts them).
static ROUND_TRIPS: AtomicU64 = AtomicU64::new(0);

pub fn round_trips() -> u64 {
    ROUND_TRIPS.load(Ordering::Relaxed)
}

/// The device addresses of `mems`, in order: written by the device into a
/// buffer and read back (blocking; a plan binds its launches once), except
/// those a `BindScope` already holds.
pub fn resolve(device: &Device, mems: &[cl_mem]) -> Result<Vec<u64>> {
    let key = |m: &cl_mem| (device as *const Device as usize, *m as usize);
    let known: Option<Vec<u64>> = BOUND.with(|b| {
        let b = b.borrow();
        let map = b.as_ref()?;
        mems.iter().map(|m| map.get(&key(m)).copied()).collect()
    });
    if let Some(addresses) = known {
        return Ok(addresses);
    }
    let p = patcher(device).ok_or_else(|| {
        Error::Unsupported(format!(
            "{}: a kernel built for buffers by address, on a device without them",
            device.name
        ))
    })?;
    let mut addresses = vec![0u64; mems.len()];
    let slots = super::step::upload(device, &mut addresses)?;
    enqueue_writes(device, &p.kernel.lock(), slots.get(), mems)?;
    read_blocking(device, slots.get(), 0, &mut addresses)?;
    ROUND_TRIPS.fetch_add(1, Ordering::Relaxed);
    BOUND.with(|b| {
        if let Some(map) = b.borrow_mut().as_mut() {
            for (m, &a) in mems.iter().zip(&addresses) {
                map.insert(key(m), a);
            }
        }
    });
    Ok(addresses)
}

/// Reads `out.len()` values from byte `offset` of `mem`, waiting for them
/// (the caller's range lies inside `mem`).
pub(crate) fn read_blocking<T>(
    device: &Device,
    mem: cl_mem,
    offset: usize,
    out: &mut [T],
) -> Result<()> {
    // SAFETY: `out` is a live host array of out.len() values and the read is
    // blocking, so OpenCL is done with it when this returns.
    let ev = unsafe {
        cq::enqueue_read_buffer(
            device.queue()?.get(),
            mem,
            opencl3::types::CL_BLOCKING,
            offset,
            std::mem::size_of_val(out),
            out.as_mut_ptr() as *mut c_void,
            0,
            std::ptr::null(),
        )
    };
    super::buffer::finish_event(ev, "clEnqueueReadBuffer")
}

/// Writes `data` at the start of `mem`, waiting (the caller's range lies
/// inside `mem`).
pub(crate) fn write_blocking<T>(device: &Device, mem: cl_mem, data: &[T]) -> Result<()> {
    // SAFETY: `data` is a live host array within `mem`'s size and the write
    // is blocking, so OpenCL is done with it when this returns.
    let ev = unsafe {
        cq::enqueue_write_buffer(
            device.queue()?.get(),
            mem,
            opencl3::types::CL_BLOCKING,
            0,
            std::mem::size_of_val(data),
            data.as_ptr() as *const c_void,
            0,
            std::ptr::null(),
        )
    };
    super::buffer::finish_event(ev, "clEnqueueWriteBuffer")
}

/// Enqueues the patcher: pk[i] = the address of mems[i].
fn enqueue_writes(device: &Device, kernel: &Kernel, pk: cl_mem, mems: &[cl_mem]) -> Result<()> {
    for (chunk, ms) in mems.chunks(PER_LAUNCH).enumerate() {
        let first = (chunk * PER_LAUNCH) as u32;
        let n = ms.len() as u32;
        // SAFETY: the parameters are a buffer, two uints and 16 buffers, in
        // that order (addresses.cl); slots past n get pk itself, unread.
        unsafe {
            kernel.set_arg(0, &pk).cl("clSetKernelArg")?;
            kernel.set_arg(1, &first).cl("clSetKernelArg")?;
            kernel.set_arg(2, &n).cl("clSetKernelArg")?;
            for i in 0..PER_LAUNCH {
                let m = ms.get(i).copied().unwrap_or(pk);
                kernel.set_arg(3 + i as u32, &m).cl("clSetKernelArg")?;
            }
        }
        let one = [1usize, 1, 1];
        // SAFETY: every argument is set; the caller keeps pk and the buffers
        // alive until this launch has run (`resolve` and `check` read pk
        // back, blocking), and OpenCL copies the arguments at enqueue.
        unsafe {
            enqueue_without_event(
                device.queue()?.get(),
                kernel.get(),
                1,
                one.as_ptr(),
                one.as_ptr(),
            )?;
        }
    }
    Ok(())
}

/// The address check's program as a device of `target` builds it
/// (program.rs every_program).
pub fn program_build(target: &BuildTarget, config: &crate::config::Config) -> ProgramBuild {
    ProgramBuild {
        name: "addresses".into(),
        source: SOURCE.into(),
        options: super::program::build_options(target, config, "addresses", SOURCE, ""),
    }
}

/// Builds the kernels, then copies a buffer through addresses alone (read
/// back to the host and passed as ulong arguments, as `resolve` gives them
/// to the decode kernels) and checks every value: the device's answer to
/// whether a kernel can reach a buffer it was not given.
fn check(device: &Device) -> Result<Kernel> {
    let program = super::program::build_source_with(device, "addresses", SOURCE, "")?;
    let create = |name: &str| {
        Kernel::create(&program, name).map_err(|e| {
            Error::Unsupported(format!(
                "kernel {name} in program addresses: status {}",
                e.0
            ))
        })
    };
    let patch = create("kernel_pk_addresses")?;
    let copy = create("kernel_address_check")?;
    const N: usize = 4096;
    let mut src: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let src_buf = super::step::upload(device, &mut src)?;
    let dst_buf = super::step::upload(device, &mut vec![0f32; N])?;
    let mut addresses = [0u64; 2];
    let slots = super::step::upload(device, &mut addresses)?;
    enqueue_writes(device, &patch, slots.get(), &[src_buf.get(), dst_buf.get()])?;
    read_blocking(device, slots.get(), 0, &mut addresses)?;
    // SAFETY: kernel_address_check's parameters are two ulongs.
    unsafe {
        copy.set_arg(0, &addresses[0]).cl("clSetKernelArg")?;
        copy.set_arg(1, &addresses[1]).cl("clSetKernelArg")?;
    }
    let (global, local) = ([N, 1, 1], [64usize, 1, 1]);
    // SAFETY: the arguments are set and src and dst live to the end of this
    // function, after the blocking read below.
    unsafe {
        enqueue_without_event(
            device.queue()?.get(),
            copy.get(),
            1,
            global.as_ptr(),
            local.as_ptr(),
        )?;
    }
    let mut out = vec![0f32; N];
    read_blocking(device, dst_buf.get(), 0, &mut out)?;
    let wrong = (0..N).filter(|&i| out[i] != 2.0 * i as f32 + 1.0).count();
    if wrong > 0 {
        return Err(Error::Unsupported(format!(
            "{wrong} of {N} values copied through buffer addresses were wrong"
        )));
    }
    Ok(patch)
}
