//! CONCAT of two tensors of 4-byte elements (F32, I32) along one dim.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{src_ty, Ctx};
use crate::ggml::op_params;
use crate::ggml::types::GgmlType::{F32, I32};
use crate::ir::{Op, Value};

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let (Some(a), Some(b)) = (src_ty(dec, node, 0), src_ty(dec, node, 1)) else {
        return false;
    };
    let out = &node.out.ty;
    let dim = op_params::concat_dim(&node.params);
    (0..4).contains(&dim)
        && [F32, I32].contains(&out.dtype)
        && a.dtype == out.dtype
        && b.dtype == out.dtype
        && (0..4).all(|d| {
            if d == dim as usize {
                a.ne[d] + b.ne[d] == out.ne[d]
            } else {
                a.ne[d] == out.ne[d] && b.ne[d] == out.ne[d]
            }
        })
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let dim = op_params::concat_dim(&node.params);
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    Ok(ctx.emit(Op::Concat { dim }, vec![a, b], node))
}
