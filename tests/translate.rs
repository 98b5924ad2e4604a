//! Decoder + frontend + passes on hand-built ggml cgraphs (metadata only, no
//! device): the IR dump and op counts are what the op table promises.

use ggml_polycl::decoder::ggml_graph::{fingerprint, GgmlGraph, Memory};
use ggml_polycl::decoder::Decoder;
use ggml_polycl::frontend;
use ggml_polycl::ggml::abi::*;
use ggml_polycl::ggml::ops::*;
use ggml_polycl::ggml::types::GgmlType;
use ggml_polycl::ir::dump::dump;
use ggml_polycl::passes::run_pipeline;

fn tensor(
    ty: GgmlType,
    ne: [i64; 4],
    op: i32,
    srcs: &[*mut ggml_tensor],
    name: &str,
) -> *mut ggml_tensor {
    // SAFETY: ggml_tensor is plain old data; all-zero is a valid empty tensor.
    let mut t: ggml_tensor = unsafe { std::mem::zeroed() };
    t.type_ = ty.id() as i32;
    t.ne = ne;
    t.nb[0] = ty.block_bytes();
    t.nb[1] = ty.row_bytes(ne[0]) as usize;
    t.nb[2] = t.nb[1] * ne[1] as usize;
    t.nb[3] = t.nb[2] * ne[2] as usize;
    t.op = op;
    t.flags = if op == OP_NONE {
        0
    } else {
        TENSOR_FLAG_COMPUTE
    };
    for (i, s) in srcs.iter().enumerate() {
        t.src[i] = *s;
    }
    for (i, b) in name.bytes().take(63).enumerate() {
        t.name[i] = b as i8;
    }
    Box::into_raw(Box::new(t))
}

fn set_f32(t: *mut ggml_tensor, slot: usize, v: f32) {
    // SAFETY: t is a live tensor made by `tensor`.
    unsafe { (*t).op_params[slot] = v.to_bits() as i32 };
}
fn set_i32(t: *mut ggml_tensor, slot: usize, v: i32) {
    // SAFETY: as above.
    unsafe { (*t).op_params[slot] = v };
}

fn graph(nodes: &mut Vec<*mut ggml_tensor>) -> ggml_cgraph {
    // SAFETY: plain old data; the fields read by the decoder are set below.
    let mut g: ggml_cgraph = unsafe { std::mem::zeroed() };
    g.n_nodes = nodes.len() as i32;
    g.size = nodes.len() as i32;
    g.nodes = nodes.as_mut_ptr();
    g
}

/// One llama-style attention prologue: norm, scale by weight, Q projection,
/// rope, and the K-cache write.
fn llama_prologue() -> Vec<*mut ggml_tensor> {
    use GgmlType::*;
    let x = tensor(F32, [64, 1, 1, 1], OP_NONE, &[], "inp");
    let norm_w = tensor(F32, [64, 1, 1, 1], OP_NONE, &[], "attn_norm.weight");
    let wq = tensor(Q8_0, [64, 64, 1, 1], OP_NONE, &[], "attn_q.weight");
    let pos = tensor(I32, [1, 1, 1, 1], OP_NONE, &[], "inp_pos");
    let cache = tensor(F16, [64, 16, 1, 1], OP_NONE, &[], "cache_k_l0");
    let idx = tensor(I64, [1, 1, 1, 1], OP_NONE, &[], "k_idxs");
    let n = tensor(F32, [64, 1, 1, 1], OP_RMS_NORM, &[x], "norm");
    set_f32(n, 0, 1e-5);
    let m = tensor(F32, [64, 1, 1, 1], OP_MUL, &[n, norm_w], "attn_norm");
    let q = tensor(F32, [64, 1, 1, 1], OP_MUL_MAT, &[wq, m], "Qcur");
    let q3 = tensor(F32, [16, 4, 1, 1], OP_RESHAPE, &[q], "Qcur (reshaped)");
    let qr = tensor(F32, [16, 4, 1, 1], OP_ROPE, &[q3, pos], "Qcur (rope)");
    set_i32(qr, 1, 16);
    set_f32(qr, 5, 10000.0);
    set_f32(qr, 6, 1.0);
    set_f32(qr, 8, 1.0);
    let k2 = tensor(F32, [64, 1, 1, 1], OP_VIEW, &[qr], "Kcur (view)");
    let sr = tensor(
        F16,
        [64, 16, 1, 1],
        OP_SET_ROWS,
        &[k2, idx, cache],
        "cache_k_l0 (view)",
    );
    vec![n, m, q, q3, qr, k2, sr]
}

