//! Random graphs through the decoder callbacks of polycl.h: every byte string
//! describes a graph (inputs, weights, nodes, outputs, extensions; mostly
//! plausible, sometimes broken in one place) that is handed to
//! `polycl_frontend_convert` through C callbacks. Whatever the bytes, the
//! answer is OK or an error status with a message — never a panic (INTERNAL)
//! or a crash — and an OK model is consistent. cargo test runs thousands of
//! deterministic byte strings; fuzz/ feeds the same `drive` from libFuzzer.

#![allow(dead_code)]

use ggml_polycl::capi::decoder::*;
use ggml_polycl::capi::{polycl_last_error, PolyclStatus};
use std::ffi::{c_char, c_void, CStr, CString};

/// A generated node: op name, op params, sources, outputs (type, ne).
type RandomOp<'a> = (&'a str, Vec<u8>, Vec<RawSource>, Vec<(i32, [i64; 4])>);

/// Reads the byte string as a stream of choices (zeros once it runs out).
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
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.u8() as usize % xs.len()]
    }
    fn below(&mut self, n: usize) -> usize {
        self.u8() as usize % n.max(1)
    }
}

/// Same layout as PolyclSource, with the kind as a plain int so that
/// out-of-range kinds can be described without an invalid Rust enum.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawSource {
    kind: i32,
    index: usize,
    port: u32,
}

struct RawNode {
    op: CString,
    params: Vec<u8>,
    inputs: Vec<RawSource>,
    outputs: Vec<PolyclTensorInfo>,
}

/// A described graph, owning every string and array its callbacks hand out.
struct Desc {
    names: Vec<CString>,
    inputs: Vec<PolyclTensorInfo>,
    weights: Vec<PolyclWeightInfo>,
    weight_data: Vec<Vec<u8>>,
    nodes: Vec<RawNode>,
    outputs: Vec<RawSource>,
    /// Index of a callback that returns false (usize::MAX for none).
    fail_at: usize,
    calls: usize,
    answers: Vec<i32>,
}

const OPS: &[&str] = &[
    "ADD",
    "MUL",
    "SUB",
    "DIV",
    "SCALE",
    "RMS_NORM",
    "NORM",
    "MUL_MAT",
    "CPY",
    "CONT",
    "RESHAPE",
    "VIEW",
    "PERMUTE",
    "TRANSPOSE",
    "GET_ROWS",
    "SET_ROWS",
    "SOFT_MAX",
    "ROPE",
    "FLASH_ATTN_EXT",
    "UNARY",
    "GLU",
    "SUM_ROWS",
    "CONCAT",
    "TOP_K",
    "NONE",
    "ARGSORT",
    "FROBNICATE",
    "",
    "set_rows",
];
const TYPES: &[i32] = &[0, 0, 0, 1, 1, 26, 27, 8, 99, -1];
const DIMS: &[i64] = &[-1, -1, 1, 1, 2, 4, 8, 0, 3, -5];
const PARAM_SIZES: &[usize] = &[0, 0, 4, 8, 12, 16, 60, 64, 6];

impl Desc {
    fn name(&mut self, b: &mut Bytes, prefix: &str) -> *const c_char {
        let s = match b.u8() % 16 {
            0 => "dup".to_string(),
            1 => "beam_idx".to_string(),
            2 => return std::ptr::null(),
            _ => format!("{prefix}{}", self.names.len()),
        };
        self.names.push(CString::new(s).unwrap());
        self.names.last().unwrap().as_ptr()
    }

    fn shape(b: &mut Bytes) -> PolyclShape {
        let rank = b.pick(&[1, 2, 2, 3, 4, 4, -1, 0, 5]);
        let mut ne = [1i64; 4];
        for d in ne.iter_mut() {
            *d = b.pick(DIMS);
        }
        PolyclShape { rank, ne }
    }

    fn tensor(&mut self, b: &mut Bytes, prefix: &str) -> PolyclTensorInfo {
        PolyclTensorInfo {
            name: self.name(b, prefix),
            ggml_type: b.pick(TYPES),
            shape: Self::shape(b),
        }
    }

    fn source(b: &mut Bytes, n_in: usize, n_w: usize, before: usize) -> RawSource {
        let kind = b.pick(&[1, 1, 3, 3, 3, 2, 0, 7]);
        let (index, port) = match kind {
            1 => (b.below(n_in + 1), 0),
            2 => (b.below(n_w + 1), 0),
            3 => (b.below(before + 1), b.pick(&[0, 0, 0, 1, 2])),
            _ => (b.below(4), 0),
        };
        RawSource { kind, index, port }
    }

