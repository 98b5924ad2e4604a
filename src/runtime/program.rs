//! Kernel programs: one per op family, built once per device from embedded
//! OpenCL C sources and cached; a failed build is an error carrying the log.

use super::device::Device;
use crate::config::BufferAddresses;
use crate::error::{ClContext, Error, Result};
use crate::log;
use opencl3::kernel::Kernel;
use opencl3::program::Program;
use std::sync::Arc;

pub(crate) const COMMON: &str = include_str!("kernels/common.cl");
const QUANT: &str = include_str!("kernels/quant.cl");
const LIBM: &str = include_str!("kernels/libm.cl");
/// The packed kernels' frame for the programs whose kernels end in PK_END:
/// the hand-off's (runtime/handoff.rs), then the group trace's
/// (runtime/trace.rs), which wraps it.
pub(crate) const HANDOFF: &str = concat!(
    include_str!("kernels/handoff.cl"),
    "\n",
    include_str!("kernels/trace.cl")
);

/// Every program: its name and the sources concatenated to build it.
pub const PROGRAMS: &[(&str, &[&str])] = &[
    ("cpy", &[COMMON, QUANT, include_str!("kernels/cpy.cl")]),
    ("binary", &[COMMON, include_str!("kernels/binary.cl")]),
    ("unary", &[COMMON, LIBM, include_str!("kernels/unary.cl")]),
    ("glu", &[COMMON, LIBM, include_str!("kernels/glu.cl")]),
    ("norm", &[COMMON, include_str!("kernels/norm.cl")]),
    (
        "softmax",
        &[COMMON, LIBM, include_str!("kernels/softmax.cl")],
    ),
    ("rope", &[COMMON, LIBM, include_str!("kernels/rope.cl")]),
    ("get_rows", &[COMMON, include_str!("kernels/get_rows.cl")]),
    ("hadamard", &[COMMON, include_str!("kernels/hadamard.cl")]),
    ("set_rows", &[COMMON, include_str!("kernels/set_rows.cl")]),
    ("misc", &[COMMON, include_str!("kernels/misc.cl")]),
    (
        "mul_mat",
        &[COMMON, QUANT, include_str!("kernels/mul_mat.cl")],
    ),
    (
        "flash_attn",
        &[COMMON, QUANT, LIBM, include_str!("kernels/flash_attn.cl")],
    ),
    ("state", &[COMMON, include_str!("kernels/state.cl")]),
    ("peer", &[COMMON, include_str!("kernels/peer.cl")]),
    ("upload", &[include_str!("kernels/upload.cl")]),
    (
        "mul_mv",
        &[
            COMMON,
            HANDOFF,
            include_str!("kernels/mul_mv.cl"),
            include_str!("kernels/mul_mv_norm.cl"),
        ],
    ),
    (
        "mul_mm_mma",
        &[COMMON, include_str!("kernels/mul_mm_mma.cl")],
    ),
    (
        "fa_split",
        &[COMMON, HANDOFF, include_str!("kernels/fa_split.cl")],
    ),
    ("fa_tile", &[COMMON, include_str!("kernels/fa_tile.cl")]),
    ("fa_mma", &[COMMON, include_str!("kernels/fa_mma.cl")]),
    (
        "fa_gqa",
        &[
            COMMON,
            HANDOFF,
            "#define FA_HELPERS_ONLY 1",
            include_str!("kernels/fa_split.cl"),
            include_str!("kernels/fa_mma.cl"),
            include_str!("kernels/fa_gqa.cl"),
        ],
    ),
    (
        "fused_norm",
        &[COMMON, include_str!("kernels/fused_norm.cl")],
    ),
    // Built in step mode: its kernels call the packed bodies as functions.
    (
        "attn_o",
        &[
            "#define POLYCL_STEP 1",
            COMMON,
            HANDOFF,
            include_str!("kernels/mul_mv.cl"),
            include_str!("kernels/mul_mv_norm.cl"),
            include_str!("kernels/fa_split.cl"),
            include_str!("kernels/attn_o.cl"),
        ],
    ),
    (
        "attn_oh",
        &[
            COMMON,
            HANDOFF,
            include_str!("kernels/mul_mv.cl"),
            include_str!("kernels/mul_mv_norm.cl"),
            "#define FA_HELPERS_ONLY 1",
            include_str!("kernels/fa_split.cl"),
            include_str!("kernels/attn_oh.cl"),
        ],
    ),
    (
        "rope_store",
        &[COMMON, include_str!("kernels/rope_store.cl")],
    ),
    (
        "rope_rot_store",
        &[
            COMMON,
            HANDOFF,
            include_str!("kernels/rope_store.cl"),
            include_str!("kernels/set_rows.cl"),
            include_str!("kernels/hadamard.cl"),
            include_str!("kernels/rope_rot_store.cl"),
        ],
    ),
    (
        "group_rope",
        &[
            COMMON,
            HANDOFF,
            include_str!("kernels/rope_store.cl"),
            include_str!("kernels/mul_mv.cl"),
            include_str!("kernels/group_rope.cl"),
        ],
    ),
];

