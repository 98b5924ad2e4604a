//! The decode attention and the O projection after it as one launch, by
//! ticket (`kernels/attn_o.cl`): where a plan's short-cache attention launch
//! (`kernel_fa_short_*`, plan/flash_attn.rs) is followed by the
//! MulMatAddNorm launch that reads its Q8_1 copy (llama's O projection with
//! the residual add and the FFN norm), one launch of the pair kernel runs
//! both, the attention's work-groups first. Both launches stay bound in the
//! plan as they are: the pair kernel reads their packed scalars and takes
//! their buffers, so a pair is only a different way to enqueue them. The host
//! of a 1B model is its bound at ~113 launches a token (docs/perf.md step 38);
//! this takes one a layer away, and with it one launch's drain and ramp on
//! the GPU. Off by default (`POLYCL_ATTN_O`): on the H200 it measured no
//! faster, the pair's launch costing the host more than the two it replaces
//! (docs/perf.md step 45).
//!
//! Where one group a head takes the whole cache (`kernel_fa_one_*`), a
//! second kind of pair runs by heads instead (`heads_pair`,
//! `kernels/attn_oh.cl`, `POLYCL_ATTN_OH`, off by default): each head's
//! groups go on from its attention to its columns of W_o, so no group waits
//! for another, and the last group to finish does MulMatAddNorm's
//! epilogue. Without its O work and epilogue the launch took ~113 us off a
//! 1B token's GPU span and ~250 us off a 7B's on the H200; with them it is
//! slower so far (docs/perf.md step 59).
//!
//! Checked here, from the two launches themselves: no host work between them
//! (`plain`), the kernel names, the widths both kernels are written for, and
//! that the projection's activation is the attention's Q8_1 copy (same memory
//! object and offset, written: has_q8).

use crate::config;
use crate::error::{ClContext, Result};
use crate::passes::fuse::matmul_norm::WORK_GROUP as MVN_WG;
use crate::runtime::executor::{set_buffers, Launch, Packed};
use crate::runtime::{program, Device};
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer, ClMem};

/// Work-items a group of both bodies (AO_WG; FS_WG, MVN_WG).
const WG: usize = 512;
/// Buffer arguments of the attention kernels (FA_SPLIT_ARGS) and of
/// MulMatAddNorm (MV_NORM_KERNEL).
const FA_MEMS: usize = 8;
const MVN_MEMS: usize = 8;
/// Slot of MulMatAddNorm's activation offset: after w's tensor (9 slots).
const MVN_ACT_SLOT: usize = 9;

/// A pair's launch and its ticket counters (tk in attn_o.cl). The pair
/// reads the two launches' own scalars and takes their buffers, as they do:
/// by address where the device takes them so (runtime/addresses.rs).
pub struct Pair {
    pub launch: Launch,
    _tickets: Buffer<i32>,
    /// The by-heads kernel's row sums (attn_oh.cl `acc`).
    _sums: Option<Buffer<i32>>,
}

/// Pairs of `launches`: (index of the attention launch, the pair), the
/// projection being the launch after it. `plain(i)`: launch i needs no host
/// work before it (MatmulState::plain).
pub fn pairs(
    device: &Device,
    launches: &[Launch],
    plain: impl Fn(usize) -> bool,
) -> Result<Vec<(usize, Pair)>> {
    let mut out = Vec::new();
    let config = config::get();
    if !config.attn_o && !config.attn_oh {
        return Ok(out);
    }
    let mut i = 0;
    while i + 1 < launches.len() {
        if plain(i) && plain(i + 1) {
            let (fa, mvn) = (&launches[i], &launches[i + 1]);
            let p = match (config.attn_o, config.attn_oh) {
                (true, true) => match pair(device, fa, mvn)? {
                    None => heads_pair(device, fa, mvn)?,
                    p => p,
                },
                (true, false) => pair(device, fa, mvn)?,
                _ => heads_pair(device, fa, mvn)?,
            };
            if let Some(p) = p {
                out.push((i, p));
                i += 2;
                continue;
            }
        }
        i += 1;
    }
    Ok(out)
}

