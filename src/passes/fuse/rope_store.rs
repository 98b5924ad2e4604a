//! Rope of Q and K plus the K/V cache writes of one attention layer -> RopeStore.
//!
//! Pattern (llama's attention input, stateless cache form):
//!   rope_q  = Rope(p)(q, pos [, ff])
//!   rope_k  = Rope(p)(k, pos [, ff])             same params, positions, factors
//!   write_k = ScatterRows(k_cache, reshape(rope_k) as [width, rows], k_rows)
//!   write_v = ScatterRows(v_cache, v, v_rows)    any V layout (also llama's
//!                                                transposed V: one element a row)
//! The four run as one kernel, so no member may write memory another member
//! reads or writes (the host's allocator reuses memory of dead tensors: in
//! llama's own order it puts V over Q once rope Q has read Q, and without
//! help it puts rope K's output over Q). polycl's graph_optimize
//! (backend/optimize.rs) moves the V and K matmuls up to Q's and keeps Q
//! allocated until rope K, which makes the layers fusable; `memory_safe`
//! still checks every match. Graph::fuse only fuses runs of members with
//! views between them, so no other node changes sides.

use super::{overlap, span, Span};
use crate::ggml::types::GgmlType::{self, F16, F32, I32, I64};
use crate::ir::{Graph, NodeId, Op, Place, RopeParams, Value};

/// Fuses every match; returns how many.
pub fn run(g: &mut Graph) -> usize {
    fuse_matches(g, try_match, "rope+store")
}

/// A match of this pass, rope_rot_store or fa_rotation: the members in the
/// fused node's port order, the node `try_match` found it from (a K write;
/// fa_rotation's attention) by which `fuse_matches` remembers a refusal, and
/// the member that names the fused node.
pub(super) struct Match {
    pub members: Vec<NodeId>,
    pub found_at: NodeId,
    pub named_by: NodeId,
    pub op: Op,
    pub inputs: Vec<Value>,
}

/// Fuses every match `try_match` finds from a node (a K write, or
/// fa_rotation's attention); returns how many.
pub(super) fn fuse_matches(
    g: &mut Graph,
    try_match: fn(&Graph, NodeId) -> Option<Match>,
    label: &str,
) -> usize {
    let mut fused = 0;
    let mut refused: Vec<NodeId> = Vec::new();
    // Ids change with each fusion, so the search starts over after one; a
    // refused match is remembered by the node it was found at, whose id only
    // shifts when a fusion happens, so the list is cleared then.
    let find = |g: &Graph, refused: &[NodeId]| {
        (0..g.nodes.len())
            .filter(|w| !refused.contains(w))
            .find_map(|w| try_match(g, w))
    };
    while let Some(m) = find(g, &refused) {
        let name = format!("{} ({label})", g.nodes[m.named_by].name);
        // A member reads another through RESHAPE views between them (the K
        // write rope(k) or its rotation, the Hadamard the attention); the
        // views are no inputs of the fused node (the kernel takes those rows
        // from registers or local memory), so Graph::fuse sees no cycle.
        if g.fuse(&m.members, m.op, m.inputs, name).is_some() {
            fused += 1;
            refused.clear();
        } else {
            refused.push(m.found_at);
        }
    }
    fused
}

/// The inputs of a RopeStore or RopeRotStore: [q, k, positions, k_cache,
/// k_rows, v, v_cache, v_rows] (+ freq factors), from rope(q) `rq`, rope(k)
/// `rk`, the K write `wk`, the V rows `v` and the V write `wv`.
pub(super) fn fused_inputs(
    g: &Graph,
    rq: NodeId,
    rk: NodeId,
    wk: NodeId,
    v: Value,
    wv: NodeId,
) -> Vec<Value> {
    let (rope_k, nk, nv) = (&g.nodes[rk], &g.nodes[wk], &g.nodes[wv]);
    let mut inputs = vec![
        g.nodes[rq].inputs[0],
        rope_k.inputs[0],
        rope_k.inputs[1],
        nk.inputs[0],
        nk.inputs[2],
        v,
        nv.inputs[0],
        nv.inputs[2],
    ];
    // rope(k)'s freq factors, where it has them
    inputs.extend(rope_k.inputs.get(2));
    inputs
}

