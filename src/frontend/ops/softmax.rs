//! SOFT_MAX with optional F32/F16 mask, scale and ALiBi max_bias (no sinks).

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{is_type, src_ty, Ctx};
use crate::ggml::op_params;
use crate::ggml::types::GgmlType::{F16, F32};
use crate::ir::{Op, Value};

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let Some(a) = src_ty(dec, node, 0) else {
        return false;
    };
    if a.dtype != F32 || !is_type(Some(&node.out.ty), &[F32]) || a.ne != node.out.ty.ne {
        return false;
    }
    if node.srcs.get(2).copied().flatten().is_some() {
        return false;
    }
    let p = op_params::soft_max(&node.params);
    match src_ty(dec, node, 1) {
        None => p.max_bias == 0.0,
        Some(m) => {
            [F32, F16].contains(&m.dtype)
                && m.ne[0] == a.ne[0]
                && m.ne[1] >= a.ne[1]
                && m.ne[2] > 0
                && m.ne[3] > 0
                && a.ne[2] % m.ne[2] == 0
                && a.ne[3] % m.ne[3] == 0
        }
    }
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let p = op_params::soft_max(&node.params);
    let mut inputs = vec![ctx.input(node, 0)?];
    let has_mask = node.srcs.get(1).copied().flatten().is_some();
    if has_mask {
        inputs.push(ctx.input(node, 1)?);
    }
    Ok(ctx.emit(
        Op::SoftMax {
            scale: p.scale,
            max_bias: p.max_bias,
            has_mask,
        },
        inputs,
        node,
    ))
}
