//! The step kernel (kernels/step.cl): one launch that runs a run of a plan's
//! packed decode launches as phases, with a barrier over all of its
//! work-groups between them, instead of one launch each. Each launch costs
//! the host 2-6 us on NVIDIA's OpenCL and the GPU a ramp and a drain; the
//! barrier measured 1.8 us on the H200 (scripts/probe/kernel-floor.c).
//!
//! The barrier is only sound when every work-group of the launch is resident
//! at once, which OpenCL does not promise: `groups` launches the kernel once
//! per device with a barrier and fewer groups each time until no wait timed
//! out, and the plan runs its launches one by one where none passed. A wait
//! in a real step that times out (residency lost later, e.g. to another
//! process sharing the GPU through MPS) ends the hang but not the error:
//! that step's results are wrong, and its count in bar[2] is not read back.
//! This is one reason the step kernel is opt-in.

use super::device::Device;
use super::executor::{Launch, Packed};
use super::program::{BuildTarget, ProgramBuild};
use crate::error::{ClContext, Error, Result};
use crate::log;
use opencl3::command_queue as cq;
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer, ClMem, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_WRITE};
use opencl3::types::cl_mem;
use std::ffi::c_void;
use std::sync::Arc;

/// A kernel the step program can run as a phase: its name, how many buffer
/// arguments it takes, its own work-group size (None: a flat launch that
/// bounds-checks its global id), and how many step work-groups (STEP_WG
/// wide) one of its own work-groups becomes along x.
/// Its first `weights` tensor arguments are weights (POLYCL_STEP_MAX_MB).
/// `any_width`: its own work-groups may be of any width (the GLU kernels,
/// `POLYCL_GLU_WARPS`), each one still becoming `x_scale` step groups.
pub struct PhaseKind {
    pub kernel: &'static str,
    pub buffers: usize,
    pub local: Option<usize>,
    pub x_scale: usize,
    pub weights: usize,
    pub any_width: bool,
}

const fn phase(
    kernel: &'static str,
    buffers: usize,
    local: Option<usize>,
    x_scale: usize,
    weights: usize,
) -> PhaseKind {
    PhaseKind {
        kernel,
        buffers,
        local,
        x_scale,
        weights,
        any_width: false,
    }
}

/// A GLU kernel: one of its own work-groups makes GLU_ROWS rows whatever its
/// width, and so does one step work-group (4 warps of 8 rows).
const fn glu_phase(kernel: &'static str) -> PhaseKind {
    PhaseKind {
        any_width: true,
        ..phase(kernel, 8, Some(256), 1, 2)
    }
}

/// Every phase kind; the index is the kind number in step.cl (0: none).
pub const PHASES: &[PhaseKind] = &[
    phase("", 0, None, 1, 0),
    phase("kernel_mul_mv_q4_0", 3, Some(128), 1, 1),
    phase("kernel_mul_mv_q8_0", 3, Some(128), 1, 1),
    phase("kernel_mul_mv_q4_k", 3, Some(128), 1, 1),
    phase("kernel_mul_mv_q6_k", 3, Some(128), 1, 1),
    phase("kernel_mul_mv_group_q4_0", 8, Some(128), 1, 3),
    phase("kernel_mul_mv_group_q8_0", 8, Some(128), 1, 3),
    phase("kernel_mul_mv_group_rope_q4_0", 16, Some(128), 1, 3),
    phase("kernel_mul_mv_group_rope_q8_0", 16, Some(128), 1, 3),
    phase("kernel_mul_mv_group_q4_k", 8, Some(128), 1, 3),
    phase("kernel_mul_mv_group_q6_k", 8, Some(128), 1, 3),
    phase("kernel_mul_mv_group_rope_q4_k", 16, Some(128), 1, 3),
    phase("kernel_mul_mv_group_rope_q6_k", 16, Some(128), 1, 3),
    phase("kernel_mul_mv_group_mixed", 8, Some(128), 1, 3),
    phase("kernel_mul_mv_group_rope_mixed", 16, Some(128), 1, 3),
    // GLU_ROWS rows a group either way: GLU_WARPS warps alone, 4 in the step.
    glu_phase("kernel_mul_mv_glu_q4_0"),
    glu_phase("kernel_mul_mv_glu_q8_0"),
    glu_phase("kernel_mul_mv_glu_q4_k"),
    glu_phase("kernel_mul_mv_glu_q6_k"),
    // FW_WG elements a group: 256 alone, 128 in the step.
    phase("kernel_fused_rms_norm_wide", 7, Some(256), 2, 0),
    phase("kernel_fa_vec", 8, Some(128), 1, 0),
    phase("kernel_rope_store_f32", 11, None, 1, 0),
];

