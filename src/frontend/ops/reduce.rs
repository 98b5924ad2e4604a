//! SUM_ROWS on F32.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{is_type, src_ty, Ctx};
use crate::ggml::types::GgmlType::F32;
use crate::ir::{Op, Value};

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let a = src_ty(dec, node, 0);
    let out = &node.out.ty;
    is_type(a, &[F32])
        && is_type(Some(out), &[F32])
        && a.is_some_and(|a| out.ne[0] == 1 && a.ne[1..] == out.ne[1..])
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let a = ctx.input(node, 0)?;
    Ok(ctx.emit(Op::SumRows, vec![a], node))
}
