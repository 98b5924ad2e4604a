//! The decoder interface in C: a host describes a ggml-style graph through
//! callbacks (`PolyclDecoderCallbacks`), registers extensions on a
//! `PolyclFrontend` (which policy owns each KV cache), converts, and inspects
//! the converted model.
//!
//! Shapes (`PolyclShape`) are ggml `ne` order: ne[0] is the innermost dim;
//! `rank` dims are meaningful (the rest are 1), -1 in a dim is dynamic, and a
//! rank of -1 means the rank itself is unknown. Types are ggml type ids.

use super::{api, PolyclStatus};
use crate::decoder::foreign::{
    self, GraphDesc, NodeSpec, ShapeDesc, SourceRef, TensorSpec, WeightSpec, MAX_ITEMS, MAX_SRCS,
};
use crate::error::{Error, Result};
use crate::ir::{Graph, Op, TensorType};
use crate::passes::extension::{CacheChoice, CachePolicy, CacheWrite};
use crate::passes::make_stateful::{MakeStateful, StatefulOptions};
use crate::passes::Pass;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr::addr_of;

/// A tensor shape in ggml `ne` order: ne[0] is the innermost dim, `rank` dims
/// are meaningful (the others are 1), -1 is a dynamic dim, and rank -1 means
/// the rank itself is unknown.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolyclShape {
    /// 1 to 4, or -1 when the rank is unknown.
    pub rank: i32,
    /// Dims in ggml order; -1 is a dynamic dim; dims past `rank` are ignored.
    pub ne: [i64; 4],
}

impl From<ShapeDesc> for PolyclShape {
    fn from(s: ShapeDesc) -> Self {
        PolyclShape {
            rank: s.rank,
            ne: s.ne,
        }
    }
}

/// A named tensor: a graph input, one output of a node, a model input, output
/// or variable.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PolyclTensorInfo {
    /// NUL-terminated; unique in a graph.
    pub name: *const c_char,
    /// ggml type id (0 F32, 1 F16, 26 I32, 27 I64, ...).
    pub ggml_type: i32,
    pub shape: PolyclShape,
}

/// A weight: a static tensor whose bytes polycl copies during conversion.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PolyclWeightInfo {
    pub name: *const c_char,
    pub ggml_type: i32,
    pub shape: PolyclShape,
    /// Contiguous ggml layout, `size` bytes.
    pub data: *const c_void,
    pub size: usize,
}

/// What a `PolyclSource` refers to.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolyclSourceKind {
    /// An empty src slot.
    None = 0,
    /// Graph input `index`.
    Input = 1,
    /// Weight `index`.
    Weight = 2,
    /// Output `port` of node `index` (an earlier node).
    Node = 3,
}

/// An operand of a node or a graph output.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PolyclSource {
    pub kind: PolyclSourceKind,
    pub index: usize,
    pub port: u32,
}

/// One node, in graph order.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PolyclNodeInfo {
    /// The op name as ggml_op_name prints it: "MUL_MAT", "SET_ROWS", ...
    pub op: *const c_char,
    /// The op's ggml op_params bytes (at most 64).
    pub op_params: *const c_void,
    pub op_params_size: usize,
    /// ggml's src slots in order (SET_ROWS: values, indices, destination).
    pub inputs: *const PolyclSource,
    pub n_inputs: usize,
    /// Port 0 first. TOP_K has two: values (F32) and indices (I32).
    pub outputs: *const PolyclTensorInfo,
    pub n_outputs: usize,
}

