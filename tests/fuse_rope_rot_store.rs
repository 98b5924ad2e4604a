//! The RopeRotStore pass on hand-built IR (no device): llama's attention
//! input with a quantized KV cache (rope Q and K, the Hadamard rotations of
//! Q, K and V, both cache writes) fuses into one node that leaves unwritten
//! what only its members read; variants the kernel does not cover, or whose
//! memory one launch would race on, do not fuse.

use ggml_polycl::ggml::types::GgmlType::{self, F16, F32, I32, I64, Q8_0};
use ggml_polycl::ir::{Graph, MemRef, Op, Output, Place, RopeMode, RopeParams, TensorType, Value};
use ggml_polycl::passes::fuse::rope_rot_store::{
    self, DEAD_ROPE_K, DEAD_ROPE_Q, DEAD_ROT_K, DEAD_ROT_V,
};

const ACT: u64 = 1 << 40;
const CACHE: u64 = 2 << 40;

fn out(dtype: GgmlType, ne: [i64; 4], offset: u64) -> Output {
    let buffer = if dtype == F32 || dtype == I32 || dtype == I64 {
        ACT
    } else {
        CACHE
    };
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

/// How a test layer differs from llama's.
#[derive(Clone, Copy, Default)]
struct Variant {
    /// Rotation rows of K (Q's are 64).
    k_width: Option<i64>,
    /// V's cache is F16 and V is not rotated.
    plain_v: bool,
    /// rot(q) placed over the K projection.
    rot_q_over_k: bool,
    /// rope(k) is read by a node outside the pattern too.
    rope_k_read: bool,
}

struct Layer {
    g: Graph,
}

/// One decode layer as llama builds it with -ctk q8_0 -ctv q8_0, in the
/// order polycl's graph_optimize gives: Q, V, K projections (parameters
/// here), rope Q, rot Q, rot V, rope K, rot K, K write, V write, then the
/// attention reading rot(q).
fn layer(var: Variant) -> Layer {
    let mut g = Graph::default();
    let v = |n| Value::new(n, 0);
    let mut at = 0u64;
    let mut next = |bytes: u64| {
        at += bytes.max(4096);
        at
    };
    let param = |g: &mut Graph, dtype, ne, off, name: &str| {
        g.add(Op::Parameter, vec![], vec![out(dtype, ne, off)], name)
    };
    let q = param(&mut g, F32, [64, 4, 1, 1], next(1024), "Qcur");
    let vv = param(&mut g, F32, [128, 1, 1, 1], next(512), "Vcur");
    let k_at = next(512);
    let k = param(&mut g, F32, [64, 2, 1, 1], k_at, "Kcur");
    let pos = param(&mut g, I32, [1, 1, 1, 1], next(4), "inp_pos");
    let krot = param(&mut g, F32, [64, 64, 1, 1], next(16384), "attn_inp_k_rot");
    let kw = var.k_width.unwrap_or(64);
    let krot2 = param(&mut g, F32, [kw, kw, 1, 1], next(16384), "attn_inp_k_rot2");
    let vrot = param(&mut g, F32, [64, 64, 1, 1], next(16384), "attn_inp_v_rot");
    let view = |g: &mut Graph, src: usize, ne: [i64; 4], name: &str| {
        let place = g.output(v(src)).place;
        let ty = TensorType::contiguous(F32, ne);
        g.add(Op::View, vec![v(src)], vec![Output { ty, place }], name)
    };
    let p = params();
    let rq = g.add(
        Op::Rope(p),
        vec![v(q), v(pos)],
        vec![out(F32, [64, 4, 1, 1], next(1024))],
        "Qrope",
    );
    let rq2 = view(&mut g, rq, [64, 4, 1, 1], "Qrope (reshaped)");
    let hq_at = if var.rot_q_over_k { k_at } else { next(1024) };
    let hq = g.add(
        Op::Hadamard,
        vec![v(krot), v(rq2)],
        vec![out(F32, [64, 4, 1, 1], hq_at)],
        "rot q",
    );
    let hq4 = view(&mut g, hq, [64, 4, 1, 1], "rot q (reshaped)");
    let v_rows = if var.plain_v {
        vv
    } else {
        let v2 = view(&mut g, vv, [64, 2, 1, 1], "Vcur (reshaped)");
        let h = g.add(
            Op::Hadamard,
            vec![v(vrot), v(v2)],
            vec![out(F32, [64, 2, 1, 1], next(512))],
            "rot v",
        );
        view(&mut g, h, [128, 1, 1, 1], "rot v (reshaped)")
    };
    let rk = g.add(
        Op::Rope(p),
        vec![v(k), v(pos)],
        vec![out(F32, [64, 2, 1, 1], next(512))],
        "Krope",
    );
    let rk2 = view(&mut g, rk, [kw, 128 / kw, 1, 1], "Krope (reshaped)");
    let hk = g.add(
        Op::Hadamard,
        vec![v(krot2), v(rk2)],
        vec![out(F32, [kw, 128 / kw, 1, 1], next(512))],
        "rot k",
    );
    let hk2 = view(&mut g, hk, [128, 1, 1, 1], "rot k (reshaped)");
    let kidx = param(&mut g, I64, [1, 1, 1, 1], next(8), "k_idxs");
    let kc = param(&mut g, Q8_0, [128, 64, 1, 1], 0, "cache_k");
    let kc_out = g.nodes[kc].outputs.clone();
    let sk = g.add(
        Op::ScatterRows,
        vec![v(kc), v(hk2), v(kidx)],
        kc_out,
        "cache_k (view)",
    );
    let vidx = param(&mut g, I64, [1, 1, 1, 1], next(8), "v_idxs");
    let vtype = if var.plain_v { F16 } else { Q8_0 };
    let vc = param(&mut g, vtype, [128, 64, 1, 1], 1 << 20, "cache_v");
    let vc_out = g.nodes[vc].outputs.clone();
    let sv = g.add(
        Op::ScatterRows,
        vec![v(vc), v(v_rows), v(vidx)],
        vc_out,
        "cache_v (view)",
    );
    let attn = g.add(
        Op::Scale {
            scale: 1.0,
            bias: 0.0,
        },
        vec![v(hq4)],
        vec![out(F32, [64, 4, 1, 1], next(1024))],
        "attn",
    );
    let mut results = vec![v(attn), v(sk), v(sv)];
    if var.rope_k_read {
        let r = g.add(
            Op::Scale {
                scale: 2.0,
                bias: 0.0,
            },
            vec![v(rk)],
            vec![out(F32, [64, 2, 1, 1], next(512))],
            "rope k reader",
        );
        results.push(v(r));
    }
    g.results = results;
    Layer { g }
}

fn fused(g: &Graph) -> (usize, ggml_polycl::ir::RopeRot) {
    let id = g
        .nodes
        .iter()
        .position(|n| n.op.kind() == "RopeRotStore")
        .expect("a RopeRotStore node");
    let Op::RopeRotStore(p) = g.nodes[id].op else {
        unreachable!()
    };
    (id, p)
}

#[test]
fn llama_layer_fuses_into_one_node() {
    let Layer { mut g } = layer(Variant::default());
    assert_eq!(rope_rot_store::run(&mut g), 1);
    for kind in ["Rope", "Hadamard", "ScatterRows"] {
        assert_eq!(g.count(kind), 0, "{kind} left");
    }
    let (id, p) = fused(&g);
    let n = &g.nodes[id];
    // [q, k, pos, k_cache, k_rows, v, v_cache, v_rows]
    assert_eq!(n.inputs.len(), 8);
    assert_eq!(g.nodes[g.reshaped_source(n.inputs[5]).node].name, "Vcur");
    // ports: rope(q), rot(q), rope(k), rot(k), K cache, rot(v), V cache
    assert_eq!(n.outputs.len(), 7);
    assert_eq!((p.qk_width, p.v_width), (64, 64));
    // only the members read the ropes and the rotations of K and V
    assert_eq!(p.dead, DEAD_ROPE_Q | DEAD_ROPE_K | DEAD_ROT_K | DEAD_ROT_V);
    // the attention reads rot(q) through its view, now of port 1
    let attn = g.nodes.iter().position(|n| n.name == "attn").unwrap();
    assert!(attn > id);
    let view = g.nodes[attn].inputs[0].node;
    assert_eq!(g.reshaped_source(Value::new(view, 0)), Value::new(id, 1));
    assert_eq!(g.results[1..], [Value::new(id, 4), Value::new(id, 6)]);
}

#[test]
fn an_output_read_elsewhere_is_written() {
    let Layer { mut g } = layer(Variant {
        rope_k_read: true,
        ..Variant::default()
    });
    assert_eq!(rope_rot_store::run(&mut g), 1);
    let (_, p) = fused(&g);
    assert_eq!(p.dead, DEAD_ROPE_Q | DEAD_ROT_K | DEAD_ROT_V);
}

#[test]
fn an_unrotated_v_fuses_too() {
    // -ctk q8_0 -ctv f16: llama rotates q and k only
    let Layer { mut g } = layer(Variant {
        plain_v: true,
        ..Variant::default()
    });
    assert_eq!(rope_rot_store::run(&mut g), 1);
    let (id, p) = fused(&g);
    assert_eq!(p.v_width, 1);
    assert_eq!(g.nodes[id].outputs.len(), 6);
    assert_eq!(p.dead, DEAD_ROPE_Q | DEAD_ROPE_K | DEAD_ROT_K);
}

#[test]
fn rotations_of_other_widths_do_not_fuse() {
    let Layer { mut g } = layer(Variant {
        k_width: Some(128),
        ..Variant::default()
    });
    assert_eq!(rope_rot_store::run(&mut g), 0);
    assert_eq!(g.count("Hadamard"), 3);
}

#[test]
fn rot_q_written_over_k_is_not_fused() {
    // in one launch, Q's groups would write rot(q) where K's groups read k
    let Layer { mut g } = layer(Variant {
        rot_q_over_k: true,
        ..Variant::default()
    });
    assert_eq!(rope_rot_store::run(&mut g), 0);
    assert_eq!(g.count("Rope"), 2);
}

#[test]
fn v_chunks_are_a_head_row_where_they_divide() {
    assert_eq!(rope_rot_store::v_chunk(4096, 64, 128), Some(128));
    assert_eq!(rope_rot_store::v_chunk(4096, 256, 128), Some(256));
    assert_eq!(rope_rot_store::v_chunk(192, 64, 128), Some(64));
    assert_eq!(rope_rot_store::v_chunk(4096, 2048, 128), None);
}
