//! Bad input and panics at the polycl.h boundary: NULL at every pointer
//! argument, a panic forced inside every entry, graphs with cycles and
//! dangling inputs, op_params of the wrong size, types polycl does not
//! support, and garbage environment values. Each case has its expected
//! status and message; none may crash, abort or report INTERNAL except the
//! forced panics.

mod reliability_common;
use ggml_polycl::capi::decoder::*;
use ggml_polycl::capi::model::*;
use ggml_polycl::capi::*;
use ggml_polycl::fault;
use reliability_common::*;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::{null, null_mut};

/// A stateful model (one state variable) with its compiled form and a
/// request that has run once, so every function has a valid object to pair
/// with the NULL under test.
struct Objects {
    _g: Box<Graph>,
    dec: *mut PolyclDecoder,
    fe: *mut PolyclFrontend,
    model: Model,
    compiled: Compiled,
    req: Request,
    var: std::ffi::CString,
}

fn stateful_graph() -> Box<Graph> {
    let mut g = Box::new(Graph::default());
    let x = g.input("x", F32, &[C, 1]);
    let pos = g.input("pos", I64, &[1]);
    let cache = g.input("k_cache", F32, &[C, -1]);
    let kc = g.node(
        "SET_ROWS",
        &[],
        &[inp(x), inp(pos), inp(cache)],
        "k_cache_out",
        F32,
        &[C, -1],
    );
    let s = g.node(
        "SCALE",
        &[2f32.to_ne_bytes(), 0f32.to_ne_bytes()].concat(),
        &[inp(x)],
        "y",
        F32,
        &[C, 1],
    );
    g.output(nd(s));
    g.output(nd(kc));
    g
}

fn objects() -> Objects {
    let mut g = stateful_graph();
    let cb = g.callbacks();
    let mut dec = null_mut();
    assert_eq!(polycl_decoder_new(&cb, &mut dec), PolyclStatus::Ok);
    let mut fe = null_mut();
    assert_eq!(polycl_frontend_new(&mut fe), PolyclStatus::Ok);
    assert_eq!(
        polycl_frontend_add_make_stateful(fe, null(), 0, -1, null()),
        PolyclStatus::Ok
    );
    let mut m = null_mut();
    let st = polycl_frontend_convert(fe, dec, &mut m);
    assert_eq!(st, PolyclStatus::Ok, "{}", last_error());
    let model = Model(m);
    let mut info = PolyclTensorInfo {
        name: null(),
        ggml_type: 0,
        shape: PolyclShape::default(),
    };
    assert_eq!(polycl_model_variable(m, 0, &mut info), PolyclStatus::Ok);
    // SAFETY: the name lives as long as the model.
    let var = unsafe { CStr::from_ptr(info.name) }.to_owned();
    let compiled = compile(&model, &[0]).expect("compile");
    let req = request(&compiled, 0).expect("request");
    set_input(&req, "x", &[C, 1], &f32_bytes(&[1.0; C as usize]));
    set_input(&req, "pos", &[1], &0i64.to_ne_bytes());
    set_input(&req, "beam_idx", &[1], &0i32.to_ne_bytes());
    infer(&req).expect("infer");
    Objects {
        _g: g,
        dec,
        fe,
        model,
        compiled,
        req,
        var,
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        polycl_decoder_free(self.dec);
        polycl_frontend_free(self.fe);
    }
}

/// Runs `call`, which must fail with `want` and a message containing `msg`.
fn expect(case: &str, st: PolyclStatus, want: PolyclStatus, msg: &str) {
    let e = last_error();
    assert_eq!(st, want, "{case}: status {st:?} ({e})");
    assert!(e.contains(msg), "{case}: message {e:?} lacks {msg:?}");
}