/// The graph, described by callbacks. Every `x(user_data, i, out)` callback
/// fills `*out` for item i < `n_x(user_data)` and returns true, or returns
/// false on failure; the pointers it stores must stay valid until the next
/// callback call. `n_weights`/`weight` may both be NULL (no weights).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PolyclDecoderCallbacks {
    pub user_data: *mut c_void,
    pub n_inputs: Option<unsafe extern "C" fn(user_data: *mut c_void) -> usize>,
    pub input: Option<
        unsafe extern "C" fn(user_data: *mut c_void, i: usize, out: *mut PolyclTensorInfo) -> bool,
    >,
    pub n_weights: Option<unsafe extern "C" fn(user_data: *mut c_void) -> usize>,
    pub weight: Option<
        unsafe extern "C" fn(user_data: *mut c_void, i: usize, out: *mut PolyclWeightInfo) -> bool,
    >,
    pub n_nodes: Option<unsafe extern "C" fn(user_data: *mut c_void) -> usize>,
    pub node: Option<
        unsafe extern "C" fn(user_data: *mut c_void, i: usize, out: *mut PolyclNodeInfo) -> bool,
    >,
    pub n_outputs: Option<unsafe extern "C" fn(user_data: *mut c_void) -> usize>,
    pub output: Option<
        unsafe extern "C" fn(user_data: *mut c_void, i: usize, out: *mut PolyclSource) -> bool,
    >,
}

/// A graph description (the callbacks); it describes, it does not own state.
pub struct PolyclDecoder {
    callbacks: PolyclDecoderCallbacks,
}

/// A cache policy callback's answer.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolyclCacheChoice {
    /// Leave this cache write to the next extension (or the stateless default).
    Leave = 0,
    /// The host owns the cache: it stays an input and its update an output.
    Stateless = 1,
    /// polycl owns the cache as a state variable (make_stateful's rewrite).
    Stateful = 2,
}

/// Called once per cache write (SET_ROWS) still undecided: the destination's
/// name, ggml type and shape, and whether it is a graph input.
pub type PolyclCacheCallback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        cache_name: *const c_char,
        ggml_type: i32,
        shape: *const PolyclShape,
        is_parameter: bool,
    ) -> PolyclCacheChoice,
>;

/// The same callback seen as returning a plain int, so an out-of-range answer
/// from C is an error instead of an invalid Rust enum.
type RawCacheCallback =
    unsafe extern "C" fn(*mut c_void, *const c_char, i32, *const PolyclShape, bool) -> i32;

enum Extension {
    MakeStateful {
        skip: Vec<String>,
        options: StatefulOptions,
    },
    Callback {
        f: RawCacheCallback,
        user_data: *mut c_void,
        options: StatefulOptions,
    },
}

/// Converts decoders; holds the extensions, which run in registration order
/// before the built-in stateless lowering of every remaining cache write.
pub struct PolyclFrontend {
    extensions: Vec<Extension>,
}

struct Named {
    name: CString,
    ty: TensorType,
    rank: i32,
}

/// A converted graph.
pub struct PolyclModel {
    pub(crate) graph: Graph,
    inputs: Vec<Named>,
    outputs: Vec<Named>,
    variables: Vec<Named>,
    dump: CString,
}

pub(crate) fn cstr<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::InvalidArgument(format!("{what} is NULL")));
    }
    // SAFETY: non-null; the API contract is a NUL-terminated string that stays
    // valid for the call.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Error::InvalidArgument(format!("{what} is not UTF-8")))
}

