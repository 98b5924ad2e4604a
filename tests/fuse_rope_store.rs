//! The RopeStore pass on hand-built IR (no device): llama's attention input
//! (rope Q, rope K, K and V cache writes) fuses into one node; variants the
//! kernel does not cover, or whose memory a moved node would clobber, do not.

use ggml_polycl::ggml::types::GgmlType::{self, F16, F32, I32, I64, Q4_0};
use ggml_polycl::ir::{Graph, MemRef, Op, Output, Place, RopeMode, RopeParams, TensorType, Value};
use ggml_polycl::passes::fuse::rope_store;

const ACT: u64 = 1 << 40;
const CACHE: u64 = 2 << 40;
const W: u64 = 3 << 40;

fn out(dtype: GgmlType, ne: [i64; 4], buffer: u64, offset: u64) -> Output {
    Output {
        ty: TensorType::contiguous(dtype, ne),
        place: Place::Bound(MemRef { buffer, offset }),
    }
}

fn params() -> RopeParams {
    RopeParams {
        mode: RopeMode::Normal,
        n_dims: 64,
        n_ctx_orig: 4096,
        freq_base: 10000.0,
        freq_scale: 1.0,
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        has_freq_factors: false,
    }
}

/// One decode layer in llama's order: Q matmul, rope Q, V and K matmuls,
/// rope K, K write, V write, in the order polycl's graph_optimize gives
/// (Q, V and K matmuls first). `k_rope_over_q` puts K's rope output where Q
/// was (what ggml-alloc does once rope Q has read Q, unless graph_optimize
/// keeps Q alive).
fn layer(k_params: RopeParams, k_rope_over_q: bool) -> Graph {
    let mut g = Graph::default();
    let p = params();
    let v = |n| Value::new(n, 0);
    let x = g.add(
        Op::Parameter,
        vec![],
        vec![out(F32, [256, 1, 1, 1], ACT, 0)],
        "x",
    );
    let wq = g.add(
        Op::Parameter,
        vec![],
        vec![out(Q4_0, [256, 256, 1, 1], W, 0)],
        "wq",
    );
    let wk = g.add(
        Op::Parameter,
        vec![],
        vec![out(Q4_0, [256, 128, 1, 1], W, 1 << 20)],
        "wk",
    );
    let wv = g.add(
        Op::Parameter,
        vec![],
        vec![out(Q4_0, [256, 128, 1, 1], W, 2 << 20)],
        "wv",
    );
    let pos = g.add(
        Op::Parameter,
        vec![],
        vec![out(I32, [1, 1, 1, 1], ACT, 1 << 12)],
        "pos",
    );
    let q_at = 1 << 16;
    let qmm = g.add(
        Op::MulMat,
        vec![v(wq), v(x)],
        vec![out(F32, [256, 1, 1, 1], ACT, q_at)],
        "Qcur",
    );
    let v_at = 3 << 16;
    let vmm = g.add(
        Op::MulMat,
        vec![v(wv), v(x)],
        vec![out(F32, [128, 1, 1, 1], ACT, v_at)],
        "Vcur",
    );
    let kmm = g.add(
        Op::MulMat,
        vec![v(wk), v(x)],
        vec![out(F32, [128, 1, 1, 1], ACT, 4 << 16)],
        "Kcur",
    );
    let qv = g.add(
        Op::View,
        vec![v(qmm)],
        vec![out(F32, [64, 4, 1, 1], ACT, q_at)],
        "Qcur",
    );
    let rq = g.add(
        Op::Rope(p),
        vec![v(qv), v(pos)],
        vec![out(F32, [64, 4, 1, 1], ACT, 2 << 16)],
        "Qrope",
    );
    let kv = g.add(
        Op::View,
        vec![v(kmm)],
        vec![out(F32, [64, 2, 1, 1], ACT, 4 << 16)],
        "Kcur",
    );
    let rk = g.add(
        Op::Rope(k_params),
        vec![v(kv), v(pos)],
        vec![out(
            F32,
            [64, 2, 1, 1],
            ACT,
            if k_rope_over_q { q_at } else { 5 << 16 },
        )],
        "Krope",
    );
    let kflat = g.add(
        Op::View,
        vec![v(rk)],
        vec![out(
            F32,
            [128, 1, 1, 1],
            ACT,
            if k_rope_over_q { q_at } else { 5 << 16 },
        )],
        "Krope (view)",
    );
    let kidx = g.add(
        Op::Parameter,
        vec![],
        vec![out(I64, [1, 1, 1, 1], ACT, 2 << 12)],
        "k_idxs",
    );
    let kc = g.add(
        Op::Parameter,
        vec![],
        vec![out(F16, [128, 64, 1, 1], CACHE, 0)],
        "cache_k",
    );
    let sk = g.add(
        Op::ScatterRows,
        vec![v(kc), v(kflat), v(kidx)],
        vec![out(F16, [128, 64, 1, 1], CACHE, 0)],
        "cache_k (view)",
    );
    let vidx = g.add(
        Op::Parameter,
        vec![],
        vec![out(I64, [1, 1, 1, 1], ACT, 3 << 12)],
        "v_idxs",
    );
    let vc = g.add(
        Op::Parameter,
        vec![],
        vec![out(F16, [128, 64, 1, 1], CACHE, 1 << 16)],
        "cache_v",
    );
    let sv = g.add(
        Op::ScatterRows,
        vec![v(vc), v(vmm), v(vidx)],
        vec![out(F16, [128, 64, 1, 1], CACHE, 1 << 16)],
        "cache_v (view)",
    );
    g.results = vec![v(rq), v(sk), v(sv)];
    g
}