#[test]
fn null_at_every_pointer_argument_is_an_invalid_argument() {
    let o = objects();
    let (m, c, r) = (o.model.0 as *const PolyclModel, o.compiled.0, o.req.0);
    let v = o.var.as_ptr();
    let name = c"y".as_ptr();
    let sh = shape(&[C, 1]);
    let data = [0u8; 64];
    let (mut n, mut found, mut ty, mut size) = (0usize, false, 0i32, 0usize);
    let mut psh = PolyclShape::default();
    let mut info = PolyclTensorInfo {
        name: null(),
        ggml_type: 0,
        shape: sh,
    };
    let mut text: *const c_char = null();
    let mut dec: *mut PolyclDecoder = null_mut();
    let mut mo: *mut PolyclModel = null_mut();
    let mut co: *mut PolyclCompiledModel = null_mut();
    let mut rq: *mut PolyclInferRequest = null_mut();
    let mut g = stateful_graph();
    let cb = g.callbacks();
    let dev = [0i32];
    const IA: PolyclStatus = PolyclStatus::InvalidArgument;
    let cases: Vec<(&str, PolyclStatus, &str)> = vec![
        (
            "device_count(out_count)",
            polycl_device_count(null_mut()),
            "out_count is NULL",
        ),
        (
            "memory_stats(out_stats)",
            polycl_memory_stats(null_mut()),
            "out_stats is NULL",
        ),
        (
            "decoder_new(callbacks)",
            polycl_decoder_new(null(), &mut dec),
            "callbacks is NULL",
        ),
        (
            "decoder_new(out_decoder)",
            polycl_decoder_new(&cb, null_mut()),
            "out_decoder is NULL",
        ),
        (
            "frontend_new(out_frontend)",
            polycl_frontend_new(null_mut()),
            "out_frontend is NULL",
        ),
        (
            "add_make_stateful(frontend)",
            polycl_frontend_add_make_stateful(null_mut(), null(), 0, -1, null()),
            "frontend is NULL",
        ),
        (
            "add_make_stateful(skip_caches)",
            polycl_frontend_add_make_stateful(o.fe, null(), 1, -1, null()),
            "skip_caches is NULL",
        ),
        (
            "add_make_stateful(skip_caches[1])",
            polycl_frontend_add_make_stateful(
                o.fe,
                [c"a".as_ptr(), null()].as_ptr(),
                2,
                -1,
                null(),
            ),
            "skip_caches[1] is NULL",
        ),
        (
            "add_cache_callback(frontend)",
            polycl_frontend_add_cache_callback(null_mut(), None, null_mut(), -1, null()),
            "frontend is NULL",
        ),
        (
            "add_cache_callback(callback)",
            polycl_frontend_add_cache_callback(o.fe, None, null_mut(), -1, null()),
            "callback is NULL",
        ),
        (
            "convert(decoder)",
            polycl_frontend_convert(o.fe, null(), &mut mo),
            "decoder is NULL",
        ),
        (
            "convert(out_model)",
            polycl_frontend_convert(o.fe, o.dec, null_mut()),
            "out_model is NULL",
        ),
        (
            "op_count(model)",
            polycl_model_op_count(null(), c"Parameter".as_ptr(), &mut n),
            "model is NULL",
        ),
        (
            "op_count(kind)",
            polycl_model_op_count(m, null(), &mut n),
            "kind is NULL",
        ),
        (
            "op_count(out_count)",
            polycl_model_op_count(m, c"Parameter".as_ptr(), null_mut()),
            "out_count is NULL",
        ),
        (
            "sink_count(model)",
            polycl_model_sink_count(null(), &mut n),
            "model is NULL",
        ),
        (
            "sink_count(out_count)",
            polycl_model_sink_count(m, null_mut()),
            "out_count is NULL",
        ),
        (
            "input_count(model)",
            polycl_model_input_count(null(), &mut n),
            "model is NULL",
        ),
        (
            "input_count(out_count)",
            polycl_model_input_count(m, null_mut()),
            "out_count is NULL",
        ),
        (
            "output_count(model)",
            polycl_model_output_count(null(), &mut n),
            "model is NULL",
        ),
        (
            "output_count(out_count)",
            polycl_model_output_count(m, null_mut()),
            "out_count is NULL",
        ),
        (
            "variable_count(model)",
            polycl_model_variable_count(null(), &mut n),
            "model is NULL",
        ),
        (
            "variable_count(out_count)",
            polycl_model_variable_count(m, null_mut()),
            "out_count is NULL",
        ),
        (
            "input(model)",
            polycl_model_input(null(), 0, &mut info),
            "model is NULL",
        ),
        (
            "input(out_info)",
            polycl_model_input(m, 0, null_mut()),
            "out_info is NULL",
        ),
        (
            "output(model)",
            polycl_model_output(null(), 0, &mut info),
            "model is NULL",
        ),
        (
            "output(out_info)",
            polycl_model_output(m, 0, null_mut()),
            "out_info is NULL",
        ),
        (
            "variable(model)",
            polycl_model_variable(null(), 0, &mut info),
            "model is NULL",
        ),
        (
            "variable(out_info)",
            polycl_model_variable(m, 0, null_mut()),
            "out_info is NULL",
        ),
        (
            "has_input(model)",
            polycl_model_has_input(null(), name, &mut found),
            "model is NULL",
        ),
        (
            "has_input(name)",
            polycl_model_has_input(m, null(), &mut found),
            "name is NULL",
        ),
        (
            "has_input(out_found)",
            polycl_model_has_input(m, name, null_mut()),
            "out_found is NULL",
        ),
        (
            "has_output(model)",
            polycl_model_has_output(null(), name, &mut found),
            "model is NULL",
        ),
        (
            "has_output(name)",
            polycl_model_has_output(m, null(), &mut found),
            "name is NULL",
        ),
        (
            "has_output(out_found)",
            polycl_model_has_output(m, name, null_mut()),
            "out_found is NULL",
        ),
        (
            "dump(model)",
            polycl_model_dump(null(), &mut text),
            "model is NULL",
        ),
        (
            "dump(out_text)",
            polycl_model_dump(m, null_mut()),
            "out_text is NULL",
        ),
        (
            "compile(model)",
            polycl_model_compile(null(), dev.as_ptr(), 1, &mut co),
            "model is NULL",
        ),
        (
            "compile(devices)",
            polycl_model_compile(m, null(), 1, &mut co),
            "devices is NULL",
        ),
        (
            "compile(out_compiled)",
            polycl_model_compile(m, dev.as_ptr(), 1, null_mut()),
            "out_compiled is NULL",
        ),
        (
            "request_new(compiled)",
            polycl_infer_request_new(null(), 0, &mut rq),
            "compiled is NULL",
        ),
        (
            "request_new(out_request)",
            polycl_infer_request_new(c, 0, null_mut()),
            "out_request is NULL",
        ),
        (
            "set_input(request)",
            polycl_infer_request_set_input(null_mut(), c"x".as_ptr(), &sh, data.as_ptr() as _, 64),
            "request is NULL",
        ),
        (
            "set_input(name)",
            polycl_infer_request_set_input(r, null(), &sh, data.as_ptr() as _, 64),
            "name is NULL",
        ),
        (
            "set_input(shape)",
            polycl_infer_request_set_input(r, c"x".as_ptr(), null(), data.as_ptr() as _, 64),
            "shape is NULL",
        ),
        (
            "set_input(data)",
            polycl_infer_request_set_input(r, c"x".as_ptr(), &sh, null(), 64),
            "data is NULL",
        ),
        (
            "infer(request)",
            polycl_infer_request_infer(null_mut()),
            "request is NULL",
        ),
        (
            "output_info(request)",
            polycl_infer_request_output_info(null(), name, &mut ty, &mut psh, &mut size),
            "request is NULL",
        ),
        (
            "output_info(name)",
            polycl_infer_request_output_info(r, null(), &mut ty, &mut psh, &mut size),
            "name is NULL",
        ),
        (
            "output_info(out_type)",
            polycl_infer_request_output_info(r, name, null_mut(), &mut psh, &mut size),
            "out_type is NULL",
        ),
        (
            "output_info(out_shape)",
            polycl_infer_request_output_info(r, name, &mut ty, null_mut(), &mut size),
            "out_shape is NULL",
        ),
        (
            "output_info(out_size)",
            polycl_infer_request_output_info(r, name, &mut ty, &mut psh, null_mut()),
            "out_size is NULL",
        ),
        (
            "get_output(request)",
            polycl_infer_request_get_output(null(), name, data.as_ptr() as _, 64),
            "request is NULL",
        ),
        (
            "get_output(name)",
            polycl_infer_request_get_output(r, null(), data.as_ptr() as _, 64),
            "name is NULL",
        ),
        (
            "get_output(dst)",
            polycl_infer_request_get_output(r, name, null_mut(), 64),
            "dst is NULL",
        ),
        (
            "reset_state(request)",
            polycl_infer_request_reset_state(null_mut()),
            "request is NULL",
        ),
        (
            "state_info(request)",
            polycl_infer_request_state_info(null(), v, &mut ty, &mut psh, &mut size),
            "request is NULL",
        ),
        (
            "state_info(variable_id)",
            polycl_infer_request_state_info(r, null(), &mut ty, &mut psh, &mut size),
            "variable_id is NULL",
        ),
        (
            "state_info(out_type)",
            polycl_infer_request_state_info(r, v, null_mut(), &mut psh, &mut size),
            "out_type is NULL",
        ),
        (
            "state_info(out_shape)",
            polycl_infer_request_state_info(r, v, &mut ty, null_mut(), &mut size),
            "out_shape is NULL",
        ),
        (
            "state_info(out_size)",
            polycl_infer_request_state_info(r, v, &mut ty, &mut psh, null_mut()),
            "out_size is NULL",
        ),
        (
            "get_state(request)",
            polycl_infer_request_get_state(null(), v, data.as_ptr() as _, 64),
            "request is NULL",
        ),
        (
            "get_state(variable_id)",
            polycl_infer_request_get_state(r, null(), data.as_ptr() as _, 64),
            "variable_id is NULL",
        ),
        (
            "get_state(dst)",
            polycl_infer_request_get_state(r, v, null_mut(), 64),
            "dst is NULL",
        ),
    ];
    // The vec evaluated every call before any message could be read, so this
    // checks statuses; `null_arguments_say_which_argument` checks messages.
    for (case, st, _) in &cases {
        assert_eq!(*st, IA, "{case}: {st:?}");
    }
    let mut cnt = cases.len();
    // Outputs stay untouched on failure.
    assert!(dec.is_null() && mo.is_null() && co.is_null() && rq.is_null());

    // NULL to every _free function is harmless.
    polycl_decoder_free(null_mut());
    polycl_frontend_free(null_mut());
    polycl_model_free(null_mut());
    polycl_compiled_model_free(null_mut());
    polycl_infer_request_free(null_mut());
    cnt += 5;
    eprintln!("NULL pointer cases through polycl.h: {cnt}");
}