pub(crate) fn out_ptr<T>(p: *mut T, what: &str) -> Result<()> {
    if p.is_null() {
        Err(Error::InvalidArgument(format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

fn count(
    f: Option<unsafe extern "C" fn(*mut c_void) -> usize>,
    ud: *mut c_void,
    what: &str,
) -> Result<usize> {
    let f = f.ok_or_else(|| Error::InvalidArgument(format!("callback {what} is NULL")))?;
    // SAFETY: a host callback with the documented signature.
    let n = unsafe { f(ud) };
    if n > MAX_ITEMS {
        return Err(Error::InvalidGraph(format!(
            "{what} returned {n}: at most {MAX_ITEMS}"
        )));
    }
    Ok(n)
}

fn tensor_spec(info: &PolyclTensorInfo, what: &str) -> Result<TensorSpec> {
    let name = cstr(info.name, &format!("the name of {what}"))?.to_string();
    Ok(TensorSpec {
        name,
        dtype: info.ggml_type,
        shape: ShapeDesc {
            rank: info.shape.rank,
            ne: info.shape.ne,
        },
    })
}

/// # Safety
/// `p` must point to a readable PolyclSource.
unsafe fn read_source(p: *const PolyclSource) -> Result<Option<SourceRef>> {
    // SAFETY: p is readable; the kind is read as the int C wrote, never as a
    // Rust enum, so an out-of-range value cannot be an invalid enum.
    let (kind, index, port) = unsafe {
        (
            std::ptr::read_unaligned(addr_of!((*p).kind) as *const i32),
            std::ptr::read_unaligned(addr_of!((*p).index)),
            std::ptr::read_unaligned(addr_of!((*p).port)),
        )
    };
    Ok(match kind {
        0 => None,
        1 => Some(SourceRef::Input(index)),
        2 => Some(SourceRef::Weight(index)),
        3 => Some(SourceRef::Node { node: index, port }),
        k => {
            return Err(Error::InvalidGraph(format!(
                "source kind {k}: expected 0 to 3"
            )))
        }
    })
}

/// Reads the whole description through the callbacks.
fn read_graph(cb: &PolyclDecoderCallbacks) -> Result<GraphDesc> {
    let ud = cb.user_data;
    let failed =
        |what: String| Error::InvalidGraph(format!("decoder callback {what} returned false"));
    let mut g = GraphDesc::default();
    let n_inputs = count(cb.n_inputs, ud, "n_inputs")?;
    let input = cb
        .input
        .ok_or_else(|| Error::InvalidArgument("callback input is NULL".into()))?;
    for i in 0..n_inputs {
        let mut info = PolyclTensorInfo {
            name: std::ptr::null(),
            ggml_type: 0,
            shape: PolyclShape::default(),
        };
        // SAFETY: a host callback writing into our local.
        if !unsafe { input(ud, i, &mut info) } {
            return Err(failed(format!("input({i})")));
        }
        g.inputs.push(tensor_spec(&info, &format!("input {i}"))?);
    }
    match (cb.n_weights, cb.weight) {
        (None, None) => {}
        (Some(_), Some(weight)) => {
            for i in 0..count(cb.n_weights, ud, "n_weights")? {
                let mut info = PolyclWeightInfo {
                    name: std::ptr::null(),
                    ggml_type: 0,
                    shape: PolyclShape::default(),
                    data: std::ptr::null(),
                    size: 0,
                };
                // SAFETY: as above.
                if !unsafe { weight(ud, i, &mut info) } {
                    return Err(failed(format!("weight({i})")));
                }
                let t = tensor_spec(
                    &PolyclTensorInfo {
                        name: info.name,
                        ggml_type: info.ggml_type,
                        shape: info.shape,
                    },
                    &format!("weight {i}"),
                )?;
                if info.size > 0 && info.data.is_null() {
                    return Err(Error::InvalidArgument(format!(
                        "weight '{}' has {} bytes at NULL",
                        t.name, info.size
                    )));
                }
                let data = if info.size == 0 {
                    Vec::new()
                } else {
                    // SAFETY: the host promises `size` readable bytes at `data`.
                    unsafe { std::slice::from_raw_parts(info.data as *const u8, info.size) }
                        .to_vec()
                };
                g.weights.push(WeightSpec {
                    name: t.name,
                    dtype: t.dtype,
                    shape: t.shape,
                    data,
                });
            }
        }
        _ => {
            return Err(Error::InvalidArgument(
                "n_weights and weight must both be set or both be NULL".into(),
            ))
        }
    }
    let n_nodes = count(cb.n_nodes, ud, "n_nodes")?;
    let node = cb
        .node
        .ok_or_else(|| Error::InvalidArgument("callback node is NULL".into()))?;
    for j in 0..n_nodes {
        let mut info = PolyclNodeInfo {
            op: std::ptr::null(),
            op_params: std::ptr::null(),
            op_params_size: 0,
            inputs: std::ptr::null(),
            n_inputs: 0,
            outputs: std::ptr::null(),
            n_outputs: 0,
        };
        // SAFETY: as above.
        if !unsafe { node(ud, j, &mut info) } {
            return Err(failed(format!("node({j})")));
        }
        let op = cstr(info.op, &format!("the op of node {j}"))?.to_string();
        if info.op_params_size > 64 {
            return Err(Error::InvalidGraph(format!(
                "node {j} ({op}): op_params of {} bytes, at most 64",
                info.op_params_size
            )));
        }
        let params = if info.op_params_size == 0 {
            Vec::new()
        } else if info.op_params.is_null() {
            return Err(Error::InvalidArgument(format!(
                "node {j} ({op}): op_params is NULL"
            )));
        } else {
            // SAFETY: the host promises op_params_size (<= 64) readable bytes.
            unsafe { std::slice::from_raw_parts(info.op_params as *const u8, info.op_params_size) }
                .to_vec()
        };
        if info.n_inputs > MAX_SRCS {
            return Err(Error::InvalidGraph(format!(
                "node {j} ({op}): {} inputs, at most {MAX_SRCS}",
                info.n_inputs
            )));
        }
        if info.n_inputs > 0 && info.inputs.is_null() {
            return Err(Error::InvalidArgument(format!(
                "node {j} ({op}): inputs is NULL"
            )));
        }
        let mut inputs = Vec::new();
        for k in 0..info.n_inputs {
            // SAFETY: the host promises n_inputs readable entries.
            inputs.push(
                unsafe { read_source(info.inputs.add(k)) }.map_err(|e| match e {
                    Error::InvalidGraph(m) => {
                        Error::InvalidGraph(format!("node {j} ({op}), input {k}: {m}"))
                    }
                    other => other,
                })?,
            );
        }
        if info.n_outputs == 0 || info.n_outputs > 8 {
            return Err(Error::InvalidGraph(format!(
                "node {j} ({op}): {} outputs",
                info.n_outputs
            )));
        }
        if info.outputs.is_null() {
            return Err(Error::InvalidArgument(format!(
                "node {j} ({op}): outputs is NULL"
            )));
        }
        let mut outputs = Vec::new();
        for p in 0..info.n_outputs {
            // SAFETY: the host promises n_outputs readable entries.
            let o = unsafe { std::ptr::read_unaligned(info.outputs.add(p)) };
            outputs.push(tensor_spec(&o, &format!("output {p} of node {j} ({op})"))?);
        }
        g.nodes.push(NodeSpec {
            op,
            params,
            inputs,
            outputs,
        });
    }
    let n_outputs = count(cb.n_outputs, ud, "n_outputs")?;
    let output = cb
        .output
        .ok_or_else(|| Error::InvalidArgument("callback output is NULL".into()))?;
    for k in 0..n_outputs {
        let mut s = PolyclSource {
            kind: PolyclSourceKind::None,
            index: 0,
            port: 0,
        };
        // SAFETY: as above.
        if !unsafe { output(ud, k, &mut s) } {
            return Err(failed(format!("output({k})")));
        }
        // SAFETY: s is our local.
        match unsafe { read_source(&s) } {
            Ok(Some(r)) => g.outputs.push(r),
            Ok(None) => {
                return Err(Error::InvalidGraph(format!(
                    "graph output {k} names nothing"
                )))
            }
            Err(Error::InvalidGraph(m)) => {
                return Err(Error::InvalidGraph(format!("graph output {k}: {m}")))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(g)
}

fn options(append_axis: i32, beam_idx_name: *const c_char) -> Result<StatefulOptions> {
    let beam_idx_name = if beam_idx_name.is_null() {
        "beam_idx".to_string()
    } else {
        cstr(beam_idx_name, "beam_idx_name")?.to_string()
    };
    if beam_idx_name.is_empty() {
        return Err(Error::InvalidArgument("beam_idx_name is empty".into()));
    }
    Ok(StatefulOptions {
        append_axis: append_axis as i64,
        beam_idx_name,
    })
}

impl PolyclFrontend {
    fn passes(&self) -> Vec<Box<dyn Pass>> {
        self.extensions
            .iter()
            .map(|e| -> Box<dyn Pass> {
                match e {
                    Extension::MakeStateful { skip, options } => Box::new(MakeStateful {
                        skip_caches: skip.iter().cloned().collect(),
                        options: options.clone(),
                    }),
                    Extension::Callback { f, user_data, options } => {
                        let (f, ud) = (*f, *user_data);
                        Box::new(CachePolicy {
                            name: "cache_callback".into(),
                            options: options.clone(),
                            choose: Box::new(move |w: &CacheWrite| {
                                let name = cstring(&w.name);
                                let shape = PolyclShape::from(ShapeDesc::of(&w.ty));
                                // SAFETY: the host's callback, with pointers that live for the call.
                                let r = unsafe { f(ud, name.as_ptr(), w.ty.dtype.id() as i32, &shape, w.is_parameter) };
                                match r {
                                    0 => Ok(CacheChoice::Leave),
                                    1 => Ok(CacheChoice::Stateless),
                                    2 => Ok(CacheChoice::Stateful),
                                    x => Err(Error::InvalidArgument(format!(
                                        "the cache callback answered {x} for '{}': expected 0, 1 or 2",
                                        w.name
                                    ))),
                                }
                            }),
                        })
                    }
                }
            })
            .collect()
    }
}

fn model_of(f: &foreign::Foreign, graph: Graph) -> PolyclModel {
    let named = |name: &str, ty: &TensorType, rank: Option<i32>| Named {
        name: cstring(name),
        ty: ty.clone(),
        rank: rank.unwrap_or_else(|| ShapeDesc::of(ty).rank),
    };
    let inputs = graph
        .nodes
        .iter()
        .filter(|n| n.op == Op::Parameter)
        .map(|n| named(&n.name, &n.outputs[0].ty, f.input_rank(&n.name)))
        .collect();
    let outputs = graph
        .results
        .iter()
        .map(|&v| named(&graph.value_name(v), graph.ty(v), None))
        .collect();
    let variables = graph
        .variables()
        .iter()
        .map(|(id, ty)| named(id, ty, None))
        .collect();
    let dump = cstring(&crate::ir::dump::dump(&graph));
    PolyclModel {
        graph,
        inputs,
        outputs,
        variables,
        dump,
    }
}

fn info(n: &Named) -> PolyclTensorInfo {
    PolyclTensorInfo {
        name: n.name.as_ptr(),
        ggml_type: n.ty.dtype.id() as i32,
        shape: PolyclShape {
            rank: n.rank,
            ne: n.ty.ne,
        },
    }
}

/// # Safety
/// `p` is NULL or a live handle made by polycl.
pub(crate) unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: per the function contract.
    unsafe { p.as_ref() }.ok_or_else(|| Error::InvalidArgument(format!("{what} is NULL")))
}

/// # Safety
/// `p` is NULL or a live handle made by polycl.
pub(crate) unsafe fn handle_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: per the function contract.
    unsafe { p.as_mut() }.ok_or_else(|| Error::InvalidArgument(format!("{what} is NULL")))
}

/// Makes a decoder from callbacks (copied; they are called during conversion).
#[no_mangle]
pub extern "C" fn polycl_decoder_new(
    callbacks: *const PolyclDecoderCallbacks,
    out_decoder: *mut *mut PolyclDecoder,
) -> PolyclStatus {
    api("polycl_decoder_new", || {
        // SAFETY: NULL or a readable struct, per the API contract.
        let cb = *unsafe { handle(callbacks, "callbacks") }?;
        out_ptr(out_decoder, "out_decoder")?;
        if cb.n_inputs.is_none() || cb.input.is_none() || cb.n_nodes.is_none() || cb.node.is_none()
        {
            return Err(Error::InvalidArgument(
                "callbacks n_inputs, input, n_nodes and node are required".into(),
            ));
        }
        if cb.n_outputs.is_none() || cb.output.is_none() {
            return Err(Error::InvalidArgument(
                "callbacks n_outputs and output are required".into(),
            ));
        }
        // SAFETY: checked non-null.
        unsafe { *out_decoder = Box::into_raw(Box::new(PolyclDecoder { callbacks: cb })) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn polycl_decoder_free(decoder: *mut PolyclDecoder) {
    super::boundary::guard("polycl_decoder_free", (), || {
        if !decoder.is_null() {
            // SAFETY: made by polycl_decoder_new, freed once.
            drop(unsafe { Box::from_raw(decoder) });
        }
    })
}

/// Makes a frontend with no extensions: it converts to the stateless form.
#[no_mangle]
pub extern "C" fn polycl_frontend_new(out_frontend: *mut *mut PolyclFrontend) -> PolyclStatus {
    api("polycl_frontend_new", || {
        out_ptr(out_frontend, "out_frontend")?;
        // SAFETY: checked non-null.
        unsafe {
            *out_frontend = Box::into_raw(Box::new(PolyclFrontend {
                extensions: Vec::new(),
            }))
        };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn polycl_frontend_free(frontend: *mut PolyclFrontend) {
    super::boundary::guard("polycl_frontend_free", (), || {
        if !frontend.is_null() {
            // SAFETY: made by polycl_frontend_new, freed once.
            drop(unsafe { Box::from_raw(frontend) });
        }
    })
}

/// Registers make_stateful: every SET_ROWS into a graph input whose name is not
/// in `skip_caches` becomes a state variable (ReadValue -> Gather(beam_idx) ->
/// Concat -> Assign). `append_axis` is a ggml dim (0..3) or -1 to infer the
/// single dynamic dim; `beam_idx_name` NULL means "beam_idx".
#[no_mangle]
pub extern "C" fn polycl_frontend_add_make_stateful(
    frontend: *mut PolyclFrontend,
    skip_caches: *const *const c_char,
    n_skip_caches: usize,
    append_axis: i32,
    beam_idx_name: *const c_char,
) -> PolyclStatus {
    api("polycl_frontend_add_make_stateful", || {
        // SAFETY: NULL or a live frontend.
        let fe = unsafe { handle_mut(frontend, "frontend") }?;
        if n_skip_caches > 0 && skip_caches.is_null() {
            return Err(Error::InvalidArgument("skip_caches is NULL".into()));
        }
        let mut skip = Vec::new();
        for i in 0..n_skip_caches {
            // SAFETY: the host promises n_skip_caches readable pointers.
            let p = unsafe { *skip_caches.add(i) };
            skip.push(cstr(p, &format!("skip_caches[{i}]"))?.to_string());
        }
        let options = options(append_axis, beam_idx_name)?;
        fe.extensions
            .push(Extension::MakeStateful { skip, options });
        Ok(())
    })
}

/// Registers a cache policy callback, asked once per cache write still
/// undecided when it runs; `append_axis` and `beam_idx_name` are used for the
/// writes it answers POLYCL_CACHE_CHOICE_STATEFUL, as in make_stateful.
#[no_mangle]
pub extern "C" fn polycl_frontend_add_cache_callback(
    frontend: *mut PolyclFrontend,
    callback: PolyclCacheCallback,
    user_data: *mut c_void,
    append_axis: i32,
    beam_idx_name: *const c_char,
) -> PolyclStatus {
    api("polycl_frontend_add_cache_callback", || {
        // SAFETY: NULL or a live frontend.
        let fe = unsafe { handle_mut(frontend, "frontend") }?;
        let f = callback.ok_or_else(|| Error::InvalidArgument("callback is NULL".into()))?;
        // SAFETY: PolyclCacheChoice is repr(i32), so both signatures have the
        // same ABI; reading the answer as i32 lets polycl reject unknown values.
        let f: RawCacheCallback = unsafe { std::mem::transmute(f) };
        let options = options(append_axis, beam_idx_name)?;
        fe.extensions.push(Extension::Callback {
            f,
            user_data,
            options,
        });
        Ok(())
    })
}

/// Reads the decoder, translates it through the op table, runs the extensions
/// in registration order, then lowers every remaining SET_ROWS statelessly.
/// `frontend` may be NULL (no extensions).
#[no_mangle]
pub extern "C" fn polycl_frontend_convert(
    frontend: *const PolyclFrontend,
    decoder: *const PolyclDecoder,
    out_model: *mut *mut PolyclModel,
) -> PolyclStatus {
    api("polycl_frontend_convert", || {
        // SAFETY: NULL or a live decoder.
        let dec = unsafe { handle(decoder, "decoder") }?;
        out_ptr(out_model, "out_model")?;
        let mut passes = if frontend.is_null() {
            Vec::new()
        } else {
            // SAFETY: a live frontend.
            unsafe { &*frontend }.passes()
        };
        let desc = read_graph(&dec.callbacks)?;
        let (f, graph) = foreign::convert(&desc, &mut passes)?;
        let model = model_of(&f, graph);
        // SAFETY: checked non-null.
        unsafe { *out_model = Box::into_raw(Box::new(model)) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn polycl_model_free(model: *mut PolyclModel) {
    super::boundary::guard("polycl_model_free", (), || {
        if !model.is_null() {
            // SAFETY: made by polycl_frontend_convert, freed once.
            drop(unsafe { Box::from_raw(model) });
        }
    })
}

/// How many nodes have op kind `kind` ("Parameter", "ReadValue", "Assign",
/// "Gather", "Concat", "ScatterRows", "SetRows", "MulMat", ... as the dump
/// prints them).
#[no_mangle]
pub extern "C" fn polycl_model_op_count(
    model: *const PolyclModel,
    kind: *const c_char,
    out_count: *mut usize,
) -> PolyclStatus {
    api("polycl_model_op_count", || {
        // SAFETY: NULL or a live model.
        let m = unsafe { handle(model, "model") }?;
        let kind = cstr(kind, "kind")?;
        out_ptr(out_count, "out_count")?;
        // SAFETY: checked non-null.
        unsafe { *out_count = m.graph.count(kind) };
        Ok(())
    })
}

/// The number of sinks (Assign nodes that commit state variables).
#[no_mangle]
pub extern "C" fn polycl_model_sink_count(
    model: *const PolyclModel,
    out_count: *mut usize,
) -> PolyclStatus {
    api("polycl_model_sink_count", || {
        // SAFETY: NULL or a live model.
        let m = unsafe { handle(model, "model") }?;
        out_ptr(out_count, "out_count")?;
        // SAFETY: checked non-null.
        unsafe { *out_count = m.graph.sinks().len() };
        Ok(())
    })
}

fn list_count(
    model: *const PolyclModel,
    pick: fn(&PolyclModel) -> &[Named],
    out_count: *mut usize,
) -> Result<()> {
    // SAFETY: NULL or a live model.
    let m = unsafe { handle(model, "model") }?;
    out_ptr(out_count, "out_count")?;
    // SAFETY: checked non-null.
    unsafe { *out_count = pick(m).len() };
    Ok(())
}

fn list_item(
    model: *const PolyclModel,
    pick: fn(&PolyclModel) -> &[Named],
    what: &str,
    index: usize,
    out_info: *mut PolyclTensorInfo,
) -> Result<()> {
    // SAFETY: NULL or a live model.
    let m = unsafe { handle(model, "model") }?;
    out_ptr(out_info, "out_info")?;
    let list = pick(m);
    let n = list.get(index).ok_or_else(|| {
        Error::InvalidArgument(format!("{what} index {index}: there are {}", list.len()))
    })?;
    // SAFETY: checked non-null.
    unsafe { *out_info = info(n) };
    Ok(())
}

/// The number of inputs of the converted model (graph inputs it reads, plus
/// beam_idx when make_stateful added it).
#[no_mangle]
pub extern "C" fn polycl_model_input_count(
    model: *const PolyclModel,
    out_count: *mut usize,
) -> PolyclStatus {
    api("polycl_model_input_count", || {
        list_count(model, |m| &m.inputs, out_count)
    })
}

/// Input `index`: name (valid while the model lives), type, declared shape.
#[no_mangle]
pub extern "C" fn polycl_model_input(
    model: *const PolyclModel,
    index: usize,
    out_info: *mut PolyclTensorInfo,
) -> PolyclStatus {
    api("polycl_model_input", || {
        list_item(model, |m| &m.inputs, "input", index, out_info)
    })
}

/// The number of outputs of the converted model.
#[no_mangle]
pub extern "C" fn polycl_model_output_count(
    model: *const PolyclModel,
    out_count: *mut usize,
) -> PolyclStatus {
    api("polycl_model_output_count", || {
        list_count(model, |m| &m.outputs, out_count)
    })
}

/// Output `index`: name (valid while the model lives), type, declared shape.
#[no_mangle]
pub extern "C" fn polycl_model_output(
    model: *const PolyclModel,
    index: usize,
    out_info: *mut PolyclTensorInfo,
) -> PolyclStatus {
    api("polycl_model_output", || {
        list_item(model, |m| &m.outputs, "output", index, out_info)
    })
}

/// The number of state variables of the converted model.
#[no_mangle]
pub extern "C" fn polycl_model_variable_count(
    model: *const PolyclModel,
    out_count: *mut usize,
) -> PolyclStatus {
    api("polycl_model_variable_count", || {
        list_count(model, |m| &m.variables, out_count)
    })
}

/// State variable `index`: id (valid while the model lives), type and shape
/// (the append axis is dynamic).
#[no_mangle]
pub extern "C" fn polycl_model_variable(
    model: *const PolyclModel,
    index: usize,
    out_info: *mut PolyclTensorInfo,
) -> PolyclStatus {
    api("polycl_model_variable", || {
        list_item(model, |m| &m.variables, "variable", index, out_info)
    })
}

/// Whether the model has an input named `name`.
#[no_mangle]
pub extern "C" fn polycl_model_has_input(
    model: *const PolyclModel,
    name: *const c_char,
    out_found: *mut bool,
) -> PolyclStatus {
    api("polycl_model_has_input", || {
        // SAFETY: NULL or a live model.
        let m = unsafe { handle(model, "model") }?;
        let name = cstr(name, "name")?;
        out_ptr(out_found, "out_found")?;
        // SAFETY: checked non-null.
        unsafe {
            *out_found = m
                .inputs
                .iter()
                .any(|n| n.name.to_bytes() == name.as_bytes())
        };
        Ok(())
    })
}

/// Whether the model has an output named `name`.
#[no_mangle]
pub extern "C" fn polycl_model_has_output(
    model: *const PolyclModel,
    name: *const c_char,
    out_found: *mut bool,
) -> PolyclStatus {
    api("polycl_model_has_output", || {
        // SAFETY: NULL or a live model.
        let m = unsafe { handle(model, "model") }?;
        let name = cstr(name, "name")?;
        out_ptr(out_found, "out_found")?;
        // SAFETY: checked non-null.
        unsafe {
            *out_found = m
                .outputs
                .iter()
                .any(|n| n.name.to_bytes() == name.as_bytes())
        };
        Ok(())
    })
}

/// The model as text, one node a line (valid while the model lives).
#[no_mangle]
pub extern "C" fn polycl_model_dump(
    model: *const PolyclModel,
    out_text: *mut *const c_char,
) -> PolyclStatus {
    api("polycl_model_dump", || {
        // SAFETY: NULL or a live model.
        let m = unsafe { handle(model, "model") }?;
        out_ptr(out_text, "out_text")?;
        // SAFETY: checked non-null.
        unsafe { *out_text = m.dump.as_ptr() };
        Ok(())
    })
}
