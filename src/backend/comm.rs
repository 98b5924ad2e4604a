//! Device-to-device work the host asks for: ggml events, `cpy_tensor_async`,
//! and the `ggml_backend_comm_*` all-reduce that ggml's meta backend
//! (`-sm tensor`) calls after every partial-sum subgraph.
//!
//! All of it is enqueued with OpenCL events between the devices' in-order
//! queues (devices of one platform share a context), so neither the host nor
//! the meta backend waits; without these, the meta backend and the scheduler
//! synchronize both devices and copy through host memory.

use super::buffer::{locate, nbytes};
use super::stream;
use crate::capi::boundary::guard;
use crate::error::{Error, Result};
use crate::ggml::abi::*;
use crate::log;
use crate::runtime::executor::{ArgBinder, Launch};
use crate::runtime::peer::{self, Region};
use crate::runtime::{counters, program, Device, DeviceBuffer};
use opencl3::event::Event;
use parking_lot::Mutex;
use std::ffi::c_void;
use std::sync::Arc;

// ---------------------------------------------------------------------------
// Events (device and backend vtables).

struct EventCtx {
    ev: Mutex<Option<Event>>,
}

/// # Safety
/// `dev` is the device ggml creates the event for.
pub unsafe extern "C" fn event_new(dev: ggml_backend_dev_t) -> ggml_backend_event_t {
    guard("event_new", std::ptr::null_mut(), || {
        let ctx = Box::into_raw(Box::new(EventCtx {
            ev: Mutex::new(None),
        }));
        Box::into_raw(Box::new(ggml_backend_event {
            device: dev,
            context: ctx as *mut c_void,
        }))
    })
}

/// # Safety
/// `ev` was made by `event_new` and is freed once.
pub unsafe extern "C" fn event_free(_: ggml_backend_dev_t, ev: ggml_backend_event_t) {
    guard("event_free", (), || {
        if ev.is_null() {
            return;
        }
        // SAFETY: made by event_new; ggml frees it once.
        unsafe {
            drop(Box::from_raw((*ev).context as *mut EventCtx));
            drop(Box::from_raw(ev));
        }
    })
}

/// # Safety
/// `ev` was made by `event_new`.
unsafe fn event_ctx<'a>(ev: ggml_backend_event_t) -> Option<&'a EventCtx> {
    if ev.is_null() {
        return None;
    }
    // SAFETY: our events carry an EventCtx.
    Some(unsafe { &*((*ev).context as *const EventCtx) })
}

/// # Safety
/// `ev` was made by `event_new`.
pub unsafe extern "C" fn event_synchronize(dev: ggml_backend_dev_t, ev: ggml_backend_event_t) {
    super::void_entry(
        "event_synchronize",
        || super::device::ours(dev).map(|c| c.dev.clone()),
        || {
            // SAFETY: ggml passes our event.
            let Some(c) = (unsafe { event_ctx(ev) }) else {
                return Ok(());
            };
            match &*c.ev.lock() {
                Some(e) => e.wait().map_err(|e| Error::OpenCl("clWaitForEvents", e.0)),
                None => Ok(()),
            }
        },
    )
}

/// # Safety
/// `b` is a polycl backend and `ev` was made by `event_new`.
pub unsafe extern "C" fn event_record(b: ggml_backend_t, ev: ggml_backend_event_t) {
    super::void_entry(
        "event_record",
        || stream::ours(b).map(|c| c.dev.clone()),
        || {
            let Some(bc) = stream::ours(b) else {
                return Err(Error::InvalidArgument("not a polycl backend".into()));
            };
            // SAFETY: ggml passes our event.
            let Some(c) = (unsafe { event_ctx(ev) }) else {
                return Err(Error::InvalidArgument("NULL event".into()));
            };
            let m = peer::marker(&bc.dev)?;
            bc.dev.flush()?;
            *c.ev.lock() = Some(m);
            Ok(())
        },
    )
}