#[test]
fn llama_prologue_translates_to_the_expected_ir() {
    let mut nodes = llama_prologue();
    let g = graph(&mut nodes);
    // SAFETY: g and its tensors are alive for the whole test.
    let dec = unsafe { GgmlGraph::new(&g, Memory::Metadata) }.unwrap();
    assert_eq!(dec.nodes().len(), 7);
    assert_eq!(dec.leaves().len(), 6);
    let mut ir = frontend::translate(&dec).unwrap();
    assert_eq!(ir.count("SetRows"), 1);
    run_pipeline(&mut ir, &mut []).unwrap();
    let text = dump(&ir);
    let expected = "\
%0 = Parameter() -> f32[64,1,1,1] internal  # inp
%1 = RmsNorm{eps=1e-5}(%0:0) -> f32[64,1,1,1] internal  # norm
%2 = Parameter() -> f32[64,1,1,1] internal  # attn_norm.weight
%3 = Mul(%1:0, %2:0) -> f32[64,1,1,1] internal  # attn_norm
%4 = Parameter() -> q8_0[64,64,1,1] internal  # attn_q.weight
%5 = MulMat(%4:0, %3:0) -> f32[64,1,1,1] internal  # Qcur
%6 = View(%5:0) -> f32[16,4,1,1] internal  # Qcur (reshaped)
%7 = Parameter() -> i32[1,1,1,1] internal  # inp_pos
%8 = Rope{Normal,n_dims=16,base=10000}(%6:0, %7:0) -> f32[16,4,1,1] internal  # Qcur (rope)
%9 = View(%8:0) -> f32[64,1,1,1] internal  # Kcur (view)
%10 = Parameter() -> i64[1,1,1,1] internal  # k_idxs
%11 = Parameter() -> f16[64,16,1,1] internal  # cache_k_l0
%12 = ScatterRows(%11:0, %9:0, %10:0) -> f16[64,16,1,1] internal  # cache_k_l0 (view)
results: %1:0, %3:0, %5:0, %6:0, %8:0, %9:0, %12:0
";
    assert_eq!(text, expected, "got:\n{text}");
    assert_eq!(ir.count("SetRows"), 0);
    assert_eq!(ir.count("ScatterRows"), 1);
}

#[test]
fn nodes_without_compute_flag_are_skipped_and_fingerprints_track_changes() {
    let mut nodes = llama_prologue();
    let g = graph(&mut nodes);
    // SAFETY: as above.
    let before = unsafe { fingerprint(&g) };
    // SAFETY: nodes[1] is a live tensor.
    unsafe { (*nodes[1]).flags = 0 };
    // SAFETY: as above.
    let dec = unsafe { GgmlGraph::new(&g, Memory::Metadata) }.unwrap();
    assert_eq!(dec.nodes().len(), 6);
    // SAFETY: as above.
    assert_ne!(before, unsafe { fingerprint(&g) });
    // SAFETY: as above.
    unsafe { (*nodes[1]).flags = TENSOR_FLAG_COMPUTE };
    // SAFETY: as above.
    assert_eq!(before, unsafe { fingerprint(&g) });
    // A moved tensor is a different plan.
    // SAFETY: as above.
    unsafe { (*nodes[2]).data = 0x1000 as *mut _ };
    // SAFETY: as above.
    assert_ne!(before, unsafe { fingerprint(&g) });
}

#[test]
fn unsupported_types_and_ops_are_refused_not_translated() {
    use GgmlType::*;
    let a = tensor(F16, [8, 2, 1, 1], OP_NONE, &[], "a");
    let b = tensor(F16, [8, 2, 1, 1], OP_NONE, &[], "b");
    let add = tensor(F16, [8, 2, 1, 1], OP_ADD, &[a, b], "f16 add");
    let mut nodes = vec![add];
    let g = graph(&mut nodes);
    // SAFETY: as above.
    let dec = unsafe { GgmlGraph::new(&g, Memory::Metadata) }.unwrap();
    assert!(!frontend::supports(&dec, &dec.nodes()[0]));
    let err = frontend::translate(&dec).unwrap_err().to_string();
    assert!(err.contains("ADD"), "{err}");

    let x = tensor(F32, [8, 2, 1, 1], OP_NONE, &[], "x");
    let argsort = tensor(I32, [8, 2, 1, 1], 69, &[x], "argsort");
    let mut nodes = vec![argsort];
    let g = graph(&mut nodes);
    // SAFETY: as above.
    let dec = unsafe { GgmlGraph::new(&g, Memory::Metadata) }.unwrap();
    assert!(!frontend::supports(&dec, &dec.nodes()[0]));
    assert!(frontend::translate(&dec).is_err());

    // A type id unknown at the pinned version is refused while decoding.
    let bad = tensor(F32, [8, 1, 1, 1], OP_NONE, &[], "bad");
    // SAFETY: bad is live.
    unsafe { (*bad).type_ = 31 };
    let sc = tensor(F32, [8, 1, 1, 1], OP_SCALE, &[bad], "scale");
    // SAFETY: sc is live.
    assert!(unsafe { GgmlGraph::single(sc) }.is_err());
}

