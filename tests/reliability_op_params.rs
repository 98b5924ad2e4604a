//! The op_params readers under arbitrary bytes: `OpParams::from_bytes` (the C
//! decoder's entry), every typed reader, and every translator of the op table
//! fed a one-node graph whose 16 op_params slots are arbitrary (what a live
//! ggml cgraph hands the ggml path, unchecked) or whose byte count is
//! arbitrary (the C decoder path). Whatever the bytes: a value or an error,
//! never a panic. cargo test runs deterministic byte strings; the cargo-fuzz
//! target fuzz/fuzz_targets/op_params.rs feeds `drive` from libFuzzer.

#![allow(dead_code)]

use ggml_polycl::decoder::foreign::{self, GraphDesc, NodeSpec, ShapeDesc, SourceRef, TensorSpec};
use ggml_polycl::decoder::{NodeDesc, SingleNode, Source, TensorDesc};
use ggml_polycl::frontend;
use ggml_polycl::ggml::op_params::{self as opp, OpParams};
use ggml_polycl::ggml::ops::{op_name, OP_NAMES};
use ggml_polycl::ggml::types::GgmlType;
use ggml_polycl::ir::TensorType;

struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.u8() as usize % xs.len()]
    }
}

/// Slot values that steer translators into their edge cases.
const SLOT_VALUES: &[i32] = &[
    0,
    1,
    2,
    3,
    4,
    -1,
    8,
    24,
    64,
    i32::MIN,
    i32::MAX,
    0x3f80_0000, // 1.0f
    0x7fc0_0000, // NaN
    0x7f80_0000, // inf
];

const TYPES: &[i32] = &[0, 0, 0, 1, 8, 2, 12, 14, 26, 27, 24, 28, 30];
const DIMS: &[i64] = &[1, 1, 2, 4, 16, 32, 64, 0, 3, 256];

fn slots(b: &mut Bytes) -> [i32; 16] {
    let mut p = [0i32; 16];
    for s in p.iter_mut() {
        *s = if b.u8().is_multiple_of(3) {
            b.i32()
        } else {
            b.pick(SLOT_VALUES)
        };
    }
    p
}

fn tensor(b: &mut Bytes, name: &str) -> TensorDesc {
    let dtype = GgmlType::from_id(b.pick(TYPES)).unwrap_or(GgmlType::F32);
    let mut ne = [1i64; 4];
    for d in ne.iter_mut().take(1 + b.u8() as usize % 4) {
        *d = b.pick(DIMS);
    }
    if dtype.block_elems() > 1 {
        ne[0] = dtype.block_elems() as i64 * (1 + b.u8() as i64 % 2);
    }
    let mut ty = TensorType::contiguous(dtype, ne);
    if b.u8().is_multiple_of(8) {
        // A permuted (non-contiguous) view.
        ty.nb.swap(1, 2);
        ty.ne.swap(1, 2);
    }
    TensorDesc {
        name: name.to_string(),
        ty,
        mem: None,
    }
}

/// Every typed reader over `p` (they are total; this proves it under any bits).
fn read_all(p: &OpParams) {
    let _ = opp::norm(p);
    let _ = opp::scale(p);
    let _ = opp::soft_max(p);
    let _ = opp::rope(p);
    let _ = opp::flash_attn_ext(p);
    let _ = opp::glu(p);
    let _ = opp::unary_op(p);
    let _ = opp::concat_dim(p);
    let _ = opp::view_offset(p);
    let _ = opp::permute_axes(p);
    let _ = opp::mul_mat(p);
}

