//! Shared by the tests/reliability_*.rs files: a graph described through the
//! C decoder callbacks of polycl.h (so every test goes through the real C
//! API), a small decode step built with it, and helpers around the API.
#![allow(dead_code)]

use ggml_polycl::capi::decoder::*;
use ggml_polycl::capi::model::*;
use ggml_polycl::capi::{polycl_last_error, PolyclStatus};
use std::ffi::{c_void, CStr, CString};

pub const F32: i32 = 0;
pub const F16: i32 = 1;
pub const I32: i32 = 26;
pub const I64: i32 = 27;

/// PolyclSource's layout with the kind as a plain int, so tests can also
/// describe out-of-range kinds.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawSource {
    pub kind: i32,
    pub index: usize,
    pub port: u32,
}

pub fn inp(i: usize) -> RawSource {
    RawSource {
        kind: 1,
        index: i,
        port: 0,
    }
}
pub fn wt(i: usize) -> RawSource {
    RawSource {
        kind: 2,
        index: i,
        port: 0,
    }
}
pub fn nd(i: usize) -> RawSource {
    RawSource {
        kind: 3,
        index: i,
        port: 0,
    }
}

pub fn shape(ne: &[i64]) -> PolyclShape {
    let mut d = [1i64; 4];
    d[..ne.len()].copy_from_slice(ne);
    PolyclShape {
        rank: ne.len() as i32,
        ne: d,
    }
}

pub struct Node {
    pub op: CString,
    pub params: Vec<u8>,
    pub inputs: Vec<RawSource>,
    pub outputs: Vec<PolyclTensorInfo>,
    /// Hand out NULL instead of these arrays (bad-input tests).
    pub null_inputs: bool,
    pub null_params: bool,
}

/// A graph description owning every string and array its callbacks hand out
/// (CString and Vec heap buffers do not move when the owners do).
#[derive(Default)]
pub struct Graph {
    names: Vec<CString>,
    pub inputs: Vec<PolyclTensorInfo>,
    pub weights: Vec<PolyclWeightInfo>,
    weight_data: Vec<Vec<u8>>,
    pub nodes: Vec<Node>,
    pub outputs: Vec<RawSource>,
}

impl Graph {
    pub fn name(&mut self, s: &str) -> *const std::ffi::c_char {
        self.names.push(CString::new(s).unwrap());
        self.names.last().unwrap().as_ptr()
    }
    pub fn info(&mut self, name: &str, ty: i32, ne: &[i64]) -> PolyclTensorInfo {
        PolyclTensorInfo {
            name: self.name(name),
            ggml_type: ty,
            shape: shape(ne),
        }
    }
    pub fn input(&mut self, name: &str, ty: i32, ne: &[i64]) -> usize {
        let t = self.info(name, ty, ne);
        self.inputs.push(t);
        self.inputs.len() - 1
    }
    pub fn weight(&mut self, name: &str, ty: i32, ne: &[i64], data: Vec<u8>) -> usize {
        let t = self.info(name, ty, ne);
        self.weight_data.push(data);
        let d = self.weight_data.last().unwrap();
        self.weights.push(PolyclWeightInfo {
            name: t.name,
            ggml_type: ty,
            shape: t.shape,
            data: d.as_ptr() as *const c_void,
            size: d.len(),
        });
        self.weights.len() - 1
    }
    pub fn node(
        &mut self,
        op: &str,
        params: &[u8],
        inputs: &[RawSource],
        out: &str,
        ty: i32,
        ne: &[i64],
    ) -> usize {
        let o = self.info(out, ty, ne);
        self.nodes.push(Node {
            op: CString::new(op).unwrap(),
            params: params.to_vec(),
            inputs: inputs.to_vec(),
            outputs: vec![o],
            null_inputs: false,
            null_params: false,
        });
        self.nodes.len() - 1
    }
    pub fn output(&mut self, s: RawSource) {
        self.outputs.push(s);
    }

    pub fn callbacks(&mut self) -> PolyclDecoderCallbacks {
        PolyclDecoderCallbacks {
            user_data: self as *mut Graph as *mut c_void,
            n_inputs: Some(cb_n_inputs),
            input: Some(cb_input),
            n_weights: Some(cb_n_weights),
            weight: Some(cb_weight),
            n_nodes: Some(cb_n_nodes),
            node: Some(cb_node),
            n_outputs: Some(cb_n_outputs),
            output: Some(cb_output),
        }
    }

    /// Converts with `fe` (NULL: no extensions): the model, or the status
    /// and message of the refusal.
    pub fn convert_with(
        &mut self,
        fe: *const PolyclFrontend,
    ) -> Result<Model, (PolyclStatus, String)> {
        let cb = self.callbacks();
        let mut dec = std::ptr::null_mut();
        assert_eq!(polycl_decoder_new(&cb, &mut dec), PolyclStatus::Ok);
        let mut m = std::ptr::null_mut();
        let st = polycl_frontend_convert(fe, dec, &mut m);
        let r = if st == PolyclStatus::Ok {
            Ok(Model(m))
        } else {
            assert!(m.is_null(), "out_model written on failure");
            Err((st, last_error()))
        };
        polycl_decoder_free(dec);
        r
    }

