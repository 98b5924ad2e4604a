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
    /// The value `v` is a view of, through views that keep memory, element
    /// count and a contiguous layout (ggml's RESHAPE); `v` itself otherwise.
    pub fn reshaped_source(&self, mut v: Value) -> Value {
        loop {
            let n = &self.nodes[v.node];
            if n.op != Op::View || v.port != 0 {
                return v;
            }
            let (outer, inner) = (self.output(v), self.output(n.inputs[0]));
            if outer.place != inner.place
                || outer.ty.nelements() != inner.ty.nelements()
                || !outer.ty.is_contiguous()
                || !inner.ty.is_contiguous()
            {
                return v;
            }
            v = n.inputs[0];
        }
    }
    /// Nodes that read value `v`.
    pub fn users(&self, v: Value) -> Vec<NodeId> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].inputs.contains(&v))
            .collect()
    }
}

impl Graph {
    /// Replaces `members` by one node computing `op` from `inputs`, whose
    /// ports are the members' outputs in order (`members[0]`'s ports first,
    /// then `members[1]`'s, ...): every use of a member (node inputs,
    /// results) is redirected to its port, the members are removed, and the
    /// nodes are put back in a topological order that keeps the original
    /// order wherever dependencies allow (the fused node takes the place of
    /// its first member). Returns the fused node's id.
    /// None (graph untouched) where fusing would make a cycle (one of
    /// `inputs` computed from a member's output), or where a node that
    /// computes something sits between two members: the host's allocator
    /// placed tensors for the original order, so a fused node may only take
    /// the place of a run of members (views and parameters in between move).
    /// Nodes between members that only fed a member (views of one member
    /// read by another) are left reading the fused node.
    pub fn fuse(
        &mut self,
        members: &[NodeId],
        op: Op,
        inputs: Vec<Value>,
        name: String,
    ) -> Option<NodeId> {
        let end = self.fusion_window_end(members, &inputs)?;
        if !self.can_fuse(members, &inputs, end) {
            return None;
        }
        let first = *members.iter().min().expect("a fusion has members");
        let outputs: Vec<Output> = members
            .iter()
            .flat_map(|&m| self.nodes[m].outputs.iter().cloned())
            .collect();
        // Port 0 takes the node's name; every other port its member's name
        // (a member's own port 0) or that member's port name.
        let mut port_names: Vec<String> = Vec::new();
        for (k, &m) in members.iter().enumerate() {
            let n = &self.nodes[m];
            if k > 0 {
                port_names.push(n.name.clone());
            }
            port_names.extend(n.port_names.iter().cloned());
        }
        // First port of each member on the fused node.
        let base: Vec<u32> = members
            .iter()
            .scan(0u32, |next, &m| {
                let b = *next;
                *next += self.nodes[m].outputs.len() as u32;
                Some(b)
            })
            .collect();
        let fused = self.nodes.len();
        self.nodes.push(Node {
            op,
            inputs,
            outputs,
            name,
            port_names,
        });
        let redirect = |v: Value| match members.iter().position(|&m| m == v.node) {
            Some(k) => Value::new(fused, base[k] + v.port),
            None => v,
        };
        // In topological order only nodes from the first member on read one.
        for n in self.nodes[first..].iter_mut() {
            for v in n.inputs.iter_mut() {
                *v = redirect(*v);
            }
        }
        for r in self.results.iter_mut() {
            *r = redirect(*r);
        }
        // Stable topological order: among the nodes whose inputs are placed,
        // the one with the smallest key goes next. Nodes before the first
        // member keep their places (they read nothing after them), and so do
        // those from `end` on: every node before `end` reads only nodes
        // before it, so all of them are placed first. Only the window
        // [first, end) and the fused node are ordered again; a plan's
        // graph of hundreds of nodes is fused dozens of times.
        let local = |i: usize| if i == fused { end - first } else { i - first };
        let window = end - first + 1;
        let removed = |i: usize| i != fused && members.contains(&i);
        let key = |i: usize| if i == fused { first } else { i };
        let mut pending = vec![0usize; window];
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); window];
        for i in (first..end).chain([fused]) {
            if removed(i) {
                continue;
            }
            for v in &self.nodes[i].inputs {
                if v.node >= first {
                    pending[local(i)] += 1;
                    users[local(v.node)].push(i);
                }
            }
        }
        let mut ready = std::collections::BinaryHeap::new();
        for i in (first..end).chain([fused]) {
            if !removed(i) && pending[local(i)] == 0 {
                ready.push(std::cmp::Reverse((key(i), i)));
            }
        }
        let mut order = Vec::with_capacity(window);
        while let Some(std::cmp::Reverse((_, i))) = ready.pop() {
            order.push(i);
            for &u in &users[local(i)] {
                pending[local(u)] -= 1;
                if pending[local(u)] == 0 {
                    ready.push(std::cmp::Reverse((key(u), u)));
                }
            }
        }
        let mut new_at = vec![usize::MAX; window];
        for (k, &i) in order.iter().enumerate() {
            new_at[local(i)] = first + k;
        }
        let shift_from = first + order.len();
        let remap = |v: Value| {
            let node = if v.node < first {
                v.node
            } else if v.node < end || v.node == fused {
                new_at[local(v.node)]
            } else {
                shift_from + (v.node - end)
            };
            Value::new(node, v.port)
        };
        let fused_node = self.nodes.pop().expect("pushed above");
        let mut old: Vec<Option<Node>> = self.nodes.drain(first..end).map(Some).collect();
        old.push(Some(fused_node));
        let placed: Vec<Node> = order
            .iter()
            .map(|&i| old[local(i)].take().expect("each node placed once"))
            .collect();
        self.nodes.splice(first..first, placed);
        for n in self.nodes[first..].iter_mut() {
            for v in n.inputs.iter_mut() {
                *v = remap(*v);
            }
        }
        for r in self.results.iter_mut() {
            *r = remap(*r);
        }
        Some(new_at[local(fused)])
    }

    /// The end of the nodes a fusion of `members` may reorder: past the last
    /// member where every input of the fused node comes before it (as every
    /// pass builds them, from the members' inputs), else the graph's end.
    /// None where the members or inputs name no node.
    fn fusion_window_end(&self, members: &[NodeId], inputs: &[Value]) -> Option<NodeId> {
        let hi = *members.iter().max()?;
        if hi >= self.nodes.len() || inputs.iter().any(|v| v.node >= self.nodes.len()) {
            return None;
        }
        Some(if inputs.iter().all(|v| v.node <= hi) {
            hi + 1
        } else {
            self.nodes.len()
        })
    }

    /// `end` from `fusion_window_end`; the graph in topological order (as
    /// `verify` requires).
    fn can_fuse(&self, members: &[NodeId], inputs: &[Value], end: NodeId) -> bool {
        let (Some(&lo), Some(&hi)) = (members.iter().min(), members.iter().max()) else {
            return false;
        };
        if (lo..hi).any(|i| !members.contains(&i) && !self.nodes[i].op.is_view()) {
            return false;
        }
        // Everything computed from a member's output (members included), in
        // the window that holds every input: no input of the fused node may
        // come from there. Nodes before the first member read none.
        let mut downstream = vec![false; end - lo];
        for i in lo..end {
            downstream[i - lo] = members.contains(&i)
                || self.nodes[i]
                    .inputs
                    .iter()
                    .any(|v| v.node >= lo && downstream.get(v.node - lo) == Some(&true));
        }
        !inputs
            .iter()
            .any(|v| v.node >= lo && downstream.get(v.node - lo) == Some(&true))
    }
}
