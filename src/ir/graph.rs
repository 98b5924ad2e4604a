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
    /// A tensor whose rank is not known (the C decoder's rank -1): every dim is
    /// dynamic and `nb` holds the marker `DYNAMIC_RANK_NB` (strides mean nothing
    /// before the dims are known).
    pub fn dynamic_rank(dtype: GgmlType) -> TensorType {
        TensorType {
            dtype,
            ne: [-1; 4],
            nb: DYNAMIC_RANK_NB,
        }
    }
    pub fn has_dynamic_rank(&self) -> bool {
        self.nb == DYNAMIC_RANK_NB
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

/// The `nb` marker of `TensorType::dynamic_rank`.
pub const DYNAMIC_RANK_NB: [u64; 4] = [u64::MAX; 4];

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
    /// Names of output ports 1.. of a multi-output node (port 0 is `name`).
    pub port_names: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    /// Graph results: values the caller reads after the compute.
    pub results: Vec<Value>,
}

impl Graph {
    pub fn add(
        &mut self,
        op: Op,
        inputs: Vec<Value>,
        outputs: Vec<Output>,
        name: impl Into<String>,
    ) -> NodeId {
        self.nodes.push(Node {
            op,
            inputs,
            outputs,
            name: name.into(),
            port_names: Vec::new(),
        });
        self.nodes.len() - 1
    }
    /// The name of value `v`: its node's name, or the port's own name.
    pub fn value_name(&self, v: Value) -> String {
        let n = &self.nodes[v.node];
        match v.port {
            0 => n.name.clone(),
            p => n
                .port_names
                .get(p as usize - 1)
                .cloned()
                .unwrap_or_else(|| format!("{}:{p}", n.name)),
        }
    }
    /// State variables: (id, type) of each ReadValue, in graph order.
    pub fn variables(&self) -> Vec<(String, TensorType)> {
        let mut out: Vec<(String, TensorType)> = Vec::new();
        for n in &self.nodes {
            if let Op::ReadValue { variable } = &n.op {
                if !out.iter().any(|(id, _)| id == variable) {
                    out.push((variable.clone(), n.outputs[0].ty.clone()));
                }
            }
        }
        out
    }
    /// Sink nodes (Assign), in graph order.
    pub fn sinks(&self) -> Vec<NodeId> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].op.is_sink())
            .collect()
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
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].inputs.contains(&v))
            .collect()
    }
}