/// The same NULL cases one call at a time, so each message is read right
/// after its call (the last error is per call).
#[test]
fn null_arguments_say_which_argument() {
    let o = objects();
    let (m, r) = (o.model.0 as *const PolyclModel, o.req.0);
    let mut n = 0usize;
    let mut ty = 0i32;
    let mut psh = PolyclShape::default();
    let mut size = 0usize;
    let v = o.var.as_ptr();
    const IA: PolyclStatus = PolyclStatus::InvalidArgument;
    expect(
        "device_count",
        polycl_device_count(null_mut()),
        IA,
        "out_count is NULL",
    );
    expect(
        "memory_stats",
        polycl_memory_stats(null_mut()),
        IA,
        "out_stats is NULL",
    );
    expect(
        "decoder_new",
        polycl_decoder_new(null(), &mut null_mut()),
        IA,
        "callbacks is NULL",
    );
    expect(
        "add_make_stateful",
        polycl_frontend_add_make_stateful(o.fe, [null()].as_ptr(), 1, -1, null()),
        IA,
        "skip_caches[0] is NULL",
    );
    expect(
        "op_count",
        polycl_model_op_count(m, null(), &mut n),
        IA,
        "kind is NULL",
    );
    expect(
        "state_info",
        polycl_infer_request_state_info(r, v, &mut ty, null_mut(), &mut size),
        IA,
        "out_shape is NULL",
    );
    expect(
        "output_info",
        polycl_infer_request_output_info(r, c"y".as_ptr(), &mut ty, &mut psh, null_mut()),
        IA,
        "out_size is NULL",
    );
    expect(
        "get_state",
        polycl_infer_request_get_state(r, v, null_mut(), C as usize * 4),
        IA,
        "dst is NULL",
    );
    // Success clears the message.
    assert_eq!(polycl_device_count(&mut 0), PolyclStatus::Ok);
    assert_eq!(last_error(), "");
}

