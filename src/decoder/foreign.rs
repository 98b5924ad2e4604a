//! Decoder over a graph a host described itself (through the C callbacks of
//! `polycl.h`, or `GraphDesc` from Rust): graph inputs, weights, nodes in order
//! with GGML op names and op_params, graph outputs. Like the ggml decoder it
//! describes what is computed and nothing about state ownership.
//!
//! Shapes are ggml `ne` order (ne[0] innermost) with -1 for a dynamic dim; a
//! rank of -1 means the rank itself is unknown. A node may have several outputs
//! (TOP_K: values, indices); port p >= 1 of node j is decoder node
//! `OP_OUTPUT_PORT` placed right after j, so the op table sees ports as values.
//!
//! Everything is validated while building: a bad description is an error that
//! names what is wrong, never a panic.

use super::{Decoder, NodeDesc, Source, TensorDesc, OP_OUTPUT_PORT};
use crate::error::{Error, Result};
use crate::ggml::op_params::{self, OpParams};
use crate::ggml::ops::*;
use crate::ggml::types::GgmlType;
use crate::ir::op::ViewRule;
use crate::ir::{Graph, Op, TensorType};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// ggml's GGML_MAX_SRC.
pub const MAX_SRCS: usize = 10;
/// Bound on what a description may declare, so a hostile count cannot make
/// polycl allocate without limit.
pub const MAX_ITEMS: usize = 1 << 20;

/// A shape: `rank` (1..=4, or -1 when unknown) and ne in ggml order, -1 dynamic.
/// Dims past the rank are 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeDesc {
    pub rank: i32,
    pub ne: [i64; 4],
}

impl ShapeDesc {
    pub fn new(ne: &[i64]) -> ShapeDesc {
        let mut d = [1i64; 4];
        d[..ne.len().min(4)].copy_from_slice(&ne[..ne.len().min(4)]);
        ShapeDesc {
            rank: ne.len() as i32,
            ne: d,
        }
    }
    pub fn dynamic_rank() -> ShapeDesc {
        ShapeDesc {
            rank: -1,
            ne: [-1; 4],
        }
    }
    /// The shape of an IR type: rank = ggml_n_dims (dynamic dims count as
    /// non-1), or -1 for a dynamic rank.
    pub fn of(t: &TensorType) -> ShapeDesc {
        if t.has_dynamic_rank() {
            return ShapeDesc::dynamic_rank();
        }
        let rank = (0..4).rev().find(|&d| t.ne[d] != 1).map_or(1, |d| d + 1);
        ShapeDesc {
            rank: rank as i32,
            ne: t.ne,
        }
    }
}

/// A named, typed tensor: a graph input or one output of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    /// ggml type id.
    pub dtype: i32,
    pub shape: ShapeDesc,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WeightSpec {
    pub name: String,
    pub dtype: i32,
    pub shape: ShapeDesc,
    pub data: Vec<u8>,
}

/// Where an operand comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceRef {
    Input(usize),
    Weight(usize),
    Node { node: usize, port: u32 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// The GGML op name as `ggml_op_name` prints it ("MUL_MAT").
    pub op: String,
    pub params: Vec<u8>,
    /// ggml src slots; None is an empty slot.
    pub inputs: Vec<Option<SourceRef>>,
    /// Port 0 first; each output's name must be unique in the graph.
    pub outputs: Vec<TensorSpec>,
}

/// A whole host-described graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphDesc {
    pub inputs: Vec<TensorSpec>,
    pub weights: Vec<WeightSpec>,
    pub nodes: Vec<NodeSpec>,
    pub outputs: Vec<SourceRef>,
}

/// op_params byte counts ggml's constructors write, per op: (fewest, most).
fn params_range(op: i32) -> (usize, usize) {
    match op {
        OP_RMS_NORM | OP_NORM | OP_CONCAT => (4, 4),
        OP_SCALE | OP_SOFT_MAX | OP_VIEW => (8, 8),
        OP_PERMUTE => (16, 16),
        OP_ROPE => (60, 64),
        OP_FLASH_ATTN_EXT => (12, 20),
        OP_GLU => (8, 16),
        OP_UNARY => (4, 20),
        OP_MUL_MAT => (0, 16),
        _ => (0, 0),
    }
}