/// # Safety
/// `b` is a polycl backend and `ev` was made by `event_new`.
pub unsafe extern "C" fn event_wait(b: ggml_backend_t, ev: ggml_backend_event_t) {
    super::void_entry(
        "event_wait",
        || stream::ours(b).map(|c| c.dev.clone()),
        || {
            let Some(bc) = stream::ours(b) else {
                return Err(Error::InvalidArgument("not a polycl backend".into()));
            };
            // SAFETY: ggml passes our event.
            let Some(c) = (unsafe { event_ctx(ev) }) else {
                return Err(Error::InvalidArgument("NULL event".into()));
            };
            let held = c.ev.lock();
            let Some(e) = &*held else { return Ok(()) };
            // An event of another context cannot be waited on by this queue:
            // the host waits instead.
            // SAFETY: `ev.device` is the device ggml made the event for.
            let same = unsafe { super::device::ours((*ev).device) }
                .is_some_and(|d| peer::linked(&d.dev, &bc.dev));
            if same {
                peer::barrier(&bc.dev, &[e])
            } else {
                e.wait().map_err(|e| Error::OpenCl("clWaitForEvents", e.0))
            }
        },
    )
}

// ---------------------------------------------------------------------------
// cpy_tensor_async

/// A tensor's memory: device buffer and byte offset (polycl buffers only).
///
/// # Safety
/// `t` must be a valid tensor.
unsafe fn place(t: *const ggml_tensor, size: usize) -> Option<(Arc<DeviceBuffer>, usize)> {
    // SAFETY: caller guarantees validity; `locate` only accepts polycl buffers.
    unsafe { locate(t, 0, size) }.ok()
}

/// The backend vtable's `cpy_tensor_async`, called on the destination's
/// backend: a copy between two polycl devices of one context, on the source
/// queue after the destination queue's pending work, with the destination
/// queue waiting for the copy. Declines (false) anything else, and ggml then
/// copies through the host.
///
/// # Safety
/// ggml passes valid backends and tensors.
pub unsafe extern "C" fn cpy_tensor_async(
    b_src: ggml_backend_t,
    b_dst: ggml_backend_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    guard("cpy_tensor_async", false, || {
        let (Some(_), Some(_)) = (stream::ours(b_src), stream::ours(b_dst)) else {
            return false;
        };
        if src.is_null() || dst.is_null() {
            return false;
        }
        // SAFETY: valid tensors.
        let size = unsafe { nbytes(src) };
        // SAFETY: as above.
        if size != unsafe { nbytes(dst) } {
            return false;
        }
        // SAFETY: as above.
        let (Some((sb, so)), Some((db, dof))) =
            (unsafe { place(src, size) }, unsafe { place(dst, size) })
        else {
            return false;
        };
        if !peer::linked(&sb.device, &db.device) {
            return false;
        }
        match async_copy(&sb, so, &db, dof, size) {
            Ok(()) => {
                counters::async_copy();
                true
            }
            Err(e) => {
                // Nothing was enqueued for a failed step: ggml's host copy
                // still gives the right data.
                log::error(&format!("cpy_tensor_async: {e}; copying through the host"));
                false
            }
        }
    })
}

fn async_copy(
    sb: &DeviceBuffer,
    so: usize,
    db: &DeviceBuffer,
    dof: usize,
    size: usize,
) -> Result<()> {
    let (s, d) = (&sb.device, &db.device);
    let src = Region {
        mem: sb.cl_mem() as _,
        offset: so as u64,
    };
    let dst = Region {
        mem: db.cl_mem() as _,
        offset: dof as u64,
    };
    if Arc::ptr_eq(s, d) {
        drop(peer::copy(s, s, src, d, dst, size as u64, &[])?);
        return s.flush();
    }
    // The destination may still be read by work queued on its device.
    let dst_idle = peer::marker(d)?;
    d.flush()?;
    let c = peer::copy(s, s, src, d, dst, size as u64, &[&dst_idle])?;
    s.flush()?;
    peer::barrier(d, &[&c])?;
    d.flush()
}

// ---------------------------------------------------------------------------
// ggml_backend_comm_*: the all-reduce of -sm tensor.

struct Comm {
    devices: Vec<Arc<Device>>,
    /// Per device index 1..: a buffer on device 0 its tensor is copied into.
    tmp: Mutex<Vec<Option<DeviceBuffer>>>,
    /// The accumulate launch on device 0 (arguments rebound per call).
    acc: Mutex<Option<Launch>>,
}