/// NULL inside what the decoder callbacks hand over.
#[test]
fn null_inside_callback_answers_is_an_invalid_argument() {
    let mut cases = 0;
    let check = |g: &mut Graph, msg: &str| {
        let (st, e) = g.convert().err().expect("a NULL was accepted");
        assert_eq!(st, PolyclStatus::InvalidArgument, "{msg}: {e}");
        assert!(e.contains(msg), "{e:?} lacks {msg:?}");
    };
    let mut g = decode_step();
    g.inputs[0].name = null();
    check(&mut g, "the name of input 0 is NULL");
    cases += 1;
    let mut g = decode_step();
    g.weights[0].name = null();
    check(&mut g, "the name of weight 0 is NULL");
    cases += 1;
    let mut g = decode_step();
    g.weights[0].data = null();
    check(&mut g, "has 1024 bytes at NULL");
    cases += 1;
    let mut g = decode_step();
    g.nodes[1].null_params = true;
    check(&mut g, "op_params is NULL");
    cases += 1;
    let mut g = decode_step();
    g.nodes[0].null_inputs = true;
    check(&mut g, "inputs is NULL");
    cases += 1;
    let mut g = decode_step();
    g.nodes[0].outputs[0].name = null();
    check(&mut g, "the name of output 0 of node 0");
    cases += 1;
    let mut g = decode_step();
    g.nodes[0].op = c"".to_owned();
    let (st, e) = g.convert().err().unwrap();
    assert_eq!(st, PolyclStatus::InvalidGraph, "{e}");
    cases += 1;
    // Missing callbacks.
    let mut g = decode_step();
    for k in 0..6 {
        let mut cb = g.callbacks();
        match k {
            0 => cb.n_inputs = None,
            1 => cb.input = None,
            2 => cb.n_nodes = None,
            3 => cb.node = None,
            4 => cb.n_outputs = None,
            _ => cb.output = None,
        }
        let mut dec = null_mut();
        expect(
            "callbacks",
            polycl_decoder_new(&cb, &mut dec),
            PolyclStatus::InvalidArgument,
            "are required",
        );
        assert!(dec.is_null());
        cases += 1;
    }
    let mut cb = g.callbacks();
    cb.weight = None;
    let mut dec = null_mut();
    assert_eq!(polycl_decoder_new(&cb, &mut dec), PolyclStatus::Ok);
    let mut mo = null_mut();
    expect(
        "weight callback",
        polycl_frontend_convert(null(), dec, &mut mo),
        PolyclStatus::InvalidArgument,
        "n_weights and weight must both be set",
    );
    polycl_decoder_free(dec);
    cases += 1;
    eprintln!("NULL-in-callback cases: {cases}");
}