    fn new(data: &[u8]) -> Desc {
        let mut b = Bytes { data, pos: 0 };
        if !b.u8().is_multiple_of(4) {
            return Desc::plausible(&mut b);
        }
        Desc::hostile(&mut b)
    }

    fn empty() -> Desc {
        Desc {
            names: Vec::new(),
            inputs: Vec::new(),
            weights: Vec::new(),
            weight_data: Vec::new(),
            nodes: Vec::new(),
            outputs: Vec::new(),
            fail_at: usize::MAX,
            calls: 0,
            answers: vec![0, 1, 2, 2],
        }
    }

    fn named(&mut self, s: String) -> *const c_char {
        self.names.push(CString::new(s).unwrap());
        self.names.last().unwrap().as_ptr()
    }

    fn info(&mut self, name: String, ggml_type: i32, rank: i32, ne: [i64; 4]) -> PolyclTensorInfo {
        PolyclTensorInfo {
            name: self.named(name),
            ggml_type,
            shape: PolyclShape { rank, ne },
        }
    }

    /// A graph that is valid as built (elementwise ops, matmuls, cache writes,
    /// TOP_K), then broken in one random place one time in three.
    fn plausible(b: &mut Bytes) -> Desc {
        let mut d = Desc::empty();
        let n0 = b.pick(&[4i64, 8]);
        let t = b.pick(&[-1i64, -1, 1, 3]);
        let x = d.info("x".into(), 0, 2, [n0, t, 1, 1]);
        let idx = d.info("idx".into(), 27, 1, [t, 1, 1, 1]);
        let cache = d.info("cache".into(), 1, 2, [n0, -1, 1, 1]);
        let cache2 = d.info("cache2".into(), 1, 2, [n0, -1, 1, 1]);
        d.inputs = vec![x, idx, cache, cache2];
        d.weight_data.push(vec![0x3c; (n0 * n0 * 4) as usize]);
        let wname = d.named("w".into());
        d.weights.push(PolyclWeightInfo {
            name: wname,
            ggml_type: 0,
            shape: PolyclShape {
                rank: 2,
                ne: [n0, n0, 1, 1],
            },
            data: d.weight_data[0].as_ptr() as *const c_void,
            size: d.weight_data[0].len(),
        });
        // f32 values [n0, t] usable by every op below.
        let mut pool = vec![RawSource {
            kind: 1,
            index: 0,
            port: 0,
        }];
        let mut caches_left = vec![2usize, 3];
        let src = |k, i, p| RawSource {
            kind: k,
            index: i,
            port: p,
        };
        for j in 0..1 + b.below(8) {
            let v = pool[b.below(pool.len())];
            let same = [n0, t, 1, 1];
            let f = |x: f32| x.to_ne_bytes().to_vec();
            let (op, params, inputs, outs): RandomOp = match b.u8() % 8 {
                0 => ("SCALE", [f(0.5), f(0.0)].concat(), vec![v], vec![(0, same)]),
                1 => (
                    "ADD",
                    vec![],
                    vec![v, pool[b.below(pool.len())]],
                    vec![(0, same)],
                ),
                2 => ("RMS_NORM", f(1e-5), vec![v], vec![(0, same)]),
                3 => ("MUL_MAT", vec![], vec![src(2, 0, 0), v], vec![(0, same)]),
                4 if !caches_left.is_empty() => {
                    let c = caches_left.remove(0);
                    (
                        "SET_ROWS",
                        vec![],
                        vec![v, src(1, 1, 0), src(1, c, 0)],
                        vec![(1, [n0, -1, 1, 1])],
                    )
                }
                5 => (
                    "TOP_K",
                    vec![],
                    vec![v],
                    vec![(0, [2, t, 1, 1]), (26, [2, t, 1, 1])],
                ),
                6 => (
                    "UNARY",
                    10i32.to_ne_bytes().to_vec(),
                    vec![v],
                    vec![(0, same)],
                ),
                _ => ("CONT", vec![], vec![v], vec![(0, same)]),
            };
            let outputs = outs
                .iter()
                .enumerate()
                .map(|(p, &(ty, ne))| d.info(format!("n{j}_{p}"), ty, 2, ne))
                .collect();
            d.nodes.push(RawNode {
                op: CString::new(op).unwrap(),
                params,
                inputs,
                outputs,
            });
            if outs[0] == (0, same) {
                pool.push(src(3, j, 0));
            }
            if op == "SET_ROWS" || op == "TOP_K" || b.u8().is_multiple_of(4) {
                d.outputs
                    .push(src(3, j, (op == "TOP_K") as u32 * (b.u8() as u32 % 2)));
            }
        }
        if d.outputs.is_empty() {
            d.outputs.push(*pool.last().unwrap());
        }
        if b.u8().is_multiple_of(3) {
            d.mutate(b);
        }
        d.answers = (0..4).map(|_| b.pick(&[0, 1, 2, 2])).collect();
        d
    }

