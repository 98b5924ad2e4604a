//! CPY, CONT, DUP: copy in logical element order with F32/F16 conversion;
//! Q8_0 and Q4_0 sources dequantize into F32 or F16 of their own shape.
//! CPY's result is a view of its src1 (the destination), so the output's
//! memory is the destination's.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{is_type, src_ty, Ctx};
use crate::ggml::types::GgmlType::{F16, F32, Q4_0, Q8_0};
use crate::ir::{Op, Value};

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let src = src_ty(dec, node, 0);
    let out = &node.out.ty;
    let quantized_same_shape = is_type(src, &[Q8_0, Q4_0]) && src.is_some_and(|s| s.ne == out.ne);
    (is_type(src, &[F32, F16]) || quantized_same_shape)
        && is_type(Some(out), &[F32, F16])
        && src.is_some_and(|s| s.nelements() == out.nelements())
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let src = ctx.input(node, 0)?;
    Ok(ctx.emit(Op::Copy, vec![src], node))
}
