//! FLASH_ATTN_EXT: F32 q, F16, Q8_0 or Q4_0 k/v, optional F16 mask, no
//! sinks; head sizes up to 256.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{src_ty, Ctx};
use crate::ggml::op_params;
use crate::ggml::types::GgmlType::{self, F16, F32, Q4_0, Q8_0};
use crate::ir::{Op, Value};

pub const MAX_HEAD_SIZE: i64 = 256;

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let (Some(q), Some(k), Some(v)) = (
        src_ty(dec, node, 0),
        src_ty(dec, node, 1),
        src_ty(dec, node, 2),
    ) else {
        return false;
    };
    if node.srcs.get(4).copied().flatten().is_some() {
        return false;
    }
    let mask_ok = match src_ty(dec, node, 3) {
        None => true,
        Some(m) => {
            m.dtype == F16
                && m.ne[0] == k.ne[1]
                && m.ne[1] >= q.ne[1]
                && m.ne[2] > 0
                && m.ne[3] > 0
                && q.ne[2] % m.ne[2] == 0
                && q.ne[3] % m.ne[3] == 0
        }
    };
    let out = &node.out.ty;
    let cache_ok = |t: GgmlType| matches!(t, F16 | Q8_0 | Q4_0);
    q.dtype == F32
        && cache_ok(k.dtype)
        && cache_ok(v.dtype)
        && out.dtype == F32
        && q.ne[0] == k.ne[0]
        && q.ne[0] <= MAX_HEAD_SIZE
        && v.ne[0] <= MAX_HEAD_SIZE
        && k.ne[1] == v.ne[1]
        && k.ne[2] == v.ne[2]
        && k.ne[2] > 0
        && q.ne[2] % k.ne[2] == 0
        && k.ne[3] == q.ne[3]
        && v.ne[3] == q.ne[3]
        && out.ne == [v.ne[0], q.ne[2], q.ne[1], q.ne[3]]
        && out.is_contiguous()
        && mask_ok
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let p = op_params::flash_attn_ext(&node.params);
    let has_mask = node.srcs.get(3).copied().flatten().is_some();
    let mut inputs = vec![
        ctx.input(node, 0)?,
        ctx.input(node, 1)?,
        ctx.input(node, 2)?,
    ];
    if has_mask {
        inputs.push(ctx.input(node, 3)?);
    }
    let op = Op::FlashAttn {
        scale: p.scale,
        max_bias: p.max_bias,
        softcap: p.logit_softcap,
        has_mask,
        rotation: 0,
    };
    Ok(ctx.emit(op, inputs, node))
}
