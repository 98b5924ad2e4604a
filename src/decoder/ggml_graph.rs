//! Decoder over a live ggml cgraph. Reads the mirror structs only; nodes
//! without GGML_TENSOR_FLAG_COMPUTE, empty nodes and NONE nodes are skipped as
//! every in-tree backend does.
//!
//! Every node is a result (the host may read it after the compute) except
//! those ggml itself would let a backend fuse away (`ggml_node_has_n_uses`,
//! `ggml_can_fuse_subgraph_ext`): every use ggml counted when it built the
//! graph is a src of a node here, and the node is not flagged OUTPUT and not
//! the last node. A view is no exception, as in ggml's subgraph rule: who
//! else reads its source is a fact of the IR (the source's other users, or
//! the source a result itself), which the passes check.
//! The graph handed over is often a view of a larger one (one split of the
//! scheduler's), whose use counts it shares, so a reader in another split
//! keeps the node a result.

use super::{Decoder, NodeDesc, SingleNode, Source, TensorDesc};
use crate::error::{Error, Result};
use crate::ggml::abi::{ggml_cgraph, ggml_tensor, TENSOR_FLAG_COMPUTE, TENSOR_FLAG_OUTPUT};
use crate::ggml::op_params::OpParams;
use crate::ggml::ops::{op_name, OP_NONE};
use crate::ggml::types::GgmlType;
use crate::ir::{MemRef, TensorType};
use std::collections::HashMap;
use std::ffi::CStr;

/// The use count ggml recorded for `t` when it built `g` (or the graph `g`
/// is a view of), None where the graph carries none or `t` is not in it
/// (ggml_node_get_use_count; ggml_hash_find's hash and linear probing).
///
/// # Safety
/// `g` must be a valid cgraph.
unsafe fn ggml_use_count(g: &ggml_cgraph, t: *const ggml_tensor) -> Option<i32> {
    let set = &g.visited_hash_set;
    if g.use_counts.is_null() || set.used.is_null() || set.keys.is_null() || set.size == 0 {
        return None;
    }
    let used = |i: usize| {
        // SAFETY: `used` holds size bits, i < size.
        unsafe { *set.used.add(i >> 5) & (1u32 << (i & 31)) != 0 }
    };
    let start = (t as usize >> 4) % set.size;
    let mut i = start;
    loop {
        if !used(i) {
            return None;
        }
        // SAFETY: keys has `size` entries, i < size; defined where used.
        if std::ptr::eq(unsafe { *set.keys.add(i) }, t) {
            // SAFETY: use_counts has `size` entries, indexed like keys.
            return Some(unsafe { *g.use_counts.add(i) });
        }
        i = (i + 1) % set.size;
        if i == start {
            return None;
        }
    }
}

/// Whether node `i` of `g` (tensor `t`) is read by nothing but `uses_here`
/// srcs of this graph's nodes (the module comment says when).
///
/// # Safety
/// `g` must be a valid cgraph and `t` its node `i`.
unsafe fn used_only_here(g: &ggml_cgraph, i: usize, t: &ggml_tensor, uses_here: i32) -> bool {
    uses_here > 0
        && t.flags & TENSOR_FLAG_OUTPUT == 0
        && i + 1 < g.n_nodes.max(0) as usize
        // SAFETY: caller's guarantees.
        && unsafe { ggml_use_count(g, t) } == Some(uses_here)
}

pub struct GgmlGraph {
    leaves: Vec<TensorDesc>,
    nodes: Vec<NodeDesc>,
    results: Vec<Source>,
}

/// How tensor memory is resolved: `Placed` demands polycl memory (compute),
/// `Metadata` ignores data pointers (supports_op on unallocated tensors).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    Placed,
    Metadata,
}

