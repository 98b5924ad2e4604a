//! SCALE and UNARY (SILU, GELU, GELU_QUICK) on F32.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{is_type, src_ty, Ctx};
use crate::ggml::op_params;
use crate::ggml::ops::{UNARY_GELU, UNARY_GELU_QUICK, UNARY_SILU};
use crate::ggml::types::GgmlType::F32;
use crate::ir::{Op, UnaryOp, Value};

fn same_shape_f32(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let a = src_ty(dec, node, 0);
    is_type(a, &[F32])
        && is_type(Some(&node.out.ty), &[F32])
        && a.is_some_and(|a| a.ne == node.out.ty.ne)
}

fn unary_kind(node: &NodeDesc) -> Option<UnaryOp> {
    match op_params::unary_op(&node.params) {
        UNARY_SILU => Some(UnaryOp::Silu),
        UNARY_GELU => Some(UnaryOp::Gelu),
        UNARY_GELU_QUICK => Some(UnaryOp::GeluQuick),
        _ => None,
    }
}

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    unary_kind(node).is_some() && same_shape_f32(dec, node)
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let kind = unary_kind(node).expect("checked by supports");
    let a = ctx.input(node, 0)?;
    Ok(ctx.emit(Op::Unary(kind), vec![a], node))
}

pub fn supports_scale(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    same_shape_f32(dec, node)
}

pub fn translate_scale(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let p = op_params::scale(&node.params);
    let a = ctx.input(node, 0)?;
    Ok(ctx.emit(
        Op::Scale {
            scale: p.scale,
            bias: p.bias,
        },
        vec![a],
        node,
    ))
}