/// The kernels' names' suffixes (head size, quant type) and packed
/// scalars, where `fa` and `mvn` are a pair.
fn matched<'a>(
    fa: &'a Launch,
    mvn: &'a Launch,
) -> Option<(String, String, &'a Packed, &'a Packed)> {
    let fa_name = fa.kernel.function_name().ok()?;
    let mvn_name = mvn.kernel.function_name().ok()?;
    let d = fa_name.strip_prefix("kernel_fa_short_")?;
    let q = mvn_name.strip_prefix("kernel_mul_mv_norm_")?;
    let (pf, pm) = (fa.packed.as_ref()?, mvn.packed.as_ref()?);
    let widths = fa.local == Some([WG, 1, 1]) && mvn.local == Some([MVN_WG, 1, 1]);
    (widths && reads_q8(pf, pm)).then(|| (d.to_string(), q.to_string(), pf, pm))
}

/// Whether MulMatAddNorm's activation (`pm`) is the attention's Q8_1 copy
/// (`pf`: FA_SPLIT_UNPACK ends with has_q8, q8_off and rot, and q8 is its
/// last buffer).
fn reads_q8(pf: &Packed, pm: &Packed) -> bool {
    let n = pf.slots.len();
    pf.mems.len() == FA_MEMS
        && pm.mems.len() == MVN_MEMS
        && n >= 3
        && pm.slots.len() > MVN_ACT_SLOT
        && pf.slots[n - 3] == 1
        && pm.mems[1] == pf.mems[FA_MEMS - 1]
        && pm.slots[MVN_ACT_SLOT] == pf.slots[n - 2]
}

fn pair(device: &Device, fa: &Launch, mvn: &Launch) -> Result<Option<Pair>> {
    let Some((d, q, pf, pm)) = matched(fa, mvn) else {
        return Ok(None);
    };
    // Attention groups along y (query rows x chunks) and z (heads); the
    // projection's along x.
    let fa_gy = fa.global[1];
    let fa_groups = fa.global[1] * fa.global[2];
    let o_groups = mvn.global[0] / MVN_WG;
    let small = |n: usize| i32::try_from(n).ok();
    let (Some(gy), Some(ga), Some(go), Some(_)) = (
        small(fa_gy),
        small(fa_groups),
        small(o_groups),
        small(fa_groups + o_groups),
    ) else {
        return Ok(None);
    };
    if gy == 0 || ga == 0 || go == 0 {
        return Ok(None);
    }
    let kernel = program::kernel(device, "attn_o", &format!("kernel_attn_o_{q}_{d}"))?;
    let tickets = crate::runtime::step::upload(device, &mut [0i32; 4])?;
    bind_both(device, &kernel, pf, pm)?;
    let (pkf, pkm, tk) = (pf.params.get(), pm.params.get(), tickets.get());
    // SAFETY: then three buffer pointers (the packed scalars, which live with
    // the launches, and the tickets, which live with the pair) and three
    // ints.
    unsafe {
        kernel.set_arg(16, &pkf).cl("clSetKernelArg")?;
        kernel.set_arg(17, &pkm).cl("clSetKernelArg")?;
        kernel.set_arg(18, &tk).cl("clSetKernelArg")?;
        kernel.set_arg(19, &gy).cl("clSetKernelArg")?;
        kernel.set_arg(20, &ga).cl("clSetKernelArg")?;
        kernel.set_arg(21, &go).cl("clSetKernelArg")?;
    }
    Ok(Some(Pair {
        launch: Launch {
            kernel,
            global: [(fa_groups + o_groups) * WG, 1, 1],
            local: Some([WG, 1, 1]),
            dims: 1,
            // It runs a matmul: the counters count it as one.
            kind: "mul_mat",
            packed: None,
        },
        _tickets: tickets,
        _sums: None,
    }))
}

/// A pair kernel's first 16 parameters: the two launches' buffers in their
/// order (attn_o.cl AO_BUFS, attn_oh.cl OH_BUFS), by address where the pair's
/// program was built so; the memory objects live with the plan, which keeps
/// both launches.
fn bind_both(device: &Device, kernel: &Kernel, pf: &Packed, pm: &Packed) -> Result<()> {
    let mems: Vec<_> = pf.mems.iter().chain(&pm.mems).copied().collect();
    let written: Vec<_> = pf.written.iter().chain(&pm.written).copied().collect();
    let mode = program::address_mode(device, kernel)?;
    set_buffers(device, kernel, mode, 0, &mems, &written)
}