/// # Safety
/// `t` must point to a valid ggml_tensor.
pub unsafe fn describe(t: *const ggml_tensor, memory: Memory) -> Result<TensorDesc> {
    // SAFETY: caller guarantees t is valid.
    let t = unsafe { &*t };
    // SAFETY: ggml keeps name NUL-terminated within its 64 bytes.
    let name = unsafe { CStr::from_ptr(t.name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let dtype = GgmlType::from_id(t.type_).ok_or_else(|| {
        Error::Unsupported(format!(
            "tensor '{name}' has ggml type {} unknown to polycl",
            t.type_
        ))
    })?;
    let ty = TensorType {
        dtype,
        ne: t.ne,
        nb: t.nb.map(|x| x as u64),
    };
    let mem = match memory {
        Memory::Metadata => None,
        Memory::Placed => {
            if t.data.is_null() {
                return Err(Error::InvalidGraph(format!("tensor '{name}' has no data")));
            }
            // Split buffers (-sm row) resolve too; only split-aware lowering reads them.
            let (buffer, offset) =
                crate::runtime::peer::resolve(t.data as u64).ok_or_else(|| {
                    Error::InvalidGraph(format!("tensor '{name}' is not in a polycl buffer"))
                })?;
            Some(MemRef { buffer, offset })
        }
    };
    Ok(TensorDesc { name, ty, mem })
}

fn is_empty(t: &ggml_tensor) -> bool {
    t.ne.contains(&0)
}

impl GgmlGraph {
    /// # Safety
    /// `g` must point to a valid cgraph whose nodes and srcs are valid tensors.
    pub unsafe fn new(g: *const ggml_cgraph, memory: Memory) -> Result<GgmlGraph> {
        // SAFETY: caller guarantees g is valid.
        let g = unsafe { &*g };
        let mut out = GgmlGraph {
            leaves: Vec::new(),
            nodes: Vec::new(),
            results: Vec::new(),
        };
        let mut seen: HashMap<*const ggml_tensor, Source> = HashMap::new();
        // Srcs naming each tensor, over every node of this graph.
        let mut uses_here: HashMap<*const ggml_tensor, i32> = HashMap::new();
        for i in 0..g.n_nodes.max(0) as usize {
            // SAFETY: nodes has n_nodes valid entries.
            let t = unsafe { &**g.nodes.add(i) };
            for &sp in t.src.iter().filter(|s| !s.is_null()) {
                *uses_here.entry(sp as *const ggml_tensor).or_default() += 1;
            }
        }
        for i in 0..g.n_nodes.max(0) as usize {
            // SAFETY: nodes has n_nodes valid entries.
            let tp = unsafe { *g.nodes.add(i) } as *const ggml_tensor;
            // SAFETY: node pointers are valid tensors.
            let t = unsafe { &*tp };
            if t.flags & TENSOR_FLAG_COMPUTE == 0 || is_empty(t) || t.op == OP_NONE {
                continue;
            }
            let mut srcs = Vec::new();
            for &sp in t.src.iter() {
                if sp.is_null() {
                    srcs.push(None);
                    continue;
                }
                let sp = sp as *const ggml_tensor;
                let s = match seen.get(&sp) {
                    Some(s) => *s,
                    None => {
                        // SAFETY: src pointers of a valid tensor are valid tensors.
                        let d = unsafe { describe(sp, memory) }?;
                        out.leaves.push(d);
                        let s = Source::Leaf(out.leaves.len() - 1);
                        seen.insert(sp, s);
                        s
                    }
                };
                srcs.push(Some(s));
            }
            while srcs.last() == Some(&None) {
                srcs.pop();
            }
            // SAFETY: tp is valid.
            let d = unsafe { describe(tp, memory) }?;
            out.nodes.push(NodeDesc {
                op: t.op,
                params: OpParams(t.op_params),
                srcs,
                out: d,
            });
            let s = Source::Node(out.nodes.len() - 1);
            // A node listed twice (perf mode) is recomputed; later users read the latest.
            seen.insert(tp, s);
            let here = uses_here.get(&tp).copied().unwrap_or(0);
            // SAFETY: g is valid and tp is its node i.
            if !unsafe { used_only_here(g, i, t, here) } {
                out.results.push(s);
            }
        }
        Ok(out)
    }

    /// A one-node decoder for `supports_op`, reading metadata only.
    ///
    /// # Safety
    /// `t` must point to a valid tensor with valid srcs.
    pub unsafe fn single(t: *const ggml_tensor) -> Result<SingleNode> {
        // SAFETY: caller guarantees validity.
        let tr = unsafe { &*t };
        let mut leaves = Vec::new();
        let mut srcs = Vec::new();
        for &sp in tr.src.iter() {
            if sp.is_null() {
                srcs.push(None);
            } else {
                // SAFETY: valid src pointer.
                leaves.push(unsafe { describe(sp, Memory::Metadata) }?);
                srcs.push(Some(Source::Leaf(leaves.len() - 1)));
            }
        }
        while srcs.last() == Some(&None) {
            srcs.pop();
        }
        // SAFETY: valid tensor.
        let out = unsafe { describe(t, Memory::Metadata) }?;
        Ok(SingleNode {
            leaves,
            nodes: vec![NodeDesc {
                op: tr.op,
                params: OpParams(tr.op_params),
                srcs,
                out,
            }],
            results: vec![Source::Node(0)],
        })
    }
}

impl Decoder for GgmlGraph {
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

/// A 64-bit fingerprint of everything a plan depends on: ops, params, types,
/// shapes, strides and data addresses of every computed node and its srcs.
///
/// # Safety
/// `g` must point to a valid cgraph.
pub unsafe fn fingerprint(g: *const ggml_cgraph) -> u64 {
    // SAFETY: caller guarantees g is valid.
    let g = unsafe { &*g };
    let mut h = Fnv::default();
    for i in 0..g.n_nodes.max(0) as usize {
        // SAFETY: nodes has n_nodes valid entries.
        let t = unsafe { &**g.nodes.add(i) };
        h.word((t.op as u64) << 32 | (t.flags & (TENSOR_FLAG_COMPUTE | TENSOR_FLAG_OUTPUT)) as u64);
        // Which nodes are results depends on uses outside this graph too.
        // SAFETY: g is valid.
        h.word(unsafe { ggml_use_count(g, t) }.map_or(u64::MAX, |c| c as u64));
        hash_tensor(&mut h, t);
        for p in t.op_params.chunks(2) {
            h.word((p[0] as u32 as u64) << 32 | p[1] as u32 as u64);
        }
        for &s in t.src.iter() {
            if s.is_null() {
                h.word(0);
            } else {
                // SAFETY: src pointers are valid tensors.
                hash_tensor(&mut h, unsafe { &*s });
            }
        }
    }
    h.0
}

fn hash_tensor(h: &mut Fnv, t: &ggml_tensor) {
    h.word(t.type_ as u64);
    h.word(t.data as u64);
    for d in 0..4 {
        h.word(t.ne[d] as u64);
        h.word(t.nb[d] as u64);
    }
}

/// A word-at-a-time FNV-style mix: fast enough to run per token.
struct Fnv(u64);
impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}
impl Fnv {
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w)
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(29);
    }
}

/// ggml's name of a node's op, for messages.
pub fn describe_op(node: &NodeDesc) -> String {
    format!("{} '{}'", op_name(node.op), node.out.name)
}
