//! SET_ROWS: becomes the neutral `SetRows(destination, rows, indices)`; who
//! owns the destination (a KV cache) is decided later by passes. ggml's src
//! order is (values, indices, destination) for legacy reasons. Destinations
//! are F32, F16, or Q8_0 / Q4_0 rows of whole blocks (llama's `-ctk q8_0`:
//! a cache in polycl's buffer that polycl cannot write makes ggml's
//! scheduler abort at context creation).

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{src_ty, Ctx};
use crate::ggml::types::GgmlType::{F16, F32, I32, I64, Q4_0, Q8_0};
use crate::ir::{Op, Value};

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let (Some(v), Some(i)) = (src_ty(dec, node, 0), src_ty(dec, node, 1)) else {
        return false;
    };
    let dst = &node.out.ty;
    v.dtype == F32
        && [I64, I32].contains(&i.dtype)
        && ([F32, F16].contains(&dst.dtype)
            || ([Q8_0, Q4_0].contains(&dst.dtype) && dst.ne[0] % 32 == 0))
        && v.ne[0] == dst.ne[0]
        && v.ne[2] == dst.ne[2]
        && v.ne[3] == dst.ne[3]
        && v.ne[1] == i.ne[0]
        && i.ne[1] > 0
        && i.ne[2] > 0
        && v.ne[2] % i.ne[1] == 0
        && v.ne[3] % i.ne[2] == 0
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let values = ctx.input(node, 0)?;
    let indices = ctx.input(node, 1)?;
    let dst = ctx.input(node, 2)?;
    Ok(ctx.emit(Op::SetRows, vec![dst, values, indices], node))
}
