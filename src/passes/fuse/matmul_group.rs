//! Decode matmuls that read one activation (llama's Q, K and V projections)
//! -> `MulMatGroup`: one launch computes all of them from one Q8_1 copy.
//!
//! Preconditions (`decode_matmul`): Q4_0, Q8_0, Q4_K or Q6_K 2-D weights of
//! one row length (a multiple of their block), not split across
//! devices; an F32 contiguous activation of one column; contiguous F32
//! results. At most three matmuls a group (the kernel's limit), adjacent in
//! node order.

use super::is_split_weight;
use crate::ggml::types::GgmlType::{F32, Q4K, Q4_0, Q6K, Q8_0};
use crate::ir::{Graph, Op, Value};

/// Most matrices one group kernel takes.
pub const MAX_GROUP: usize = 3;

/// Whether `mm` is a MulMat the fused decode kernels compute; its weight type.
pub(crate) fn decode_matmul(g: &Graph, mm: usize) -> Option<crate::ggml::types::GgmlType> {
    let n = &g.nodes[mm];
    if n.op != Op::MulMat {
        return None;
    }
    let (w, x, y) = (
        g.ty(n.inputs[0]),
        g.ty(n.inputs[1]),
        g.ty(Value::new(mm, 0)),
    );
    let block = match w.dtype {
        Q4_0 | Q8_0 => 32,
        Q4K | Q6K => 256,
        _ => return None,
    };
    let ok = w.ne[2] == 1
        && w.ne[3] == 1
        && w.ne[0] == x.ne[0]
        && w.ne[0] % block == 0
        && x.dtype == F32
        && x.ne[1..] == [1, 1, 1]
        && x.is_contiguous()
        && y.dtype == F32
        && y.is_contiguous()
        && !is_split_weight(g, n.inputs[0]);
    ok.then_some(w.dtype)
}

/// Fuses every group; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut fused = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        if decode_matmul(g, i).is_none() {
            i += 1;
            continue;
        }
        let x = g.nodes[i].inputs[1];
        let mut members = vec![i];
        let mut j = i + 1;
        while j < g.nodes.len() && members.len() < MAX_GROUP {
            let n = &g.nodes[j];
            // Weight types may differ (Q4_K_M keeps some V projections in
            // Q6_K): every decode type reads the same Q8_1 activation.
            if decode_matmul(g, j).is_some()
                && n.inputs[1] == x
                && g.ty(n.inputs[0]).ne[0] == g.ty(g.nodes[i].inputs[0]).ne[0]
            {
                members.push(j);
            } else if !n.op.is_view() {
                break;
            }
            j += 1;
        }
        if members.len() > 1 {
            let mut inputs: Vec<Value> = members.iter().map(|&m| g.nodes[m].inputs[0]).collect();
            inputs.push(x);
            let name = g.nodes[i].name.clone();
            if let Some(id) = g.fuse(&members, Op::MulMatGroup, inputs, name) {
                fused += 1;
                i = id;
            }
        }
        i += 1;
    }
    fused
}