    /// Breaks one thing.
    fn mutate(&mut self, b: &mut Bytes) {
        let j = b.below(self.nodes.len());
        match b.u8() % 12 {
            0 => self.nodes[j].op = CString::new(b.pick(OPS)).unwrap(),
            1 => {
                let n = b.pick(PARAM_SIZES);
                self.nodes[j].params.resize(n, 0);
            }
            2 => {
                if let Some(s) = self.nodes[j].inputs.first_mut() {
                    *s = Desc::source(b, 5, 2, j + 2);
                }
            }
            3 => self.inputs[b.below(4)].ggml_type = b.pick(TYPES),
            4 => self.inputs[b.below(4)].shape = Desc::shape(b),
            5 => self.nodes[j].outputs[0].shape = Desc::shape(b),
            6 => self.nodes[j].outputs[0].name = self.inputs[0].name,
            7 => self.nodes[j].outputs[0].name = std::ptr::null(),
            8 => self.outputs[0] = Desc::source(b, 5, 2, self.nodes.len() + 1),
            9 => self.fail_at = b.below(8),
            10 => {
                // A wrong byte count, but always backed by that many bytes:
                // the header lets polycl read `size` bytes at `data`.
                let n = b.below(300);
                self.weight_data[0].resize(n.max(1), 0x3c);
                self.weights[0].data = self.weight_data[0].as_ptr() as *const c_void;
                self.weights[0].size = n;
            }
            _ => self.nodes[j].inputs.truncate(b.below(2)),
        }
    }

    fn hostile(b: &mut Bytes) -> Desc {
        let b = &mut *b;
        let mut d = Desc {
            names: Vec::new(),
            inputs: Vec::new(),
            weights: Vec::new(),
            weight_data: Vec::new(),
            nodes: Vec::new(),
            outputs: Vec::new(),
            fail_at: usize::MAX,
            calls: 0,
            answers: Vec::new(),
        };
        for _ in 0..1 + b.below(5) {
            let t = d.tensor(b, "in");
            d.inputs.push(t);
        }
        for _ in 0..b.below(3) {
            let t = d.tensor(b, "w");
            let ty = ggml_polycl::ggml::types::GgmlType::from_id(t.ggml_type);
            let n: i64 = t.shape.ne[..t.shape.rank.clamp(0, 4) as usize]
                .iter()
                .product();
            let size = match (ty, b.u8() % 4) {
                (Some(ty), 0..=2) if n >= 0 && ty.block_elems() == 1 => {
                    n as usize * ty.block_bytes()
                }
                _ => b.below(64),
            };
            d.weight_data.push(vec![0x3c; size]);
            let data = if b.u8().is_multiple_of(32) {
                std::ptr::null()
            } else {
                d.weight_data.last().unwrap().as_ptr()
            };
            d.weights.push(PolyclWeightInfo {
                name: t.name,
                ggml_type: t.ggml_type,
                shape: t.shape,
                data: data as *const c_void,
                size,
            });
        }
        for j in 0..b.below(10) {
            let op = CString::new(b.pick(OPS)).unwrap();
            let params: Vec<u8> = (0..b.pick(PARAM_SIZES))
                .map(|_| b.pick(&[0u8, 0, 1, 2, 3, 0x3f, 0x80]))
                .collect();
            let inputs = (0..b.below(5))
                .map(|_| Desc::source(b, d.inputs.len(), d.weights.len(), j))
                .collect();
            let outputs = (0..1 + b.u8().is_multiple_of(8) as usize)
                .map(|_| d.tensor(b, "n"))
                .collect();
            d.nodes.push(RawNode {
                op,
                params,
                inputs,
                outputs,
            });
        }
        for _ in 0..b.below(4) {
            let s = Desc::source(b, d.inputs.len(), d.weights.len(), d.nodes.len());
            d.outputs.push(s);
        }
        if b.u8().is_multiple_of(16) {
            d.fail_at = b.below(8);
        }
        d.answers = (0..4).map(|_| b.pick(&[0, 1, 2, 2, 5])).collect();
        d
    }