/// Kernels that run as another kernel's phase: same arguments, same
/// results. The step program holds only `kernel_fa_vec`, which takes every
/// head size `kernel_fa_vec_d128` does: PoCL's cold compile of the step
/// program (CI builds it) took 723 s in session 12's CI run and 685 s with
/// this alias; with both attention kernels in it, it had not finished after
/// 12.5 minutes.
const PHASE_ALIASES: &[(&str, &str)] = &[
    ("kernel_fa_vec_d128", "kernel_fa_vec"),
    ("kernel_fa_vec_d64", "kernel_fa_vec"),
];

/// Work-group size of the step kernel (STEP_WG).
pub const STEP_WG: usize = 128;
/// Buffer arguments of the step kernel (m0..m7): distinct memory objects
/// one launch can name.
pub const STEP_MEMS: usize = 8;
const STEP_MAX_ARGS: usize = 16;
const STEP_DESC: usize = 5 + STEP_MAX_ARGS;

fn source() -> String {
    let mut cases = String::from("#define STEP_CASES");
    for (i, p) in PHASES.iter().enumerate().skip(1) {
        let args: Vec<String> = (0..p.buffers).map(|a| format!("STEP_ARG({a})")).collect();
        cases.push_str(&format!(
            " \\\n    case {i}: {}({}, pk, vg, lmem); break;",
            p.kernel,
            args.join(", ")
        ));
    }
    [
        super::program::COMMON,
        super::program::HANDOFF,
        include_str!("kernels/rope_store.cl"),
        include_str!("kernels/mul_mv.cl"),
        include_str!("kernels/group_rope.cl"),
        include_str!("kernels/fused_norm.cl"),
        include_str!("kernels/fa_split.cl"),
        &cases,
        include_str!("kernels/step.cl"),
    ]
    .join("\n")
}

fn kernel(device: &Device) -> Result<Kernel> {
    let built = device.programs.lock().get("step").cloned();
    let program = match built {
        Some(p) => p,
        None => {
            let p = Arc::new(super::program::build_source_with(
                device,
                "step",
                &source(),
                &step_options(&BuildTarget::of(device), crate::config::get()),
            )?);
            device.programs.lock().entry("step").or_insert(p).clone()
        }
    };
    Kernel::create(&program, "kernel_step").map_err(|e| {
        Error::Unsupported(format!(
            "kernel kernel_step in program step: status {}",
            e.0
        ))
    })
}

/// The step program as a device of `target` builds it
/// (program.rs every_program).
pub fn program_build(target: &BuildTarget, config: &crate::config::Config) -> ProgramBuild {
    let source = source();
    let extra = step_options(target, config);
    ProgramBuild {
        name: "step".into(),
        options: super::program::build_options(target, config, "step", &source, &extra),
        source,
    }
}

/// The step program's build options: on NVIDIA, a register cap
/// (POLYCL_STEP_MAXRREG) lets more work-groups stay resident, since the step
/// kernel needs the registers of its hungriest phase.
fn step_options(target: &BuildTarget, config: &crate::config::Config) -> String {
    match config.step_maxrreg {
        Some(r) if target.is_nvidia => format!("-DPOLYCL_STEP=1 -cl-nv-maxrregcount={r}"),
        _ => "-DPOLYCL_STEP=1".to_string(),
    }
}

/// Whether plans on `device` should use the step kernel: only when asked
/// (POLYCL_STEP=1). On the H200 it did not beat one launch per kernel: 7B
/// Q4_0 decode 329.7 tokens/s off, 332.8 with the default weight limit
/// (which leaves the 7B's matvecs as launches), 266.9 with every kernel in
/// it; 1B 629.2 off, 618.2 and 634.5 (docs/perf.md step 10).
pub fn wanted() -> bool {
    crate::config::get().step.unwrap_or(false)
}

