//! `FusedRmsNorm(w x + res)` -> `MulMatAddNorm`: llama's O and down
//! projections with the residual add and the norm of the sublayer after
//! them, one launch instead of two (`mul_mv_norm.cl`). The kernel does no
//! reduction over the row: it writes the Q8_1 copy of sum * weight with a
//! factor of its own instead of the norm's 1/rms, and the fused matmuls
//! that read it correct for both from the shares of the sum of squares it
//! leaves. So the normed row and normed * weight are never written as
//! floats.
//!
//! Preconditions: a FusedRmsNorm with its add, one of whose operands is a
//! decode matmul (`matmul_group::decode_matmul`) with a multiple of 32 rows
//! and the other an F32 row of the same length; every vector (residual,
//! matmul result, sum, normed, weighted, norm weight) a contiguous F32 row,
//! placed at a 16-byte aligned offset, any two of them the same memory or
//! disjoint; the Q8_1 cache on; the normed row read by nothing, and
//! normed * weight read only as the activation of fused matmuls
//! (MulMatGroup, MulMatGroupRope, MulMatGlu), directly or through
//! reshapes; neither a graph result (the host reads neither: the ggml
//! decoder's use counts say so).
//!
//! Or, for llama's output norm: normed * weight read by one decode matmul
//! (the lm head) as its activation, and nothing else, a graph result or not
//! (llama marks it an output), where the residual is a MulMatAddNorm's sum
//! (so the kernel's factor c comes from its shares). That matmul becomes `MulMatNormed`, which
//! applies 1/rms as the fused matmuls do and also writes normed * weight in
//! its memory for the host, and takes its place among the results: the
//! output norm's launch goes, as every other norm's did.

use super::matmul_group::decode_matmul;
use super::span;
use crate::ggml::types::GgmlType::F32;
use crate::ir::{Graph, Op, Place, Value};

/// Work-items a work-group of the fused kernel (`mul_mv_norm.cl` MVN_WG:
/// 16 warps of two rows): devices whose work-groups are narrower keep the
/// matmul and the norm apart (`fuse::run_for`).
pub const WORK_GROUP: usize = 512;

/// A contiguous F32 row of `n` elements at a 16-byte aligned offset.
fn row_of(g: &Graph, v: Value, n: i64) -> bool {
    let t = g.ty(v);
    let aligned = matches!(g.output(v).place, Place::Bound(m) if m.offset % 16 == 0);
    t.dtype == F32 && t.ne == [n, 1, 1, 1] && t.is_contiguous() && aligned
}

/// Whether nothing reads `v` and the host does not either.
fn unread(g: &Graph, v: Value) -> bool {
    !g.results.contains(&v) && g.users(v).is_empty()
}

/// Whether `v` is read, and only as the Q8_1 activation of fused matmuls,
/// directly or through reshapes that keep its memory (which are not
/// results either), and the Q8_1 cache will hold it.
fn q8_only(g: &Graph, v: Value) -> bool {
    if crate::plan::q8_cache::mode() == 0 || g.results.contains(&v) {
        return false;
    }
    let users = g.users(v);
    !users.is_empty()
        && users.iter().all(|&u| {
            let n = &g.nodes[u];
            match n.op {
                Op::MulMatGroup | Op::MulMatGroupRope(_) | Op::MulMatGlu { .. } => {
                    n.inputs.iter().filter(|&&i| i == v).count() == 1 && n.inputs.last() == Some(&v)
                }
                Op::View => {
                    let out = Value::new(u, 0);
                    n.outputs.len() == 1 && g.reshaped_source(out) == v && q8_only(g, out)
                }
                _ => false,
            }
        })
}

/// The MulMatAddNorm whose sum (port 3) `res` is, directly or through
/// reshapes: its shares give the kernel's factor c for the norm after it
/// (plan/matmul_norm.rs), where none leaves c = 1.
pub(crate) fn sum_of(g: &Graph, res: Value) -> Option<usize> {
    let r = g.reshaped_source(res);
    (r.port == 3 && matches!(g.nodes[r.node].op, Op::MulMatAddNorm { .. })).then_some(r.node)
}