#[test]
fn llama_layer_fuses_into_one_node() {
    let mut g = layer(params(), false);
    assert_eq!(rope_store::run(&mut g), 1);
    assert_eq!(g.count("RopeStore"), 1);
    assert_eq!(g.count("Rope"), 0);
    assert_eq!(g.count("ScatterRows"), 0);
    let f = g
        .nodes
        .iter()
        .position(|n| n.op.kind() == "RopeStore")
        .unwrap();
    let n = &g.nodes[f];
    assert_eq!(n.inputs.len(), 8);
    assert_eq!(n.outputs.len(), 4);
    // results now name the fused node's ports: rope(q), K cache, V cache
    assert_eq!(
        g.results,
        vec![Value::new(f, 0), Value::new(f, 2), Value::new(f, 3)]
    );
    // the fused node runs after both matmuls it reads
    let mm_after = g.nodes[f + 1..].iter().any(|n| n.op == Op::MulMat);
    assert!(!mm_after);
}

#[test]
fn different_rope_params_do_not_fuse() {
    let mut k = params();
    k.freq_base = 500000.0;
    let mut g = layer(k, false);
    assert_eq!(rope_store::run(&mut g), 0);
    assert_eq!(g.count("Rope"), 2);
    assert_eq!(g.count("ScatterRows"), 2);
}

#[test]
fn neox_is_fused_too() {
    let mut p = params();
    p.mode = RopeMode::Neox;
    let mut g = layer(p, false);
    // Q keeps NORMAL: the modes differ, so nothing fuses
    assert_eq!(rope_store::run(&mut g), 0);
}

#[test]
fn k_rope_written_over_q_is_not_fused() {
    // in one kernel, K's rope output would overwrite Q while Q's rope reads it
    let mut g = layer(params(), true);
    assert_eq!(rope_store::run(&mut g), 0);
    assert_eq!(g.count("Rope"), 2);
}

/// Every fusion pass, as a decode step runs them.
fn fuse_all(g: &mut Graph) -> ggml_polycl::passes::fuse::Fused {
    ggml_polycl::passes::fuse::run(g)
}

#[test]
fn projections_rope_and_cache_writes_fuse_into_one_group_node() {
    let mut g = layer(params(), false);
    let f = fuse_all(&mut g);
    assert_eq!((f.matmul_group, f.rope_store, f.group_rope), (1, 1, 1));
    assert_eq!(g.count("MulMatGroupRope"), 1);
    assert_eq!(
        g.count("MulMatGroup") + g.count("RopeStore") + g.count("MulMat"),
        0
    );
    let id = g
        .nodes
        .iter()
        .position(|n| n.op.kind() == "MulMatGroupRope")
        .unwrap();
    let n = &g.nodes[id];
    // [wq, wv, wk, pos, k_cache, k_rows, v_cache, v_rows, x]
    assert_eq!(n.inputs.len(), 9);
    assert_eq!(g.nodes[n.inputs[8].node].name, "x");
    // ports: Q, V, K projections, rope(q), rope(k), K cache, V cache
    assert_eq!(n.outputs.len(), 7);
    assert_eq!(
        g.results,
        vec![Value::new(id, 3), Value::new(id, 5), Value::new(id, 6)]
    );
    let Op::MulMatGroupRope(p) = n.op else {
        unreachable!()
    };
    // the group holds Q, V, K in that order
    assert_eq!(p.roles, [0, 2, 1]);
}

#[test]
fn neox_rope_keeps_its_own_launch() {
    let mut g = layer(params(), false);
    for n in g.nodes.iter_mut() {
        if let Op::Rope(p) = &mut n.op {
            p.mode = RopeMode::Neox;
        }
    }
    let f = fuse_all(&mut g);
    // a NEOX pair is (j, j + n_dims/2): not two rows of one row group
    assert_eq!((f.matmul_group, f.rope_store, f.group_rope), (1, 1, 0));
}
