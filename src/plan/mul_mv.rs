//! Device-specific matrix-vector kernels for the decode shape, chosen at plan
//! time by device capability; the portable kernels in `mul_mat.cl` stay the
//! fallback everywhere. On CPU OpenCL devices (PoCL) the portable kernels are
//! kept because they reproduce ggml's CPU backend bit for bit; GPUs get the
//! fast kernels of `mul_mv.cl` (`POLYCL_FAST_KERNELS` overrides the choice).
//! Prompt-size Q4_0/Q8_0/Q4_K/Q6_K batches on NVIDIA take the tensor-core
//! tiles of `mul_mm_mma.cl` instead (`POLYCL_MMA` overrides; elsewhere the
//! same kernels emulate `mma.sync`, which only tests are meant to force on).

use super::mul_mat::MatmulKernel;
use crate::config;
use crate::ggml::types::GgmlType::{self, F16, F32, Q4K, Q4_0, Q6K, Q8_0};
use crate::runtime::executor::Operand;
use crate::runtime::Device;

/// Rows per work-group and lanes per row of `mul_mv.cl`.
const MV_ROWS: usize = 4;
const MV_LANES: usize = 32;
/// Batches up to this many columns use the matrix-vector kernels; larger ones
/// the 64x64-tile matrix-matrix kernels (16x16 work-items).
const MAX_MV_BATCH: i64 = 8;
const MM_TILE: usize = 64;
const MM_T: usize = 16;
/// Elements per quantization block; the mma kernels take whole blocks (K=32).
const QK: i64 = 32;

/// A 64x64-tile kernel of `mul_mv.cl` (16x16 work-items) for `w` times the
/// batch `x`: the dp4a tiles and the float tiles share this geometry.
fn mm_tile(name: &str, w: &Operand, x: &Operand) -> MatmulKernel {
    let tiles = |n: i64| (n as usize).div_ceil(MM_TILE) * MM_T;
    MatmulKernel {
        program: "mul_mv",
        name: name.to_string(),
        global: [tiles(w.ne[1]), tiles(x.ne[1]), (x.ne[2] * x.ne[3]) as usize],
        local: [MM_T, MM_T, 1],
    }
}

/// Whether prompt-size quantized matmuls and flash attention on `device` use
/// the tensor-core kernels: where `mma.sync` and `cp.async` exist (NVIDIA
/// sm_80 and later) unless `POLYCL_MMA` says otherwise.
pub fn mma_wanted(device: &Device) -> bool {
    config::get().mma.unwrap_or(device.has_mma())
}

/// Whether the raw-staged mma tiles (Q4_0, Q8_0, Q4_K) can copy `w` in 4-byte
/// words: an even number of blocks a row and 4-byte aligned rows, so that no
/// word straddles two rows.
fn raw_stageable(w: &Operand) -> bool {
    w.ne[0] % (2 * QK) == 0
        && w.offset.is_multiple_of(4)
        && w.nb[1..].iter().all(|nb| nb.is_multiple_of(4))
}

/// The widest work-group of the fast kernels but MulMatAddNorm's (the GLU at
/// its default 8 warps, the fused norms): GPUs whose work-groups are
/// narrower get the portable kernels unless `POLYCL_FAST_KERNELS=1` asks.
const FAST_WORK_GROUP: usize = 256;

/// Whether `device` runs the fast kernels (and the fusions made for them).
pub fn wanted(device: &Device) -> bool {
    config::get()
        .fast_kernels
        .unwrap_or(device.is_gpu && device.max_work_group >= FAST_WORK_GROUP)
}

/// Whether `select` picks a fast kernel for K-quant weights on `device`
/// (a decode matvec or, for batches, a tile kernel; both read Q8_1): what
/// the K-quant activation format follows.
pub fn fast_kquants(device: &Device) -> bool {
    wanted(device)
}

