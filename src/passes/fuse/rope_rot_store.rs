//! Rope of Q and K, llama's Hadamard rotations of Q, K and V, and the K/V
//! cache writes of one attention layer -> RopeRotStore.
//!
//! With a quantized KV cache llama rotates q, k (and v, where V is quantized
//! too) by the Hadamard matrix before the cache writes (llama_mul_mat_hadamard,
//! `Op::Hadamard` here). The rotations stand between the ropes and the
//! writes, so `rope_store` cannot match, and a layer took seven launches.
//! Pattern:
//!   rope_q  = Rope(p)(q, pos [, ff])
//!   rot_q   = Hadamard(reshape(rope_q))          rows of n, n dividing a head row
//!   rope_k  = Rope(p)(k, pos [, ff])             same params, positions, factors
//!   rot_k   = Hadamard(reshape(rope_k))          same n
//!   write_k = ScatterRows(k_cache, reshape(rot_k), k_rows)
//!   [rot_v  = Hadamard(reshape(v))]              rows of n_v
//!   write_v = ScatterRows(v_cache, reshape(rot_v) or v, v_rows)
//! The kernel (rope_rot_store.cl) takes a head row or a chunk of V a
//! work-group, ropes and rotates it in local memory and writes rot(q), the
//! caches and every other member's output that something but the members
//! may read (with llama's graphs: none).
//! Memory: no written output may overlap another one or an input, but a
//! rope's over its own input; `Graph::fuse` refuses matches with computing
//! nodes between members.

use super::rope_store::{
    bound, fuse_matches, fused_inputs, nearest, rope_ok, rope_source, scatter_into, Match,
};
use super::{overlap, readers, span, Span};
use crate::ggml::types::GgmlType::{F16, F32, Q4_0, Q8_0};
use crate::ir::{Graph, NodeId, Op, RopeRot, Value};

/// `RopeRot::dead` bits: outputs the kernel leaves unwritten, which only
/// members read.
pub const DEAD_ROPE_Q: u8 = 1;
pub const DEAD_ROPE_K: u8 = 2;
pub const DEAD_ROT_K: u8 = 4;
pub const DEAD_ROT_V: u8 = 8;

/// The longest head row or V chunk the kernel holds in local memory
/// (RR_MAX in rope_rot_store.cl).
pub const MAX_ROW: i64 = 1024;

/// Fuses every match; returns how many. Members in port order: [rope_q,
/// rot_q, rope_k, rot_k, write_k, (rot_v,) write_v].
pub fn run(g: &mut Graph) -> usize {
    fuse_matches(g, try_match, "rope+rot+store")
}

/// The Hadamard node whose output `v` is, through RESHAPE views.
fn rotation_source(g: &Graph, v: Value) -> Option<NodeId> {
    let s = g.reshaped_source(v);
    (s.port == 0 && g.nodes[s.node].op == Op::Hadamard).then_some(s.node)
}

/// The rotation of rope `r`'s output: a Hadamard reading it through RESHAPE
/// views, whose rows divide the rope's rows, contiguous in and out.
fn rotation_of(g: &Graph, r: NodeId) -> Option<(NodeId, i64)> {
    let rows = g.nodes[r].outputs[0].ty.ne[0];
    (0..g.nodes.len()).find_map(|h| {
        let n = &g.nodes[h];
        if n.op != Op::Hadamard || g.reshaped_source(n.inputs[1]) != Value::new(r, 0) {
            return None;
        }
        let width = g.ty(n.inputs[1]).ne[0];
        (rotation_ok(g, h) && rows % width == 0).then_some((h, width))
    })
}

