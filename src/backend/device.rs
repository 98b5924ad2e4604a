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
        event_new: None,
        event_free: None,
        event_synchronize: None,
    }
}

/// # Safety
/// `dev` must be one of polycl's devices.
pub unsafe fn ctx<'a>(dev: ggml_backend_dev_t) -> &'a DeviceCtx {
    // SAFETY: polycl's devices carry a leaked DeviceCtx as context.
    unsafe { &*((*dev).context as *const DeviceCtx) }
}

unsafe extern "C" fn get_name(dev: ggml_backend_dev_t) -> *const c_char {
    // SAFETY: ggml passes our device.
    unsafe { ctx(dev) }.name.as_ptr()
}

unsafe extern "C" fn get_description(dev: ggml_backend_dev_t) -> *const c_char {
    // SAFETY: ggml passes our device.
    unsafe { ctx(dev) }.description.as_ptr()
}

unsafe extern "C" fn get_memory(dev: ggml_backend_dev_t, free: *mut usize, total: *mut usize) {
    guard("device get_memory", (), || {
        // SAFETY: ggml passes our device and writable out pointers.
        let d = &unsafe { ctx(dev) }.dev;
        if !free.is_null() {
            // SAFETY: checked non-null.
            unsafe { *free = d.free_memory() };
        }
        if !total.is_null() {
            // SAFETY: checked non-null.
            unsafe { *total = d.global_mem };
        }
    })
}

/// GPUs are GPU; other OpenCL devices (PoCL's CPU device) are IGPU, so llama
/// uses them when no GPU exists and `-dev` accepts them.
unsafe extern "C" fn get_type(dev: ggml_backend_dev_t) -> c_int {
    // SAFETY: ggml passes our device.
    if unsafe { ctx(dev) }.dev.is_gpu {
        DEV_TYPE_GPU
    } else {
        DEV_TYPE_IGPU
    }
}

unsafe extern "C" fn get_props(dev: ggml_backend_dev_t, props: *mut ggml_backend_dev_props) {
    guard("device get_props", (), || {
        if props.is_null() {
            return;
        }
        // SAFETY: ggml passes our device and a writable props struct.
        unsafe {
            let c = ctx(dev);
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
                events: false,
                mmap_support: true,
            };
        }
    })
}

unsafe extern "C" fn get_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t {
    // SAFETY: ggml passes our device.
    unsafe { ctx(dev) }.buft
}

unsafe extern "C" fn supports_op(_dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool {
    guard("device supports_op", false, || {
        if op.is_null() {
            return false;
        }
        // SAFETY: ggml passes a tensor with valid (possibly unallocated) srcs.
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
        // SAFETY: ggml passes our device.
        !buft.is_null() && buffer_type::is_ours(buft) && unsafe { ctx(dev) }.buft == buft
    })
}
