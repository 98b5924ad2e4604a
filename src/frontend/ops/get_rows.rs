//! GET_ROWS from F32, F16, Q4_0, Q8_0, Q4_K, Q6_K tables into F32.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{src_ty, Ctx};
use crate::ggml::types::GgmlType::{F16, F32, I32, Q4K, Q4_0, Q6K, Q8_0};
use crate::ir::{Op, Value};

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let (Some(a), Some(r)) = (src_ty(dec, node, 0), src_ty(dec, node, 1)) else {
        return false;
    };
    let out = &node.out.ty;
    [F32, F16, Q4_0, Q8_0, Q4K, Q6K].contains(&a.dtype)
        && (!a.dtype.is_quantized() || a.nb[0] == a.dtype.block_bytes() as u64)
        && r.dtype == I32
        && out.dtype == F32
        && out.ne == [a.ne[0], r.ne[0], r.ne[1], r.ne[2]]
        && r.ne[3] == 1
        && a.ne[2] == r.ne[1]
        && a.ne[3] == r.ne[2]
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let a = ctx.input(node, 0)?;
    let r = ctx.input(node, 1)?;
    Ok(ctx.emit(Op::GetRows, vec![a, r], node))
}