pub struct Foreign {
    leaves: Vec<TensorDesc>,
    nodes: Vec<NodeDesc>,
    results: Vec<Source>,
    /// Ports 1.. of each decoder node (empty for single-output nodes).
    extra: Vec<Vec<TensorDesc>>,
    n_inputs: usize,
    /// Declared rank of each graph input (introspection reports it back).
    input_ranks: HashMap<String, i32>,
    weights: HashMap<String, Arc<[u8]>>,
    views: HashMap<String, ViewRule>,
}

fn tensor_type(name: &str, dtype: i32, shape: &ShapeDesc) -> Result<TensorType> {
    let t = GgmlType::from_id(dtype).ok_or_else(|| {
        Error::InvalidGraph(format!("'{name}' has ggml type {dtype}, unknown to polycl"))
    })?;
    if shape.rank == -1 {
        return Ok(TensorType::dynamic_rank(t));
    }
    if !(1..=4).contains(&shape.rank) {
        return Err(Error::InvalidGraph(format!(
            "'{name}' has rank {}: expected 1 to 4, or -1 for an unknown rank",
            shape.rank
        )));
    }
    let mut ne = [1i64; 4];
    for (d, &x) in shape.ne.iter().enumerate().take(shape.rank as usize) {
        if x < -1 {
            return Err(Error::InvalidGraph(format!(
                "'{name}' has dim {d} = {x}: expected -1 (dynamic) or >= 0"
            )));
        }
        ne[d] = x;
    }
    if t.block_elems() > 1 && ne[0] >= 0 && ne[0] % t.block_elems() as i64 != 0 {
        return Err(Error::InvalidGraph(format!(
            "'{name}' is {} with ne0 = {}, not a multiple of its block of {}",
            t.name(),
            ne[0],
            t.block_elems()
        )));
    }
    Ok(TensorType::contiguous(t, ne))
}

fn desc(s: &TensorSpec) -> Result<TensorDesc> {
    if s.name.is_empty() {
        return Err(Error::InvalidGraph("a tensor has an empty name".into()));
    }
    Ok(TensorDesc {
        name: s.name.clone(),
        ty: tensor_type(&s.name, s.dtype, &s.shape)?,
        mem: None,
    })
}

