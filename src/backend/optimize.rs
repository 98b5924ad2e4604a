//! graph_optimize: ggml calls it on each of polycl's graph splits before the
//! compute memory is allocated, so nodes may be reordered here without
//! breaking the allocator's placement (which follows the new order). polycl
//! moves matmuls that read the same activation next to each other (llama
//! emits Q, rope(Q), V, K, rope(K)), so the fusion passes find Q/K/V and
//! then rope(Q), rope(K) and the cache writes as runs of adjacent nodes, and
//! asks the allocator to keep Q alive until K's rope (`keep_rope_inputs`) and
//! a residual add's inputs alive until the norm that follows has run
//! (`keep_norm_inputs`).

use super::stream::ours;
use crate::capi::boundary::guard;
use crate::ggml::abi::*;
use crate::ggml::ops::{OP_ADD, OP_MUL, OP_MUL_MAT, OP_RMS_NORM, OP_ROPE};
use crate::runtime::profile::{host_call, HostCall};

/// How far ahead a sibling matmul is looked for.
const WINDOW: usize = 24;

/// The tensor whose memory `t` lives in.
///
/// # Safety
/// `t` is a valid tensor whose view_src chain is valid.
unsafe fn root(mut t: *const ggml_tensor) -> *const ggml_tensor {
    // SAFETY: per the contract, every view_src link is a valid tensor.
    while !unsafe { (*t).view_src }.is_null() {
        t = unsafe { (*t).view_src };
    }
    t
}

/// Whether node `moved` may run before every node of `jumped`: it reads
/// nothing they compute or write (through views), and writes only its own
/// memory.
///
/// # Safety
/// All pointers are valid tensors of one graph.
unsafe fn may_precede(moved: *const ggml_tensor, jumped: &[*mut ggml_tensor]) -> bool {
    // SAFETY: valid per the contract.
    let m = unsafe { &*moved };
    if !m.view_src.is_null() {
        return false;
    }
    for &s in m.src.iter().filter(|s| !s.is_null()) {
        // SAFETY: srcs of a valid tensor are valid.
        let rs = unsafe { root(s) };
        for &j in jumped {
            // SAFETY: as above.
            if std::ptr::eq(s, j) || std::ptr::eq(rs, unsafe { root(j) }) {
                return false;
            }
        }
    }
    true
}

/// Reorders `g`'s nodes: matmuls sharing their activation become adjacent.
///
/// # Safety
/// `g` is a valid cgraph.
unsafe fn group_sibling_matmuls(g: &mut ggml_cgraph) {
    let n = g.n_nodes.max(0) as usize;
    if g.nodes.is_null() || n == 0 {
        return;
    }
    // SAFETY: nodes holds n_nodes entries.
    let nodes = unsafe { std::slice::from_raw_parts_mut(g.nodes, n) };
    if nodes.iter().any(|t| t.is_null()) {
        return;
    }
    let mut i = 0;
    while i < n {
        // SAFETY: non-NULL node pointers of a valid graph.
        let t = unsafe { &*nodes[i] };
        if t.op != OP_MUL_MAT {
            i += 1;
            continue;
        }
        let x = t.src[1];
        let mut at = i + 1;
        for j in i + 1..n.min(i + 1 + WINDOW) {
            // SAFETY: as above.
            let c = unsafe { &*nodes[j] };
            if c.op == OP_MUL_MAT
                && std::ptr::eq(c.src[1], x)
                && unsafe { may_precede(nodes[j], &nodes[at..j]) }
            {
                nodes[at..=j].rotate_right(1);
                at += 1;
            }
        }
        i = at;
    }
}

/// Keeps each rope's input allocated until the next rope of the same
/// positions (llama's Q and K ropes) has run: the fused rope + cache-write
/// kernel runs both at once, so K's rope output must not take the memory of
/// Q, which the allocator would otherwise reuse once Q's rope has read it.
///
/// # Safety
/// `nodes` are a graph's valid nodes.
unsafe fn keep_rope_inputs(
    nodes: &[*mut ggml_tensor],
    keep: &dyn Fn(*mut ggml_tensor, *mut ggml_tensor),
) {
    let n = nodes.len();
    for i in 0..n {
        // SAFETY: valid nodes.
        let r = unsafe { &*nodes[i] };
        if r.op != OP_ROPE || r.src[0].is_null() {
            continue;
        }
        let next = (i + 1..n.min(i + 1 + WINDOW)).find(|&j| {
            // SAFETY: as above.
            let t = unsafe { &*nodes[j] };
            t.op == OP_ROPE && std::ptr::eq(t.src[1], r.src[1])
        });
        if let Some(j) = next {
            keep(r.src[0], nodes[j]);
        }
    }
}

