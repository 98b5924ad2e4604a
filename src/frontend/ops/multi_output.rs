//! Multi-output nodes (the C decoder path): TOP_K with its values and indices
//! as ports 0 and 1, and the output-port pseudo op through which a decoder
//! hands a later node port p of an earlier one. ggml's own TOP_K has one I32
//! output (the indices); polycl does not compute that form, so `supports`
//! answers no for it.

use crate::decoder::{Decoder, NodeDesc, TensorDesc};
use crate::error::{Error, Result};
use crate::frontend::{src_ty, Ctx};
use crate::ggml::types::GgmlType::{F32, I32};
use crate::ir::{Op, Output, Place, Value};

fn output_of(d: &TensorDesc) -> Output {
    Output {
        ty: d.ty.clone(),
        place: d.mem.map(Place::Bound).unwrap_or(Place::Internal),
    }
}

pub fn supports_port(_: &dyn Decoder, node: &NodeDesc) -> bool {
    node.srcs.len() == 1 && node.srcs[0].is_some() && node.params.i32(0) >= 1
}

pub fn translate_port(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let v = ctx.input(node, 0)?;
    let port = node.params.i32(0) as u32;
    let producer = &ctx.graph.nodes[v.node];
    if v.port != 0 || port as usize >= producer.outputs.len() {
        return Err(Error::InvalidGraph(format!(
            "'{}' names port {port} of '{}', which has {} outputs",
            node.out.name,
            producer.name,
            producer.outputs.len()
        )));
    }
    Ok(Value::new(v.node, port))
}

/// Values F32 `[k, rows...]` and indices I32 of the same shape; k static, or
/// dynamic (-1) with k given by a one-element I32 src1 (a graph input).
pub fn supports_top_k(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let Some(a) = src_ty(dec, node, 0) else {
        return false;
    };
    let [idx] = dec.extra_outputs(node) else {
        return false;
    };
    let vals = &node.out.ty;
    let k_ok = match src_ty(dec, node, 1) {
        None => vals.ne[0] >= 0 && (a.ne[0] < 0 || vals.ne[0] <= a.ne[0]),
        Some(k) => k.dtype == I32 && k.ne == [1, 1, 1, 1],
    };
    node.srcs.len() <= 2
        && a.dtype == F32
        && !a.has_dynamic_rank()
        && vals.dtype == F32
        && idx.ty.dtype == I32
        && vals.ne[1..] == a.ne[1..]
        && idx.ty.ne == vals.ne
        && k_ok
}

pub fn translate_top_k(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let mut inputs = vec![ctx.input(node, 0)?];
    let has_k_input = node.srcs.get(1).copied().flatten().is_some();
    if has_k_input {
        inputs.push(ctx.input(node, 1)?);
    }
    let idx = ctx.dec.extra_outputs(node)[0].clone();
    let outputs = vec![output_of(&node.out), output_of(&idx)];
    let id = ctx.graph.add(
        Op::TopK { has_k_input },
        inputs,
        outputs,
        node.out.name.clone(),
    );
    ctx.graph.nodes[id].port_names = vec![idx.name];
    Ok(Value::new(id, 0))
}