/// ggml's visited hash set and use counts for `nodes` (ggml_visit_parents:
/// linear probing on the pointer >> 4, a use per src slot), plus `outside`
/// uses of node `k` by readers not in the graph.
struct UseCounts {
    used: Vec<u32>,
    keys: Vec<*mut ggml_tensor>,
    counts: Vec<i32>,
}

impl UseCounts {
    fn new(nodes: &[*mut ggml_tensor], outside: &[(usize, i32)]) -> UseCounts {
        let size = 4 * nodes.len() * (GGML_MAX_SRC + 1) + 1;
        let mut u = UseCounts {
            used: vec![0; size.div_ceil(32)],
            keys: vec![std::ptr::null_mut(); size],
            counts: vec![0; size],
        };
        for &t in nodes {
            u.slot(t);
            // SAFETY: t is a live tensor made by `tensor`.
            for &s in unsafe { &(*t).src }.iter().filter(|s| !s.is_null()) {
                let i = u.slot(s);
                u.counts[i] += 1;
            }
        }
        for &(k, n) in outside {
            let i = u.slot(nodes[k]);
            u.counts[i] += n;
        }
        u
    }
    fn slot(&mut self, t: *mut ggml_tensor) -> usize {
        let size = self.keys.len();
        let mut i = (t as usize >> 4) % size;
        while self.used[i >> 5] & (1 << (i & 31)) != 0 && self.keys[i] != t {
            i = (i + 1) % size;
        }
        self.used[i >> 5] |= 1 << (i & 31);
        self.keys[i] = t;
        i
    }
    fn attach(&mut self, g: &mut ggml_cgraph) {
        g.use_counts = self.counts.as_mut_ptr();
        g.visited_hash_set = ggml_hash_set {
            size: self.keys.len(),
            used: self.used.as_mut_ptr(),
            keys: self.keys.as_mut_ptr(),
        };
    }
}

/// The results line of the prologue's IR dump with ggml's use counts.
fn prologue_results(outside: &[(usize, i32)], output_flag: Option<usize>) -> String {
    let mut nodes = llama_prologue();
    // Reshapes, views and set_rows are views in ggml (view_src set).
    // SAFETY: the tensors are live; srcs as built by llama_prologue.
    unsafe {
        (*nodes[3]).view_src = nodes[2];
        (*nodes[5]).view_src = nodes[4];
        (*nodes[6]).view_src = (*nodes[6]).src[2];
        if let Some(k) = output_flag {
            (*nodes[k]).flags |= TENSOR_FLAG_OUTPUT;
        }
    }
    let mut uses = UseCounts::new(&nodes, outside);
    let mut g = graph(&mut nodes);
    uses.attach(&mut g);
    // SAFETY: g, its tensors and the hash set are alive for the call.
    let dec = unsafe { GgmlGraph::new(&g, Memory::Metadata) }.unwrap();
    let ir = frontend::translate(&dec).unwrap();
    dump(&ir)
        .lines()
        .find(|l| l.starts_with("results:"))
        .unwrap()
        .to_string()
}

#[test]
fn nodes_only_this_graph_reads_are_not_results() {
    // norm, attn_norm, Qcur, its rope and the views: read once, by nodes
    // here (ggml's rule for a fused subgraph's views too); the last node is
    // a result.
    assert_eq!(prologue_results(&[], None), "results: %12:0");
    // attn_norm and the view of the rope read by nodes of another split too;
    // rope flagged OUTPUT.
    assert_eq!(
        prologue_results(&[(1, 1), (5, 1)], Some(4)),
        "results: %3:0, %8:0, %9:0, %12:0"
    );
    // Without use counts (a hand-made graph), every node is a result.
    let mut nodes = llama_prologue();
    let g = graph(&mut nodes);
    // SAFETY: as above.
    let dec = unsafe { GgmlGraph::new(&g, Memory::Metadata) }.unwrap();
    assert_eq!(dec.results().len(), 7);
}