    pub fn convert(&mut self) -> Result<Model, (PolyclStatus, String)> {
        self.convert_with(std::ptr::null())
    }
}

unsafe fn g<'a>(u: *mut c_void) -> &'a Graph {
    // SAFETY: every callback gets the Graph that `callbacks` was made from,
    // alive for the conversion.
    unsafe { &*(u as *const Graph) }
}
unsafe extern "C" fn cb_n_inputs(u: *mut c_void) -> usize {
    // SAFETY: see `g`.
    unsafe { g(u) }.inputs.len()
}
unsafe extern "C" fn cb_input(u: *mut c_void, i: usize, out: *mut PolyclTensorInfo) -> bool {
    // SAFETY: see `g`; `out` is polycl's local.
    unsafe { *out = g(u).inputs[i] };
    true
}
unsafe extern "C" fn cb_n_weights(u: *mut c_void) -> usize {
    // SAFETY: see `g`.
    unsafe { g(u) }.weights.len()
}
unsafe extern "C" fn cb_weight(u: *mut c_void, i: usize, out: *mut PolyclWeightInfo) -> bool {
    // SAFETY: see `g`.
    unsafe { *out = g(u).weights[i] };
    true
}
unsafe extern "C" fn cb_n_nodes(u: *mut c_void) -> usize {
    // SAFETY: see `g`.
    unsafe { g(u) }.nodes.len()
}
unsafe extern "C" fn cb_node(u: *mut c_void, i: usize, out: *mut PolyclNodeInfo) -> bool {
    // SAFETY: see `g`.
    let n = unsafe { &g(u).nodes[i] };
    // SAFETY: `out` is polycl's local; the arrays live as long as the Graph.
    unsafe {
        *out = PolyclNodeInfo {
            op: n.op.as_ptr(),
            op_params: if n.null_params {
                std::ptr::null()
            } else {
                n.params.as_ptr() as *const c_void
            },
            op_params_size: n.params.len(),
            inputs: if n.null_inputs {
                std::ptr::null()
            } else {
                n.inputs.as_ptr() as *const PolyclSource
            },
            n_inputs: n.inputs.len(),
            outputs: n.outputs.as_ptr(),
            n_outputs: n.outputs.len(),
        }
    };
    true
}
unsafe extern "C" fn cb_n_outputs(u: *mut c_void) -> usize {
    // SAFETY: see `g`.
    unsafe { g(u) }.outputs.len()
}
unsafe extern "C" fn cb_output(u: *mut c_void, i: usize, out: *mut PolyclSource) -> bool {
    // SAFETY: RawSource has PolyclSource's layout; polycl reads the kind as an int.
    unsafe { std::ptr::write(out as *mut RawSource, g(u).outputs[i]) };
    true
}