    fn tick(&mut self) -> bool {
        self.calls += 1;
        self.calls - 1 != self.fail_at
    }
}

unsafe fn desc<'a>(u: *mut c_void) -> &'a mut Desc {
    // SAFETY: every callback gets the Desc that `drive` owns for the call.
    unsafe { &mut *(u as *mut Desc) }
}

unsafe extern "C" fn n_inputs(u: *mut c_void) -> usize {
    // SAFETY: see `desc`.
    unsafe { desc(u) }.inputs.len()
}
/// Item `i` of the list `pick` takes from the Desc, written to `out`: false
/// past the end, and where the Desc's injected failure falls.
///
/// # Safety
/// `u` is the Desc that `drive` owns for the call; `out` points to a `O`
/// that a `T` may be written over (the same type, or a `repr(C)` twin).
unsafe fn copy_out<T: Copy, O>(
    u: *mut c_void,
    i: usize,
    out: *mut O,
    pick: fn(&Desc) -> &[T],
) -> bool {
    // SAFETY: see `desc`.
    let d = unsafe { desc(u) };
    if !d.tick() {
        return false;
    }
    let Some(&item) = pick(d).get(i) else {
        return false;
    };
    // SAFETY: the caller's contract on `out`.
    unsafe { std::ptr::write(out as *mut T, item) };
    true
}

unsafe extern "C" fn input(u: *mut c_void, i: usize, out: *mut PolyclTensorInfo) -> bool {
    // SAFETY: `out` is polycl's local PolyclTensorInfo.
    unsafe { copy_out(u, i, out, |d| &d.inputs) }
}
unsafe extern "C" fn n_weights(u: *mut c_void) -> usize {
    // SAFETY: see `desc`.
    unsafe { desc(u) }.weights.len()
}
unsafe extern "C" fn weight(u: *mut c_void, i: usize, out: *mut PolyclWeightInfo) -> bool {
    // SAFETY: `out` is polycl's local PolyclWeightInfo.
    unsafe { copy_out(u, i, out, |d| &d.weights) }
}
unsafe extern "C" fn n_nodes(u: *mut c_void) -> usize {
    // SAFETY: see `desc`.
    unsafe { desc(u) }.nodes.len()
}
unsafe extern "C" fn node(u: *mut c_void, i: usize, out: *mut PolyclNodeInfo) -> bool {
    // SAFETY: see `desc`.
    let d = unsafe { desc(u) };
    if !d.tick() || i >= d.nodes.len() {
        return false;
    }
    let n = &d.nodes[i];
    // SAFETY: as above; the arrays live in the Desc for the whole conversion.
    unsafe {
        *out = PolyclNodeInfo {
            op: n.op.as_ptr(),
            op_params: n.params.as_ptr() as *const c_void,
            op_params_size: n.params.len(),
            inputs: n.inputs.as_ptr() as *const PolyclSource,
            n_inputs: n.inputs.len(),
            outputs: n.outputs.as_ptr(),
            n_outputs: n.outputs.len(),
        }
    };
    true
}
unsafe extern "C" fn n_outputs(u: *mut c_void) -> usize {
    // SAFETY: see `desc`.
    unsafe { desc(u) }.outputs.len()
}
unsafe extern "C" fn output(u: *mut c_void, i: usize, out: *mut PolyclSource) -> bool {
    // SAFETY: RawSource has PolyclSource's layout; polycl reads the kind as an int.
    unsafe { copy_out::<RawSource, _>(u, i, out, |d| &d.outputs) }
}

/// Answers from the Desc's list; 5 is an out-of-range answer on purpose.
unsafe extern "C" fn policy(
    u: *mut c_void,
    _: *const c_char,
    _: i32,
    _: *const PolyclShape,
    _: bool,
) -> PolyclCacheChoice {
    // SAFETY: see `desc`.
    let d = unsafe { desc(u) };
    let a = d.answers[d.calls % d.answers.len()];
    d.calls += 1;
    // SAFETY: PolyclCacheChoice is repr(i32) and polycl reads the answer as an
    // int; a value outside the enum tests that it is rejected, not trusted.
    unsafe { std::mem::transmute::<i32, PolyclCacheChoice>(a) }
}