impl Foreign {
    pub fn new(g: &GraphDesc) -> Result<Foreign> {
        for (what, n) in [
            ("inputs", g.inputs.len()),
            ("weights", g.weights.len()),
            ("nodes", g.nodes.len()),
        ] {
            if n > MAX_ITEMS {
                return Err(Error::InvalidGraph(format!(
                    "{n} {what}: at most {MAX_ITEMS}"
                )));
            }
        }
        let mut names = HashSet::new();
        let mut unique = |name: &str| -> Result<()> {
            if !names.insert(name.to_string()) {
                return Err(Error::InvalidGraph(format!(
                    "the name '{name}' is used twice: inputs, weights and node outputs are found by name"
                )));
            }
            Ok(())
        };
        let mut f = Foreign {
            leaves: Vec::new(),
            nodes: Vec::new(),
            results: Vec::new(),
            extra: Vec::new(),
            n_inputs: g.inputs.len(),
            input_ranks: HashMap::new(),
            weights: HashMap::new(),
            views: HashMap::new(),
        };
        for s in &g.inputs {
            let d = desc(s)?;
            unique(&d.name)?;
            f.input_ranks.insert(d.name.clone(), s.shape.rank);
            f.leaves.push(d);
        }
        for w in &g.weights {
            let d = desc(&TensorSpec {
                name: w.name.clone(),
                dtype: w.dtype,
                shape: w.shape,
            })?;
            unique(&d.name)?;
            if d.ty.is_dynamic() {
                return Err(Error::InvalidGraph(format!(
                    "weight '{}' has a dynamic shape",
                    w.name
                )));
            }
            let want = crate::plan::internal::nbytes(&d.ty);
            if w.data.len() as u64 != want {
                return Err(Error::InvalidGraph(format!(
                    "weight '{}' ({} {:?}) has {} bytes, expected {want}",
                    w.name,
                    d.ty.dtype.name(),
                    d.ty.ne,
                    w.data.len()
                )));
            }
            f.weights
                .insert(w.name.clone(), Arc::from(w.data.as_slice()));
            f.leaves.push(d);
        }
        // Decoder index of each (node, port).
        let mut port_index: Vec<Vec<usize>> = Vec::new();
        for (j, n) in g.nodes.iter().enumerate() {
            let op = op_by_name(&n.op).ok_or_else(|| {
                Error::InvalidGraph(format!(
                    "node {j}: unknown op name '{}' (expected a ggml_op_name, e.g. MUL_MAT)",
                    n.op
                ))
            })?;
            let who = || {
                format!(
                    "node {j} ({} '{}')",
                    n.op,
                    n.outputs.first().map_or("", |o| o.name.as_str())
                )
            };
            if op == OP_NONE {
                return Err(Error::InvalidGraph(format!(
                    "{}: NONE is not a node op; describe leaves as graph inputs or weights",
                    who()
                )));
            }
            let want_outputs = if op == OP_TOP_K { 1..=2 } else { 1..=1 };
            if !want_outputs.contains(&n.outputs.len()) {
                return Err(Error::InvalidGraph(format!(
                    "{}: {} outputs, expected {:?}",
                    who(),
                    n.outputs.len(),
                    want_outputs
                )));
            }
            let (lo, hi) = params_range(op);
            if n.params.len() < lo || n.params.len() > hi || n.params.len() % 4 != 0 {
                return Err(Error::InvalidGraph(format!(
                    "{}: op_params of {} bytes, expected {}",
                    who(),
                    n.params.len(),
                    if lo == hi {
                        format!("{lo}")
                    } else {
                        format!("{lo} to {hi} (a multiple of 4)")
                    }
                )));
            }
            let params = OpParams::from_bytes(&n.params)?;
            if n.inputs.len() > MAX_SRCS {
                return Err(Error::InvalidGraph(format!(
                    "{}: {} inputs, at most {MAX_SRCS}",
                    who(),
                    n.inputs.len()
                )));
            }
            let mut srcs = Vec::new();
            for (k, s) in n.inputs.iter().enumerate() {
                srcs.push(match s {
                    None => None,
                    Some(r) => Some(f.source(*r, j, &port_index).map_err(|e| match e {
                        Error::InvalidGraph(m) => {
                            Error::InvalidGraph(format!("{}, input {k}: {m}", who()))
                        }
                        other => other,
                    })?),
                });
            }
            while srcs.last() == Some(&None) {
                srcs.pop();
            }
            let mut outs = Vec::new();
            for o in &n.outputs {
                let d = desc(o)?;
                unique(&d.name)?;
                outs.push(d);
            }
            let rule = match op {
                OP_RESHAPE => Some(ViewRule::Reshape),
                OP_TRANSPOSE => Some(ViewRule::Permute([1, 0, 2, 3])),
                OP_PERMUTE => {
                    let axes = op_params::permute_axes(&params);
                    let mut seen = [false; 4];
                    for &a in &axes {
                        if !(0..4).contains(&a) || std::mem::replace(&mut seen[a as usize], true) {
                            return Err(Error::InvalidGraph(format!(
                                "{}: PERMUTE axes {axes:?} are not a permutation of 0..3",
                                who()
                            )));
                        }
                    }
                    Some(ViewRule::Permute(axes))
                }
                OP_VIEW => Some(ViewRule::Offset(op_params::view_offset(&params))),
                _ => None,
            };
            if let Some(r) = rule {
                f.views.insert(outs[0].name.clone(), r);
            }
            let out0 = outs.remove(0);
            let index = f.nodes.len();
            f.nodes.push(NodeDesc {
                op,
                params,
                srcs,
                out: out0,
            });
            f.extra.push(outs.clone());
            let mut ports = vec![index];
            for (p, o) in outs.into_iter().enumerate() {
                let mut pp = [0i32; 16];
                pp[0] = p as i32 + 1;
                ports.push(f.nodes.len());
                f.nodes.push(NodeDesc {
                    op: OP_OUTPUT_PORT,
                    params: OpParams(pp),
                    srcs: vec![Some(Source::Node(index))],
                    out: o,
                });
                f.extra.push(Vec::new());
            }
            port_index.push(ports);
        }
        for (k, r) in g.outputs.iter().enumerate() {
            let s = f
                .source(*r, g.nodes.len(), &port_index)
                .map_err(|e| match e {
                    Error::InvalidGraph(m) => Error::InvalidGraph(format!("graph output {k}: {m}")),
                    other => other,
                })?;
            f.results.push(s);
        }
        Ok(f)
    }

