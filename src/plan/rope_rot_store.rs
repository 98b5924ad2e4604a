//! RopeRotStore lowering: one launch of kernel_rope_rot_store_f32
//! (rope_rot_store.cl), a work-group a head row of Q and K and a chunk of V.

use super::lower::grid;
use super::rope_store::{bad, bind_rope, cache_rows_shape, index_flags};
use super::Binder;
use crate::error::Result;
use crate::ggml::types::GgmlType::{self, F16, F32, Q4_0, Q8_0};
use crate::ir::{Node, RopeRot, Value};
use crate::passes::fuse::rope_rot_store::v_chunk;
use crate::runtime::executor::Launch;

/// Work-items a group (RR_WG in rope_rot_store.cl).
const WORK_GROUP: usize = 64;

pub fn lower(
    b: &mut Binder,
    id: usize,
    n: &Node,
    p: &RopeRot,
    out: &mut Vec<Launch>,
) -> Result<()> {
    let bad = |why: &str| bad(n, why);
    let ff_in = p.rope.has_freq_factors as usize;
    let rotated_v = p.v_width > 1;
    if n.inputs.len() != 8 + ff_in || n.outputs.len() != 6 + rotated_v as usize {
        return Err(bad("wrong operand count"));
    }
    let g = b.graph;
    let ty = |i: usize| g.ty(n.inputs[i]).dtype;
    let flags = index_flags(n, &p.rope, ty(4), ty(7))?;
    let kc_type = cache_type(ty(3)).ok_or_else(|| bad("K cache type"))?;
    let vc_type = cache_type(ty(6)).ok_or_else(|| bad("V cache type"))?;

    let q = b.operand(n.inputs[0])?;
    let k = b.operand(n.inputs[1])?;
    let pos = b.operand(n.inputs[2])?;
    let kr = b.operand(n.inputs[4])?;
    let v = b.operand(n.inputs[5])?;
    let vr = b.operand(n.inputs[7])?;
    let ff = if ff_in == 1 {
        b.operand(n.inputs[8])?
    } else {
        pos
    };
    let mut port = |p: u32| b.operand(Value::new(id, p));
    let (rq, hq, rk, hk, kc) = (port(0)?, port(1)?, port(2)?, port(3)?, port(4)?);
    let vc = port(n.outputs.len() as u32 - 1)?;
    // Unrotated V has no rot(v): the kernel writes none (v_width 1).
    let hv = if rotated_v { port(5)? } else { vc };
    let kv_ne = cache_rows_shape(n, &k.ne, &kc.ne)?;
    let vv_ne = cache_rows_shape(n, &v.ne, &vc.ne)?;
    let v_elems: i64 = v.ne.iter().product();
    let chunk = v_chunk(v_elems, p.v_width.into(), k.ne[0]).ok_or_else(|| bad("V chunk"))?;

    let rows = |ne: &[i64; 4]| ne[1] * ne[2] * ne[3];
    let groups = rows(&q.ne) + rows(&k.ne) + v_elems / chunk;
    let groups = usize::try_from(groups).map_err(|_| bad("negative size"))?;
    let scale = |width: i32| 1.0 / (width as f32).sqrt();
    out.push(grid(
        b,
        "rope_rot_store",
        "kernel_rope_rot_store_f32",
        [groups * WORK_GROUP, 1, 1],
        Some([WORK_GROUP, 1, 1]),
        "rope",
        |a| {
            a.tensor(&q)?.ptr_out(rq.mem, rq.offset)?;
            a.ptr_out(hq.mem, hq.offset)?.tensor(&k)?;
            a.ptr_out(rk.mem, rk.offset)?.ptr_out(hk.mem, hk.offset)?;
            a.ptr(pos.mem, pos.offset)?
                .ptr(ff.mem, ff.offset)?
                .i32(ff_in as i32)?;
            a.tensor_out(&kc)?.tensor(&kr)?.i64x4(kv_ne)?;
            a.tensor(&v)?.ptr_out(hv.mem, hv.offset)?;
            a.tensor_out(&vc)?.tensor(&vr)?.i64x4(vv_ne)?;
            a.i32(kc_type)?.i32(vc_type)?;
            a.i32(p.qk_width)?.f32(scale(p.qk_width))?;
            a.i32(p.v_width)?.f32(scale(p.v_width))?.i32(chunk as i32)?;
            a.i32(p.dead.into())?;
            bind_rope(a, flags, &p.rope)
        },
    )?);
    Ok(())
}

/// The kernel's code for a cache type (RR_* in rope_rot_store.cl).
fn cache_type(t: GgmlType) -> Option<i32> {
    match t {
        F32 => Some(0),
        F16 => Some(1),
        Q8_0 => Some(2),
        Q4_0 => Some(3),
        _ => None,
    }
}
