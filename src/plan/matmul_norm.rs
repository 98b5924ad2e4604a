//! MulMatAddNorm lowering: one launch of `mul_mv_norm.cl`, 32 rows a
//! work-group, which writes the matmul's result and the sum, the Q8_1 copy of
//! sum * weight * c (c in place of the norm's 1/rms: 1/rms of the residual,
//! from the shares of the MulMatAddNorm whose sum it is) into the cache slot
//! of the fused matmuls that read the norm, and one share of the sum of
//! squares a work-group, then c, into the plan's scratch (after flash
//! attention's partials, each node its own region). Those matmuls make
//! 1/(rms * c) from them (`NormScale`, MV_NORM_ARG in mul_mv.cl); the pass
//! checked that nothing else reads the normed row.

use super::fused_matmul::{group_layout, q8_activation, suffix};
use super::lower::grid;
use super::q8_cache::NormShares;
use super::Binder;
use crate::config;
use crate::error::{ClContext, Error, Result};
use crate::ggml::types::GgmlType::{Q4_0, Q8_0};
use crate::ir::{Graph, Node, Op, Value};
use crate::runtime::executor::{ArgBinder, Launch};
use opencl3::types::cl_mem;

/// Rows a work-group (one Q8_1 block) and its size (MVN_WG: 16 warps of
/// two rows).
const ROWS: usize = 32;
const WG: usize = crate::passes::fuse::matmul_norm::WORK_GROUP;

fn align(n: usize) -> usize {
    n.div_ceil(128) * 128
}

/// A node's rows and shares (one a work-group).
fn rows_parts(g: &Graph, n: &Node) -> (usize, usize) {
    let rows = g.ty(n.inputs[0]).ne[1].max(0) as usize;
    (rows, rows.div_ceil(ROWS))
}

/// Bytes of a node's shares and the factor c after them.
fn share_bytes(g: &Graph, n: &Node) -> usize {
    align((rows_parts(g, n).1 + 1) * 4)
}

/// Where node `id`'s shares start, counted from `base`.
fn shares_offset(g: &Graph, id: usize, base: usize) -> usize {
    base + g.nodes[..id]
        .iter()
        .filter(|n| matches!(n.op, Op::MulMatAddNorm { .. }))
        .map(|n| share_bytes(g, n))
        .sum::<usize>()
}

fn shares_base(mm_bytes: usize, fa_bytes: usize) -> usize {
    align(align(mm_bytes) + fa_bytes)
}

/// Scratch bytes the plan of `g` needs beyond the matmuls' (`mm_bytes`) and
/// flash attention's (`fa_bytes`), counted from 0: the end of the last
/// node's shares, or 0 without a MulMatAddNorm.
pub fn scratch_end(g: &Graph, mm_bytes: usize, fa_bytes: usize) -> usize {
    let base = shares_base(mm_bytes, fa_bytes);
    let end = shares_offset(g, g.nodes.len(), base);
    if end == base {
        0
    } else {
        end
    }
}

/// The MV_NORM_ARG arguments of a fused matmul: the shares of the norm whose
/// Q8_1 copy it reads without 1/rms, or none (0 shares: a factor of 1).
#[derive(Clone, Copy)]
pub struct NormScale {
    mem: cl_mem,
    shares: Option<NormShares>,
}

impl NormScale {
    pub fn new(mem: cl_mem, shares: Option<NormShares>) -> Self {
        NormScale { mem, shares }
    }
    /// Whether the activation lacks its norm's 1/rms (a MulMatAddNorm's).
    pub fn has_shares(&self) -> bool {
        self.shares.is_some()
    }
    pub fn bind(&self, a: &mut ArgBinder) -> Result<()> {
        let s = self.shares.unwrap_or(NormShares {
            offset: 0,
            parts: 0,
            n: 1,
            eps: 0.0,
        });
        a.ptr(self.mem, s.offset)?
            .i32(s.parts)?
            .i64(s.n)?
            .f32(s.eps)?;
        Ok(())
    }
}

/// Whether a MulMatAddNorm of `rows` rows of `nb` weight blocks runs two
/// warps a row pair (`kernel_mul_mv_norm2_*`, 1024 wide; mul_mv_norm.cl
/// MV_NORM_BODY's SPLIT; Q4_0 and Q8_0 have one). `POLYCL_MVN_SPLIT=2`
/// takes it for both types wherever the device runs 1024 work-items a group
/// (the Q8_0's has not run on a GPU yet: its 7B down projection's warps each
/// chain ~12 KB a row, twice the Q4_0's). By shape: Q4_0 on NVIDIA,
/// at most half as many work-groups as compute units (each group's rows,
/// one Q8_1 block and one share, cannot be fewer, so a 1B's 2048 rows leave
/// half the device idle; the 7B's 4096 fill it and gained nothing,
/// docs/perf.md step 58), and rows of at least 128 blocks (four a lane or
/// more: halves that save a round trip), unless the attention + O pair takes
/// the O projection (plan/attn_o.rs pairs the 512-wide kernel).
fn split_rows(b: &Binder, w: Value, rows: usize, nb: i64) -> Result<bool> {
    let d = &b.device;
    if let Some(s) = config::get().mvn_split {
        let splits = matches!(b.graph.ty(w).dtype, Q4_0 | Q8_0);
        return Ok(s == 2 && splits && d.max_work_group >= 2 * WG);
    }
    if config::get().attn_o
        || b.graph.ty(w).dtype != Q4_0
        || !d.nvidia_ptx()
        || d.max_work_group < 2 * WG
        || nb < 128
    {
        return Ok(false);
    }
    let cus = d.cl.max_compute_units().cl("clGetDeviceInfo")? as usize;
    Ok(2 * (rows / ROWS) <= cus)
}

