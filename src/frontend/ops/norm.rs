//! RMS_NORM and NORM over rows of F32.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{is_type, src_ty, Ctx};
use crate::ggml::op_params;
use crate::ggml::ops::OP_RMS_NORM;
use crate::ggml::types::GgmlType::F32;
use crate::ir::{Op, Value};

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let a = src_ty(dec, node, 0);
    is_type(a, &[F32])
        && is_type(Some(&node.out.ty), &[F32])
        && a.is_some_and(|a| a.ne == node.out.ty.ne)
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let eps = op_params::norm(&node.params).eps;
    let a = ctx.input(node, 0)?;
    let op = if node.op == OP_RMS_NORM {
        Op::RmsNorm { eps }
    } else {
        Op::Norm { eps }
    };
    Ok(ctx.emit(op, vec![a], node))
}