fn last_error() -> String {
    // SAFETY: polycl_last_error returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(polycl_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// What converting one random graph gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Converted,
    Refused,
}

fn count(
    f: extern "C" fn(*const PolyclModel, *mut usize) -> PolyclStatus,
    m: *const PolyclModel,
) -> usize {
    let mut n = usize::MAX;
    assert_eq!(f(m, &mut n), PolyclStatus::Ok, "{}", last_error());
    n
}

fn clean(status: PolyclStatus) -> bool {
    assert_ne!(
        status,
        PolyclStatus::Internal,
        "a panic crossed into the API: {}",
        last_error()
    );
    if status != PolyclStatus::Ok {
        assert!(
            !last_error().is_empty(),
            "error status {status:?} without a message"
        );
    }
    status == PolyclStatus::Ok
}

/// Compiles and runs a converted model once, every dynamic dim 2 and every
/// input zero: whatever happens is a status, never a crash.
fn run_model(model: *const PolyclModel) {
    let mut compiled = std::ptr::null_mut();
    if !clean(ggml_polycl::capi::model::polycl_model_compile(
        model,
        std::ptr::null(),
        0,
        &mut compiled,
    )) {
        return;
    }
    let mut req = std::ptr::null_mut();
    assert_eq!(
        ggml_polycl::capi::model::polycl_infer_request_new(compiled, 0, &mut req),
        PolyclStatus::Ok
    );
    for i in 0..count(polycl_model_input_count, model) {
        let mut info = PolyclTensorInfo {
            name: std::ptr::null(),
            ggml_type: -1,
            shape: PolyclShape::default(),
        };
        assert_eq!(polycl_model_input(model, i, &mut info), PolyclStatus::Ok);
        let mut shape = info.shape;
        if shape.rank < 0 {
            shape = PolyclShape {
                rank: 2,
                ne: [2, 2, 1, 1],
            };
        }
        for d in shape.ne.iter_mut() {
            if *d < 0 {
                *d = 2;
            }
        }
        let elem = match info.ggml_type {
            0 | 26 => 4,
            1 => 2,
            27 => 8,
            _ => continue,
        };
        let n: i64 = shape.ne[..shape.rank.clamp(1, 4) as usize].iter().product();
        let data = vec![0u8; (n.max(0) as usize) * elem];
        clean(ggml_polycl::capi::model::polycl_infer_request_set_input(
            req,
            info.name,
            &shape,
            data.as_ptr() as *const c_void,
            data.len(),
        ));
    }
    if clean(ggml_polycl::capi::model::polycl_infer_request_infer(req)) {
        for i in 0..count(polycl_model_output_count, model) {
            let mut info = PolyclTensorInfo {
                name: std::ptr::null(),
                ggml_type: -1,
                shape: PolyclShape::default(),
            };
            assert_eq!(polycl_model_output(model, i, &mut info), PolyclStatus::Ok);
            let (mut ty, mut shape, mut size) = (0, PolyclShape::default(), 0usize);
            let st = ggml_polycl::capi::model::polycl_infer_request_output_info(
                req, info.name, &mut ty, &mut shape, &mut size,
            );
            assert_eq!(st, PolyclStatus::Ok, "{}", last_error());
            let mut buf = vec![0u8; size];
            let st = ggml_polycl::capi::model::polycl_infer_request_get_output(
                req,
                info.name,
                buf.as_mut_ptr() as *mut c_void,
                size,
            );
            assert_eq!(st, PolyclStatus::Ok, "{}", last_error());
        }
    }
    ggml_polycl::capi::model::polycl_infer_request_free(req);
    ggml_polycl::capi::model::polycl_compiled_model_free(compiled);
}

/// Converts the graph `data` describes with the extensions it picks; panics
/// only if polycl broke its contract.
pub fn drive(data: &[u8]) -> Outcome {
    drive_and_maybe_run(data, false)
}