/// The one reader of `v`, where that is a decode matmul (`decode_matmul`)
/// whose activation `v` is and the Q8_1 cache will hold it: llama's lm head,
/// reading the output norm, which the host may also read (llama marks it an
/// output). It becomes MulMatNormed, which writes the row for the host.
fn head_reader(g: &Graph, v: Value) -> Option<usize> {
    if crate::plan::q8_cache::mode() == 0 {
        return None;
    }
    match g.users(v)[..] {
        [u] if matches!(g.nodes[u].inputs[..], [w, x] if x == v && w != v)
            && decode_matmul(g, u).is_some() =>
        {
            Some(u)
        }
        _ => None,
    }
}

/// One match: the matmul's node id, the fused op with its inputs, and the
/// lm head that reads the norm where that is its one reader (`head_reader`).
fn find(g: &Graph, norm: usize) -> Option<(usize, Op, Vec<Value>, Option<usize>)> {
    let nn = &g.nodes[norm];
    let Op::FusedRmsNorm { eps, has_add: true } = nn.op else {
        return None;
    };
    let (a, b, nw) = (nn.inputs[0], nn.inputs[1], nn.inputs[2]);
    // The matmul may come through views of its memory (row_select's).
    let (sa, sb) = (g.reshaped_source(a), g.reshaped_source(b));
    let (mm, res) = if sa.port == 0 && decode_matmul(g, sa.node).is_some() {
        (sa.node, b)
    } else if sb.port == 0 && decode_matmul(g, sb.node).is_some() {
        (sb.node, a)
    } else {
        return None;
    };
    let o = Value::new(mm, 0);
    let n = g.ty(o).ne[0];
    if n % 32 != 0 || g.ty(g.nodes[mm].inputs[0]).ne[1] != n {
        return None;
    }
    let [dst, normed, sum] = [0, 1, 2].map(|p| Value::new(norm, p));
    let rows = [res, o, nw, dst, normed, sum];
    if !rows.iter().all(|&v| row_of(g, v, n)) {
        return None;
    }
    let spans: Vec<_> = rows.iter().map(|&v| span(g, v)).collect::<Option<_>>()?;
    let partial = spans.iter().enumerate().any(|(i, x)| {
        spans[..i]
            .iter()
            .any(|y| x != y && x.0 == y.0 && x.1 < y.2 && y.1 < x.2)
    });
    if partial || !unread(g, normed) {
        return None;
    }
    let head = if q8_only(g, dst) {
        None
    } else {
        // The head's row is the end of the residual stream, so its factor c
        // must come from shares (a residual that is a MulMatAddNorm's sum):
        // with c = 1 the Q8_1 copy of a deep model's last residual overflows
        // half (a prompt's last layer, whose residual is a row selection).
        sum_of(g, res)?;
        Some(head_reader(g, dst)?)
    };
    let mn = &g.nodes[mm];
    let inputs = vec![mn.inputs[0], res, nw, mn.inputs[1]];
    Some((mm, Op::MulMatAddNorm { eps }, inputs, head))
}

/// Makes the lm head that reads MulMatAddNorm `mvn`'s normed * weight a
/// MulMatNormed, whose second port (in the row's memory) takes the row's
/// place among the graph results. Returns whether it did.
fn normed_head(g: &mut Graph, mvn: usize) -> bool {
    let x = Value::new(mvn, 1);
    let [head] = g.users(x)[..] else {
        return false;
    };
    let inputs = vec![
        g.nodes[head].inputs[0],
        Value::new(mvn, 3),
        g.nodes[mvn].inputs[2],
        x,
    ];
    let row = g.output(x).clone();
    let row_name = g.value_name(x);
    let name = g.nodes[head].name.clone();
    let Some(id) = g.fuse(&[head], Op::MulMatNormed, inputs, name) else {
        return false;
    };
    // The fusion renumbered the nodes: the MulMatAddNorm's port is the
    // input it reads.
    let x = g.nodes[id].inputs[3];
    g.nodes[id].outputs.push(row);
    g.nodes[id].port_names.push(row_name);
    for r in g.results.iter_mut() {
        if *r == x {
            *r = Value::new(id, 1);
        }
    }
    true
}

/// Fuses every match; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut fused = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        if let Some((mm, op, inputs, head)) = find(g, i) {
            let name = g.nodes[mm].name.clone();
            if let Some(id) = g.fuse(&[mm, i], op, inputs, name) {
                fused += 1;
                i = id;
                // The head comes after the MulMatAddNorm, whose id stays;
                // `head_reader` checked what the head's fusion needs.
                assert!(
                    head.is_none() || normed_head(g, id),
                    "the lm head of '{}' did not fuse",
                    g.nodes[id].name
                );
            }
        }
        i += 1;
    }
    fused
}
