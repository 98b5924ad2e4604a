//! The backend (stream) vtable: graph_compute runs the graph through the
//! decoder -> frontend -> passes -> plan path, with plans cached by fingerprint.

use super::device;
use crate::capi::boundary::guard;
use crate::config;
use crate::decoder::ggml_graph::{fingerprint, GgmlGraph, Memory};
use crate::error::Result;
use crate::frontend;
use crate::ggml::abi::*;
use crate::log;
use crate::passes;
use crate::plan::{cache::PlanCache, Plan};
use crate::runtime::Device;
use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct BackendCtx {
    pub dev: Arc<Device>,
    pub name: CString,
    pub plans: Mutex<PlanCache>,
    /// Set when a void entry (synchronize) failed: the next compute reports it.
    pub failed: AtomicBool,
}

static GUID: [u8; 16] = *b"polycl-opencl-01";

pub unsafe extern "C" fn init_backend(
    dev: ggml_backend_dev_t,
    _params: *const c_char,
) -> ggml_backend_t {
    guard("init_backend", std::ptr::null_mut(), || {
        // SAFETY: ggml passes one of our devices.
        let dc = unsafe { device::ctx(dev) };
        let ctx = Box::into_raw(Box::new(BackendCtx {
            dev: dc.dev.clone(),
            name: dc.name.clone(),
            plans: Mutex::new(PlanCache::new(config::get().plan_cache_size)),
            failed: AtomicBool::new(false),
        }));
        Box::into_raw(Box::new(ggml_backend {
            guid: &GUID as *const [u8; 16] as *mut [u8; 16],
            iface: ggml_backend_i {
                get_name: Some(get_name),
                free: Some(free),
                set_tensor_async: None,
                get_tensor_async: None,
                set_tensor_2d_async: None,
                get_tensor_2d_async: None,
                cpy_tensor_async: None,
                synchronize: Some(synchronize),
                graph_plan_create: None,
                graph_plan_free: None,
                graph_plan_update: None,
                graph_plan_compute: None,
                graph_compute: Some(graph_compute),
                event_record: None,
                event_wait: None,
                graph_optimize: None,
            },
            device: dev,
            context: ctx as *mut c_void,
        }))
    })
}

/// # Safety
/// `b` must be one of polycl's backends.
unsafe fn ctx<'a>(b: ggml_backend_t) -> &'a BackendCtx {
    // SAFETY: our backends carry a BackendCtx.
    unsafe { &*((*b).context as *const BackendCtx) }
}

unsafe extern "C" fn get_name(b: ggml_backend_t) -> *const c_char {
    // SAFETY: ggml passes our backend.
    unsafe { ctx(b) }.name.as_ptr()
}

unsafe extern "C" fn free(b: ggml_backend_t) {
    guard("backend free", (), || {
        // SAFETY: ggml frees each backend once; we own both boxes.
        unsafe {
            let c = Box::from_raw((*b).context as *mut BackendCtx);
            let _ = c.dev.synchronize();
            drop(c);
            drop(Box::from_raw(b));
        }
    })
}

unsafe extern "C" fn synchronize(b: ggml_backend_t) {
    guard("synchronize", (), || {
        // SAFETY: ggml passes our backend.
        let c = unsafe { ctx(b) };
        if let Err(e) = c.dev.synchronize() {
            log::error(&format!("{}: synchronize: {e}", c.dev.name));
            c.failed.store(true, Ordering::Relaxed);
        }
    })
}

pub unsafe extern "C" fn set_n_threads(_: ggml_backend_t, _: c_int) {}

fn compute(c: &BackendCtx, g: *mut ggml_cgraph) -> Result<()> {
    // SAFETY: ggml passes a valid cgraph whose tensors live in our buffers.
    let key = unsafe { fingerprint(g) };
    let mut cache = c.plans.lock();
    if cache.get(key).is_none() {
        // SAFETY: as above.
        let dec = unsafe { GgmlGraph::new(g, Memory::Placed) }?;
        let mut ir = frontend::translate(&dec)?;
        passes::run_pipeline(&mut ir, &mut [])?;
        let plan = Plan::build(&ir, &c.dev)?;
        log::debug(&format!(
            "{}: new plan: {} nodes -> {} launches ({} cached)",
            c.dev.name,
            ir.nodes.len(),
            plan.launches.len(),
            cache.len()
        ));
        cache.insert(key, plan).run()
    } else {
        cache.get(key).expect("present").run()
    }
}

unsafe extern "C" fn graph_compute(b: ggml_backend_t, g: *mut ggml_cgraph) -> c_int {
    guard("graph_compute", STATUS_FAILED, || {
        if b.is_null() || g.is_null() {
            log::error("graph_compute: NULL backend or graph");
            return STATUS_FAILED;
        }
        // SAFETY: ggml passes our backend.
        let c = unsafe { ctx(b) };
        if c.failed.swap(false, Ordering::Relaxed) {
            log::error(&format!("{}: an earlier operation failed", c.dev.name));
            return STATUS_FAILED;
        }
        match compute(c, g) {
            Ok(()) => STATUS_SUCCESS,
            Err(e) => {
                log::error(&format!("{}: graph_compute: {e}", c.dev.name));
                match e {
                    crate::error::Error::OutOfMemory { .. } => STATUS_ALLOC_FAILED,
                    _ => STATUS_FAILED,
                }
            }
        }
    })
}
