//! The decoder interface: what a graph computes (ops, inputs, attributes,
//! outputs, leaves), never how state is owned. Two implementations: the live
//! ggml cgraph and (through `polycl.h`) C callbacks.

pub mod foreign;
pub mod ggml_graph;

use crate::ggml::op_params::OpParams;
use crate::ir::{MemRef, TensorType};

#[derive(Clone, Debug, PartialEq)]
pub struct TensorDesc {
    pub name: String,
    pub ty: TensorType,
    /// Where the host placed it, if it did.
    pub mem: Option<MemRef>,
}

/// An operand of a node: a leaf (graph input or weight) or an earlier node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    Leaf(usize),
    Node(usize),
}

/// Pseudo op of decoders whose nodes have several outputs: a node with this op
/// stands for output port `params.i32(0)` of the node that is its only src.
/// ggml op numbers are never negative, so a live cgraph cannot contain it.
pub const OP_OUTPUT_PORT: i32 = -1;

#[derive(Clone, Debug, PartialEq)]
pub struct NodeDesc {
    /// ggml op number of the pinned version.
    pub op: i32,
    pub params: OpParams,
    /// ggml's src slots, trailing empty slots trimmed.
    pub srcs: Vec<Option<Source>>,
    pub out: TensorDesc,
}

pub trait Decoder {
    fn leaves(&self) -> &[TensorDesc];
    fn nodes(&self) -> &[NodeDesc];
    /// Values the caller reads after the compute.
    fn results(&self) -> &[Source];

    fn desc(&self, s: Source) -> &TensorDesc {
        match s {
            Source::Leaf(i) => &self.leaves()[i],
            Source::Node(i) => &self.nodes()[i].out,
        }
    }
    /// The description of src slot `k` of `node`, if present.
    fn src(&self, node: &NodeDesc, k: usize) -> Option<&TensorDesc> {
        node.srcs.get(k).copied().flatten().map(|s| self.desc(s))
    }
    /// Output ports 1.. of a multi-output node (`NodeDesc::out` is port 0); later
    /// nodes reach them through `OP_OUTPUT_PORT` nodes. ggml nodes have none.
    fn extra_outputs(&self, _node: &NodeDesc) -> &[TensorDesc] {
        &[]
    }
}

/// A one-node decoder: how `supports_op` asks the op table about a lone tensor
/// through the same code path as a whole graph.
pub struct SingleNode {
    pub leaves: Vec<TensorDesc>,
    pub nodes: Vec<NodeDesc>,
    pub results: Vec<Source>,
}

impl Decoder for SingleNode {
    fn leaves(&self) -> &[TensorDesc] {
        &self.leaves
    }
    fn nodes(&self) -> &[NodeDesc] {
        &self.nodes
    }
    fn results(&self) -> &[Source] {
        &self.results
    }
}
