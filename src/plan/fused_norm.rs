//! FusedRmsNorm lowering: one launch of fused_norm.cl per graph node, writing
//! the Q8_1 copy of its result into the cache slot of the decode matmul that
//! reads it, when there is one. `kernel_fused_rms_norm_wide` (several
//! work-groups per row) when no output shares memory with the inputs,
//! otherwise `kernel_fused_rms_norm` (one work-group per row, safe in place).

use super::lower::grid;
use super::Binder;
use crate::error::Result;
use crate::ir::{Node, Value};
use crate::runtime::executor::{Launch, Operand};
use std::ops::Range;

/// Work-group size of the kernel (FN_WG) and the longest row it keeps in
/// local memory (FN_LOCAL_MAX), which a Q8_1 copy needs.
const WG: usize = 256;
const LOCAL_MAX: i64 = 8192;
/// Work-group size of the wide kernel (FW_WG): elements per group of a row.
const WIDE_WG: usize = 256;

/// Bytes an F32 view touches (from its first to past its last element).
fn span(o: &Operand) -> Range<u64> {
    let last: u64 = (0..4).map(|i| (o.ne[i].max(1) as u64 - 1) * o.nb[i]).sum();
    o.offset..o.offset + last + 4
}

fn overlap(x: &Operand, y: &Operand) -> bool {
    let (a, b) = (span(x), span(y));
    x.mem == y.mem && a.start < b.end && b.start < a.end
}

pub fn lower(
    b: &mut Binder,
    id: usize,
    n: &Node,
    eps: f32,
    has_add: bool,
    out: &mut Vec<Launch>,
) -> Result<()> {
    let a = b.operand(n.inputs[0])?;
    let (bb, w) = if has_add {
        (b.operand(n.inputs[1])?, b.operand(n.inputs[2])?)
    } else {
        (a, b.operand(n.inputs[1])?)
    };
    let dst = b.operand(Value::new(id, 0))?;
    let normed = b.operand(Value::new(id, 1))?;
    let sum = if has_add {
        b.operand(Value::new(id, 2))?
    } else {
        normed
    };
    let contiguous = b.graph.ty(Value::new(id, 0)).is_contiguous();
    let q8 = if dst.ne[0] % 32 == 0 && dst.ne[0] <= LOCAL_MAX && contiguous {
        b.q8_target(Value::new(id, 0))
    } else {
        None
    };
    let (q8_mem, q8_off) = q8.map_or((dst.mem, 0), |t| (t.mem, t.offset));
    let outputs = if has_add {
        vec![sum, normed, dst]
    } else {
        vec![normed, dst]
    };
    let aliased = outputs.iter().any(|o| overlap(o, &a) || overlap(o, &bb));
    let rows = [dst.ne[1] as usize, (dst.ne[2] * dst.ne[3]) as usize];
    let (name, wg, global) = if aliased {
        ("kernel_fused_rms_norm", WG, [WG, rows[0], rows[1]])
    } else {
        let groups = (dst.ne[0].max(1) as usize).div_ceil(WIDE_WG);
        (
            "kernel_fused_rms_norm_wide",
            WIDE_WG,
            [WIDE_WG * groups, rows[0], rows[1]],
        )
    };
    out.push(grid(
        b,
        "fused_norm",
        name,
        global,
        Some([wg, 1, 1]),
        "norm",
        |k| {
            k.tensor(&a)?.tensor(&bb)?.i32(has_add as i32)?;
            k.tensor_out(&sum)?
                .tensor_out(&normed)?
                .tensor(&w)?
                .tensor_out(&dst)?;
            k.f32(eps)?
                .ptr_out(q8_mem, q8_off)?
                .i32(q8.is_some() as i32)?;
            Ok(())
        },
    )?);
    Ok(())
}
