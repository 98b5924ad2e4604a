//! `GetRows(x, ids)` of a one-row `x` -> a View of `x`: llama's last layer
//! selects its output rows (`inp_out_ids`) from the attention result and the
//! residual, and for one token both have one row, so the only valid index
//! is 0 and the selection is the identity. Two launches fewer a decode step,
//! and the last O projection then meets its norm (matmul_norm) as every
//! other layer's does. An index other than 0 would be out of range; the
//! selection then returns the row instead of failing.
//!
//! Preconditions: x is a contiguous F32 row and the result has its type;
//! one index; the result is not a graph result (nobody outside this graph
//! reads its memory) and no view reads it (a view's memory is its source's,
//! which moves); and the host's allocator gave x's memory to nothing that
//! is written from the GetRows up to its last reader (the GetRows was x's
//! last reader, so its memory may have been handed on), except that last
//! reader itself when it is element-wise and writes exactly x's memory (an
//! in-place add, which the kernels allow).

use super::span;
use crate::ggml::types::GgmlType::F32;
use crate::ir::{Graph, Op, Value};

/// Whether `v` is a contiguous F32 row.
fn f32_row(g: &Graph, v: Value) -> bool {
    let t = g.ty(v);
    t.dtype == F32 && t.ne[1..] == [1, 1, 1] && t.is_contiguous()
}

fn applies(g: &Graph, i: usize) -> bool {
    let n = &g.nodes[i];
    if n.op != Op::GetRows {
        return false;
    }
    let (x, ids, out) = (n.inputs[0], n.inputs[1], Value::new(i, 0));
    if !f32_row(g, x) || g.ty(out) != g.ty(x) || g.ty(ids).nelements() != 1 {
        return false;
    }
    if g.results.contains(&out) {
        return false;
    }
    let readers = g.users(out);
    let Some(&last) = readers.iter().max() else {
        return false;
    };
    if readers.iter().any(|&r| g.nodes[r].op.is_view()) {
        return false;
    }
    // None: x is the planner's to place (the C API path), not the host's.
    let Some(xs) = span(g, x) else {
        return false;
    };
    (i + 1..=last).all(|k| {
        let out = |p: usize| span(g, Value::new(k, p as u32));
        g.nodes[k].op.is_view()
            || (0..g.nodes[k].outputs.len())
                .all(|p| out(p).is_none_or(|s| !super::overlap(&[s], &[xs])))
            || in_place_last(g, k, last, xs)
    })
}

/// Whether node `k` is the last reader and an element-wise op writing its
/// result over exactly x's memory: ggml's allocator makes such an add in
/// place over a source freed at the GetRows, and element-wise kernels read
/// each element before they write it.
fn in_place_last(g: &Graph, k: usize, last: usize, xs: super::Span) -> bool {
    let n = &g.nodes[k];
    k == last
        && matches!(n.op, Op::Binary(_))
        && n.outputs.len() == 1
        && span(g, Value::new(k, 0)) == Some(xs)
        && n.inputs
            .iter()
            .all(|&v| g.ty(v).ne == g.ty(Value::new(k, 0)).ne)
}

/// Turns every applying GetRows into a View of its row; returns how many.
/// Last first: a GetRows made a View no longer writes, which an earlier
/// one's check then sees (llama's two selections sit side by side).
pub fn run(g: &mut Graph) -> usize {
    let mut done = 0;
    for i in (0..g.nodes.len()).rev() {
        if applies(g, i) {
            let x = g.nodes[i].inputs[0];
            let place = g.output(x).place;
            let n = &mut g.nodes[i];
            n.op = Op::View;
            n.inputs = vec![x];
            n.outputs[0].place = place;
            done += 1;
        }
    }
    done
}
