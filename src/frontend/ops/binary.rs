//! ADD, SUB, MUL, DIV on F32 with src1 broadcast over src0 (ggml_can_repeat).

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{is_type, src_ty, Ctx};
use crate::ggml::ops::{OP_ADD, OP_DIV, OP_MUL, OP_SUB};
use crate::ggml::types::GgmlType::F32;
use crate::ir::{BinaryOp, Op, Value};

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let (Some(a), Some(b)) = (src_ty(dec, node, 0), src_ty(dec, node, 1)) else {
        return false;
    };
    is_type(Some(a), &[F32])
        && is_type(Some(b), &[F32])
        && is_type(Some(&node.out.ty), &[F32])
        && a.ne == node.out.ty.ne
        && (0..4).all(|d| b.ne[d] > 0 && a.ne[d] % b.ne[d] == 0)
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let op = match node.op {
        OP_ADD => BinaryOp::Add,
        OP_SUB => BinaryOp::Sub,
        OP_MUL => BinaryOp::Mul,
        OP_DIV => BinaryOp::Div,
        _ => unreachable!("binary translator registered for op {}", node.op),
    };
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    Ok(ctx.emit(Op::Binary(op), vec![a, b], node))
}
