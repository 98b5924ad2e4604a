//! RopeStore lowering: one launch of kernel_rope_store_f32 (rope_store.cl).

use super::lower::{corr_dims, flat};
use super::Binder;
use crate::error::{Error, Result};
use crate::ggml::types::GgmlType::{self, F16, F32, I32, I64};
use crate::ir::{Node, RopeMode, RopeParams, Value};
use crate::runtime::executor::{ArgBinder, Launch};

// Flag bits of rope_store.cl.
const KC_F16: i32 = 1;
const VC_F16: i32 = 2;
const KR_I64: i32 = 4;
const VR_I64: i32 = 8;
const NEOX: i32 = 16;

/// A fused rope node's error, naming its op (shared with rope_rot_store.rs).
pub(super) fn bad(n: &Node, why: &str) -> Error {
    Error::InvalidGraph(format!("{} '{}': {why}", n.op.kind(), n.name))
}

pub fn lower(
    b: &mut Binder,
    id: usize,
    n: &Node,
    p: &RopeParams,
    out: &mut Vec<Launch>,
) -> Result<()> {
    let g = b.graph;
    if n.inputs.len() != 8 + p.has_freq_factors as usize || n.outputs.len() != 4 {
        return Err(bad(n, "wrong operand count"));
    }
    let ty = |i: usize| g.ty(n.inputs[i]).dtype;
    let flags = flags(n, p, [ty(3), ty(4), ty(6), ty(7)])?;

    let q = b.operand(n.inputs[0])?;
    let k = b.operand(n.inputs[1])?;
    let pos = b.operand(n.inputs[2])?;
    let kr = b.operand(n.inputs[4])?;
    let v = b.operand(n.inputs[5])?;
    let vr = b.operand(n.inputs[7])?;
    let ff = if p.has_freq_factors {
        b.operand(n.inputs[8])?
    } else {
        pos
    };
    let qo = b.operand(Value::new(id, 0))?;
    let ko = b.operand(Value::new(id, 1))?;
    let kc = b.operand(Value::new(id, 2))?;
    let vc = b.operand(Value::new(id, 3))?;
    // The K cache source is rope(k) reshaped: the K vals node is gone after
    // fusion, so its shape is recovered from the cache write: rows of the
    // cache's width, as many as rope(k) holds.
    let kv_ne = cache_rows_shape(n, &k.ne, &kc.ne)?;

    let pairs = |ne: &[i64; 4]| (ne[0] / 2) * ne[1] * ne[2] * ne[3];
    let total = pairs(&q.ne) + pairs(&k.ne) + v.ne.iter().product::<i64>();
    let total = usize::try_from(total).map_err(|_| bad(n, "negative size"))?;
    out.push(flat(
        b,
        "rope_store",
        "kernel_rope_store_f32",
        total,
        "rope",
        |a| {
            a.tensor(&q)?.tensor_out(&qo)?.tensor(&k)?.tensor_out(&ko)?;
            a.ptr(pos.mem, pos.offset)?
                .ptr(ff.mem, ff.offset)?
                .i32(p.has_freq_factors as i32)?;
            a.tensor_out(&kc)?.tensor(&kr)?.i64x4(kv_ne)?;
            a.tensor(&v)?.tensor_out(&vc)?.tensor(&vr)?;
            bind_rope(a, flags, p)
        },
    )?);
    Ok(())
}

/// The kernels' flag bits for caches and row indices of these types:
/// [k_cache, k_rows, v_cache, v_rows] (shared with group_rope.rs).
pub(super) fn flags(n: &Node, p: &RopeParams, types: [GgmlType; 4]) -> Result<i32> {
    let cache_flag = |t, f16| match t {
        F16 => Ok(f16),
        F32 => Ok(0),
        _ => Err(bad(n, "cache type is neither F16 nor F32")),
    };
    let [kc, kr, vc, vr] = types;
    Ok(cache_flag(kc, KC_F16)? | cache_flag(vc, VC_F16)? | index_flags(n, p, kr, vr)?)
}

/// The flag bits of the K and V row indices' types and the rope's mode
/// (shared with rope_rot_store.rs, whose caches are typed apart).
pub(super) fn index_flags(n: &Node, p: &RopeParams, kr: GgmlType, vr: GgmlType) -> Result<i32> {
    let rows_flag = |t, i64| match t {
        I64 => Ok(i64),
        I32 => Ok(0),
        _ => Err(bad(n, "row indices are neither I64 nor I32")),
    };
    let mut flags = rows_flag(kr, KR_I64)? | rows_flag(vr, VR_I64)?;
    if p.mode == RopeMode::Neox {
        flags |= NEOX;
    }
    Ok(flags)
}

/// The rope scalars both kernels take last: flags, n_dims, theta_scale,
/// freq_scale, ext_factor, attn_factor and YaRN's two correction dims.
pub(super) fn bind_rope(a: &mut ArgBinder, flags: i32, p: &RopeParams) -> Result<()> {
    let corr = corr_dims(p);
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    a.i32(flags)?
        .i32(p.n_dims)?
        .f32(theta_scale)?
        .f32(p.freq_scale)?
        .f32(p.ext_factor)?;
    a.f32(p.attn_factor)?.f32(corr[0])?.f32(corr[1])?;
    Ok(())
}

/// The shape of the K (or V) rows written to the cache, [cache width, rows,
/// 1, 1]: the only source shape the passes fuse (llama's reshape_2d of
/// rope(k) or of a rotation).
pub(super) fn cache_rows_shape(n: &Node, k_ne: &[i64; 4], kc_ne: &[i64; 4]) -> Result<[i64; 4]> {
    let elems: i64 = k_ne.iter().product();
    let width = kc_ne[0];
    if width <= 0 || elems % width != 0 {
        return Err(bad(n, "the rows written do not split into cache rows"));
    }
    Ok([width, elems / width, 1, 1])
}