/// Programs whose kernels take their buffers by address where the device
/// allows it (runtime/addresses.rs): every program that holds a packed
/// kernel, and the attention + O pair (attn_o), which is built in step mode,
/// where the bodies are functions of their buffers and only the pair's own
/// signature takes addresses (attn_o.cl AO_BUFS).
const BY_ADDRESS: &[&str] = &[
    "mul_mv",
    "group_rope",
    "fused_norm",
    "rope_store",
    "rope_rot_store",
    "fa_split",
    "fa_gqa",
    "attn_o",
    "attn_oh",
];

/// Kernels that take their scalar arguments packed in one buffer (PK_* in
/// common.cl; ArgBinder says why): the ones a decode step launches.
pub const PACKED: &[&str] = &[
    "kernel_fused_rms_norm",
    "kernel_fused_rms_norm_wide",
    "kernel_mul_mv_q4_0",
    "kernel_mul_mv_q8_0",
    "kernel_mul_mv_q4_k",
    "kernel_mul_mv_q6_k",
    "kernel_mul_mv_group_q4_0",
    "kernel_mul_mv_group_q8_0",
    "kernel_mul_mv_group_q4_k",
    "kernel_mul_mv_group_q6_k",
    "kernel_mul_mv_group_mixed",
    "kernel_mul_mv_norm2_q4_0",
    "kernel_mul_mv_norm2_q8_0",
    "kernel_mul_mv_normed_q4_0",
    "kernel_mul_mv_normed_q8_0",
    "kernel_mul_mv_normed_q4_k",
    "kernel_mul_mv_normed_q6_k",
    "kernel_mul_mv_group_rope_q4_0",
    "kernel_mul_mv_group_rope_q8_0",
    "kernel_mul_mv_group_rope_q4_k",
    "kernel_mul_mv_group_rope_q6_k",
    "kernel_mul_mv_group_rope_mixed",
    "kernel_mul_mv_glu_q4_0",
    "kernel_mul_mv_glu_q8_0",
    "kernel_mul_mv_glu_q4_k",
    "kernel_mul_mv_glu_q6_k",
    "kernel_mul_mv_glu16_q4_0",
    "kernel_mul_mv_norm_q4_0",
    "kernel_mul_mv_norm_q8_0",
    "kernel_mul_mv_norm_q4_k",
    "kernel_mul_mv_norm_q6_k",
    "kernel_rope_store_f32",
    "kernel_rope_rot_store_f32",
    "kernel_fa_split",
    "kernel_fa_vec",
    "kernel_fa_vec_d128",
    "kernel_fa_vec_d64",
    "kernel_fa_short_d128",
    "kernel_fa_short_d64",
    "kernel_fa_one_d128",
    "kernel_fa_one_d64",
    "kernel_fa_long_d128",
    "kernel_fa_long_d64",
    "kernel_fa_long_gqa2_d128",
    "kernel_fa_long_gqa4_d64",
    "kernel_fa_long_gqa2_d64",
    "kernel_fa_long_q8_d128",
    "kernel_fa_long_q8_d64",
    "kernel_fa_long_q8_gqa2_d128",
    "kernel_fa_long_q8_gqa4_d64",
    "kernel_fa_long_q8_gqa2_d64",
    "kernel_fa_long_q4_d128",
    "kernel_fa_long_q4_d64",
    "kernel_fa_long_q4_gqa2_d128",
    "kernel_fa_long_q4_gqa4_d64",
    "kernel_fa_long_q4_gqa2_d64",
    "kernel_fa_gqa_d64",
    "kernel_fa_gqa_d128",
    "kernel_fa_gqa_cols_d64",
    "kernel_fa_gqa_cols_d128",
];

