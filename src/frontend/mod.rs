//! Translation of a decoded graph into IR through the one op table. Every
//! consumer (the ggml plugin, the C decoder API) goes through `translate`, and
//! `supports` reads the same table, so support and translation cannot drift.

pub mod op_table;
pub mod ops;

use crate::decoder::{Decoder, NodeDesc, Source, TensorDesc};
use crate::error::{Error, Result};
use crate::ggml::ops::op_name;
use crate::ggml::types::GgmlType;
use crate::ir::{Graph, Op, Output, Place, TensorType, Value};

/// Translation state: the IR being built and the value of each decoded operand.
pub struct Ctx<'a> {
    pub dec: &'a dyn Decoder,
    pub graph: Graph,
    leaf_values: Vec<Option<Value>>,
    node_values: Vec<Option<Value>>,
}

fn output_of(d: &TensorDesc) -> Output {
    Output {
        ty: d.ty.clone(),
        place: d.mem.map(Place::Bound).unwrap_or(Place::Internal),
    }
}

impl<'a> Ctx<'a> {
    fn new(dec: &'a dyn Decoder) -> Self {
        Ctx {
            dec,
            graph: Graph::default(),
            leaf_values: vec![None; dec.leaves().len()],
            node_values: vec![None; dec.nodes().len()],
        }
    }

    fn value_of(&mut self, s: Source) -> Result<Value> {
        match s {
            Source::Leaf(i) => {
                if let Some(v) = self.leaf_values[i] {
                    return Ok(v);
                }
                let d = &self.dec.leaves()[i];
                let id = self
                    .graph
                    .add(Op::Parameter, vec![], vec![output_of(d)], d.name.clone());
                let v = Value::new(id, 0);
                self.leaf_values[i] = Some(v);
                Ok(v)
            }
            Source::Node(i) => self.node_values.get(i).copied().flatten().ok_or_else(|| {
                Error::InvalidGraph(format!(
                    "node {i} is used before it is computed (cycle or dangling input)"
                ))
            }),
        }
    }

    /// The IR value of src slot `k` of `node`.
    pub fn input(&mut self, node: &NodeDesc, k: usize) -> Result<Value> {
        let s = node.srcs.get(k).copied().flatten().ok_or_else(|| {
            Error::InvalidGraph(format!(
                "{} '{}' lacks input {k}",
                op_name(node.op),
                node.out.name
            ))
        })?;
        self.value_of(s)
    }

    /// Adds a node producing `node`'s output.
    pub fn emit(&mut self, op: Op, inputs: Vec<Value>, node: &NodeDesc) -> Value {
        let id = self.graph.add(
            op,
            inputs,
            vec![output_of(&node.out)],
            node.out.name.clone(),
        );
        Value::new(id, 0)
    }
}

/// Types of `node`'s src slot `k`, if present.
pub fn src_ty<'d>(dec: &'d dyn Decoder, node: &NodeDesc, k: usize) -> Option<&'d TensorType> {
    dec.src(node, k).map(|d| &d.ty)
}

pub fn is_type(t: Option<&TensorType>, types: &[GgmlType]) -> bool {
    t.is_some_and(|t| types.contains(&t.dtype))
}

/// Whether polycl computes `node` (the answer `supports_op` gives).
pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    match op_table::entry(node.op) {
        Some(e) => (e.supports)(dec, node),
        None => false,
    }
}

/// Translates the whole decoded graph into IR.
pub fn translate(dec: &dyn Decoder) -> Result<Graph> {
    let mut ctx = Ctx::new(dec);
    for (i, node) in dec.nodes().iter().enumerate() {
        let entry = op_table::entry(node.op).ok_or_else(|| {
            Error::Unsupported(format!("ggml op {} ({})", op_name(node.op), node.op))
        })?;
        if !(entry.supports)(dec, node) {
            return Err(Error::Unsupported(format!(
                "{} '{}' with these types/shapes",
                op_name(node.op),
                node.out.name
            )));
        }
        let v = (entry.translate)(&mut ctx, node)?;
        ctx.node_values[i] = Some(v);
    }
    let mut results = Vec::new();
    for &r in dec.results() {
        results.push(ctx.value_of(r)?);
    }
    ctx.graph.results = results;
    crate::ir::verify::verify(&ctx.graph)?;
    Ok(ctx.graph)
}