/// `ggml_backend_comm_init(backends, n)`: a context when every backend is a
/// polycl backend and all share one OpenCL context (else NULL, and the meta
/// backend uses its own fallback).
///
/// # Safety
/// `backends` points to `n` backends.
pub unsafe extern "C" fn comm_init(backends: *mut ggml_backend_t, n: usize) -> *mut c_void {
    guard("ggml_backend_comm_init", std::ptr::null_mut(), || {
        if backends.is_null() || n < 2 {
            return std::ptr::null_mut();
        }
        let mut devices = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: the caller passes n backends.
            let b = unsafe { *backends.add(i) };
            match stream::ours(b) {
                Some(c) => devices.push(c.dev.clone()),
                None => return std::ptr::null_mut(),
            }
        }
        if !devices.iter().all(|d| peer::linked(d, &devices[0])) {
            log::info("comm_init: devices in different OpenCL contexts; using ggml's all-reduce");
            return std::ptr::null_mut();
        }
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        log::info(&format!(
            "all-reduce over {} with OpenCL events",
            names.join(", ")
        ));
        Box::into_raw(Box::new(Comm {
            tmp: Mutex::new((0..n).map(|_| None).collect()),
            acc: Mutex::new(None),
            devices,
        })) as *mut c_void
    })
}

/// # Safety
/// `ctx` was returned by `comm_init` and is freed once.
pub unsafe extern "C" fn comm_free(ctx: *mut c_void) {
    guard("ggml_backend_comm_free", (), || {
        if !ctx.is_null() {
            // SAFETY: made by comm_init; ggml frees it once.
            let c = unsafe { Box::from_raw(ctx as *mut Comm) };
            for d in &c.devices {
                let _ = d.synchronize();
            }
        }
    })
}

/// `ggml_backend_comm_allreduce_tensor(ctx, tensors)`: `tensors[j]` lives on
/// device j; afterwards each holds the sum over all j, tensors without
/// GGML_TENSOR_FLAG_COMPUTE counting as zeros. Summed in device order on
/// device 0 (for two devices the same additions as ggml's fallback), then
/// copied back; all enqueued, nothing waits. false (ggml's fallback) for
/// what it does not handle: non-F32 or non-contiguous tensors, or tensors
/// outside polycl buffers.
///
/// # Safety
/// `ctx` came from `comm_init`; `tensors` points to one tensor per device.
pub unsafe extern "C" fn comm_allreduce_tensor(
    ctx: *mut c_void,
    tensors: *mut *mut ggml_tensor,
) -> bool {
    guard("ggml_backend_comm_allreduce_tensor", false, || {
        if ctx.is_null() || tensors.is_null() {
            return false;
        }
        // SAFETY: made by comm_init.
        let c = unsafe { &*(ctx as *const Comm) };
        let n = c.devices.len();
        let mut parts = Vec::with_capacity(n);
        for j in 0..n {
            // SAFETY: one valid tensor per device.
            let t = unsafe { *tensors.add(j) };
            // SAFETY: as above.
            match unsafe { reduce_operand(t, &c.devices[j]) } {
                Some(p) => parts.push(p),
                None => {
                    log::debug("all-reduce: declined a non-F32, strided or foreign tensor");
                    return false;
                }
            }
        }
        if parts.iter().any(|p| p.bytes != parts[0].bytes) {
            log::debug("all-reduce: declined tensors of different sizes");
            return false;
        }
        match allreduce(c, &parts) {
            Ok(()) => {
                counters::allreduce();
                true
            }
            Err(e) => {
                // Part of the reduction may be enqueued: a fallback would add
                // twice. The devices report the failure at their next compute.
                log::error(&format!("all-reduce: {e}"));
                for d in &c.devices {
                    d.mark_failed();
                }
                true
            }
        }
    })
}

struct Part {
    buf: Arc<DeviceBuffer>,
    offset: usize,
    bytes: usize,
    active: bool,
}