#[test]
fn cycles_and_dangling_inputs_are_invalid_graphs() {
    type Break = fn(&mut Graph);
    let cases: &[(&str, Break, &str)] = &[
        (
            "two-node cycle",
            |g| g.nodes[0].inputs[1] = nd(1),
            "names node 1, which is not an earlier node",
        ),
        (
            "self loop",
            |g| g.nodes[1].inputs[0] = nd(1),
            "names node 1, which is not an earlier node",
        ),
        (
            "forward reference",
            |g| g.nodes[2].inputs[0] = nd(4),
            "names node 4, which is not an earlier node",
        ),
        (
            "dangling node",
            |g| g.nodes[4].inputs[0] = nd(99),
            "names node 99",
        ),
        (
            "dangling port",
            |g| {
                g.nodes[4].inputs[0] = RawSource {
                    kind: 3,
                    index: 3,
                    port: 1,
                }
            },
            "names port 1 of node 3",
        ),
        (
            "dangling graph input",
            |g| g.nodes[0].inputs[1] = inp(7),
            "names graph input 7, but there are 3",
        ),
        (
            "dangling weight",
            |g| g.nodes[0].inputs[0] = wt(3),
            "names weight 3, but there are 1",
        ),
        (
            "graph output names a missing node",
            |g| g.outputs[0] = nd(5),
            "graph output 0: names node 5",
        ),
        (
            "graph output names nothing",
            |g| g.outputs[0].kind = 0,
            "graph output 0 names nothing",
        ),
        (
            "unknown source kind",
            |g| g.nodes[1].inputs[0].kind = 9,
            "source kind 9",
        ),
        (
            "unknown op",
            |g| g.nodes[1].op = c"FROBNICATE".to_owned(),
            "unknown op name 'FROBNICATE'",
        ),
        (
            "duplicate name",
            |g| g.nodes[1].outputs[0].name = g.inputs[0].name,
            "the name 'x' is used twice",
        ),
    ];
    for (what, brk, msg) in cases {
        let mut g = decode_step();
        brk(&mut g);
        let (st, e) = g
            .convert()
            .err()
            .unwrap_or_else(|| panic!("{what}: converted"));
        assert_eq!(st, PolyclStatus::InvalidGraph, "{what}: {e}");
        assert!(e.contains(msg), "{what}: {e:?} lacks {msg:?}");
    }
    eprintln!("cycle/dangling cases: {}", cases.len());
}

#[test]
fn op_params_of_the_wrong_size_are_refused() {
    // (op, srcs, accepted sizes) for every op whose ggml constructor writes
    // op_params; every other size must be refused by size, naming it.
    let ops: &[(&str, usize, &[usize])] = &[
        ("RMS_NORM", 1, &[4]),
        ("NORM", 1, &[4]),
        ("SCALE", 1, &[8]),
        ("SOFT_MAX", 1, &[8]),
        ("CONCAT", 2, &[4]),
        ("VIEW", 1, &[8]),
        ("PERMUTE", 1, &[16]),
        ("ROPE", 2, &[60, 64]),
        ("FLASH_ATTN_EXT", 3, &[12, 16, 20]),
        ("GLU", 1, &[8, 12, 16]),
        ("UNARY", 1, &[4, 8, 12, 16, 20]),
        ("MUL_MAT", 2, &[0, 4, 8, 12, 16]),
        ("ADD", 2, &[0]),
        ("GET_ROWS", 2, &[0]),
        ("SET_ROWS", 3, &[0]),
    ];
    let mut refused = 0;
    for (op, n_src, ok) in ops {
        for size in [0usize, 2, 4, 6, 8, 12, 16, 20, 24, 60, 64] {
            if ok.contains(&size) {
                continue;
            }
            let mut g = Graph::default();
            let x = g.input("x", F32, &[C, 1]);
            let srcs: Vec<RawSource> = (0..*n_src).map(|_| inp(x)).collect();
            let y = g.node(op, &vec![0u8; size], &srcs, "y", F32, &[C, 1]);
            g.output(nd(y));
            let (st, e) = g
                .convert()
                .err()
                .unwrap_or_else(|| panic!("{op} with {size} op_params bytes converted"));
            assert_eq!(st, PolyclStatus::InvalidGraph, "{op}/{size}: {e}");
            assert!(
                e.contains(&format!("op_params of {size} bytes")),
                "{op}/{size}: {e}"
            );
            refused += 1;
        }
    }
    // More than ggml's 64 bytes is refused before anything reads them.
    let mut g = decode_step();
    g.nodes[1].params = vec![0; 68];
    let (st, e) = g.convert().err().unwrap();
    assert_eq!(st, PolyclStatus::InvalidGraph);
    assert!(e.contains("op_params of 68 bytes, at most 64"), "{e}");
    refused += 1;
    eprintln!("wrong op_params sizes refused: {refused}");
}

