//! The backend (stream) vtable: graph_compute runs the graph through the
//! decoder -> frontend -> passes -> plan path, with plans cached by fingerprint.

use super::device;
use crate::capi::boundary::guard;
use crate::config;
use crate::decoder::ggml_graph::{fingerprint, GgmlGraph, Memory};
use crate::error::{Error, Result};
use crate::frontend;
use crate::ggml::abi::*;
use crate::log;
use crate::passes;
use crate::plan::{cache::PlanCache, Plan};
use crate::runtime::profile::{host_call, HostCall};
use crate::runtime::Device;
use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub struct BackendCtx {
    pub dev: Arc<Device>,
    pub name: CString,
    pub plans: Mutex<PlanCache>,
    /// The device's `failures` count already reported by this backend.
    pub seen_failures: AtomicU64,
}

static GUID: [u8; 16] = *b"polycl-opencl-01";

/// # Safety
/// `dev` must be one of polycl's devices (ggml calls it through the device vtable).
pub unsafe extern "C" fn init_backend(
    dev: ggml_backend_dev_t,
    _params: *const c_char,
) -> ggml_backend_t {
    guard("init_backend", std::ptr::null_mut(), || {
        let Some(dc) = device::ours(dev) else {
            return std::ptr::null_mut();
        };
        // Failures charged before this backend existed are not its to report:
        // a fresh backend starts clean.
        let ctx = Box::into_raw(Box::new(BackendCtx {
            dev: dc.dev.clone(),
            name: dc.name.clone(),
            plans: Mutex::new(PlanCache::new(config::get().plan_cache_size)),
            seen_failures: AtomicU64::new(dc.dev.failures.load(Ordering::Relaxed)),
        }));
        Box::into_raw(Box::new(ggml_backend {
            guid: &GUID as *const [u8; 16] as *mut [u8; 16],
            iface: ggml_backend_i {
                get_name: Some(get_name),
                free: Some(free),
                set_tensor_async: None,
                get_tensor_async: Some(super::buffer::get_tensor_async),
                set_tensor_2d_async: None,
                get_tensor_2d_async: None,
                cpy_tensor_async: Some(super::comm::cpy_tensor_async),
                synchronize: Some(synchronize),
                graph_plan_create: None,
                graph_plan_free: None,
                graph_plan_update: None,
                graph_plan_compute: None,
                graph_compute: Some(graph_compute),
                event_record: Some(super::comm::event_record),
                event_wait: Some(super::comm::event_wait),
                graph_optimize: Some(super::optimize::graph_optimize),
            },
            device: dev,
            context: ctx as *mut c_void,
        }))
    })
}

/// `b`'s context if it is one of polycl's backends (non-NULL, polycl's GUID,
/// a context); None for anything else, which every entry refuses.
pub(crate) fn ours<'a>(b: ggml_backend_t) -> Option<&'a BackendCtx> {
    if b.is_null() {
        return None;
    }
    // SAFETY: non-NULL; ggml passes a live backend struct.
    let (guid, context) = unsafe { ((*b).guid, (*b).context) };
    if context.is_null() || !std::ptr::eq(guid as *const [u8; 16], &GUID) {
        return None;
    }
    // SAFETY: polycl's backends carry a BackendCtx.
    Some(unsafe { &*(context as *const BackendCtx) })
}

unsafe extern "C" fn get_name(b: ggml_backend_t) -> *const c_char {
    guard("backend get_name", std::ptr::null(), || {
        ours(b).map_or(std::ptr::null(), |c| c.name.as_ptr())
    })
}

unsafe extern "C" fn free(b: ggml_backend_t) {
    guard("backend free", (), || {
        if ours(b).is_none() {
            return log::error("backend free: NULL or not a polycl backend");
        }
        // SAFETY: ours; ggml frees each backend once; we own both boxes.
        unsafe {
            let c = Box::from_raw((*b).context as *mut BackendCtx);
            let _ = c.dev.synchronize();
            drop(c);
            drop(Box::from_raw(b));
        }
    })
}

unsafe extern "C" fn synchronize(b: ggml_backend_t) {
    // A failed (or panicking) synchronize is charged to the device: its
    // queue is shared by every backend on it.
    super::void_entry(
        "synchronize",
        || ours(b).map(|c| c.dev.clone()),
        || {
            let c = ours(b).ok_or_else(|| {
                Error::InvalidArgument("synchronize: NULL or not a polycl backend".into())
            })?;
            host_call(HostCall::Synchronize, || c.dev.synchronize())
        },
    )
}

