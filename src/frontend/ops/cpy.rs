//! CPY, CONT, DUP: copy in logical element order with F32/F16 conversion.
//! CPY's result is a view of its src1 (the destination), so the output's
//! memory is the destination's.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{is_type, src_ty, Ctx};
use crate::ggml::types::GgmlType::{F16, F32};
use crate::ir::{Op, Value};

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let src = src_ty(dec, node, 0);
    is_type(src, &[F32, F16])
        && is_type(Some(&node.out.ty), &[F32, F16])
        && src.is_some_and(|s| s.nelements() == node.out.ty.nelements())
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let src = ctx.input(node, 0)?;
    Ok(ctx.emit(Op::Copy, vec![src], node))
}
