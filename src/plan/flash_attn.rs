//! FLASH_ATTN_EXT lowering choices. GPUs, for the decode shape, get the
//! split-KV kernels of `fa_split.cl` (one work-group per query, KV chunk and
//! head, then a merge), so a single token fills the device; everything else
//! uses the portable, CPU-exact kernel.

use super::lower::grid;
use super::Binder;
use crate::config;
use crate::error::Result;
use crate::ir::{Graph, Node, Op};
use crate::runtime::executor::{Launch, Operand};

/// KV positions per chunk of the split kernel.
const CHUNK: i64 = 256;
/// Queries per graph node up to which the split kernel is used.
const MAX_SPLIT_QUERIES: i64 = 8;
const FA_WG: usize = 64;

fn chunks(n_kv: i64) -> i64 {
    (n_kv + CHUNK - 1) / CHUNK
}

fn applies(g: &Graph, n: &Node, fast: bool) -> bool {
    if !fast || !matches!(n.op, Op::FlashAttn { .. }) {
        return false;
    }
    let q = g.ty(n.inputs[0]);
    q.ne[1] <= MAX_SPLIT_QUERIES
}

fn fast(b_device_is_gpu: bool) -> bool {
    config::get().fast_kernels.unwrap_or(b_device_is_gpu)
}

/// Bytes of partial softmax state the split kernel needs for node `n`.
pub fn scratch_bytes(g: &Graph, device_is_gpu: bool) -> usize {
    g.nodes
        .iter()
        .filter(|n| applies(g, n, fast(device_is_gpu)))
        .map(|n| {
            let q = g.ty(n.inputs[0]);
            let k = g.ty(n.inputs[1]);
            let v = g.ty(n.inputs[2]);
            (q.ne[1] * q.ne[2] * q.ne[3] * chunks(k.ne[1]) * (v.ne[0] + 2) * 4) as usize
        })
        .max()
        .unwrap_or(0)
}

/// Pushes the split launches if they apply; false leaves the node to the
/// portable kernel.
#[allow(clippy::too_many_arguments)]
pub fn lower_split(
    b: &mut Binder,
    n: &Node,
    ops: [Operand; 5],
    has_mask: bool,
    params: [f32; 6],
    n_head_log2: u32,
    out: &mut Vec<Launch>,
) -> Result<bool> {
    if !applies(b.graph, n, fast(b.device.is_gpu)) {
        return Ok(false);
    }
    let Some((scratch, size)) = b.scratch else {
        return Ok(false);
    };
    let [q, k, v, mask, dst] = ops;
    let [scale, max_bias, m0, m1, softcap, _] = params;
    let n_chunks = chunks(k.ne[1]);
    let part_off = b.mm.scratch_bytes() as u64;
    let need = (q.ne[1] * q.ne[2] * q.ne[3] * n_chunks * (v.ne[0] + 2) * 4) as u64;
    if part_off + need > size as u64 {
        return Ok(false);
    }
    let heads = (q.ne[2] * q.ne[3]) as usize;
    let global = [FA_WG, (q.ne[1] * n_chunks) as usize, heads];
    out.push(grid(
        b,
        "fa_split",
        "kernel_fa_split_partial",
        global,
        Some([FA_WG, 1, 1]),
        "flash_attn",
        |a| {
            a.tensor(&q)?
                .tensor(&k)?
                .tensor(&v)?
                .tensor(&mask)?
                .i32(has_mask as i32)?;
            a.ptr(scratch, part_off)?
                .i32(CHUNK as i32)?
                .i32(n_chunks as i32)?;
            a.f32(scale)?
                .f32(max_bias)?
                .f32(m0)?
                .f32(m1)?
                .u32(n_head_log2)?
                .f32(softcap)?;
            Ok(())
        },
    )?);
    let global = [FA_WG, q.ne[1] as usize, heads];
    out.push(grid(
        b,
        "fa_split",
        "kernel_fa_split_merge",
        global,
        Some([FA_WG, 1, 1]),
        "flash_attn",
        |a| {
            a.ptr(scratch, part_off)?.i32(n_chunks as i32)?;
            a.i64(q.ne[1])?.i64(q.ne[2])?.tensor(&dst)?;
            Ok(())
        },
    )?);
    Ok(true)
}