/// Work-groups the step kernel launches on `device`, or None where the
/// residency check failed (or the program did not build): found once.
pub fn groups(device: &Device) -> Option<usize> {
    let n = *device
        .step_groups
        .get_or_init(|| match find_groups(device) {
            Ok(n) => n,
            Err(e) => {
                log::warn(&format!(
                    "{}: step kernel unavailable, launching kernels one by one: {e}",
                    device.name
                ));
                0
            }
        });
    (n > 0).then_some(n)
}

fn find_groups(device: &Device) -> Result<usize> {
    // A CPU device runs work-groups on a few threads: one group is the only
    // count sure to be resident.
    if !device.is_gpu {
        return Ok(1);
    }
    let cus = device.cl.max_compute_units().cl("clGetDeviceInfo")? as usize;
    let mut per_cu = crate::config::get().step_groups_per_cu;
    while per_cu > 0 {
        let n = cus * per_cu;
        // Three empty phases: two barriers over n groups.
        let phases = Phases {
            pk: vec![0],
            desc: vec![0u32; 3 * STEP_DESC],
            count: 3,
            mems: Vec::new(),
        };
        // A short spin limit: a count that is not resident fails in milliseconds.
        let launch = Batch::new(device, kernel(device)?, phases, n, 1 << 14)?;
        launch.launch.enqueue(device)?;
        let mut timeouts = [0i32; 3];
        // SAFETY: `timeouts` is a live host array of 3 i32s and the read is
        // blocking, so OpenCL is done with it when this returns.
        let ev = unsafe {
            cq::enqueue_read_buffer(
                device.queue()?.get(),
                launch.bar.get(),
                opencl3::types::CL_BLOCKING,
                0,
                12,
                timeouts.as_mut_ptr() as *mut c_void,
                0,
                std::ptr::null(),
            )
        };
        super::buffer::finish_event(ev, "clEnqueueReadBuffer")?;
        if timeouts[2] == 0 {
            log::info(&format!(
                "{}: step kernel: {n} work-groups ({per_cu} per compute unit) resident",
                device.name
            ));
            return Ok(n);
        }
        per_cu /= 2;
    }
    Err(Error::Unsupported(
        "no work-group count passed the residency check".into(),
    ))
}

/// A bound step launch and the memory it names.
pub struct Batch {
    pub launch: Launch,
    _pk: Buffer<u64>,
    _desc: Buffer<u32>,
    bar: Buffer<i32>,
}

/// The phases of one step launch: their packed scalars, descriptor rows
/// (STEP_DESC words each) and the memory objects the rows name.
#[derive(Default)]
struct Phases {
    pk: Vec<u64>,
    desc: Vec<u32>,
    count: i32,
    mems: Vec<cl_mem>,
}

impl Batch {
    fn new(
        device: &Device,
        kernel: Kernel,
        mut phases: Phases,
        groups: usize,
        spin_limit: i32,
    ) -> Result<Batch> {
        let (nphases, mems) = (phases.count, &phases.mems);
        let pk_buf = upload(device, &mut phases.pk)?;
        let desc_buf = upload(device, &mut phases.desc)?;
        let bar = upload(device, &mut [0, 0, 0, spin_limit])?;
        let fallback = pk_buf.get();
        for i in 0..STEP_MEMS {
            let m = mems.get(i).copied().unwrap_or(fallback);
            // SAFETY: m0..m7 are buffer parameters; `m` is a live memory object
            // (the plan keeps its buffers, and pk_buf lives with the batch).
            unsafe { kernel.set_arg(i as u32, &m) }.cl("clSetKernelArg")?;
        }
        let (p, d, b) = (pk_buf.get(), desc_buf.get(), bar.get());
        // SAFETY: the step kernel's remaining parameters, in order: two buffer
        // pointers, an int, a buffer pointer; the buffers live with the batch.
        unsafe {
            kernel.set_arg(8, &p).cl("clSetKernelArg")?;
            kernel.set_arg(9, &d).cl("clSetKernelArg")?;
            kernel.set_arg(10, &nphases).cl("clSetKernelArg")?;
            kernel.set_arg(11, &b).cl("clSetKernelArg")?;
        }
        Ok(Batch {
            launch: Launch {
                kernel,
                global: [groups * STEP_WG, 1, 1],
                local: Some([STEP_WG, 1, 1]),
                dims: 1,
                kind: "step",
                packed: None,
            },
            _pk: pk_buf,
            _desc: desc_buf,
            bar,
        })
    }
}