pub fn last_error() -> String {
    // SAFETY: polycl_last_error returns a NUL-terminated string valid until
    // this thread's next polycl call.
    unsafe { CStr::from_ptr(polycl_last_error()) }
        .to_string_lossy()
        .into_owned()
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}
pub fn f32_of(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Owners that free their handle on drop.
pub struct Model(pub *mut PolyclModel);
impl Drop for Model {
    fn drop(&mut self) {
        polycl_model_free(self.0);
    }
}
pub struct Compiled(pub *mut PolyclCompiledModel);
impl Drop for Compiled {
    fn drop(&mut self) {
        polycl_compiled_model_free(self.0);
    }
}
pub struct Request(pub *mut PolyclInferRequest);
impl Drop for Request {
    fn drop(&mut self) {
        polycl_infer_request_free(self.0);
    }
}
// SAFETY: a request is used by one thread at a time (the header's rule);
// the tests move each to the one thread that uses it.
unsafe impl Send for Request {}

pub fn status_msg(st: PolyclStatus) -> Result<(), (PolyclStatus, String)> {
    if st == PolyclStatus::Ok {
        Ok(())
    } else {
        Err((st, last_error()))
    }
}

pub fn compile(m: &Model, devices: &[i32]) -> Result<Compiled, (PolyclStatus, String)> {
    let mut c = std::ptr::null_mut();
    status_msg(polycl_model_compile(
        m.0,
        devices.as_ptr(),
        devices.len(),
        &mut c,
    ))?;
    Ok(Compiled(c))
}

pub fn request(c: &Compiled, slot: usize) -> Result<Request, (PolyclStatus, String)> {
    let mut r = std::ptr::null_mut();
    status_msg(polycl_infer_request_new(c.0, slot, &mut r))?;
    Ok(Request(r))
}

pub fn set_input(r: &Request, name: &str, ne: &[i64], data: &[u8]) {
    let n = CString::new(name).unwrap();
    let s = shape(ne);
    let st = polycl_infer_request_set_input(r.0, n.as_ptr(), &s, data.as_ptr() as _, data.len());
    assert_eq!(st, PolyclStatus::Ok, "set_input {name}: {}", last_error());
}

pub fn infer(r: &Request) -> Result<(), (PolyclStatus, String)> {
    status_msg(polycl_infer_request_infer(r.0))
}

pub fn get_output(r: &Request, name: &str) -> Vec<u8> {
    let n = CString::new(name).unwrap();
    let (mut ty, mut sh, mut size) = (0, PolyclShape::default(), 0);
    let st = polycl_infer_request_output_info(r.0, n.as_ptr(), &mut ty, &mut sh, &mut size);
    assert_eq!(st, PolyclStatus::Ok, "output_info {name}: {}", last_error());
    let mut out = vec![0u8; size];
    let st = polycl_infer_request_get_output(r.0, n.as_ptr(), out.as_mut_ptr() as _, size);
    assert_eq!(st, PolyclStatus::Ok, "get_output {name}: {}", last_error());
    out
}

/// Embedding width and cache rows of the decode step.
pub const C: i64 = 16;
pub const ROWS: i64 = 32;

/// One decode step of a tiny attention-like layer, every shape fixed (as a
/// host with a preallocated KV cache runs it token after token):
///
///   y = MUL_MAT(w, x) [C, 1];  yn = RMS_NORM(y)
///   k_cache_out = SET_ROWS(yn, pos, k_cache [C, ROWS])   (host-owned cache)
///   probs = SOFT_MAX(MUL_MAT(k_cache_out, yn)) [ROWS, 1]
pub fn decode_step() -> Graph {
    let mut g = Graph::default();
    let x = g.input("x", F32, &[C, 1]);
    let pos = g.input("pos", I64, &[1]);
    let cache = g.input("k_cache", F32, &[C, ROWS]);
    let w: Vec<f32> = (0..C * C)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 16.0)
        .collect();
    let w = g.weight("w", F32, &[C, C], f32_bytes(&w));
    let y = g.node("MUL_MAT", &[], &[wt(w), inp(x)], "y", F32, &[C, 1]);
    let yn = g.node(
        "RMS_NORM",
        &1e-5f32.to_ne_bytes(),
        &[nd(y)],
        "yn",
        F32,
        &[C, 1],
    );
    let kc = g.node(
        "SET_ROWS",
        &[],
        &[nd(yn), inp(pos), inp(cache)],
        "k_cache_out",
        F32,
        &[C, ROWS],
    );
    let sc = g.node("MUL_MAT", &[], &[nd(kc), nd(yn)], "scores", F32, &[ROWS, 1]);
    let sm: Vec<u8> = [0.25f32.to_ne_bytes(), 0f32.to_ne_bytes()].concat();
    let p = g.node("SOFT_MAX", &sm, &[nd(sc)], "probs", F32, &[ROWS, 1]);
    g.output(nd(p));
    g.output(nd(kc));
    g
}

/// Runs one decode step at `step` on `r`, feeding `cache` in and taking the
/// updated cache back; returns the probabilities.
pub fn run_step(
    r: &Request,
    step: usize,
    cache: &mut Vec<u8>,
) -> Result<Vec<f32>, (PolyclStatus, String)> {
    let x: Vec<f32> = (0..C)
        .map(|i| (((i as usize + 3 * step) % 13) as f32 - 6.0) / 8.0)
        .collect();
    set_input(r, "x", &[C, 1], &f32_bytes(&x));
    set_input(r, "pos", &[1], &((step as i64) % ROWS).to_ne_bytes());
    set_input(r, "k_cache", &[C, ROWS], cache);
    infer(r)?;
    *cache = get_output(r, "k_cache_out");
    Ok(f32_of(&get_output(r, "probs")))
}

/// The same step computed on the host (reference for the thread tests).
pub fn reference_steps(n: usize) -> Vec<Vec<f32>> {
    let w: Vec<f32> = (0..C * C)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 16.0)
        .collect();
    let mut cache = vec![0f32; (C * ROWS) as usize];
    let mut out = Vec::new();
    for step in 0..n {
        let x: Vec<f32> = (0..C)
            .map(|i| (((i as usize + 3 * step) % 13) as f32 - 6.0) / 8.0)
            .collect();
        let c = C as usize;
        let y: Vec<f32> = (0..c)
            .map(|r| (0..c).map(|k| w[r * c + k] * x[k]).sum())
            .collect();
        let ms = y.iter().map(|v| v * v).sum::<f32>() / c as f32;
        let yn: Vec<f32> = y.iter().map(|v| v / (ms + 1e-5).sqrt()).collect();
        let row = step % ROWS as usize;
        cache[row * c..(row + 1) * c].copy_from_slice(&yn);
        let s: Vec<f32> = (0..ROWS as usize)
            .map(|j| 0.25 * (0..c).map(|k| cache[j * c + k] * yn[k]).sum::<f32>())
            .collect();
        let m = s.iter().cloned().fold(f32::MIN, f32::max);
        let e: Vec<f32> = s.iter().map(|v| (v - m).exp()).collect();
        let z: f32 = e.iter().sum();
        out.push(e.iter().map(|v| v / z).collect());
    }
    out
}

pub fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-4 + 1e-3 * y.abs())
}