/// Slots of the attention's V head size (v's ne0: after q's and k's
/// tensors and v's offset) and of MulMatAddNorm's weight's row length and
/// row count (w's ne0, ne1).
const FA_V_NE0_SLOT: usize = 19;
const MVN_W_NE0_SLOT: usize = 1;
const MVN_W_NE1_SLOT: usize = 2;
/// Groups a head at most (attn_oh.cl `split`).
const MAX_SPLIT: usize = 8;

/// The attention by heads with the O projection (`kernels/attn_oh.cl`):
/// where `fa` is a whole-cache launch (`kernel_fa_one_*`: one group a head,
/// one query row) and `mvn` the Q4_0 or Q8_0 MulMatAddNorm that reads its
/// Q8_1 copy, whose weight's rows are the heads' outputs in order.
fn heads_pair(device: &Device, fa: &Launch, mvn: &Launch) -> Result<Option<Pair>> {
    let (Ok(fa_name), Ok(mvn_name)) = (fa.kernel.function_name(), mvn.kernel.function_name())
    else {
        return Ok(None);
    };
    let (Some(d), Some(q)) = (
        fa_name.strip_prefix("kernel_fa_one_"),
        mvn_name.strip_prefix("kernel_mul_mv_norm_"),
    ) else {
        return Ok(None);
    };
    let head_size = match d {
        "d64" => 64,
        "d128" => 128,
        _ => return Ok(None),
    };
    let (Some(pf), Some(pm)) = (fa.packed.as_ref(), mvn.packed.as_ref()) else {
        return Ok(None);
    };
    let heads = fa.global[2];
    let shape = (q == "q4_0" || q == "q8_0")
        && fa.local == Some([WG, 1, 1])
        && mvn.local == Some([MVN_WG, 1, 1])
        && fa.global[1] == 1
        && reads_q8(pf, pm)
        && pf.slots.get(FA_V_NE0_SLOT) == Some(&head_size)
        && pm.slots.get(MVN_W_NE0_SLOT) == Some(&(head_size * heads as u64))
        && pm.slots.get(MVN_W_NE1_SLOT).is_some_and(|&r| r % 32 == 0);
    if !shape || heads == 0 || !int64_atomics(device)? {
        return Ok(None);
    }
    let rows = pm.slots[MVN_W_NE1_SLOT] as usize;
    let cus = device.cl.max_compute_units().cl("clGetDeviceInfo")? as usize;
    let split = config::get()
        .attn_oh_split
        .unwrap_or((cus / heads).clamp(1, MAX_SPLIT));
    let Ok(split_arg) = i32::try_from(split) else {
        return Ok(None);
    };
    let kernel = program::kernel(device, "attn_oh", &format!("kernel_attn_oh_{q}_{d}"))?;
    let tickets = crate::runtime::step::upload(device, &mut [0i32; 4])?;
    // One 64-bit fixed-point sum a row, as i32 pairs.
    let sums = crate::runtime::step::upload(device, &mut vec![0i32; 2 * rows])?;
    bind_both(device, &kernel, pf, pm)?;
    let (pkf, pkm, acc, tk) = (pf.params.get(), pm.params.get(), sums.get(), tickets.get());
    // SAFETY: attn_oh.cl's signature after the 16 buffers: the two packed
    // scalar buffers (they live with the launches, which the plan keeps),
    // the sums and the counter (they live with the pair) and an int.
    unsafe {
        kernel.set_arg(16, &pkf).cl("clSetKernelArg")?;
        kernel.set_arg(17, &pkm).cl("clSetKernelArg")?;
        kernel.set_arg(18, &acc).cl("clSetKernelArg")?;
        kernel.set_arg(19, &tk).cl("clSetKernelArg")?;
        kernel.set_arg(20, &split_arg).cl("clSetKernelArg")?;
    }
    Ok(Some(Pair {
        launch: Launch {
            kernel,
            global: [heads * split * WG, 1, 1],
            local: Some([WG, 1, 1]),
            dims: 1,
            kind: "mul_mat",
            packed: None,
        },
        _tickets: tickets,
        _sums: Some(sums),
    }))
}

/// Whether the device has 64-bit global atomics (attn_oh.cl's sums).
fn int64_atomics(device: &Device) -> Result<bool> {
    let extensions = device.cl.extensions().cl("clGetDeviceInfo")?;
    Ok(extensions.contains("cl_khr_int64_base_atomics"))
}