/// One byte string: decides the reader inputs, an op, its srcs, its output and
/// its op_params, then runs them through both decoder paths.
pub fn drive(data: &[u8]) -> (bool, bool) {
    let mut b = Bytes { data, pos: 0 };
    // 1. from_bytes: accepts exactly the sizes ggml can write, bytes intact.
    let n = b.u8() as usize % 72;
    let raw: Vec<u8> = (0..n).map(|_| b.u8()).collect();
    match OpParams::from_bytes(&raw) {
        Ok(p) => {
            assert!(n <= 64 && n.is_multiple_of(4), "{n} bytes accepted");
            for (i, c) in raw.chunks_exact(4).enumerate() {
                assert_eq!(p.i32(i), i32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
            }
            read_all(&p);
        }
        Err(e) => {
            assert!(n > 64 || !n.is_multiple_of(4), "{n} bytes refused: {e}");
            assert!(e.to_string().contains(&format!("{n} bytes")));
        }
    }

    // 2. The ggml path: a one-node graph whose 16 slots are arbitrary.
    let (op, op_str) = b.pick(OP_NAMES);
    let n_src = b.u8() as usize % 4;
    let leaves: Vec<TensorDesc> = (0..n_src)
        .map(|i| tensor(&mut b, &format!("src{i}")))
        .collect();
    let mut srcs: Vec<Option<Source>> = (0..n_src).map(|i| Some(Source::Leaf(i))).collect();
    if n_src > 1 && b.u8().is_multiple_of(5) {
        srcs[0] = None;
    }
    let out = tensor(&mut b, "out");
    let params = OpParams(slots(&mut b));
    read_all(&params);
    let node = NodeDesc {
        op,
        params,
        srcs,
        out: out.clone(),
    };
    let single = SingleNode {
        leaves: leaves.clone(),
        nodes: vec![node.clone()],
        results: vec![Source::Node(0)],
    };
    let supported = frontend::supports(&single, &single.nodes[0]);
    let translated = frontend::translate(&single);
    if let Err(e) = &translated {
        assert!(!e.to_string().is_empty(), "{}", op_name(op));
    }
    let _ = supported;

    // 3. The C decoder path: the same node with an arbitrary byte count.
    let n = b.pick(&[0usize, 4, 8, 12, 16, 20, 60, 64, 2, 6, 68]);
    let bytes: Vec<u8> = params
        .0
        .iter()
        .flat_map(|s| s.to_ne_bytes())
        .take(n)
        .collect();
    let spec = |t: &TensorDesc| TensorSpec {
        name: t.name.clone(),
        dtype: t.ty.dtype.id() as i32,
        shape: ShapeDesc::of(&t.ty),
    };
    let desc = GraphDesc {
        inputs: leaves.iter().map(spec).collect(),
        weights: vec![],
        nodes: vec![NodeSpec {
            op: op_str.to_string(),
            params: bytes,
            inputs: node
                .srcs
                .iter()
                .enumerate()
                .map(|(i, s)| s.map(|_| SourceRef::Input(i)))
                .collect(),
            outputs: vec![spec(&out)],
        }],
        outputs: vec![SourceRef::Node { node: 0, port: 0 }],
    };
    let converted = foreign::convert(&desc, &mut []);
    if let Err(e) = &converted {
        assert!(!e.to_string().is_empty());
    }
    (translated.is_ok(), converted.is_ok())
}

fn bytes_of(state: &mut u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (*state >> 33) as u8
        })
        .collect()
}

#[test]
fn arbitrary_op_params_give_a_value_or_an_error() {
    let mut state = 0x0dd_ba11u64;
    let runs: usize = std::env::var("POLYCL_OP_PARAMS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let (mut translated, mut converted) = (0, 0);
    for i in 0..runs {
        let len = 16 + i % 160;
        let (t, c) = drive(&bytes_of(&mut state, len));
        translated += t as usize;
        converted += c as usize;
    }
    eprintln!(
        "{runs} byte strings: {translated} translated (ggml path), {converted} converted (C path)"
    );
    // Both sides of each path are exercised.
    assert!(translated > runs / 100 && translated < runs, "{translated}");
    assert!(converted > runs / 1000 && converted < runs, "{converted}");
}

#[test]
fn the_committed_fuzz_corpus_replays_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/op_params");
    let mut n = 0;
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            drive(&std::fs::read(e.path()).unwrap());
            n += 1;
        }
    }
    eprintln!("replayed {n} corpus inputs from {}", dir.display());
}