/// A device buffer holding a copy of `data` (at least one element).
pub(crate) fn upload<T>(device: &Device, data: &mut [T]) -> Result<Buffer<T>> {
    // SAFETY: `data` is a live host slice, copied by OpenCL before create
    // returns (CL_MEM_COPY_HOST_PTR).
    unsafe {
        Buffer::<T>::create(
            &device.context,
            CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
            data.len().max(1),
            data.as_mut_ptr() as *mut c_void,
        )
    }
    .cl("clCreateBuffer")
}

/// The phase `l` would be in a step launch: its kind and virtual grid, or
/// None when the step kernel cannot run it.
fn phase_of(l: &Launch) -> Option<(usize, [usize; 3], &Packed)> {
    let packed = l.packed.as_ref()?;
    let name = l.kernel.function_name().ok()?;
    let name = PHASE_ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name.as_str(), |(_, kernel)| kernel);
    let (kind, p) = PHASES
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, p)| p.kernel == name)?;
    if packed.mems.len() != p.buffers {
        return None;
    }
    let grid = match (p.local, l.local) {
        (Some(wg), Some(local)) if local == [wg, 1, 1] || (p.any_width && local[1..] == [1, 1]) => {
            let wg = local[0];
            let g = l.global;
            if !g[0].is_multiple_of(wg) {
                return None;
            }
            [g[0] / wg * p.x_scale, g[1], g[2]]
        }
        (None, None) if l.dims == 1 => [l.global[0].div_ceil(STEP_WG), 1, 1],
        _ => return None,
    };
    let fits = grid.iter().all(|&x| x > 0 && x <= u32::MAX as usize)
        && grid.iter().product::<usize>() <= u32::MAX as usize;
    // Matvecs over large weights run faster as launches of their own: on the
    // H200 a 7B decode step ran at 260-268 tokens/s as phases and 330 as
    // launches, a 1B one (launch-bound) at 636-639 and 574-632.
    let weights: u64 = (0..PHASES[kind].weights)
        .map(|w| {
            let t = &packed.slots[9 * w..9 * w + 9];
            t[2].saturating_mul(t[6]) // ne1 x nb1
        })
        .sum();
    let small = weights <= (crate::config::get().step_max_mb as u64) << 20;
    (fits && small).then_some((kind, grid, packed))
}

/// Step launches for `launches`: each maximal run of at least two launches
/// that the step kernel can run, that `plain` accepts (no host work between
/// them) and that names at most STEP_MEMS memory objects becomes one. Returns
/// (first index, end index, batch) for each.
pub fn batches(
    device: &Device,
    launches: &[Launch],
    plain: impl Fn(usize) -> bool,
) -> Result<Vec<(usize, usize, Batch)>> {
    let Some(groups) = groups(device) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < launches.len() {
        let mut ph = Phases::default();
        let mut j = i;
        while j < launches.len() && plain(j) {
            let Some((kind, grid, packed)) = phase_of(&launches[j]) else {
                break;
            };
            let mut merged = ph.mems.clone();
            for m in &packed.mems {
                if !merged.contains(m) {
                    merged.push(*m);
                }
            }
            if merged.len() > STEP_MEMS || ph.pk.len() + packed.slots.len() > u32::MAX as usize {
                break;
            }
            ph.mems = merged;
            let mut row = vec![0u32; STEP_DESC];
            row[0] = kind as u32;
            row[1] = grid[0] as u32;
            row[2] = grid[1] as u32;
            row[3] = grid[2] as u32;
            row[4] = ph.pk.len() as u32;
            for (a, m) in packed.mems.iter().enumerate() {
                row[5 + a] = ph.mems.iter().position(|x| x == m).unwrap_or(0) as u32;
            }
            ph.desc.extend_from_slice(&row);
            ph.pk.extend_from_slice(&packed.slots);
            ph.count += 1;
            j += 1;
        }
        if j - i >= 2 {
            // About a second of polling before a wait gives up.
            let batch = Batch::new(device, kernel(device)?, ph, groups, 1 << 22)?;
            out.push((i, j, batch));
            i = j;
        } else {
            i += 1;
        }
    }
    Ok(out)
}
