//! The device vtable: names, memory, props, backends, and `supports_op`,
//! which asks the frontend's op table.

use super::{buffer_type, stream};
use crate::capi::boundary::guard;
use crate::decoder::ggml_graph::GgmlGraph;
use crate::decoder::Decoder;
use crate::frontend;
use crate::ggml::abi::*;
use crate::runtime::Device;
use std::ffi::{c_char, c_int, CString};
use std::sync::Arc;

pub struct DeviceCtx {
    pub dev: Arc<Device>,
    pub name: CString,
    pub description: CString,
    pub buft: ggml_backend_buffer_type_t,
}

pub fn iface() -> ggml_backend_device_i {
    ggml_backend_device_i {
        get_name: Some(get_name),
        get_description: Some(get_description),
        get_memory: Some(get_memory),
        get_type: Some(get_type),
        get_props: Some(get_props),
        init_backend: Some(stream::init_backend),
        get_buffer_type: Some(get_buffer_type),
        get_host_buffer_type: None,
        buffer_from_host_ptr: None,
        supports_op: Some(supports_op),
        supports_buft: Some(supports_buft),
        offload_op: None,
        event_new: Some(super::comm::event_new),
        event_free: Some(super::comm::event_free),
        event_synchronize: Some(super::comm::event_synchronize),
    }
}

/// # Safety
/// `dev` must be one of polycl's devices.
pub unsafe fn ctx<'a>(dev: ggml_backend_dev_t) -> &'a DeviceCtx {
    // SAFETY: polycl's devices carry a leaked DeviceCtx as context.
    unsafe { &*((*dev).context as *const DeviceCtx) }
}

/// `dev`'s context if it is one of polycl's devices (they are created once
/// and never freed, so the address identifies them); None for NULL or a
/// foreign device, which every entry refuses instead of dereferencing.
// The pointer is dereferenced only after it is found among our own devices.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn ours<'a>(dev: ggml_backend_dev_t) -> Option<&'a DeviceCtx> {
    if dev.is_null() || !super::reg::plugin().devices.contains(&dev) {
        crate::log::error("a device entry was called with NULL or a device that is not polycl's");
        return None;
    }
    // SAFETY: one of the plugin's devices, valid for the whole process.
    Some(unsafe { ctx(dev) })
}

unsafe extern "C" fn get_name(dev: ggml_backend_dev_t) -> *const c_char {
    guard("device get_name", std::ptr::null(), || {
        ours(dev).map_or(std::ptr::null(), |c| c.name.as_ptr())
    })
}

unsafe extern "C" fn get_description(dev: ggml_backend_dev_t) -> *const c_char {
    guard("device get_description", std::ptr::null(), || {
        ours(dev).map_or(std::ptr::null(), |c| c.description.as_ptr())
    })
}

unsafe extern "C" fn get_memory(dev: ggml_backend_dev_t, free: *mut usize, total: *mut usize) {
    guard("device get_memory", (), || {
        // A refused device reports no memory rather than leaving garbage.
        let (f, t) = ours(dev).map_or((0, 0), |c| (c.dev.free_memory(), c.dev.global_mem));
        if !free.is_null() {
            // SAFETY: checked non-null; ggml passes a writable size_t.
            unsafe { *free = f };
        }
        if !total.is_null() {
            // SAFETY: checked non-null; ggml passes a writable size_t.
            unsafe { *total = t };
        }
    })
}

/// GPUs are GPU; other OpenCL devices (PoCL's CPU device) are IGPU, so llama
/// uses them when no GPU exists and `-dev` accepts them.
unsafe extern "C" fn get_type(dev: ggml_backend_dev_t) -> c_int {
    guard("device get_type", DEV_TYPE_IGPU, || match ours(dev) {
        Some(c) if c.dev.is_gpu => DEV_TYPE_GPU,
        _ => DEV_TYPE_IGPU,
    })
}

unsafe extern "C" fn get_props(dev: ggml_backend_dev_t, props: *mut ggml_backend_dev_props) {
    guard("device get_props", (), || {
        if props.is_null() {
            return;
        }
        let Some(c) = ours(dev) else { return };
        // SAFETY: checked non-null; ggml passes a writable props struct.
        unsafe {
            let p = &mut *props;
            p.name = c.name.as_ptr();
            p.description = c.description.as_ptr();
            p.memory_free = c.dev.free_memory();
            p.memory_total = c.dev.global_mem;
            p.type_ = get_type(dev);
            p.device_id = std::ptr::null();
            p.caps = ggml_backend_dev_caps {
                async_: true,
                host_buffer: false,
                buffer_from_host_ptr: false,
                events: true,
                mmap_support: true,
            };
        }
    })
}

unsafe extern "C" fn get_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t {
    guard("device get_buffer_type", std::ptr::null_mut(), || {
        ours(dev).map_or(std::ptr::null_mut(), |c| c.buft)
    })
}

unsafe extern "C" fn supports_op(dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool {
    guard("device supports_op", false, || {
        let Some(c) = (if op.is_null() { None } else { ours(dev) }) else {
            return false;
        };
        // SAFETY: ggml passes a tensor with valid (possibly unallocated) srcs.
        if unsafe { super::split::supports_op(c.dev.index, op) } == Some(false) {
            return false;
        }
        // SAFETY: as above.
        match unsafe { GgmlGraph::single(op) } {
            Ok(single) => frontend::supports(&single, &single.nodes()[0]),
            Err(_) => false,
        }
    })
}

unsafe extern "C" fn supports_buft(
    dev: ggml_backend_dev_t,
    buft: ggml_backend_buffer_type_t,
) -> bool {
    guard("device supports_buft", false, || {
        let Some(c) = ours(dev) else { return false };
        !buft.is_null()
            && (buffer_type::is_ours(buft) && c.buft == buft
                || super::split::is_split_of(buft, c.dev.index))
    })
}