/// # Safety
/// Any arguments: polycl has no host threads to size, so this does nothing.
pub unsafe extern "C" fn set_n_threads(_: ggml_backend_t, _: c_int) {
    guard("set_n_threads", (), || {})
}

/// Refuses cgraphs whose node list cannot be walked (NULL graph, NULL node
/// array or node), before the decoder and the fingerprint walk it.
///
/// # Safety
/// `g` is NULL or points to a cgraph struct.
unsafe fn check_graph(g: *const ggml_cgraph) -> Result<()> {
    if g.is_null() {
        return Err(Error::InvalidArgument("graph is NULL".into()));
    }
    // SAFETY: non-NULL.
    let (n, nodes) = unsafe { ((*g).n_nodes, (*g).nodes) };
    if n < 0 || (n > 0 && nodes.is_null()) {
        return Err(Error::InvalidGraph(format!(
            "{n} nodes at a NULL node array"
        )));
    }
    for i in 0..n as usize {
        // SAFETY: nodes holds n entries.
        if unsafe { *nodes.add(i) }.is_null() {
            return Err(Error::InvalidGraph(format!("node {i} is NULL")));
        }
    }
    Ok(())
}

fn compute(c: &BackendCtx, g: *mut ggml_cgraph) -> Result<()> {
    let mut cache = c.plans.lock();
    // SAFETY: ggml passes a valid cgraph whose tensors live in our buffers.
    let uid = unsafe { (*g).uid };
    // SAFETY: as above.
    let key = cache.key(uid, || unsafe { fingerprint(g) });
    // The per-token path: one lookup, then enqueues.
    if let Some(plan) = cache.get(key) {
        return run_counted(c, plan);
    }
    let t0 = std::time::Instant::now();
    // SAFETY: as above.
    let dec = unsafe { GgmlGraph::new(g, Memory::Placed) }?;
    let mut ir = frontend::translate(&dec)?;
    passes::run_pipeline(&mut ir, &mut [])?;
    if config::get().fuse && crate::plan::mul_mv::wanted(&c.dev) {
        let fused = passes::fuse::run_for(&mut ir, c.dev.max_work_group);
        crate::ir::verify::verify(&ir)?;
        log::debug(&format!("{}: fused: {fused:?}", c.dev.name));
    }
    let plan = Plan::build(&ir, &c.dev)?;
    log::debug(&format!(
        "{}: new plan: {} nodes -> {} launches ({} cached) in {} us",
        c.dev.name,
        ir.nodes.len(),
        plan.launches.len(),
        cache.len(),
        t0.elapsed().as_micros()
    ));
    if config::get().verbose {
        let names = plan.kernel_names();
        log::debug(&format!("{}: launches: {}", c.dev.name, names.join(" ")));
    }
    run_counted(c, cache.insert(key, plan))
}

/// Runs `plan`; with `POLYCL_LOG=1` logs how many kernels it launched and
/// the host time the enqueues took
/// (scripts/test-launches.sh reads these lines).
fn run_counted(c: &BackendCtx, plan: &Arc<Plan>) -> Result<()> {
    if !config::get().verbose {
        return plan.run();
    }
    let before = crate::runtime::executor::LAUNCHES.load(Ordering::Relaxed);
    let t0 = std::time::Instant::now();
    let r = plan.run();
    let us = t0.elapsed().as_micros();
    let n = crate::runtime::executor::LAUNCHES.load(Ordering::Relaxed) - before;
    log::debug(&format!(
        "{}: graph compute: {n} launches, enqueued in {us} us",
        c.dev.name
    ));
    r
}

unsafe extern "C" fn graph_compute(b: ggml_backend_t, g: *mut ggml_cgraph) -> c_int {
    guard("graph_compute", STATUS_FAILED, || {
        let Some(c) = ours(b) else {
            log::error("graph_compute: NULL or not a polycl backend");
            return STATUS_FAILED;
        };
        let charged = c.dev.failures.load(Ordering::Relaxed);
        let earlier = c.seen_failures.swap(charged, Ordering::Relaxed) != charged;
        if earlier {
            log::error(&format!(
                "{}: an earlier operation (transfer, synchronize) failed",
                c.dev.name
            ));
            return STATUS_FAILED;
        }
        // SAFETY: NULL is refused; otherwise ggml passes a valid cgraph.
        if let Err(e) = unsafe { check_graph(g) } {
            log::error(&format!("{}: graph_compute: {e}", c.dev.name));
            return STATUS_FAILED;
        }
        crate::runtime::profile::compute_entered();
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
