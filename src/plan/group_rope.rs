//! MulMatGroupRope lowering: one launch of `group_rope.cl`, the group kernel
//! whose epilogue rotates Q and K and writes both caches (the pass,
//! passes/fuse/group_rope.rs, checked the shapes it relies on).

use super::fused_matmul::{bind_group, group_layout, group_types, q8_activation};
use super::lower::grid;
use super::rope_store::{bind_rope, flags};
use super::Binder;
use crate::error::{Error, Result};
use crate::ir::{GroupRope, Node, Value};
use crate::runtime::executor::Launch;

pub fn lower(
    b: &mut Binder,
    id: usize,
    n: &Node,
    p: &GroupRope,
    out: &mut Vec<Launch>,
) -> Result<()> {
    let bad = |why: &str| Error::InvalidGraph(format!("MulMatGroupRope '{}': {why}", n.name));
    let ff_in = p.rope.has_freq_factors as usize;
    if n.inputs.len() != 9 + ff_in || n.outputs.len() != 7 {
        return Err(bad("wrong operand count"));
    }
    let g = b.graph;
    let ty = |i: usize| g.ty(n.inputs[i]).dtype;
    let flags = flags(n, &p.rope, [ty(4), ty(5), ty(6), ty(7)])?;
    let (types, wtypes) = group_types(b, &n.inputs[..3], n)?;
    let name = format!("kernel_mul_mv_group_rope_{types}");
    let ws = (0..3)
        .map(|k| b.operand(n.inputs[k]))
        .collect::<Result<Vec<_>>>()?;
    let ds = (0..3)
        .map(|k| b.operand(Value::new(id, k)))
        .collect::<Result<Vec<_>>>()?;
    let pos = b.operand(n.inputs[3])?;
    let kr = b.operand(n.inputs[5])?;
    let vr = b.operand(n.inputs[7])?;
    let ff = if ff_in == 1 {
        b.operand(n.inputs[8])?
    } else {
        pos
    };
    let [qo, ko, kc, vc] = [
        b.operand(Value::new(id, 3))?,
        b.operand(Value::new(id, 4))?,
        b.operand(Value::new(id, 5))?,
        b.operand(Value::new(id, 6))?,
    ];
    let (act, act_off, scale) = q8_activation(b, n, out)?;
    let (global, local, g0, g1) = group_layout(&ws);
    let roles = p.roles.map(i32::from);
    out.push(grid(
        b,
        "group_rope",
        &name,
        global,
        Some(local),
        "mul_mat",
        |a| {
            bind_group(a, &ws, (act.mem, act_off), &ds, (g0, g1), wtypes)?;
            a.ptr(pos.mem, pos.offset)?
                .ptr(ff.mem, ff.offset)?
                .i32(ff_in as i32)?;
            a.tensor_out(&qo)?.tensor_out(&ko)?.tensor_out(&kc)?;
            a.ptr(kr.mem, kr.offset)?;
            a.tensor_out(&vc)?.ptr(vr.mem, vr.offset)?;
            a.i32(roles[0])?.i32(roles[1])?.i32(roles[2])?;
            bind_rope(a, flags, &p.rope)?;
            scale.bind(a)
        },
    )?);
    Ok(())
}