    /// `r` as a decoder source, for a consumer placed before node `before`.
    fn source(&self, r: SourceRef, before: usize, ports: &[Vec<usize>]) -> Result<Source> {
        let n_weights = self.leaves.len() - self.n_inputs;
        match r {
            SourceRef::Input(i) if i < self.n_inputs => Ok(Source::Leaf(i)),
            SourceRef::Input(i) => Err(Error::InvalidGraph(format!(
                "names graph input {i}, but there are {}",
                self.n_inputs
            ))),
            SourceRef::Weight(i) if i < n_weights => Ok(Source::Leaf(self.n_inputs + i)),
            SourceRef::Weight(i) => Err(Error::InvalidGraph(format!(
                "names weight {i}, but there are {n_weights}"
            ))),
            SourceRef::Node { node, port } => {
                if node >= before {
                    return Err(Error::InvalidGraph(format!(
                        "names node {node}, which is not an earlier node (a cycle, a forward reference or a missing node)"
                    )));
                }
                ports[node]
                    .get(port as usize)
                    .map(|&i| Source::Node(i))
                    .ok_or_else(|| {
                        Error::InvalidGraph(format!(
                            "names port {port} of node {node} ('{}'), which has {} outputs",
                            self.nodes[ports[node][0]].out.name,
                            ports[node].len()
                        ))
                    })
            }
        }
    }

    /// The ranks graph inputs were declared with.
    pub fn input_rank(&self, name: &str) -> Option<i32> {
        self.input_ranks.get(name).copied()
    }

    /// Names of the graph inputs, in declaration order.
    pub fn input_names(&self) -> impl Iterator<Item = &str> {
        self.leaves[..self.n_inputs].iter().map(|d| d.name.as_str())
    }