#[test]
fn types_polycl_does_not_support_are_refused_with_a_status() {
    let mut cases = 0;
    // A type id ggml does not have.
    for ty in [99, -1, 39] {
        let mut g = decode_step();
        g.inputs[0].ggml_type = ty;
        let (st, e) = g.convert().err().unwrap();
        assert_eq!(st, PolyclStatus::InvalidGraph, "{e}");
        assert!(e.contains(&format!("ggml type {ty}")), "{e}");
        cases += 1;
    }
    // Types ggml has but polycl's kernels do not take for these ops: refused at
    // conversion (Unsupported) or at compile/infer, never INTERNAL or a crash.
    for (op, ty, n_src) in [
        ("SOFT_MAX", 28, 1), // F64
        ("RMS_NORM", 26, 1), // I32
        ("ADD", 27, 2),      // I64
        ("MUL_MAT", 30, 2),  // BF16
        ("SCALE", 24, 1),    // I8
    ] {
        let mut g = Graph::default();
        let x = g.input("x", ty, &[C, 1]);
        let srcs: Vec<RawSource> = (0..n_src).map(|_| inp(x)).collect();
        let params = match op {
            "SOFT_MAX" | "SCALE" => vec![0u8; 8],
            "RMS_NORM" => vec![0u8; 4],
            _ => vec![],
        };
        let oty = if op == "MUL_MAT" { F32 } else { ty };
        let ne: &[i64] = if op == "MUL_MAT" { &[1, 1] } else { &[C, 1] };
        let y = g.node(op, &params, &srcs, "y", oty, ne);
        g.output(nd(y));
        let r = g.convert().and_then(|m| {
            let c = compile(&m, &[0])?;
            let r = request(&c, 0)?;
            set_input(&r, "x", &[C, 1], &[0u8; 16 * 8]);
            infer(&r)
        });
        match r {
            Err((st, e)) => {
                assert!(
                    matches!(st, PolyclStatus::Unsupported | PolyclStatus::InvalidGraph),
                    "{op} on type {ty}: {st:?} {e}"
                );
                assert!(!e.is_empty());
            }
            Ok(()) => panic!("{op} on type {ty} ran"),
        }
        cases += 1;
    }
    eprintln!("unsupported type cases: {cases}");
}