const BUILD_OPTIONS: &str = "-cl-std=CL1.2";

/// The decode matvecs' load settings (mul_mv.cl) as defines, only for a
/// source that reads them, so that sweeping them leaves every other
/// program's cached binary (keyed by options) valid: while they went to
/// every program, session 28's new one made CI compile every program cold.
fn matvec_defines(config: &crate::config::Config, source: &str) -> String {
    if !source.contains("MV_UNROLL") {
        return String::new();
    }
    let (unroll_q4_0, unroll) = config.mv_unrolls();
    // A pair of Q4_0 blocks a lane (POLYCL_MV_LOADS=pairs) is two in flight.
    let pairs = if config.mv_pairs {
        format!(
            " -DMV_PAIRS=1 -DMV_UNROLL_PAIRS_Q4_0={}",
            (unroll_q4_0 / 2).max(1)
        )
    } else {
        String::new()
    };
    format!("-DMV_UNROLL={unroll} -DMV_UNROLL_Q4_0={unroll_q4_0}{pairs}")
}

/// What programs' build options take from their device, so that the
/// options of a device that is not here can be made as well
/// (tests/nvptx_build.rs builds every program as an sm_90 GPU gets it).
#[derive(Clone, Debug)]
pub struct BuildTarget {
    pub is_nvidia: bool,
    /// An NVIDIA device's compute capability, e.g. 90.
    pub nv_sm: Option<u32>,
    /// The mul_mv program's GLU_WARPS (Device::glu_warps).
    pub glu_warps: usize,
}

impl BuildTarget {
    pub fn of(device: &Device) -> Self {
        Self {
            is_nvidia: device.is_nvidia,
            nv_sm: device.nv_sm,
            glu_warps: device.glu_warps(),
        }
    }

    /// The H200 (any Hopper GPU), with the GLU's default width.
    pub fn sm_90() -> Self {
        Self {
            is_nvidia: true,
            nv_sm: Some(90),
            glu_warps: 8,
        }
    }

    /// As Device::nvidia_ptx: dp4a needs sm_61.
    pub fn nvidia_ptx(&self) -> bool {
        super::device::nv_at_least(self.is_nvidia, self.nv_sm, super::device::SM_DP4A)
    }

    /// As Device::has_mma: mma.sync and cp.async need sm_80.
    pub fn has_mma(&self) -> bool {
        super::device::nv_at_least(self.is_nvidia, self.nv_sm, super::device::SM_MMA)
    }
}

/// The build options of program `name` (its `source`) for `target` with
/// `config`; `extra` as build_source_with's. Vendor-specific code paths
/// (inline PTX) are chosen per device here, at run time, never when polycl
/// is compiled.
pub fn build_options(
    target: &BuildTarget,
    config: &crate::config::Config,
    name: &str,
    source: &str,
    extra: &str,
) -> String {
    let unrolls = matvec_defines(config, source);
    // The split attention's publish (fa_split.cl, one fence a group by
    // default), for every program that holds it, and only where asked
    // otherwise, so the default builds stay cached.
    let fence = if !config.fa_one_fence && source.contains("FA_ONE_FENCE") {
        " -DFA_ONE_FENCE=0"
    } else {
        ""
    };
    // Settings of one program (the mma tile's shape, the GLU's warps, the
    // attention + O kernels' register cap) only for that program, so that
    // sweeping one leaves the other programs' cached binaries (keyed by
    // options) valid.
    let own = match name {
        "mul_mm_mma" => config.mma_tile.defines(),
        "mul_mv" => format!("-DGLU_WARPS={}", target.glu_warps),
        "attn_o" => match config.attn_o_maxrreg {
            Some(r) if target.nvidia_ptx() => format!("-cl-nv-maxrregcount={r}"),
            _ => String::new(),
        },
        _ => String::new(),
    };
    if target.nvidia_ptx() {
        format!("{BUILD_OPTIONS} {unrolls}{fence} {own} -DPOLYCL_NVIDIA=1 {extra}")
    } else {
        format!("{BUILD_OPTIONS} {unrolls}{fence} {own} {extra}")
    }
}