/// A rotation the kernel computes: F32 rows of a power-of-two width in and
/// out, contiguous, all memory placed.
fn rotation_ok(g: &Graph, h: NodeId) -> bool {
    let n = &g.nodes[h];
    let (x, out) = (g.ty(n.inputs[1]), &n.outputs[0].ty);
    n.outputs.len() == 1
        && x.dtype == F32
        && out.dtype == F32
        && x.ne == out.ne
        && x.is_contiguous()
        && out.is_contiguous()
        && !x.is_dynamic()
        && x.ne[0] > 0
        && (x.ne[0] as u64).is_power_of_two()
        && bound(g, n.inputs[1])
        && bound(g, Value::new(h, 0))
}

/// Whether only `members` read `v`: nothing does after the fused kernel.
fn read_only_by(g: &Graph, v: Value, members: &[NodeId]) -> bool {
    readers(g, v).is_some_and(|r| r.iter().all(|u| members.contains(u)))
}

/// Whether a ScatterRows reads `v`, directly or through views.
fn feeds_cache_write(g: &Graph, v: Value) -> bool {
    g.users(v).into_iter().any(|u| match g.nodes[u].op {
        Op::ScatterRows => true,
        Op::View => feeds_cache_write(g, Value::new(u, 0)),
        _ => false,
    })
}

/// Rows of the cache's width holding `elems` elements: the only K/V source
/// shape fused (llama's reshape_2d before its cache writes).
fn cache_rows(vals: [i64; 4], cache_width: i64, elems: i64) -> bool {
    cache_width > 0 && elems % cache_width == 0 && vals == [cache_width, elems / cache_width, 1, 1]
}

fn try_match(g: &Graph, wk: NodeId) -> Option<Match> {
    if !scatter_into(g, wk, &[Q8_0, Q4_0, F16, F32]) {
        return None;
    }
    let nk = &g.nodes[wk];
    let hk = rotation_source(g, nk.inputs[1])?;
    let rk = rope_source(g, g.nodes[hk].inputs[1])?;
    let p = rope_ok(g, rk)?;
    let (rot_k, width) = rotation_of(g, rk)?;
    if rot_k != hk {
        return None;
    }
    let rope_k = &g.nodes[rk];
    let k_out = &rope_k.outputs[0].ty;
    let k_cache = g.ty(nk.inputs[0]);
    if !k_out.is_contiguous()
        || k_out.ne[0] > MAX_ROW
        || !cache_rows(g.ty(nk.inputs[1]).ne, k_cache.ne[0], k_out.nelements())
        || (k_cache.dtype.is_quantized() && k_out.ne[0] % 32 != 0)
    {
        return None;
    }
    // Q: the nearest rope of the same kind whose rotation feeds no cache write.
    let same_rope = |r: NodeId| {
        r != rk
            && rope_ok(g, r) == Some(p)
            && g.nodes[r].inputs[1..] == rope_k.inputs[1..]
            && g.nodes[r].outputs[0].ty.is_contiguous()
            && g.nodes[r].outputs[0].ty.ne[0] <= MAX_ROW
            && rotation_of(g, r)
                .is_some_and(|(h, w)| w == width && !feeds_cache_write(g, Value::new(h, 0)))
    };
    let rq = nearest(g.nodes.len(), rk, same_rope)?;
    let (hq, _) = rotation_of(g, rq)?;
    // V: the nearest other cache write, rotated or not, of no rope (no
    // layer's K write).
    let k_dst = g.output(nk.inputs[0]).place;
    let of_rope = |vals: Value| {
        let rotated = rotation_source(g, vals).map(|h| g.nodes[h].inputs[1]);
        rope_source(g, rotated.unwrap_or(vals)).is_some()
    };
    let wv = nearest(g.nodes.len(), wk, |s| {
        s != wk
            && scatter_into(g, s, &[Q8_0, Q4_0, F16, F32])
            && !of_rope(g.nodes[s].inputs[1])
            && g.output(g.nodes[s].inputs[0]).place != k_dst
    })?;
    let nv = &g.nodes[wv];
    let v_vals = nv.inputs[1];
    let (hv, v_src, v_width) = match rotation_source(g, v_vals) {
        Some(h) if rotation_ok(g, h) => {
            let x = g.nodes[h].inputs[1];
            (Some(h), x, g.ty(x).ne[0])
        }
        Some(_) => return None,
        None => (None, v_vals, 1),
    };
    let v_ty = g.ty(v_src);
    let v_cache = g.ty(nv.inputs[0]);
    let v_chunk = v_chunk(v_ty.nelements(), v_width, k_out.ne[0])?;
    if v_ty.dtype != F32
        || !v_ty.is_contiguous()
        || !bound(g, v_src)
        || !cache_rows(g.ty(v_vals).ne, v_cache.ne[0], v_ty.nelements())
        || (v_cache.dtype.is_quantized() && v_chunk % 32 != 0)
    {
        return None;
    }
    let mut members = vec![rq, hq, rk, hk, wk];
    members.extend(hv);
    members.push(wv);
    let inputs = fused_inputs(g, rq, rk, wk, v_src, wv);
    // Intermediates that only members read are left unwritten (the host's
    // allocator may have put a later member's output over them already).
    let intermediates = [(rq, DEAD_ROPE_Q), (rk, DEAD_ROPE_K), (hk, DEAD_ROT_K)]
        .into_iter()
        .chain(hv.map(|h| (h, DEAD_ROT_V)));
    let dead_bits: Vec<Option<u8>> = members
        .iter()
        .map(|&m| {
            let (_, bit) = intermediates.clone().find(|&(n, _)| n == m)?;
            read_only_by(g, Value::new(m, 0), &members).then_some(bit)
        })
        .collect();
    let dead = dead_bits.iter().flatten().fold(0, |a, b| a | b);
    let writes: Vec<(usize, Value)> = members
        .iter()
        .zip(&dead_bits)
        .enumerate()
        .filter(|(_, (_, bit))| bit.is_none())
        .map(|(i, (&m, _))| (i, Value::new(m, 0)))
        .collect();
    if !memory_safe(g, &writes, &inputs) {
        return None;
    }
    let op = Op::RopeRotStore(RopeRot {
        rope: p,
        qk_width: width as i32,
        v_width: v_width as i32,
        dead,
    });
    Some(Match {
        members,
        found_at: wk,
        named_by: rk,
        op,
        inputs,
    })
}

