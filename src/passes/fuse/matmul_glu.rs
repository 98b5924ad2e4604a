//! `glu(gate x, up x)` -> `MulMatGlu`: llama's FFN gate and up projections
//! and their SwiGLU in one launch, which also writes the Q8_1 copy of the
//! result for the down projection.
//!
//! Preconditions: a two-operand SwiGLU (not swapped) of two decode matmuls
//! (`matmul_group::decode_matmul`) of one weight type reading one
//! activation; F32 contiguous result; the three nodes adjacent.

use super::matmul_group::decode_matmul;
use crate::ggml::types::GgmlType::F32;
use crate::ir::{GluKind, Graph, Op, Value};

fn find(g: &Graph, glu: usize) -> Option<(Vec<usize>, Vec<Value>)> {
    let n = &g.nodes[glu];
    if n.op
        != (Op::Glu {
            kind: GluKind::Swiglu,
            swapped: false,
        })
        || n.inputs.len() != 2
    {
        return None;
    }
    let (a, b) = (n.inputs[0], n.inputs[1]);
    if a.port != 0 || b.port != 0 || a.node == b.node {
        return None;
    }
    let (ta, tb) = (decode_matmul(g, a.node)?, decode_matmul(g, b.node)?);
    let (ga, gb) = (&g.nodes[a.node], &g.nodes[b.node]);
    let y = g.ty(Value::new(glu, 0));
    let same_shape = g.ty(a).ne == y.ne && g.ty(b).ne == y.ne;
    if ta != tb || ga.inputs[1] != gb.inputs[1] || !same_shape || y.dtype != F32 {
        return None;
    }
    if !y.is_contiguous() {
        return None;
    }
    Some((
        vec![glu, a.node, b.node],
        vec![ga.inputs[0], gb.inputs[0], ga.inputs[1]],
    ))
}

/// Fuses every match; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut fused = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        if let Some((members, inputs)) = find(g, i) {
            let name = g.nodes[i].name.clone();
            let op = Op::MulMatGlu {
                kind: GluKind::Swiglu,
            };
            if let Some(id) = g.fuse(&members, op, inputs, name) {
                fused += 1;
                i = id;
            }
        }
        i += 1;
    }
    fused
}
