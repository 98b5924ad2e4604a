//! MulMatAddNorm lowering: one launch of `mul_mv_norm.cl`, the decode matvec
//! whose last work-group norms the row, writing the Q8_1 copy of the
//! weighted norm into the cache slot of the matmuls that read it. Its
//! arrival counter is one word of the plan's scratch after flash attention's
//! (every such launch of a plan shares it: the in-order queue runs them one
//! after the other and each leaves it at 0).

use super::fused_matmul::{q8_activation, suffix};
use super::lower::grid;
use super::Binder;
use crate::error::{Error, Result};
use crate::ir::{Graph, Node, Op, Value};
use crate::runtime::executor::Launch;

/// Row groups a work-group (two rows each) and lanes a row group (MV_ROWS,
/// MV_LANES of mul_mv.cl).
const MV_ROWS: usize = 4;
const MV_LANES: usize = 32;
/// Bytes reserved for the counter (one 128-byte line of its own).
const COUNTER_BYTES: usize = 128;

fn align(n: usize) -> usize {
    n.div_ceil(128) * 128
}

/// Scratch bytes the plan of `g` needs beyond the matmuls' (`mm_bytes`) and
/// flash attention's (`fa_bytes`), counted from 0: the counter's offset plus
/// its line, or 0 without a MulMatAddNorm.
pub fn scratch_end(g: &Graph, mm_bytes: usize, fa_bytes: usize) -> usize {
    let any = g
        .nodes
        .iter()
        .any(|n| matches!(n.op, Op::MulMatAddNorm { .. }));
    if any {
        counter_offset(mm_bytes, fa_bytes) + COUNTER_BYTES
    } else {
        0
    }
}

fn counter_offset(mm_bytes: usize, fa_bytes: usize) -> usize {
    align(align(mm_bytes) + fa_bytes)
}

pub fn lower(b: &mut Binder, id: usize, n: &Node, eps: f32, out: &mut Vec<Launch>) -> Result<()> {
    let bad = |why: String| Error::InvalidGraph(format!("MulMatAddRmsNorm '{}': {why}", n.name));
    let name = format!("kernel_mul_mv_norm_{}", suffix(b, n.inputs[0], n)?);
    let w = b.operand(n.inputs[0])?;
    let res = b.operand(n.inputs[1])?;
    let nw = b.operand(n.inputs[2])?;
    let [o, dst, normed, sum] = [0, 1, 2, 3].map(|p| b.operand(Value::new(id, p)));
    let (o, dst, normed, sum) = (o?, dst?, normed?, sum?);
    let (scratch, size) = b
        .scratch
        .ok_or_else(|| bad("the plan has no scratch".into()))?;
    let fa_bytes = super::flash_attn::scratch_bytes(b.graph, b.device.is_gpu);
    let cnt_off = counter_offset(b.mm.scratch_bytes(), fa_bytes);
    if cnt_off + COUNTER_BYTES > size {
        return Err(bad(format!(
            "its counter at {cnt_off} lies outside the scratch of {size} bytes"
        )));
    }
    super::flash_attn::zero_counters(b, scratch, cnt_off as u64, 4)?;
    let (act, act_off) = q8_activation(b, n, out)?;
    let q8 = b.q8_target(Value::new(id, 1));
    let (q8_mem, q8_off) = q8.map_or((dst.mem, 0), |t| (t.mem, t.offset));
    let groups = (w.ne[1] as usize).div_ceil(2 * MV_ROWS);
    let n_groups = u32::try_from(groups).map_err(|_| bad(format!("{groups} work-groups")))?;
    out.push(grid(
        b,
        "mul_mv",
        &name,
        [groups * MV_ROWS * MV_LANES, 1, 1],
        Some([MV_ROWS * MV_LANES, 1, 1]),
        "mul_mat",
        |a| {
            a.tensor(&w)?.ptr(act.mem, act_off)?;
            a.ptr(res.mem, res.offset)?.ptr(o.mem, o.offset)?;
            a.ptr(sum.mem, sum.offset)?.ptr(normed.mem, normed.offset)?;
            a.ptr(nw.mem, nw.offset)?.ptr(dst.mem, dst.offset)?;
            a.ptr(q8_mem, q8_off)?.i32(q8.is_some() as i32)?.f32(eps)?;
            a.ptr(scratch, cnt_off as u64)?.u32(n_groups)?;
            Ok(())
        },
    )?);
    Ok(())
}
