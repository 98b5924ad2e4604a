//! Every program as an sm_90 GPU (the H200) builds it, built here without one:
//! clang's OpenCL C front end for nvptx with libclc's builtins, LLVM's PTX
//! back end, then NVIDIA's `ptxas` for sm_90. CI has no NVIDIA GPU, and PoCL
//! never compiles the code behind `POLYCL_NVIDIA` (inline PTX: dp4a, shfl,
//! mma.sync, cp.async, the hand-off's counters), so without this a typo there
//! showed first on the H200. Each kernel's registers, spills and shared
//! memory are printed (`--nocapture`) and written to
//! `target/nvptx/kernels.txt`: clang is not the driver's compiler, so the
//! counts are near the driver's, not equal to them (docs/perf.md step 68).
//! A kernel's `reqd_work_group_size` reaches ptxas as `.reqntid` (clang's
//! PTX drops it), so a 1024-wide kernel is fitted to 64 registers there as
//! the driver must fit it, and a spill that fitting costs shows here.
//! `POLYCL_NVPTX_ONLY=mul_mv,group_rope` builds only the programs it names.
//!
//! The tools (scripts/nvptx-tools.sh installs them): clang-15, llvm-link-15,
//! opt-15, llc-15 and libclc-15 from Debian, and `ptxas` from NVIDIA's
//! `nvidia-cuda-nvcc-cu12` wheel, named by `POLYCL_PTXAS`. Without
//! `POLYCL_PTXAS` the test says so and checks nothing; scripts/test.sh
//! always sets it.

use ggml_polycl::runtime::program::{self, BuildTarget, ProgramBuild};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const CLANG: &str = "clang-15";
const LLVM_LINK: &str = "llvm-link-15";
const OPT: &str = "opt-15";
const LLC: &str = "llc-15";
const LLVM_DIS: &str = "llvm-dis-15";
const EXTENSIONS: &str =
    "-cl-ext=-cl_khr_fp16,+cl_khr_fp64,+cl_khr_int64_base_atomics,+cl_khr_int64_extended_atomics";
const LIBCLC: &str = "/usr/lib/clc/nvptx64--nvidiacl.bc";

/// What libclc's nvptx builtins lack and the driver has, linked before
/// libclc: 64-bit atomics (cl_khr_int64_base_atomics; attn_oh.cl's sums).
const SHIM: &str = "\
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
long __attribute__((overloadable)) atom_add(volatile __global long *p, long v) {
    long old;
    __asm__ volatile(\"atom.global.add.u64 %0, [%1], %2;\" : \"=l\"(old) : \"l\"(p), \"l\"(v) : \"memory\");
    return old;
}
";

/// One kernel's figures from `ptxas -v`.
#[derive(Debug, Default, Clone)]
struct KernelInfo {
    program: String,
    name: String,
    registers: u32,
    stack: u32,
    spill_stores: u32,
    spill_loads: u32,
    smem: u32,
}

/// Runs `cmd`; on failure panics with what it printed.
fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("{what}: could not run {cmd:?}: {e} (scripts/nvptx-tools.sh installs it)")
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed: {cmd:?}\n{text}");
    text
}

/// The number before `unit` in `line` ("12 bytes spill stores" -> 12).
fn figure(line: &str, unit: &str) -> u32 {
    line.split(',')
        .find(|part| part.trim().ends_with(unit))
        .and_then(|part| part.split_whitespace().rev().nth(unit.split(' ').count()))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The kernels of `ptxas -v`'s report.
fn parse_report(program: &str, report: &str) -> Vec<KernelInfo> {
    let mut out: Vec<KernelInfo> = Vec::new();
    let mut current: Option<KernelInfo> = None;
    for line in report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            out.extend(current.take());
            current = Some(KernelInfo {
                program: program.into(),
                name: rest.split('\'').next().unwrap_or_default().into(),
                ..Default::default()
            });
        } else if let Some(k) = current.as_mut() {
            if line.contains("bytes stack frame") {
                k.stack = figure(line, "bytes stack frame");
                k.spill_stores = figure(line, "bytes spill stores");
                k.spill_loads = figure(line, "bytes spill loads");
            } else if line.contains("Used ") && line.contains(" registers") {
                k.registers = line
                    .split("Used ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                k.smem = figure(line, "bytes smem");
            }
        }
    }
    out.extend(current);
    out
}

