//! Fusion passes for devices that run the fast kernels: each file holds one
//! pattern, its preconditions and the rewrite into one fused op (ir/op.rs),
//! so a decode step launches as few kernels as possible. A fused node writes
//! every output of the nodes it replaces that anything may read: every
//! graph result (the ggml decoder counts as results all nodes but those only
//! this graph's nodes read, by ggml's use counts) and every value a node
//! reads other than through a fused kernel's own Q8_1 copy (matmul_norm is
//! the one pass that relies on this; where the host may read the output
//! norm's row, the lm head's MulMatNormed writes it and takes its place
//! among the results). So fusing never changes what a graph computes, only
//! how many launches it takes. The planner lowers the fused
//! ops (plan/fused_*.rs, plan/rope_store.rs, plan/rope_rot_store.rs,
//! plan/matmul_norm.rs, plan/lower.rs's FlashAttn for fa_rotation).

pub mod fa_rotation;
pub mod group_rope;
pub mod matmul_glu;
pub mod matmul_group;
pub mod matmul_norm;
pub mod rms_norm;
pub mod rope_rot_store;
pub mod rope_store;
pub mod row_select;

use crate::ir::{Graph, NodeId, Op, Place, Value};

/// Fusions made by one run, by pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fused {
    pub row_select: usize,
    pub rms_norm: usize,
    pub matmul_group: usize,
    pub matmul_glu: usize,
    pub rope_store: usize,
    pub rope_rot_store: usize,
    pub group_rope: usize,
    pub fa_rotation: usize,
    pub matmul_norm: usize,
}

/// The passes by name, in the order `run` runs them (`POLYCL_FUSE_SKIP`
/// names them).
pub const NAMES: &[&str] = &[
    "row_select",
    "rms_norm",
    "matmul_glu",
    "matmul_group",
    "rope_store",
    "rope_rot_store",
    "group_rope",
    "fa_rotation",
    "matmul_norm",
];

/// Runs every fusion pass that `POLYCL_FUSE_SKIP` does not name. The order
/// matters for speed of matching, and matmul_norm takes the norms rms_norm
/// made. With the step kernel on, matmul_norm does not run: the step kernel
/// runs the norm as a phase of its own, and PoCL's build of a step program
/// that also held the fused kernel ran for more than 5 minutes. row_select
/// runs only where matmul_norm does: the add it leaves in place over its
/// residual is one that MulMatAddNorm takes, while a norm kernel of its own
/// would fall back to the one-group-a-row kernel there.
pub fn run(g: &mut Graph) -> Fused {
    run_for(g, usize::MAX)
}

/// `run` for a device whose work-groups hold at most `widest` work-items:
/// matmul_norm (and so row_select) only where its kernel's groups fit.
pub fn run_for(g: &mut Graph, widest: usize) -> Fused {
    let skip = &crate::config::get().fuse_skip;
    let step = crate::runtime::step::wanted();
    let norm_fused =
        !step && !skip.iter().any(|s| s == "matmul_norm") && widest >= matmul_norm::WORK_GROUP;
    let mut pass = |name: &str, f: fn(&mut Graph) -> usize| {
        let off = !norm_fused && matches!(name, "matmul_norm" | "row_select");
        if off || skip.iter().any(|s| s == name) {
            0
        } else {
            f(g)
        }
    };
    Fused {
        row_select: pass("row_select", row_select::run),
        rms_norm: pass("rms_norm", rms_norm::run),
        matmul_glu: pass("matmul_glu", matmul_glu::run),
        matmul_group: pass("matmul_group", matmul_group::run),
        rope_store: pass("rope_store", rope_store::run),
        rope_rot_store: pass("rope_rot_store", rope_rot_store::run),
        group_rope: pass("group_rope", group_rope::run),
        fa_rotation: pass("fa_rotation", fa_rotation::run),
        matmul_norm: pass("matmul_norm", matmul_norm::run),
    }
}

/// Whether `v` is a weight split across devices (`-sm row`): those matmuls
/// are lowered with peer work and are never fused.
pub(crate) fn is_split_weight(g: &Graph, v: Value) -> bool {
    match g.output(v).place {
        Place::Bound(m) => crate::runtime::peer::tensor_at(m.buffer + m.offset).is_some(),
        Place::Internal => false,
    }
}

/// Bytes a value covers: (buffer, start, end).
pub(crate) type Span = (u64, u64, u64);

pub(crate) fn span(g: &Graph, v: Value) -> Option<Span> {
    let o = g.output(v);
    match o.place {
        Place::Bound(m) => {
            let start = m.offset;
            Some((m.buffer, start, start + o.ty.span_bytes()))
        }
        Place::Internal => None,
    }
}

pub(crate) fn overlap(a: &[Span], b: &[Span]) -> bool {
    a.iter()
        .any(|x| b.iter().any(|y| x.0 == y.0 && x.1 < y.2 && y.1 < x.2))
}

/// The nodes that read `v`, directly or through views, none of them a view;
/// None where the host may read `v` or one of those views (a result).
pub(crate) fn readers(g: &Graph, v: Value) -> Option<Vec<NodeId>> {
    if g.results.contains(&v) {
        return None;
    }
    let mut all = Vec::new();
    for u in g.users(v) {
        if g.nodes[u].op == Op::View {
            all.extend(readers(g, Value::new(u, 0))?);
        } else {
            all.push(u);
        }
    }
    Some(all)
}