/// Elements of V a work-group takes: a K head row's worth where that is
/// whole rotations and divides V, else one rotation (`None`: too long).
pub fn v_chunk(elems: i64, v_width: i64, head: i64) -> Option<i64> {
    let chunk = if head % v_width == 0 && elems % head == 0 {
        head
    } else {
        v_width
    };
    (chunk <= MAX_ROW && elems % chunk == 0).then_some(chunk)
}

/// Whether the kernel's writes (the outputs it writes, by member index)
/// overlap nothing it reads or writes elsewhere: its groups read q, k and v,
/// the positions, row indices and factors while others write. A rope may
/// write over its own input, element for element (one work-item loads and
/// stores each).
fn memory_safe(g: &Graph, writes: &[(usize, Value)], inputs: &[Value]) -> bool {
    let one = |v: Value| -> Vec<Span> { span(g, v).into_iter().collect() };
    for (i, &(_, a)) in writes.iter().enumerate() {
        for &(_, b) in &writes[i + 1..] {
            if overlap(&one(a), &one(b)) {
                return false;
            }
        }
    }
    // Inputs 3 and 6 are the caches, written, not read; members 0 and 2
    // are rope(q) and rope(k), of inputs 0 and 1.
    let in_place = |m: usize, i: usize| matches!((m, i), (0, 0) | (2, 1));
    for &(m, out) in writes {
        for (i, &input) in inputs.iter().enumerate() {
            if i == 3 || i == 6 || !overlap(&one(out), &one(input)) {
                continue;
            }
            let exact = span(g, out) == span(g, input) && g.ty(input).is_contiguous();
            if !(exact && in_place(m, i)) {
                return false;
            }
        }
    }
    true
}