/// A fast kernel that reads activations `x` (of type `xtype`) as they are,
/// with no conversion launch before it, if one applies: F16 weights times
/// F32 activations of the decode shape (which saves the attention's two
/// conversions a layer when flash attention is off), and F16 or F32
/// weights times F32 batches on the float tile.
pub fn select_raw(
    device: &Device,
    wtype: GgmlType,
    xtype: GgmlType,
    w: &Operand,
    x: &Operand,
) -> Option<MatmulKernel> {
    if !wanted(device) || xtype != F32 || x.nb[0] != 4 {
        return None;
    }
    if x.ne[1] > MAX_MV_BATCH {
        // Batches: the float tile (attention matmuls without flash
        // attention, F16 models' prompts).
        let name = match wtype {
            F16 if w.nb[0] == 2 => "kernel_mul_mm_f16_f32",
            F32 if w.nb[0] == 4 => "kernel_mul_mm_f32_f32",
            _ => return None,
        };
        return Some(mm_tile(name, w, x));
    }
    if wtype != F16 {
        return None;
    }
    Some(MatmulKernel {
        program: "mul_mv",
        name: "kernel_mul_mv_f16_f32".to_string(),
        global: [
            (w.ne[1] as usize).div_ceil(MV_ROWS) * MV_ROWS * MV_LANES,
            x.ne[1] as usize,
            (x.ne[2] * x.ne[3]) as usize,
        ],
        local: [MV_ROWS * MV_LANES, 1, 1],
    })
}

/// A faster kernel for weights `w` times activations `x` on `device`, if one applies.
pub fn select(device: &Device, wtype: GgmlType, w: &Operand, x: &Operand) -> Option<MatmulKernel> {
    if !wanted(device) {
        return None;
    }
    if x.ne[1] > MAX_MV_BATCH {
        if mma_wanted(device) && w.ne[0] % QK == 0 {
            let name = match wtype {
                Q4_0 if raw_stageable(w) => Some("kernel_mul_mm_mma_q4_0"),
                Q8_0 if raw_stageable(w) => Some("kernel_mul_mm_mma_q8_0"),
                Q4K if raw_stageable(w) => Some("kernel_mul_mm_mma_q4_k"),
                Q6K => Some("kernel_mul_mm_mma_q6_k"),
                _ => None,
            };
            if let Some(name) = name {
                // The shape the program was built with (POLYCL_MMA_TILE).
                let tile = config::get().mma_tile;
                let wg = tile.work_items();
                return Some(MatmulKernel {
                    program: "mul_mm_mma",
                    name: name.to_string(),
                    global: [
                        (w.ne[1] as usize).div_ceil(tile.rows()) * wg,
                        (x.ne[1] as usize).div_ceil(tile.tokens()),
                        (x.ne[2] * x.ne[3]) as usize,
                    ],
                    local: [wg, 1, 1],
                });
            }
        }
        // The dp4a tiles, where mma is not wanted; for K-quants a
        // 32-element unit of a super-block is one step.
        let name = match wtype {
            Q4_0 => "kernel_mul_mm_q4_0",
            Q8_0 => "kernel_mul_mm_q8_0",
            Q4K => "kernel_mul_mm_q4_k",
            Q6K => "kernel_mul_mm_q6_k",
            _ => return None,
        };
        return Some(mm_tile(name, w, x));
    }
    // Quantized kernels compute two rows a row group (Q8_1 activations,
    // activation_format), F16 one.
    let (name, rows_per_group) = match wtype {
        Q4_0 => ("kernel_mul_mv_q4_0", 2 * MV_ROWS),
        Q8_0 => ("kernel_mul_mv_q8_0", 2 * MV_ROWS),
        Q4K => ("kernel_mul_mv_q4_k", 2 * MV_ROWS),
        Q6K => ("kernel_mul_mv_q6_k", 2 * MV_ROWS),
        F16 => ("kernel_mul_mv_f16", MV_ROWS),
        _ => return None,
    };
    let groups = (w.ne[1] as usize).div_ceil(rows_per_group);
    Some(MatmulKernel {
        program: "mul_mv",
        name: name.to_string(),
        global: [
            groups * MV_ROWS * MV_LANES,
            x.ne[1] as usize,
            (x.ne[2] * x.ne[3]) as usize,
        ],
        local: [MV_ROWS * MV_LANES, 1, 1],
    })
}