/// Each kernel's `reqd_work_group_size`, from the LLVM IR text of a program.
fn required_sizes(ir: &str) -> HashMap<String, String> {
    let sizes: HashMap<&str, String> = ir
        .lines()
        .filter_map(|l| {
            let (id, rest) = l.split_once(" = !{i32 ")?;
            let dims: Vec<&str> = rest.trim_end_matches('}').split(", i32 ").collect();
            let all_numbers = dims.len() == 3 && dims.iter().all(|d| d.parse::<u32>().is_ok());
            (id.starts_with('!') && all_numbers).then(|| (id, dims.join(", ")))
        })
        .collect();
    ir.lines()
        .filter(|l| l.starts_with("define ") && l.contains(" spir_kernel "))
        .filter_map(|l| {
            let name = l.split_once('@')?.1.split('(').next()?;
            let id = l
                .split_once("!reqd_work_group_size ")?
                .1
                .split_whitespace()
                .next()?;
            Some((name.to_string(), sizes.get(id)?.clone()))
        })
        .collect()
}

/// `ptx` with `.reqntid` after each kernel's parameters where `sizes` names
/// it: clang's PTX back end drops `reqd_work_group_size`, which the driver's
/// compiler keeps, so ptxas fits such a kernel's registers into a compute
/// unit's 65536 for its work-items, as the driver must (1024 a group: 64).
fn with_required_sizes(ptx: &str, sizes: &HashMap<String, String>) -> String {
    let mut out = Vec::new();
    let mut pending: Option<&String> = None;
    for line in ptx.lines() {
        out.push(line.to_string());
        if let Some(name) = line
            .strip_prefix(".entry ")
            .and_then(|r| r.strip_suffix('('))
        {
            pending = sizes.get(name);
        } else if line.starts_with(')') {
            if let Some(size) = pending.take() {
                out.push(format!(".reqntid {size}"));
            }
        }
    }
    out.join("\n")
}

// `asm` is the driver's keyword for inline PTX; clang's OpenCL mode takes
// it as GNU `__asm__`. gnu89 inline: the driver emits a non-inlined
// `inline` function, C99 rules would leave it undefined. The extensions
// as the H200's driver has them (shared/GPU.md: no cl_khr_fp16).
fn clang(defines: &[String]) -> Command {
    let mut cmd = Command::new(CLANG);
    cmd.args(["-x", "cl", "-cl-std=CL1.2", "-fasm", "-Dasm=__asm__"])
        .args([
            "-target",
            "nvptx64-nvidia-nvcl",
            "-Xclang",
            "-finclude-default-header",
        ])
        .args(["-Xclang", EXTENSIONS])
        .args([
            "-fgnu89-inline",
            "-O2",
            "-emit-llvm",
            "-c",
            "-Wno-everything",
        ])
        .args(defines);
    cmd
}

