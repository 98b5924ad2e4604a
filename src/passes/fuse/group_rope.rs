//! MulMatGroup (llama's Q, K and V projections) + the RopeStore that reads
//! them -> MulMatGroupRope: the group kernel rotates Q and K and writes both
//! caches from registers, one launch a layer fewer (group_rope.cl).
//!
//! Pattern (after matmul_group and rope_store):
//!   grp = MulMatGroup(w_0, w_1, w_2, x)           three matrices, one token
//!   rs  = RopeStore(q, k, pos, k_cache, k_rows, v, v_cache, v_rows [, ff])
//!         where q, k, v are RESHAPE views of three different ports of grp
//! Preconditions, each something the kernel relies on: NORMAL rope mode (a
//! rotated pair is two adjacent rows, which one row group computes); rope
//! outputs as long as their projections, contiguous F32 (rope_store already
//! checked their shapes match q and k); cache rows as wide as the K and V
//! projections (llama's non-transposed V, flash attention on); one row index
//! each; and memory: no output of the fused node overlaps another one or an
//! input, except a rope written in place over its own projection (same
//! elements, same work-item).

use super::{overlap, span, Span};
use crate::ir::{Graph, GroupRope, NodeId, Op, RopeMode, Value};

/// Fuses every match; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut fused = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        if let Some((members, op, inputs)) = try_match(g, i) {
            let name = g.nodes[members[0]].name.clone();
            if let Some(id) = g.fuse(&members, op, inputs, name) {
                fused += 1;
                i = id;
            }
        }
        i += 1;
    }
    fused
}

fn try_match(g: &Graph, rs: NodeId) -> Option<([NodeId; 2], Op, Vec<Value>)> {
    let n = &g.nodes[rs];
    let Op::RopeStore(p) = n.op else {
        return None;
    };
    if p.mode != RopeMode::Normal {
        return None;
    }
    let [q, k, v] = [0, 1, 5].map(|i| g.reshaped_source(n.inputs[i]));
    let grp = q.node;
    let gn = &g.nodes[grp];
    if gn.op != Op::MulMatGroup || gn.inputs.len() != 4 || k.node != grp || v.node != grp {
        return None;
    }
    let roles = [q.port, k.port, v.port];
    if roles.iter().any(|&r| r > 2)
        || roles[0] == roles[1]
        || roles[1] == roles[2]
        || roles[0] == roles[2]
    {
        return None;
    }
    let proj = |v: Value| g.ty(v).ne[0];
    let (qo, ko) = (&n.outputs[0].ty, &n.outputs[1].ty);
    let (kc, vc) = (g.ty(n.inputs[3]), g.ty(n.inputs[6]));
    let (kr, vr) = (g.ty(n.inputs[4]), g.ty(n.inputs[7]));
    let shapes_ok = [qo, ko]
        .iter()
        .all(|t| t.is_contiguous() && t.ne[2] == 1 && t.ne[3] == 1)
        && qo.nelements() == proj(q)
        && ko.nelements() == proj(k)
        && proj(q) % 2 == 0
        && proj(k) % 2 == 0
        && proj(v) % 2 == 0
        && kc.ne[0] == proj(k)
        && vc.ne[0] == proj(v)
        && g.ty(n.inputs[5]).ne[0] == proj(v)
        && kr.nelements() == 1
        && vr.nelements() == 1;
    if !shapes_ok {
        return None;
    }
    if !memory_safe(g, grp, rs, [q, k]) {
        return None;
    }
    // [w_0, w_1, w_2, pos, k_cache, k_rows, v_cache, v_rows, (ff,) x]
    let mut inputs = gn.inputs[..3].to_vec();
    inputs.extend([2, 3, 4, 6, 7].map(|i| n.inputs[i]));
    if p.has_freq_factors {
        inputs.push(n.inputs[8]);
    }
    inputs.push(gn.inputs[3]);
    let op = Op::MulMatGroupRope(GroupRope {
        rope: p,
        roles: roles.map(|r| r as u8),
    });
    Some(([grp, rs], op, inputs))
}

/// Whether the one kernel writes what the two launches wrote: its outputs
/// (projections, rope(q), rope(k), caches) pairwise apart, except rope(q)
/// or rope(k) in place over its own projection, and none over an input
/// (weights, positions, row indices, freq factors). The activation x is not
/// one: the kernel reads its Q8_1 copy in the plan's scratch, made before
/// it, and the host may place rope(q) over x once the projections read it.
fn memory_safe(g: &Graph, grp: NodeId, rs: NodeId, [q, k]: [Value; 2]) -> bool {
    let outs: Vec<Value> = (0..3)
        .map(|p| Value::new(grp, p))
        .chain((0..4).map(|p| Value::new(rs, p)))
        .collect();
    let in_place = |a: Value, b: Value| {
        let pair = |proj: Value, rope: Value| (a, b) == (proj, rope) || (b, a) == (proj, rope);
        (pair(q, Value::new(rs, 0)) || pair(k, Value::new(rs, 1))) && span(g, a) == span(g, b)
    };
    let one = |v: Value| -> Vec<Span> { span(g, v).into_iter().collect() };
    for (i, &a) in outs.iter().enumerate() {
        for &b in &outs[i + 1..] {
            if overlap(&one(a), &one(b)) && !in_place(a, b) {
                return false;
            }
        }
    }
    let (gn, rn) = (&g.nodes[grp], &g.nodes[rs]);
    let reads: Vec<Span> = gn.inputs[..3]
        .iter()
        .chain([2, 4, 7].iter().map(|&i| &rn.inputs[i]))
        .chain(rn.inputs.get(8))
        .flat_map(|&v| one(v))
        .collect();
    !outs.iter().any(|&o| overlap(&one(o), &reads))
}
