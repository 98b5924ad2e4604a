//! `[Add ->] RmsNorm -> Mul(weight)` -> `FusedRmsNorm`: the norm of every
//! llama layer (and the final one) with its weight, and the residual add in
//! front of it. One row-wise kernel then writes the sum, the normed row, the
//! weighted row and, where a decode matmul reads it, its Q8_1 copy.
//!
//! Preconditions: F32 throughout; the weight is one row as long as the
//! normed rows (broadcast over rows, as llama's norm weights are); the Add's
//! operands have the normed shape (no broadcast); the Mul reads the norm as
//! its first operand.

use crate::ggml::types::GgmlType::F32;
use crate::ir::{BinaryOp, Graph, Op, Value};

fn f32_like(g: &Graph, v: Value, ne: [i64; 4]) -> bool {
    let t = g.ty(v);
    t.dtype == F32 && t.ne == ne
}

/// One match: (mul, norm, add) node ids and the fused op's inputs.
fn find(g: &Graph, mul: usize) -> Option<(Vec<usize>, Op, Vec<Value>)> {
    let m = &g.nodes[mul];
    if m.op != Op::Binary(BinaryOp::Mul) {
        return None;
    }
    let (nv, w) = (m.inputs[0], m.inputs[1]);
    let eps = match g.nodes[nv.node].op {
        Op::RmsNorm { eps } if nv.port == 0 => eps,
        _ => return None,
    };
    let ne = g.ty(nv).ne;
    let wt = g.ty(w);
    if !f32_like(g, Value::new(mul, 0), ne)
        || wt.dtype != F32
        || wt.ne != [ne[0], 1, 1, 1]
        || wt.nb[0] != 4
    {
        return None;
    }
    let x = g.nodes[nv.node].inputs[0];
    if !f32_like(g, x, ne) {
        return None;
    }
    let a = &g.nodes[x.node];
    if x.port == 0
        && a.op == Op::Binary(BinaryOp::Add)
        && f32_like(g, a.inputs[0], ne)
        && f32_like(g, a.inputs[1], ne)
    {
        return Some((
            vec![mul, nv.node, x.node],
            Op::FusedRmsNorm { eps, has_add: true },
            vec![a.inputs[0], a.inputs[1], w],
        ));
    }
    Some((
        vec![mul, nv.node],
        Op::FusedRmsNorm {
            eps,
            has_add: false,
        },
        vec![x, w],
    ))
}

/// Fuses every match; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut fused = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        if let Some((members, op, inputs)) = find(g, i) {
            let name = g.nodes[i].name.clone();
            // Without the add (where fusing it would make a cycle) the norm
            // and its weight still fuse.
            let done = g
                .fuse(&members, op.clone(), inputs.clone(), name.clone())
                .or_else(|| {
                    let Op::FusedRmsNorm { eps, has_add: true } = op else {
                        return None;
                    };
                    let x = g.nodes[members[1]].inputs[0];
                    g.fuse(
                        &members[..2],
                        Op::FusedRmsNorm {
                            eps,
                            has_add: false,
                        },
                        vec![x, inputs[2]],
                        name,
                    )
                });
            if let Some(id) = done {
                fused += 1;
                i = id;
            }
        }
        i += 1;
    }
    fused
}
