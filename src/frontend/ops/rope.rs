//! ROPE, normal and NeoX modes, F32, optional frequency factors, YaRN.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{is_type, src_ty, Ctx};
use crate::ggml::op_params;
use crate::ggml::ops::{ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use crate::ggml::types::GgmlType::{F32, I32};
use crate::ir::{op::RopeParams, Op, RopeMode, Value};

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let p = op_params::rope(&node.params);
    let (Some(x), Some(pos)) = (src_ty(dec, node, 0), src_ty(dec, node, 1)) else {
        return false;
    };
    let ff_ok = match src_ty(dec, node, 2) {
        None => true,
        Some(ff) => ff.dtype == F32 && ff.ne[0] >= (p.n_dims / 2) as i64 && ff.nb[0] == 4,
    };
    (p.mode == ROPE_MODE_NORMAL || p.mode == ROPE_MODE_NEOX)
        && p.n_offs == 0
        && p.n_dims > 0
        && p.n_dims % 2 == 0
        && p.n_dims as i64 <= x.ne[0]
        && x.ne[0] % 2 == 0
        && x.dtype == F32
        && is_type(Some(&node.out.ty), &[F32])
        && x.ne == node.out.ty.ne
        && pos.dtype == I32
        && pos.ne[0] == x.ne[2]
        && pos.nb[0] == 4
        && ff_ok
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let p = op_params::rope(&node.params);
    let has_ff = node.srcs.get(2).copied().flatten().is_some();
    let mut inputs = vec![ctx.input(node, 0)?, ctx.input(node, 1)?];
    if has_ff {
        inputs.push(ctx.input(node, 2)?);
    }
    let op = Op::Rope(RopeParams {
        mode: if p.mode == ROPE_MODE_NEOX {
            RopeMode::Neox
        } else {
            RopeMode::Normal
        },
        n_dims: p.n_dims,
        n_ctx_orig: p.n_ctx_orig,
        freq_base: p.freq_base,
        freq_scale: p.freq_scale,
        ext_factor: p.ext_factor,
        attn_factor: p.attn_factor,
        beta_fast: p.beta_fast,
        beta_slow: p.beta_slow,
        has_freq_factors: has_ff,
    });
    Ok(ctx.emit(op, inputs, node))
}