/// Builds `source` for `device`; on failure the error carries the build log.
pub fn build_source(device: &Device, name: &str, source: &str) -> Result<Program> {
    build_source_with(device, name, source, "")
}

/// `build_source` with more build options (`extra`, e.g. `-DPOLYCL_STEP`).
pub fn build_source_with(
    device: &Device,
    name: &str,
    source: &str,
    extra: &str,
) -> Result<Program> {
    let mut program =
        Program::create_from_source(&device.context, source).cl("clCreateProgramWithSource")?;
    let options = build_options(
        &BuildTarget::of(device),
        crate::config::get(),
        name,
        source,
        extra,
    );
    // A traced build holds this run's trace address (runtime/trace.rs).
    let cached = !options.contains(super::trace::ADDRESS_DEFINE);
    if let Some(p) = cached
        .then(|| super::binary_cache::load(device, source, &options))
        .flatten()
    {
        return Ok(p);
    }
    if let Err(e) = program.build(&[device.cl.id()], &options) {
        let log = program.get_build_log(device.cl.id()).unwrap_or_default();
        return Err(Error::Build {
            program: name.to_string(),
            log: if log.trim().is_empty() {
                format!("(empty build log, status {})", e.0)
            } else {
                log
            },
        });
    }
    if cached {
        super::binary_cache::store(device, source, &options, &program);
    }
    Ok(program)
}