    /// What the op table leaves for this path to say: weights become Constants
    /// (their bytes travel with the graph) and views get the layout rule their
    /// GGML op implies, so dynamic dims can be resolved at infer time.
    pub fn refine(&self, g: &mut Graph) -> Result<()> {
        for n in g.nodes.iter_mut() {
            match n.op {
                Op::Parameter => {
                    if let Some(data) = self.weights.get(&n.name) {
                        n.op = Op::Constant { data: data.clone() };
                    }
                }
                Op::View => {
                    let rule = self.views.get(&n.name).copied().ok_or_else(|| {
                        Error::InvalidGraph(format!("view '{}' has no layout rule", n.name))
                    })?;
                    n.op = Op::ViewAs(rule);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Decoder -> op table -> refine -> extensions in registration order ->
/// the built-in stateless lowering: the whole conversion of a described graph.
pub fn convert(
    desc: &GraphDesc,
    extensions: &mut [Box<dyn crate::passes::Pass>],
) -> Result<(Foreign, Graph)> {
    let f = Foreign::new(desc)?;
    let mut g = crate::frontend::translate(&f)?;
    f.refine(&mut g)?;
    crate::passes::run_pipeline(&mut g, extensions)?;
    Ok((f, g))
}

impl Decoder for Foreign {
    fn leaves(&self) -> &[TensorDesc] {
        &self.leaves
    }
    fn nodes(&self) -> &[NodeDesc] {
        &self.nodes
    }
    fn results(&self) -> &[Source] {
        &self.results
    }
    fn extra_outputs(&self, node: &NodeDesc) -> &[TensorDesc] {
        match self.nodes.iter().position(|n| std::ptr::eq(n, node)) {
            Some(i) => &self.extra[i],
            None => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::types::GgmlType::{F32, I32};

    fn t(name: &str, dtype: GgmlType, ne: &[i64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            dtype: dtype as i32,
            shape: ShapeDesc::new(ne),
        }
    }

    #[test]
    fn ports_become_alias_nodes_and_translate_to_port_values() {
        let g = GraphDesc {
            inputs: vec![t("x", F32, &[8, 3])],
            weights: vec![],
            nodes: vec![
                NodeSpec {
                    op: "TOP_K".into(),
                    params: vec![],
                    inputs: vec![Some(SourceRef::Input(0))],
                    outputs: vec![t("vals", F32, &[2, 3]), t("idx", I32, &[2, 3])],
                },
                NodeSpec {
                    op: "SCALE".into(),
                    params: [2f32.to_ne_bytes(), 0f32.to_ne_bytes()].concat(),
                    inputs: vec![Some(SourceRef::Node { node: 0, port: 0 })],
                    outputs: vec![t("scaled", F32, &[2, 3])],
                },
            ],
            outputs: vec![
                SourceRef::Node { node: 1, port: 0 },
                SourceRef::Node { node: 0, port: 1 },
            ],
        };
        let f = Foreign::new(&g).unwrap();
        assert_eq!(f.nodes().len(), 3);
        let mut ir = crate::frontend::translate(&f).unwrap();
        f.refine(&mut ir).unwrap();
        let topk = ir.nodes.iter().position(|n| n.op.kind() == "TopK").unwrap();
        assert_eq!(ir.nodes[topk].outputs.len(), 2);
        assert_eq!(ir.results[1], crate::ir::Value::new(topk, 1));
        assert_eq!(ir.value_name(ir.results[1]), "idx");
        assert_eq!(ir.ty(ir.results[1]).dtype, I32);
    }

    #[test]
    fn bad_descriptions_are_errors_that_say_why() {
        let base = GraphDesc {
            inputs: vec![t("x", F32, &[8])],
            weights: vec![],
            nodes: vec![NodeSpec {
                op: "SCALE".into(),
                params: vec![0; 8],
                inputs: vec![Some(SourceRef::Input(0))],
                outputs: vec![t("y", F32, &[8])],
            }],
            outputs: vec![SourceRef::Node { node: 0, port: 0 }],
        };
        assert!(Foreign::new(&base).is_ok());
        type Edit = Box<dyn Fn(&mut GraphDesc)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|g| g.nodes[0].op = "FROBNICATE".into()),
                "unknown op name 'FROBNICATE'",
            ),
            (
                Box::new(|g| g.nodes[0].params = vec![0; 4]),
                "op_params of 4 bytes",
            ),
            (
                Box::new(|g| g.nodes[0].inputs[0] = Some(SourceRef::Node { node: 0, port: 0 })),
                "not an earlier node",
            ),
            (
                Box::new(|g| g.nodes[0].inputs[0] = Some(SourceRef::Input(3))),
                "graph input 3",
            ),
            (
                Box::new(|g| g.outputs[0] = SourceRef::Node { node: 5, port: 0 }),
                "names node 5",
            ),
            (
                Box::new(|g| g.outputs[0] = SourceRef::Node { node: 0, port: 1 }),
                "port 1",
            ),
            (
                Box::new(|g| g.nodes[0].outputs[0].name = "x".into()),
                "used twice",
            ),
            (Box::new(|g| g.inputs[0].dtype = 99), "type 99"),
            (Box::new(|g| g.inputs[0].shape.rank = 7), "rank 7"),
            (Box::new(|g| g.inputs[0].shape.ne[0] = -5), "-5"),
        ];
        for (edit, want) in cases {
            let mut g = base.clone();
            edit(&mut g);
            let e = Foreign::new(&g)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(want), "expected '{want}' in '{e}'");
        }
    }
}