/// Every C API entry with a forced panic inside its boundary: a status
/// (INTERNAL) and a message, or the entry's harmless default for the void
/// and string entries; then the same call works again.
#[test]
fn a_panic_inside_every_c_api_entry_becomes_a_status() {
    let o = objects();
    let (m, c, r) = (o.model.0 as *const PolyclModel, o.compiled.0, o.req.0);
    let v = o.var.as_ptr();
    let mut g = stateful_graph();
    let cb = g.callbacks();
    let y = c"y".as_ptr();
    let buf = vec![0u8; C as usize * 4];
    type Call<'a> = Box<dyn Fn() -> PolyclStatus + 'a>;
    let mut n = 0usize;
    let mut sz = 0usize;
    let mut ty = 0i32;
    let mut psh = PolyclShape::default();
    let mut found = false;
    let mut info = PolyclTensorInfo {
        name: null(),
        ggml_type: 0,
        shape: PolyclShape::default(),
    };
    let mut text = null();
    let mut stats = PolyclMemoryStats::default();
    let mut count = 0i32;
    // Raw pointers so each closure can write its outputs.
    let (pn, psz, pty, ppsh, pfound, pinfo, ptext, pstats, pcount) = (
        &mut n as *mut usize,
        &mut sz as *mut usize,
        &mut ty as *mut i32,
        &mut psh as *mut PolyclShape,
        &mut found as *mut bool,
        &mut info as *mut PolyclTensorInfo,
        &mut text as *mut *const c_char,
        &mut stats as *mut PolyclMemoryStats,
        &mut count as *mut i32,
    );
    let sh = shape(&[C, 1]);
    let dev = [0i32];
    let entries: Vec<(&str, Call)> = vec![
        (
            "polycl_device_count",
            Box::new(|| polycl_device_count(pcount)),
        ),
        (
            "polycl_memory_stats",
            Box::new(|| polycl_memory_stats(pstats)),
        ),
        (
            "polycl_decoder_new",
            Box::new(|| {
                let mut d = null_mut();
                let st = polycl_decoder_new(&cb, &mut d);
                polycl_decoder_free(d);
                st
            }),
        ),
        (
            "polycl_frontend_new",
            Box::new(|| {
                let mut f = null_mut();
                let st = polycl_frontend_new(&mut f);
                polycl_frontend_free(f);
                st
            }),
        ),
        (
            "polycl_frontend_add_make_stateful",
            Box::new(|| {
                let mut f = null_mut();
                polycl_frontend_new(&mut f);
                let st = polycl_frontend_add_make_stateful(f, null(), 0, -1, null());
                polycl_frontend_free(f);
                st
            }),
        ),
        (
            "polycl_frontend_add_cache_callback",
            Box::new(|| {
                unsafe extern "C" fn leave(
                    _: *mut c_void,
                    _: *const c_char,
                    _: i32,
                    _: *const PolyclShape,
                    _: bool,
                ) -> PolyclCacheChoice {
                    PolyclCacheChoice::Leave
                }
                let mut f = null_mut();
                polycl_frontend_new(&mut f);
                let st = polycl_frontend_add_cache_callback(f, Some(leave), null_mut(), -1, null());
                polycl_frontend_free(f);
                st
            }),
        ),
        (
            "polycl_frontend_convert",
            Box::new(|| {
                let mut mo = null_mut();
                let st = polycl_frontend_convert(o.fe, o.dec, &mut mo);
                polycl_model_free(mo);
                st
            }),
        ),
        (
            "polycl_model_op_count",
            Box::new(|| polycl_model_op_count(m, c"Assign".as_ptr(), pn)),
        ),
        (
            "polycl_model_sink_count",
            Box::new(|| polycl_model_sink_count(m, pn)),
        ),
        (
            "polycl_model_input_count",
            Box::new(|| polycl_model_input_count(m, pn)),
        ),
        (
            "polycl_model_output_count",
            Box::new(|| polycl_model_output_count(m, pn)),
        ),
        (
            "polycl_model_variable_count",
            Box::new(|| polycl_model_variable_count(m, pn)),
        ),
        (
            "polycl_model_input",
            Box::new(|| polycl_model_input(m, 0, pinfo)),
        ),
        (
            "polycl_model_output",
            Box::new(|| polycl_model_output(m, 0, pinfo)),
        ),
        (
            "polycl_model_variable",
            Box::new(|| polycl_model_variable(m, 0, pinfo)),
        ),
        (
            "polycl_model_has_input",
            Box::new(|| polycl_model_has_input(m, c"x".as_ptr(), pfound)),
        ),
        (
            "polycl_model_has_output",
            Box::new(|| polycl_model_has_output(m, y, pfound)),
        ),
        (
            "polycl_model_dump",
            Box::new(|| polycl_model_dump(m, ptext)),
        ),
        (
            "polycl_model_compile",
            Box::new(|| {
                let mut co = null_mut();
                let st = polycl_model_compile(m, dev.as_ptr(), 1, &mut co);
                polycl_compiled_model_free(co);
                st
            }),
        ),
        (
            "polycl_infer_request_new",
            Box::new(|| {
                let mut rq = null_mut();
                let st = polycl_infer_request_new(c, 0, &mut rq);
                polycl_infer_request_free(rq);
                st
            }),
        ),
        (
            "polycl_infer_request_set_input",
            Box::new(|| {
                polycl_infer_request_set_input(r, c"x".as_ptr(), &sh, buf.as_ptr() as _, buf.len())
            }),
        ),
        (
            "polycl_infer_request_infer",
            Box::new(|| polycl_infer_request_infer(r)),
        ),
        (
            "polycl_infer_request_output_info",
            Box::new(|| polycl_infer_request_output_info(r, y, pty, ppsh, psz)),
        ),
        (
            "polycl_infer_request_get_output",
            Box::new(|| {
                let mut out = vec![0u8; C as usize * 4];
                polycl_infer_request_get_output(r, y, out.as_mut_ptr() as _, out.len())
            }),
        ),
        (
            "polycl_infer_request_reset_state",
            Box::new(|| polycl_infer_request_reset_state(r)),
        ),
        (
            "polycl_infer_request_state_info",
            Box::new(|| polycl_infer_request_state_info(r, v, pty, ppsh, psz)),
        ),
        (
            "polycl_infer_request_get_state",
            Box::new(|| {
                let (mut t, mut s, mut z) = (0, PolyclShape::default(), 0usize);
                polycl_infer_request_state_info(r, v, &mut t, &mut s, &mut z);
                let mut out = vec![0u8; z];
                polycl_infer_request_get_state(r, v, out.as_mut_ptr() as _, z)
            }),
        ),
    ];
    for (name, call) in &entries {
        fault::arm_thread(&format!("panic:{name}")).unwrap();
        let st = call();
        assert_eq!(fault::disarm_thread(), 0, "{name}: the fault did not fire");
        let e = last_error();
        assert_eq!(st, PolyclStatus::Internal, "{name}: {st:?} {e}");
        assert!(
            e.contains("injected panic in") && e.contains(name),
            "{name}: {e}"
        );
        // The same call works afterwards: nothing was left half-done.
        let again = call();
        assert_eq!(
            again,
            PolyclStatus::Ok,
            "{name} after the panic: {}",
            last_error()
        );
    }
    // Entries without a status: the boundary answers their default.
    fault::arm_thread("panic:polycl_version").unwrap();
    // SAFETY: polycl_version returns a static string.
    assert_eq!(unsafe { CStr::from_ptr(polycl_version()) }, c"0.1.0");
    fault::arm_thread("panic:polycl_last_error").unwrap();
    // SAFETY: the default is a static "".
    assert_eq!(unsafe { CStr::from_ptr(polycl_last_error()) }, c"");
    for name in [
        "polycl_decoder_free",
        "polycl_frontend_free",
        "polycl_model_free",
        "polycl_compiled_model_free",
        "polycl_infer_request_free",
    ] {
        fault::arm_thread(&format!("panic:{name}")).unwrap();
        // NULL: the panic fires before the argument is looked at, and a NULL
        // handle leaks nothing when the free is abandoned.
        match name {
            "polycl_decoder_free" => polycl_decoder_free(null_mut()),
            "polycl_frontend_free" => polycl_frontend_free(null_mut()),
            "polycl_model_free" => polycl_model_free(null_mut()),
            "polycl_compiled_model_free" => polycl_compiled_model_free(null_mut()),
            _ => polycl_infer_request_free(null_mut()),
        }
        assert_eq!(fault::disarm_thread(), 0, "{name}: the fault did not fire");
    }
    eprintln!(
        "C API entries with a forced panic: {} with a status, 7 void/string",
        entries.len()
    );
}

