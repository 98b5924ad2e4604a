//! GLU: SWIGLU and GEGLU, split (two srcs) or fused (halves of one src).

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{is_type, src_ty, Ctx};
use crate::ggml::op_params;
use crate::ggml::ops::{GLU_GEGLU, GLU_SWIGLU};
use crate::ggml::types::GgmlType::F32;
use crate::ir::{GluKind, Op, Value};

fn kind(node: &NodeDesc) -> Option<GluKind> {
    match op_params::glu(&node.params).op {
        GLU_SWIGLU => Some(GluKind::Swiglu),
        GLU_GEGLU => Some(GluKind::Geglu),
        _ => None,
    }
}

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let Some(a) = src_ty(dec, node, 0) else {
        return false;
    };
    let out = &node.out.ty;
    if kind(node).is_none() || !is_type(Some(a), &[F32]) || !is_type(Some(out), &[F32]) {
        return false;
    }
    match src_ty(dec, node, 1) {
        Some(b) => b.dtype == F32 && a.ne == out.ne && b.ne == out.ne,
        None => a.ne[0] == 2 * out.ne[0] && a.ne[1..] == out.ne[1..],
    }
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let p = op_params::glu(&node.params);
    let mut inputs = vec![ctx.input(node, 0)?];
    if node.srcs.get(1).copied().flatten().is_some() {
        inputs.push(ctx.input(node, 1)?);
    }
    let op = Op::Glu {
        kind: kind(node).expect("checked by supports"),
        swapped: p.swapped,
    };
    Ok(ctx.emit(op, inputs, node))
}