pub(super) fn bound(g: &Graph, v: Value) -> bool {
    matches!(g.output(v).place, Place::Bound(_))
}

/// Rope params and inputs the kernel handles: F32 in and out, I32 positions,
/// F32 factors, an even rotated width within an even row.
pub(super) fn rope_ok(g: &Graph, r: NodeId) -> Option<RopeParams> {
    let n = &g.nodes[r];
    let Op::Rope(p) = n.op else { return None };
    let x = g.ty(n.inputs[0]);
    let out = &n.outputs[0].ty;
    let ok = n.outputs.len() == 1
        && x.dtype == F32
        && out.dtype == F32
        && x.ne == out.ne
        && !x.is_dynamic()
        && x.ne[0] % 2 == 0
        && p.n_dims > 0
        && p.n_dims % 2 == 0
        && i64::from(p.n_dims) <= x.ne[0]
        && g.ty(n.inputs[1]).dtype == I32
        && g.ty(n.inputs[1]).ne[0] >= x.ne[2]
        && (!p.has_freq_factors || g.ty(n.inputs[2]).dtype == F32)
        && n.inputs.iter().all(|&v| bound(g, v))
        && bound(g, Value::new(r, 0));
    ok.then_some(p)
}

/// A ScatterRows the kernel handles: F32 rows into an F16/F32 destination of
/// the same width, I64/I32 indices, static shapes, ggml's broadcast rule.
fn scatter_ok(g: &Graph, s: NodeId) -> bool {
    scatter_into(g, s, &[F16, F32])
}

/// `scatter_ok` for a destination of one of `types` (Q8_0 and Q4_0 rows
/// whole blocks wide, rope_rot_store.rs).
pub(super) fn scatter_into(g: &Graph, s: NodeId, types: &[GgmlType]) -> bool {
    let n = &g.nodes[s];
    if n.op != Op::ScatterRows || n.outputs.len() != 1 {
        return false;
    }
    let (dst, vals, idx) = (g.ty(n.inputs[0]), g.ty(n.inputs[1]), g.ty(n.inputs[2]));
    let out = &n.outputs[0].ty;
    types.contains(&dst.dtype)
        && (!dst.dtype.is_quantized() || dst.ne[0] % dst.dtype.block_elems() as i64 == 0)
        && out == dst
        && vals.dtype == F32
        && matches!(idx.dtype, I64 | I32)
        && ![dst, vals, idx].iter().any(|t| t.is_dynamic())
        && vals.ne[0] == dst.ne[0]
        && vals.ne[2] == dst.ne[2]
        && vals.ne[3] == dst.ne[3]
        && idx.ne[0] == vals.ne[1]
        && idx.ne[1] > 0
        && idx.ne[2] > 0
        && vals.ne[2] % idx.ne[1] == 0
        && vals.ne[3] % idx.ne[2] == 0
        && n.inputs.iter().all(|&v| bound(g, v))
        && bound(g, Value::new(s, 0))
        && g.output(Value::new(s, 0)).place == g.output(n.inputs[0]).place
}

/// The Rope node whose output `v` is, through RESHAPE views.
pub(super) fn rope_source(g: &Graph, v: Value) -> Option<NodeId> {
    let s = g.reshaped_source(v);
    (s.port == 0 && matches!(g.nodes[s.node].op, Op::Rope(_))).then_some(s.node)
}