/// The options `program` adds to a program's own: its packed kernels'
/// buffers by address (`BY_ADDRESS` programs where the device allows it),
/// the group trace's, the hand-off frame's.
fn program_extra(by_address: bool, traced: &str, handoff: &str) -> String {
    let address = if by_address {
        super::addresses::build_defines(BufferAddresses::All)
    } else {
        ""
    };
    [address, traced, handoff]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A program as a device would build it: its name (with `+handoff` for a
/// hand-off variant), source and build options.
pub struct ProgramBuild {
    pub name: String,
    pub source: String,
    pub options: String,
}

/// Every program a device of `target` may build with `config`: each of
/// `PROGRAMS` as `program` builds it where buffers go by address (the
/// default on a GPU that allows it), and again with the hand-off frame where
/// its sources hold one, the step program and the address check's. Without
/// the group trace, whose defines are one run's addresses. For checking the
/// builds of a device that is not here (tests/nvptx_build.rs).
pub fn every_program(target: &BuildTarget, config: &crate::config::Config) -> Vec<ProgramBuild> {
    let handoff = super::handoff::build_defines(target, config);
    let mut out = Vec::new();
    for (name, sources) in PROGRAMS {
        let source = sources.join("\n");
        let by_address = BY_ADDRESS.contains(name);
        let mut variants = vec![(name.to_string(), program_extra(by_address, "", ""))];
        if sources.contains(&HANDOFF) {
            let label = format!("{name}{}", super::handoff::VARIANT);
            variants.push((label, program_extra(by_address, "", &handoff)));
        }
        for (label, extra) in variants {
            let options = build_options(target, config, name, &source, &extra);
            out.push(ProgramBuild {
                name: label,
                source: source.clone(),
                options,
            });
        }
    }
    out.push(super::step::program_build(target, config));
    out.push(super::addresses::program_build(target, config));
    out
}

/// The built program `name` for `device`, from the cache or built now.
pub fn program(device: &Device, name: &'static str) -> Result<Arc<Program>> {
    if crate::fault::build() {
        return Err(Error::Build {
            program: name.to_string(),
            log: "refused by POLYCL_FAULT=build".into(),
        });
    }
    if let Some(p) = device.programs.lock().get(name) {
        return Ok(p.clone());
    }
    // A program's hand-off variant (runtime/handoff.rs) has its own name.
    let (base, handoff) = match name.strip_suffix(super::handoff::VARIANT) {
        Some(base) => (base, true),
        None => (name, false),
    };
    let sources = PROGRAMS
        .iter()
        .find(|(n, _)| *n == base)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::Unsupported(format!("no kernel program named {name}")))?;
    let source: String = sources.join("\n");
    let by_address = BY_ADDRESS.contains(&base) && super::addresses::on(device);
    let traced = if sources.contains(&HANDOFF) {
        super::trace::build_defines(device)
    } else {
        String::new()
    };
    let handoff = if handoff {
        super::handoff::build_defines(&BuildTarget::of(device), crate::config::get())
    } else {
        String::new()
    };
    let extra = program_extra(by_address, &traced, &handoff);
    let t = std::time::Instant::now();
    let built = Arc::new(build_source_with(device, base, &source, &extra)?);
    log::debug(&format!(
        "{}: built program {name} in {:?}",
        device.name,
        t.elapsed()
    ));
    Ok(device.programs.lock().entry(name).or_insert(built).clone())
}

/// Which buffers `kernel` takes by address (common.cl PK_SIG), from the
/// build options of its program, so that a program built anywhere (a test's
/// own, say) answers as well as the ones `program` builds.
pub fn address_mode(device: &Device, kernel: &Kernel) -> Result<BufferAddresses> {
    if !super::addresses::on(device) {
        return Ok(BufferAddresses::Off);
    }
    let program = kernel.program().cl("clGetKernelInfo")?;
    let options = opencl3::program::get_program_build_info(
        program,
        device.cl.id(),
        opencl3::program::CL_PROGRAM_BUILD_OPTIONS,
    )
    .map_err(|status| Error::OpenCl("clGetProgramBuildInfo", status))?;
    Ok(super::addresses::mode_of_options(&String::from(options)))
}

/// A kernel object from program `program_name`.
pub fn kernel(device: &Device, program_name: &'static str, kernel_name: &str) -> Result<Kernel> {
    let p = program(device, program_name)?;
    Kernel::create(&p, kernel_name).map_err(|e| {
        Error::Unsupported(format!(
            "kernel {kernel_name} in program {program_name}: status {}",
            e.0
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(name: &str) -> String {
        let (_, sources) = PROGRAMS.iter().find(|(n, _)| *n == name).unwrap();
        sources.join("\n")
    }

    #[test]
    fn matvec_defines_go_only_to_the_programs_that_read_them() {
        let defaults = crate::config::parse(&|_| None);
        let mv = matvec_defines(&defaults, &joined("mul_mv"));
        assert!(mv.contains("-DMV_UNROLL=4") && mv.contains("-DMV_UNROLL_Q4_0=1"));
        assert!(mv.contains("-DMV_PAIRS=1 -DMV_UNROLL_PAIRS_Q4_0=1"));
        for name in ["norm", "rope", "fa_split", "mul_mat", "flash_attn"] {
            assert_eq!(matvec_defines(&defaults, &joined(name)), "", "{name}");
        }
        // The attention + O pair holds the matvecs too, so it keeps them.
        assert_eq!(matvec_defines(&defaults, &joined("attn_o")), mv);
        let words = crate::config::parse(&|k| (k == "POLYCL_MV_LOADS").then(|| "words".into()));
        let w = matvec_defines(&words, &joined("mul_mv"));
        assert!(w.contains("-DMV_UNROLL=4") && w.contains("-DMV_UNROLL_Q4_0=2"));
        assert!(!w.contains("MV_PAIRS"));
    }

    #[test]
    fn the_fence_define_goes_only_to_the_split_attention_and_only_when_asked() {
        let target = BuildTarget::sm_90();
        let defaults = crate::config::parse(&|_| None);
        let asked = crate::config::parse(&|k| (k == "POLYCL_FA_ONE_FENCE").then(|| "0".into()));
        for (name, _) in PROGRAMS {
            let source = joined(name);
            assert!(!build_options(&target, &defaults, name, &source, "").contains("FA_ONE_FENCE"));
            let with = build_options(&target, &asked, name, &source, "");
            let holds_publish = source.contains("fa_publish_merge_rows");
            assert_eq!(with.contains("-DFA_ONE_FENCE=0"), holds_publish, "{name}");
        }
        for name in ["fa_split", "fa_gqa", "attn_o", "attn_oh"] {
            assert!(joined(name).contains("fa_publish_merge_rows"), "{name}");
        }
    }
}