/// Builds one program down to sm_90 machine code in `dir`.
fn build(ptxas: &Path, dir: &Path, p: &ProgramBuild) -> Vec<KernelInfo> {
    let stem = dir.join(p.name.replace(['+', '.'], "_"));
    let file = |ext: &str| stem.with_extension(ext);
    std::fs::write(file("cl"), &p.source).unwrap();
    // The defines go to clang; the driver's own options to their
    // counterparts (a register cap to ptxas); the language version is
    // clang's below.
    let mut defines = Vec::new();
    let mut ptxas_args = Vec::new();
    for option in p.options.split_whitespace() {
        if option.starts_with("-D") {
            defines.push(option.to_string());
        } else if let Some(cap) = option.strip_prefix("-cl-nv-maxrregcount=") {
            ptxas_args.push(format!("-maxrregcount={cap}"));
        } else {
            assert_eq!(
                option, "-cl-std=CL1.2",
                "{}: an option this test does not map",
                p.name
            );
        }
    }
    let what = format!("program {} ({})", p.name, p.options);
    run(
        clang(&defines).arg(file("cl")).arg("-o").arg(file("bc")),
        &what,
    );
    run(
        Command::new(LLVM_LINK)
            .arg(file("bc"))
            .arg(dir.join("shim.bc"))
            .arg(LIBCLC)
            .arg("-only-needed")
            .arg("-o")
            .arg(file("linked.bc")),
        &what,
    );
    run(
        Command::new(OPT)
            .arg("-O3")
            .arg(file("linked.bc"))
            .arg("-o")
            .arg(file("opt.bc")),
        &what,
    );
    // LLVM 15 knows sm_80 at most; its sm_80 PTX is valid sm_90 PTX, which
    // ptxas takes once the header names sm_90 (PTX ISA 7.8 is its first).
    run(
        Command::new(LLC)
            .args(["-mcpu=sm_80", "-mattr=+ptx70"])
            .arg(file("opt.bc"))
            .arg("-o")
            .arg(file("ptx")),
        &what,
    );
    let ir = run(
        Command::new(LLVM_DIS)
            .arg(file("opt.bc"))
            .arg("-o")
            .arg("-"),
        &what,
    );
    let ptx = std::fs::read_to_string(file("ptx")).unwrap();
    let sizes = required_sizes(&ir);
    let ptx = with_required_sizes(&ptx, &sizes);
    assert_eq!(
        ptx.matches("\n.reqntid ").count(),
        sizes.len(),
        "{what}: a kernel's required size found no place in the PTX: {sizes:?}"
    );
    let ptx: String = ptx
        .lines()
        .map(|l| {
            if l.starts_with(".version ") {
                ".version 8.0"
            } else if l.starts_with(".target ") {
                ".target sm_90"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(file("ptx"), ptx).unwrap();
    let report = run(
        Command::new(ptxas)
            .args(["-arch=sm_90", "-v"])
            .args(&ptxas_args)
            .arg(file("ptx"))
            .arg("-o")
            .arg(file("cubin")),
        &what,
    );
    parse_report(&p.name, &report)
}

#[test]
fn every_program_builds_for_sm_90() {
    let Some(ptxas) = std::env::var_os("POLYCL_PTXAS").map(PathBuf::from) else {
        eprintln!(
            "note: POLYCL_PTXAS is not set; skipping the sm_90 builds (scripts/test.sh sets it)"
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/nvptx");
    std::fs::create_dir_all(&dir).unwrap();
    let target = BuildTarget::sm_90();
    let defaults = ggml_polycl::config::parse(&|_| None);
    std::fs::write(dir.join("shim.cl"), SHIM).unwrap();
    run(
        clang(&[])
            .arg(dir.join("shim.cl"))
            .arg("-o")
            .arg(dir.join("shim.bc")),
        "the shim",
    );
    let mut builds = program::every_program(&target, &defaults);
    // POLYCL_NVPTX_ONLY=NAME[,NAME...]: only those builds (kernels.txt's
    // program column), for a quick look at one change's machine code; the
    // check that every PACKED kernel is built is then skipped.
    let only: Option<Vec<String>> = std::env::var("POLYCL_NVPTX_ONLY")
        .ok()
        .map(|v| v.split(',').map(|n| n.trim().to_string()).collect());
    if let Some(only) = &only {
        builds.retain(|b| only.contains(&b.name));
        assert!(
            !builds.is_empty(),
            "POLYCL_NVPTX_ONLY={only:?} names no build"
        );
    }
    // Two builds at a time, alternate ones each: CI's machine has two
    // cores, ptxas takes one.
    let kernels: Vec<KernelInfo> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|first| {
                let (builds, ptxas, dir) = (&builds, &ptxas, &dir);
                s.spawn(move || {
                    builds
                        .iter()
                        .skip(first)
                        .step_by(2)
                        .flat_map(|p| build(ptxas, dir, p))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });

    let mut table = String::from("program kernel registers stack spill_stores spill_loads smem\n");
    for k in &kernels {
        table.push_str(&format!(
            "{} {} {} {} {} {} {}\n",
            k.program, k.name, k.registers, k.stack, k.spill_stores, k.spill_loads, k.smem
        ));
    }
    std::fs::write(dir.join("kernels.txt"), &table).unwrap();
    println!("{table}");

    // Every kernel a decode step launches is in some build, and none of
    // them spills: decode streams weights, and a spill's local memory
    // traffic shares their path.
    for name in program::PACKED {
        let builds: Vec<&KernelInfo> = kernels.iter().filter(|k| k.name == *name).collect();
        assert!(
            !builds.is_empty() || only.is_some(),
            "{name} (program.rs PACKED) is in no sm_90 build"
        );
        for k in builds {
            assert!(
                k.spill_stores == 0 && k.spill_loads == 0,
                "{name} spills in program {}: {k:?}",
                k.program
            );
        }
    }
    assert!(
        kernels.len() > 100 || only.is_some(),
        "only {} kernels",
        kernels.len()
    );
}

#[test]
fn required_sizes_reach_the_ptx() {
    let ir = "\
define dso_local spir_kernel void @k_wide(i64 noundef %0) #1 !kernel_arg_type !7 !reqd_work_group_size !9 {
define dso_local spir_kernel void @k_free(i64 noundef %0) #1 !kernel_arg_type !7 {
!9 = !{i32 1024, i32 1, i32 1}
!7 = !{!\"long\"}";
    let sizes = required_sizes(ir);
    assert_eq!(sizes.len(), 1);
    assert_eq!(sizes["k_wide"], "1024, 1, 1");
    let ptx = ".entry k_wide(\n\t.param .u64 k_wide_param_0\n)  // @k_wide\n{\n}\n.entry k_free(\n\t.param .u64 k_free_param_0\n)\n{\n}";
    assert_eq!(
        with_required_sizes(ptx, &sizes),
        ".entry k_wide(\n\t.param .u64 k_wide_param_0\n)  // @k_wide\n.reqntid 1024, 1, 1\n{\n}\n.entry k_free(\n\t.param .u64 k_free_param_0\n)\n{\n}"
    );
}
