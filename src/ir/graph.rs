use super::op::Op;
use crate::ggml::types::GgmlType;

pub type NodeId = usize;

/// One output of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value {
    pub node: NodeId,
    pub port: u32,
}

impl Value {
    pub fn new(node: NodeId, port: u32) -> Value {
        Value { node, port }
    }
}

/// Element type, ggml shape (ne; -1 is a dynamic dim) and byte strides (nb).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: GgmlType,
    pub ne: [i64; 4],
    pub nb: [u64; 4],
}

impl TensorType {
    /// Contiguous strides for `ne`.
    pub fn contiguous(dtype: GgmlType, ne: [i64; 4]) -> TensorType {
        let mut nb = [0u64; 4];
        nb[0] = dtype.block_bytes() as u64;
        nb[1] = dtype.row_bytes(ne[0].max(0));
        nb[2] = nb[1] * ne[1].max(0) as u64;
        nb[3] = nb[2] * ne[2].max(0) as u64;
        TensorType { dtype, ne, nb }
    }
    pub fn nelements(&self) -> i64 {
        self.ne.iter().product()
    }
    pub fn nrows(&self) -> i64 {
        self.ne[1] * self.ne[2] * self.ne[3]
    }
    pub fn is_dynamic(&self) -> bool {
        self.ne.iter().any(|&d| d < 0)
    }
    /// Rows contiguous, elements packed (ggml_is_contiguous).
    pub fn is_contiguous(&self) -> bool {
        *self == TensorType::contiguous(self.dtype, self.ne)
            || self.nelements() <= 1 && self.nb[0] == self.dtype.block_bytes() as u64
    }
    /// Bytes spanned from the first to one past the last element.
    pub fn span_bytes(&self) -> u64 {
        if self.ne.contains(&0) {
            return 0;
        }
        let blck = self.dtype.block_elems() as i64;
        let mut last = self.dtype.block_bytes() as u64;
        last += ((self.ne[0] / blck - 1).max(0) as u64) * self.nb[0];
        for d in 1..4 {
            last += (self.ne[d] - 1).max(0) as u64 * self.nb[d];
        }
        last
    }
}

/// Memory the host already allocated: buffer id (polycl's fake base address)
/// and byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemRef {
    pub buffer: u64,
    pub offset: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// Lives in host-allocated memory (the ggml path: every tensor is placed).
    Bound(MemRef),
    /// The planner allocates it.
    Internal,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    pub ty: TensorType,
    pub place: Place,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<Value>,
    pub outputs: Vec<Output>,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    /// Graph results: values the caller reads after the compute.
    pub results: Vec<Value>,
}

impl Graph {
    pub fn add(&mut self, op: Op, inputs: Vec<Value>, outputs: Vec<Output>, name: impl Into<String>) -> NodeId {
        self.nodes.push(Node { op, inputs, outputs, name: name.into() });
        self.nodes.len() - 1
    }
    pub fn output(&self, v: Value) -> &Output {
        &self.nodes[v.node].outputs[v.port as usize]
    }
    pub fn ty(&self, v: Value) -> &TensorType {
        &self.output(v).ty
    }
    /// How many nodes have each op kind (by `Op::kind`).
    pub fn count(&self, kind: &str) -> usize {
        self.nodes.iter().filter(|n| n.op.kind() == kind).count()
    }
    /// Nodes that read value `v`.
    pub fn users(&self, v: Value) -> Vec<NodeId> {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].inputs.contains(&v)).collect()
    }
}