fn try_match(g: &Graph, wk: NodeId) -> Option<Match> {
    if !scatter_ok(g, wk) {
        return None;
    }
    let nk = &g.nodes[wk];
    let rk = rope_source(g, nk.inputs[1])?;
    let p = rope_ok(g, rk)?;
    let rope_k = &g.nodes[rk];
    let k_vals = g.ty(nk.inputs[1]);
    let k_cache = g.ty(nk.inputs[0]);
    let k_out = &rope_k.outputs[0].ty;
    // The kernel writes the cache from rope(k)'s flat element order, seen as
    // rows of the cache's width (llama's reshape_2d).
    if !k_out.is_contiguous()
        || k_vals.ne != [k_cache.ne[0], k_out.nelements() / k_cache.ne[0], 1, 1]
        || k_vals.nelements() != k_out.nelements()
    {
        return None;
    }
    let same_rope = |r: NodeId| {
        r != rk
            && rope_ok(g, r) == Some(p)
            && g.nodes[r].inputs[1..] == rope_k.inputs[1..]
            // a rope that feeds a cache write is some layer's K (its users
            // found here, for the few ropes that get this far: a table of
            // every node's users, built again after each fusion, cost more)
            && !g.users(Value::new(r, 0)).into_iter().any(|u| is_k_write(g, u, r))
    };
    let rq = nearest(g.nodes.len(), rk, same_rope)?;
    let k_dst = g.output(nk.inputs[0]).place;
    let wv = nearest(g.nodes.len(), wk, |s| {
        s != wk
            && scatter_ok(g, s)
            && rope_source(g, g.nodes[s].inputs[1]).is_none()
            && g.output(g.nodes[s].inputs[0]).place != k_dst
    })?;
    let inputs = fused_inputs(g, rq, rk, wk, g.nodes[wv].inputs[1], wv);
    let members = [rq, rk, wk, wv];
    if !memory_safe(g, &members) {
        return None;
    }
    Some(Match {
        members: members.to_vec(),
        found_at: wk,
        named_by: rk,
        op: Op::RopeStore(p),
        inputs,
    })
}

fn is_k_write(g: &Graph, u: NodeId, rope: NodeId) -> bool {
    match g.nodes[u].op {
        Op::ScatterRows => rope_source(g, g.nodes[u].inputs[1]) == Some(rope),
        Op::View => users_of_view(g, u).any(|w| is_k_write(g, w, rope)),
        _ => false,
    }
}

fn users_of_view(g: &Graph, v: NodeId) -> impl Iterator<Item = NodeId> + '_ {
    g.users(Value::new(v, 0)).into_iter()
}

/// The node satisfying `ok` closest to `at` (earlier one on a tie).
pub(super) fn nearest(n: usize, at: NodeId, ok: impl Fn(NodeId) -> bool) -> Option<NodeId> {
    (1..n).find_map(|d| {
        let before = at.checked_sub(d).filter(|&i| ok(i));
        before.or_else(|| Some(at + d).filter(|&i| i < n && ok(i)))
    })
}

/// Whether running the members as one kernel reads and writes what running
/// them one after the other did (see the module comment). Nodes that compute
/// between members need no check here: `Graph::fuse` refuses those matches.
fn memory_safe(g: &Graph, members: &[NodeId; 4]) -> bool {
    let [rq, rk, wk, wv] = *members;
    // Inside the kernel every member runs at once: no member may write what
    // another reads (rope(k) reaches the K write in registers) or writes, and
    // a rope in place must read and write the very same elements.
    let reads = |m: NodeId| -> Vec<Span> {
        let n = &g.nodes[m];
        let mut r: Vec<Span> = Vec::new();
        for (i, &v) in n.inputs.iter().enumerate() {
            // the destination is written, not read; the K rows come in registers
            let skip = (n.op == Op::ScatterRows && i == 0) || (m == wk && i == 1);
            if !skip {
                r.extend(span(g, v));
            }
        }
        r
    };
    let writes = |m: NodeId| -> Vec<Span> { span(g, Value::new(m, 0)).into_iter().collect() };
    for &a in members {
        for &b in members {
            if a == b {
                continue;
            }
            if overlap(&writes(a), &reads(b)) || overlap(&writes(a), &writes(b)) {
                return false;
            }
        }
    }
    for r in [rq, rk] {
        let (x, out) = (g.nodes[r].inputs[0], Value::new(r, 0));
        let same = g.output(x) == g.output(out);
        if !same && overlap(&writes(r), &span(g, x).into_iter().collect::<Vec<_>>()) {
            return false;
        }
    }
    // The V write reads its rows from memory, not registers.
    let v_vals: Vec<Span> = span(g, g.nodes[wv].inputs[1]).into_iter().collect();
    !overlap(&writes(wv), &v_vals)
}
