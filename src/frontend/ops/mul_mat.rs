//! MUL_MAT: weights (F32, F16, Q4_0, Q8_0, Q4_K, Q6_K) times F32 activations,
//! any batch, broadcast over dims 2 and 3, strided views of src1.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{src_ty, Ctx};
use crate::ggml::types::GgmlType::{self, F16, F32, Q4K, Q4_0, Q6K, Q8_0};
use crate::ir::{Op, Value};

pub const WEIGHT_TYPES: &[GgmlType] = &[F32, F16, Q4_0, Q8_0, Q4K, Q6K];

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let (Some(w), Some(x)) = (src_ty(dec, node, 0), src_ty(dec, node, 1)) else {
        return false;
    };
    let out = &node.out.ty;
    if !WEIGHT_TYPES.contains(&w.dtype) || x.dtype != F32 || out.dtype != F32 {
        return false;
    }
    // Block formats are read block by block along a row.
    if w.dtype.is_quantized() && w.nb[0] != w.dtype.block_bytes() as u64 {
        return false;
    }
    w.ne[0] == x.ne[0]
        && w.ne[2] > 0
        && w.ne[3] > 0
        && x.ne[2] % w.ne[2] == 0
        && x.ne[3] % w.ne[3] == 0
        && out.ne == [w.ne[1], x.ne[1], x.ne[2], x.ne[3]]
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let w = ctx.input(node, 0)?;
    let x = ctx.input(node, 1)?;
    Ok(ctx.emit(Op::MulMat, vec![w, x], node))
}