/// Keeps both inputs of a residual add that feeds an RMS norm allocated until
/// the norm's weight multiply: then the allocator places neither the sum (in
/// place) nor the norm's outputs in their memory, and the fused norm may
/// spread a row over several work-groups, each of which reads the whole row
/// of both inputs (`kernel_fused_rms_norm_wide`). It costs one activation
/// row of compute memory.
///
/// # Safety
/// `nodes` are a graph's valid nodes.
unsafe fn keep_norm_inputs(
    nodes: &[*mut ggml_tensor],
    keep: &dyn Fn(*mut ggml_tensor, *mut ggml_tensor),
) {
    let n = nodes.len();
    for i in 0..n {
        // SAFETY: valid nodes; srcs are NULL or valid tensors.
        let norm = unsafe { &*nodes[i] };
        if norm.op != OP_RMS_NORM || norm.src[0].is_null() {
            continue;
        }
        // SAFETY: as above.
        let sum = unsafe { &*norm.src[0] };
        if sum.op != OP_ADD || sum.src[0].is_null() || sum.src[1].is_null() {
            continue;
        }
        let mul = (i + 1..n.min(i + 1 + WINDOW)).find(|&j| {
            // SAFETY: as above.
            let t = unsafe { &*nodes[j] };
            t.op == OP_MUL && (std::ptr::eq(t.src[0], nodes[i]) || std::ptr::eq(t.src[1], nodes[i]))
        });
        let until = nodes[mul.unwrap_or(i)];
        keep(sum.src[0], until);
        keep(sum.src[1], until);
    }
}

/// Runs the passes that ask ggml's allocator to keep tensors alive longer
/// (`add_alloc_dep`), if this ggml offers it.
///
/// # Safety
/// `g` is a valid cgraph whose nodes are all non-NULL; `params` is NULL or
/// ggml's parameters for this call.
unsafe fn keep_alive(g: &ggml_cgraph, params: *mut ggml_backend_graph_optimize_params) {
    if params.is_null() || g.nodes.is_null() {
        return;
    }
    // SAFETY: non-NULL; ggml's parameters for this call.
    let p = unsafe { &*params };
    let Some(add) = p.add_alloc_dep else {
        return;
    };
    // SAFETY: nodes holds n_nodes non-NULL entries (the caller's contract).
    let nodes = unsafe { std::slice::from_raw_parts(g.nodes, g.n_nodes.max(0) as usize) };
    // Keeps the memory of `t` (its root tensor) allocated until `until` ran.
    let keep = |t: *mut ggml_tensor, until: *mut ggml_tensor| {
        // SAFETY: ggml's callback with its user data; `t` is a valid tensor
        // of the graph and `until` one of its nodes.
        unsafe { add(p.user_data, root(t) as *mut ggml_tensor, until) };
    };
    // SAFETY: the nodes are valid (as above).
    unsafe {
        keep_rope_inputs(nodes, &keep);
        keep_norm_inputs(nodes, &keep);
    }
}

/// # Safety
/// ggml passes its backend and a split's graph.
pub unsafe extern "C" fn graph_optimize(
    b: ggml_backend_t,
    g: *mut ggml_cgraph,
    params: *mut ggml_backend_graph_optimize_params,
) {
    guard("graph_optimize", (), || {
        let Some(c) = ours(b) else {
            return;
        };
        if g.is_null() || !crate::config::get().fuse || !crate::plan::mul_mv::wanted(&c.dev) {
            return;
        }
        // SAFETY: non-NULL; ggml passes a valid graph it lets us reorder.
        let g = unsafe { &mut *g };
        host_call(HostCall::GraphOptimize, || {
            // SAFETY: as above; group_sibling_matmuls returns early unless
            // every node pointer is non-NULL, and keep_alive runs only then.
            unsafe {
                group_sibling_matmuls(g);
                if !g.nodes.is_null()
                    && (0..g.n_nodes.max(0) as usize).all(|i| !(*g.nodes.add(i)).is_null())
                {
                    keep_alive(g, params);
                }
            }
        })
    })
}