/// # Safety
/// `t` must be a valid tensor or NULL.
unsafe fn reduce_operand(t: *mut ggml_tensor, dev: &Arc<Device>) -> Option<Part> {
    if t.is_null() {
        return None;
    }
    // SAFETY: valid tensor.
    let r = unsafe { &*t };
    let n: i64 = r.ne.iter().product();
    let contiguous = r.nb[0] == 4
        && r.nb[1] == 4 * r.ne[0] as usize
        && r.nb[2] == r.nb[1] * r.ne[1] as usize
        && r.nb[3] == r.nb[2] * r.ne[2] as usize;
    if r.type_ != 0 || !contiguous || n <= 0 {
        return None;
    }
    let bytes = 4 * n as usize;
    // SAFETY: valid tensor.
    let (buf, offset) = unsafe { locate(t, 0, bytes) }.ok()?;
    if !Arc::ptr_eq(&buf.device, dev) {
        return None;
    }
    Some(Part {
        buf,
        offset,
        bytes,
        active: r.flags & TENSOR_FLAG_COMPUTE != 0,
    })
}

fn region(p: &Part) -> Region {
    Region {
        mem: p.buf.cl_mem() as _,
        offset: p.offset as u64,
    }
}

fn allreduce(c: &Comm, parts: &[Part]) -> Result<()> {
    let d0 = &c.devices[0];
    let n = parts.len();
    let bytes = parts[0].bytes;
    let mut tmp = c.tmp.lock();
    // Gather the other devices' partial sums next to device 0's.
    let mut sources: Vec<Region> = Vec::new();
    for j in 1..n {
        if !parts[j].active {
            continue;
        }
        let dj = &c.devices[j];
        if tmp[j].as_ref().is_none_or(|b| b.size < bytes) {
            tmp[j] = Some(DeviceBuffer::alloc_scratch(d0, bytes)?);
        }
        let t = tmp[j].as_ref().expect("allocated");
        let t = Region {
            mem: t.cl_mem() as _,
            offset: 0,
        };
        let done = peer::marker(dj)?;
        dj.flush()?;
        drop(peer::copy(
            d0,
            dj,
            region(&parts[j]),
            d0,
            t,
            bytes as u64,
            &[&done],
        )?);
        sources.push(t);
    }
    if !parts[0].active {
        match sources.first() {
            Some(&first) => {
                drop(peer::copy(
                    d0,
                    d0,
                    first,
                    d0,
                    region(&parts[0]),
                    bytes as u64,
                    &[],
                )?);
                sources.remove(0);
            }
            None => {
                // Nothing computed anywhere: the sum is zero.
                for p in parts {
                    p.buf.fill(p.offset, bytes, 0)?;
                }
                return Ok(());
            }
        }
    }
    if !sources.is_empty() {
        let mut acc = c.acc.lock();
        if acc.is_none() {
            *acc = Some(Launch {
                kernel: program::kernel(d0, "peer", "kernel_acc_f32")?,
                global: [0, 1, 1],
                local: None,
                dims: 1,
                kind: "allreduce",
                packed: None,
            });
        }
        let l = acc.as_mut().expect("made");
        let dst = region(&parts[0]);
        let elems = u32::try_from(bytes / 4)
            .map_err(|_| Error::Unsupported("all-reduce of more than 2^32 floats".into()))?;
        l.global = [elems as usize, 1, 1];
        // In device order: t0 + t1 (+ t2 ...), each addition one launch, as
        // the in-order queue runs them.
        for s in &sources {
            ArgBinder::new(&l.kernel)
                .ptr_out(dst.mem, dst.offset)?
                .ptr(s.mem, s.offset)?
                .u32(elems)?;
            l.enqueue(d0)?;
        }
    }
    // Broadcast the sum; device 0 must not overwrite it before the copies ran.
    let summed = peer::marker(d0)?;
    d0.flush()?;
    let mut copies = Vec::with_capacity(n - 1);
    for j in 1..n {
        let dj = &c.devices[j];
        copies.push(peer::copy(
            dj,
            d0,
            region(&parts[0]),
            dj,
            region(&parts[j]),
            bytes as u64,
            &[&summed],
        )?);
        dj.flush()?;
    }
    let waits: Vec<&Event> = copies.iter().collect();
    peer::barrier(d0, &waits)?;
    d0.flush()
}

#[cfg(test)]
mod tests {
    #[test]
    fn allreduce_kernel_is_registered() {
        assert!(crate::runtime::program::PROGRAMS
            .iter()
            .any(|(n, _)| *n == "peer"));
    }
}