pub fn lower(b: &mut Binder, id: usize, n: &Node, eps: f32, out: &mut Vec<Launch>) -> Result<()> {
    let bad = |why: String| Error::InvalidGraph(format!("MulMatAddRmsNorm '{}': {why}", n.name));
    let ty = suffix(b, n.inputs[0], n)?;
    let mut name = format!("kernel_mul_mv_norm_{ty}");
    let w = b.operand(n.inputs[0])?;
    let res = b.operand(n.inputs[1])?;
    let nw = b.operand(n.inputs[2])?;
    let o = b.operand(Value::new(id, 0))?;
    let sum = b.operand(Value::new(id, 3))?;
    let rows = w.ne[1].max(0) as usize;
    if rows == 0 || !rows.is_multiple_of(ROWS) {
        return Err(bad(format!("{rows} rows, not a multiple of {ROWS}")));
    }
    let wg = if split_rows(b, n.inputs[0], rows, w.ne[0] / 32)? {
        name = format!("kernel_mul_mv_norm2_{ty}");
        2 * WG
    } else {
        WG
    };
    let (scratch, size) = b
        .scratch
        .ok_or_else(|| bad("the plan has no scratch".into()))?;
    let fa_bytes = super::flash_attn::scratch_bytes(b.graph, &b.device);
    let g = b.graph;
    let base = shares_base(b.mm.scratch_bytes(), fa_bytes);
    let ss_off = shares_offset(g, id, base);
    let small = |v: usize| i32::try_from(v).map_err(|_| bad(format!("{v} work-groups")));
    if ss_off + share_bytes(g, n) > size {
        return Err(bad(format!(
            "its shares at {ss_off} lie outside the scratch of {size} bytes"
        )));
    }
    // The residual's own shares where it is the sum of the MulMatAddNorm
    // before (the kernel's factor c; none: c = 1).
    let (prev_off, prev_parts, prev_n) =
        match crate::passes::fuse::matmul_norm::sum_of(g, n.inputs[1]) {
            Some(p) => {
                let (rows, parts) = rows_parts(g, &g.nodes[p]);
                (shares_offset(g, p, base), parts, rows)
            }
            None => (0, 0, 1),
        };
    let prev_parts = small(prev_parts)?;
    let (act, act_off, _) = q8_activation(b, n, out)?;
    // The normed row exists only as this Q8_1 copy (the pass checked that
    // the fused matmuls reading it through the cache are its only readers).
    let q8 = b
        .q8_target(Value::new(id, 1))
        .ok_or_else(|| bad("no fused matmul reads its norm through the Q8_1 cache".into()))?;
    let parts = rows / ROWS;
    b.mm.q8.set_norm_shares(
        q8.slot,
        NormShares {
            offset: ss_off as u64,
            parts: small(parts)?,
            n: rows as i64,
            eps,
        },
    );
    out.push(grid(
        b,
        "mul_mv",
        &name,
        [parts * wg, 1, 1],
        Some([wg, 1, 1]),
        "mul_mat",
        |a| {
            a.tensor(&w)?.ptr(act.mem, act_off)?;
            a.ptr(res.mem, res.offset)?.ptr_out(o.mem, o.offset)?;
            a.ptr_out(sum.mem, sum.offset)?.ptr(nw.mem, nw.offset)?;
            a.ptr_out(q8.mem, q8.offset)?
                .ptr_out(scratch, ss_off as u64)?;
            a.i64(prev_off as i64)?
                .i32(prev_parts)?
                .i64(prev_n as i64)?;
            a.f32(eps)?;
            Ok(())
        },
    )?);
    Ok(())
}

/// MulMatNormed: one launch of `kernel_mul_mv_normed_*` (mul_mv.cl), two
/// rows a warp as the group kernels, which applies 1/(rms * c) from the
/// MulMatAddNorm's shares and also writes normed * weight (sum * 1/rms *
/// weight) as floats, the row the MulMatAddNorm left unwritten, for the host.
pub fn lower_normed(b: &mut Binder, id: usize, n: &Node, out: &mut Vec<Launch>) -> Result<()> {
    let bad = |why: &str| Error::InvalidGraph(format!("MulMatNormed '{}': {why}", n.name));
    let name = format!("kernel_mul_mv_normed_{}", suffix(b, n.inputs[0], n)?);
    let w = b.operand(n.inputs[0])?;
    let sum = b.operand(n.inputs[1])?;
    let nw = b.operand(n.inputs[2])?;
    let d = b.operand(Value::new(id, 0))?;
    let row = b.operand(Value::new(id, 1))?;
    let (act, act_off, scale) = q8_activation(b, n, out)?;
    if !scale.has_shares() {
        return Err(bad("its activation is not a MulMatAddNorm's Q8_1 copy"));
    }
    let (global, local, _, _) = group_layout(&[w]);
    out.push(grid(
        b,
        "mul_mv",
        &name,
        global,
        Some(local),
        "mul_mat",
        |a| {
            a.tensor(&w)?
                .ptr(act.mem, act_off)?
                .ptr_out(d.mem, d.offset)?;
            scale.bind(a)?;
            a.ptr(sum.mem, sum.offset)?
                .ptr(nw.mem, nw.offset)?
                .ptr_out(row.mem, row.offset)?;
            Ok(())
        },
    )?);
    Ok(())
}