#[test]
fn garbage_environment_values_name_their_variable() {
    use ggml_polycl::config::parse;
    let garbage: &[(&str, &str)] = &[
        ("POLYCL_DEVICES", "zero"),
        ("POLYCL_DEVICES", "1,1"),
        ("POLYCL_DEVICES", ","),
        ("POLYCL_LOG", "yes"),
        ("POLYCL_PLAN_CACHE", "-3"),
        ("POLYCL_PLAN_CACHE", "banana"),
        ("POLYCL_PLAN_CACHE", "0"),
        ("POLYCL_FAST_KERNELS", "fast"),
        ("POLYCL_Q8_CACHE", "7"),
        ("POLYCL_MEM_LIMIT_MB", "lots"),
        ("POLYCL_MEM_LIMIT_MB", "0"),
        ("POLYCL_MEM_LIMIT_MB", "99999999999999999999999"),
        ("POLYCL_FAULT", "explode"),
        ("POLYCL_FAULT", "queue@0"),
        ("POLYCL_PROGRAM_CACHE", "/proc/self/status"),
    ];
    for (var, val) in garbage {
        let c = parse(&|k| (k == *var).then(|| val.to_string()));
        assert_eq!(c.problems.len(), 1, "{var}={val}: {:?}", c.problems);
        let p = &c.problems[0];
        assert!(p.contains(&format!("{var}=")), "{var}={val}: {p}");
        assert!(p.contains(val), "{var}={val}: the value is not quoted: {p}");
    }
    eprintln!("garbage environment values: {}", garbage.len());
}

/// End to end: a process started with garbage values says so on its log,
/// naming each variable, and still finds its devices.
#[test]
fn a_process_with_garbage_environment_logs_each_variable() {
    if std::env::var_os("RELIABILITY_CHILD").is_some() {
        let n = ggml_polycl::runtime::devices()
            .map(|d| d.len())
            .unwrap_or(0);
        println!("child devices: {n}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_process_with_garbage_environment_logs_each_variable",
            "--nocapture",
        ])
        .env("RELIABILITY_CHILD", "1")
        .env("POLYCL_PLAN_CACHE", "banana")
        .env("POLYCL_LOG", "maybe")
        .env("POLYCL_MEM_LIMIT_MB", "-1")
        .env("POLYCL_FAULT", "explode")
        .env("POLYCL_NO_SUCH_SETTING", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {err}\n{so}");
    for needle in [
        "POLYCL_PLAN_CACHE=\"banana\"",
        "POLYCL_LOG=\"maybe\"",
        "POLYCL_MEM_LIMIT_MB=\"-1\"",
        "POLYCL_FAULT=\"explode\"",
        "POLYCL_NO_SUCH_SETTING is not a polycl setting",
    ] {
        assert!(err.contains(needle), "log lacks {needle}: {err}");
    }
    assert!(!so.contains("child devices: 0"), "{so}");
}
