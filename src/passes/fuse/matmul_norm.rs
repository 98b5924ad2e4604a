//! `FusedRmsNorm(w x + res)` -> `MulMatAddNorm`: llama's O and down
//! projections with the residual add and the norm of the sublayer after
//! them, one launch instead of two: the matvec's last work-group norms the
//! row (`mul_mv_norm.cl`). The norm kernel alone cost ~9 us a launch on the
//! H200, two a layer.
//!
//! Preconditions: a FusedRmsNorm with its add, one of whose operands is a
//! decode matmul (`matmul_group::decode_matmul`) and the other an F32 row of
//! the same length; every vector (residual, matmul result, sum, normed,
//! weighted, norm weight) a contiguous F32 row of a multiple of 32 elements,
//! placed at a 16-byte aligned offset (the last work-group reads and writes
//! them four floats at a time), and any two of them either the same memory
//! or disjoint (the kernel's order of reads and writes is sound for both,
//! not for partial overlaps).

use super::matmul_group::decode_matmul;
use super::span;
use crate::ggml::types::GgmlType::F32;
use crate::ir::{Graph, Op, Place, Value};

/// A contiguous F32 row of `n` elements at a 16-byte aligned offset.
fn row_of(g: &Graph, v: Value, n: i64) -> bool {
    let t = g.ty(v);
    let aligned = matches!(g.output(v).place, Place::Bound(m) if m.offset % 16 == 0);
    t.dtype == F32 && t.ne == [n, 1, 1, 1] && t.is_contiguous() && aligned
}

/// One match: the matmul's node id and the fused op with its inputs.
fn find(g: &Graph, norm: usize) -> Option<(usize, Op, Vec<Value>)> {
    let nn = &g.nodes[norm];
    let Op::FusedRmsNorm { eps, has_add: true } = nn.op else {
        return None;
    };
    let (a, b, nw) = (nn.inputs[0], nn.inputs[1], nn.inputs[2]);
    let (mm, res) = if a.port == 0 && decode_matmul(g, a.node).is_some() {
        (a.node, b)
    } else if b.port == 0 && decode_matmul(g, b.node).is_some() {
        (b.node, a)
    } else {
        return None;
    };
    let o = Value::new(mm, 0);
    let n = g.ty(o).ne[0];
    let [dst, normed, sum] = [0, 1, 2].map(|p| Value::new(norm, p));
    let rows = [res, o, nw, dst, normed, sum];
    if n % 32 != 0 || !rows.iter().all(|&v| row_of(g, v, n)) {
        return None;
    }
    let spans: Vec<_> = rows.iter().map(|&v| span(g, v)).collect::<Option<_>>()?;
    let partial = spans.iter().enumerate().any(|(i, x)| {
        spans[..i]
            .iter()
            .any(|y| x != y && x.0 == y.0 && x.1 < y.2 && y.1 < x.2)
    });
    if partial {
        return None;
    }
    let mn = &g.nodes[mm];
    let inputs = vec![mn.inputs[0], res, nw, mn.inputs[1]];
    Some((mm, Op::MulMatAddNorm { eps }, inputs))
}

/// Fuses every match; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut fused = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        if let Some((mm, op, inputs)) = find(g, i) {
            let name = g.nodes[mm].name.clone();
            if let Some(id) = g.fuse(&[mm, i], op, inputs, name) {
                fused += 1;
                i = id;
            }
        }
        i += 1;
    }
    fused
}