/// `drive`, then (when `run`) compile and run a converted model on POLYCL0.
pub fn drive_and_maybe_run(data: &[u8], run: bool) -> Outcome {
    let mut d = Desc::new(data);
    let extensions = data.last().copied().unwrap_or(0);
    let ud = &mut d as *mut Desc as *mut c_void;
    let cb = PolyclDecoderCallbacks {
        user_data: ud,
        n_inputs: Some(n_inputs),
        input: Some(input),
        n_weights: Some(n_weights),
        weight: Some(weight),
        n_nodes: Some(n_nodes),
        node: Some(node),
        n_outputs: Some(n_outputs),
        output: Some(output),
    };
    let mut dec = std::ptr::null_mut();
    assert_eq!(polycl_decoder_new(&cb, &mut dec), PolyclStatus::Ok);
    let mut fe = std::ptr::null_mut();
    assert_eq!(polycl_frontend_new(&mut fe), PolyclStatus::Ok);
    let skip = [c"dup".as_ptr(), c"in0".as_ptr()];
    if extensions & 1 != 0 {
        let axis = [-1, -1, 1, 2, 4][(extensions as usize >> 2) % 5];
        assert_eq!(
            polycl_frontend_add_make_stateful(
                fe,
                skip.as_ptr(),
                (extensions >> 5) as usize % 3,
                axis,
                std::ptr::null()
            ),
            PolyclStatus::Ok
        );
    }
    if extensions & 2 != 0 {
        assert_eq!(
            polycl_frontend_add_cache_callback(fe, Some(policy), ud, -1, c"beam_idx".as_ptr()),
            PolyclStatus::Ok
        );
    }
    let mut model = std::ptr::null_mut();
    let status = polycl_frontend_convert(fe, dec, &mut model);
    let outcome = if status == PolyclStatus::Ok {
        assert!(!model.is_null());
        let vars = count(polycl_model_variable_count, model);
        assert_eq!(count(polycl_model_sink_count, model), vars);
        let mut n = 0;
        for (kind, want) in [
            ("SetRows", Some(0)),
            ("ReadValue", Some(vars)),
            ("Assign", Some(vars)),
            ("Gather", None),
        ] {
            let k = CString::new(kind).unwrap();
            assert_eq!(
                polycl_model_op_count(model, k.as_ptr(), &mut n),
                PolyclStatus::Ok
            );
            if let Some(w) = want {
                assert_eq!(n, w, "{kind}");
            }
        }
        type Item = extern "C" fn(*const PolyclModel, usize, *mut PolyclTensorInfo) -> PolyclStatus;
        let lists: [(
            extern "C" fn(*const PolyclModel, *mut usize) -> PolyclStatus,
            Item,
        ); 3] = [
            (polycl_model_input_count, polycl_model_input),
            (polycl_model_output_count, polycl_model_output),
            (polycl_model_variable_count, polycl_model_variable),
        ];
        for (count_fn, item) in lists {
            for i in 0..count(count_fn, model) {
                let mut info = PolyclTensorInfo {
                    name: std::ptr::null(),
                    ggml_type: -1,
                    shape: PolyclShape::default(),
                };
                assert_eq!(item(model, i, &mut info), PolyclStatus::Ok);
                assert!(!info.name.is_null());
            }
        }
        let mut text = std::ptr::null();
        assert_eq!(polycl_model_dump(model, &mut text), PolyclStatus::Ok);
        if run {
            run_model(model);
        }
        polycl_model_free(model);
        Outcome::Converted
    } else {
        assert_ne!(
            status,
            PolyclStatus::Internal,
            "a panic crossed into the API: {}",
            last_error()
        );
        assert!(model.is_null(), "out_model written on failure");
        assert!(
            !last_error().is_empty(),
            "error status {status:?} without a message"
        );
        Outcome::Refused
    };
    polycl_frontend_free(fe);
    polycl_decoder_free(dec);
    outcome
}

#[test]
fn random_graphs_convert_or_fail_cleanly() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut converted = 0;
    let mut refused = 0;
    for _ in 0..4000 {
        let len = 8 + (state >> 59) as usize * 12;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 33) as u8
            })
            .collect();
        // The first few hundred also run on the device.
        match drive_and_maybe_run(&bytes, converted < 300) {
            Outcome::Converted => converted += 1,
            Outcome::Refused => refused += 1,
        }
    }
    eprintln!("random graphs: {converted} converted, {refused} refused");
    // Both sides of the contract are exercised.
    assert!(
        converted > 50 && refused > 50,
        "converted {converted}, refused {refused}"
    );
}

#[test]
fn short_and_empty_byte_strings_are_handled() {
    for len in 0..64 {
        for fill in [0u8, 1, 0x7f, 0xff] {
            drive(&vec![fill; len]);
        }
    }
}
