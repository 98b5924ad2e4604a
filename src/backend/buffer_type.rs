//! One buffer type per device: device memory, not host-visible.

use super::buffer;
use crate::capi::boundary::guard;
use crate::ggml::abi::*;
use crate::log;
use crate::runtime::{Device, DeviceBuffer, BUFFER_ALIGNMENT};
use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

pub struct BuftCtx {
    pub dev: Arc<Device>,
    pub name: CString,
}

/// Creates the (leaked, stable) buffer type of `dev`.
pub fn new(device: ggml_backend_dev_t, dev: Arc<Device>) -> ggml_backend_buffer_type_t {
    let ctx = Box::into_raw(Box::new(BuftCtx {
        name: CString::new(dev.name.clone()).unwrap_or_default(),
        dev,
    }));
    Box::into_raw(Box::new(ggml_backend_buffer_type {
        iface: ggml_backend_buffer_type_i {
            get_name: Some(get_name),
            alloc_buffer: Some(alloc_buffer),
            get_alignment: Some(get_alignment),
            get_max_size: Some(get_max_size),
            get_alloc_size: None,
            is_host: None,
        },
        device,
        context: ctx as *mut c_void,
    }))
}

/// Whether `buft` is one of polycl's buffer types (by address: they are
/// created once and never freed).
pub fn is_ours(buft: ggml_backend_buffer_type_t) -> bool {
    super::reg::plugin()
        .devices
        .iter()
        // SAFETY: the plugin's devices are valid for the whole process.
        .any(|&d| unsafe { super::device::ctx(d) }.buft == buft)
}

/// # Safety
/// `buft` must be one of polycl's buffer types.
pub unsafe fn ctx<'a>(buft: ggml_backend_buffer_type_t) -> &'a BuftCtx {
    // SAFETY: our buffer types carry a leaked BuftCtx.
    unsafe { &*((*buft).context as *const BuftCtx) }
}

/// `buft`'s context if it is one of polycl's buffer types; None (and a log
/// line) for NULL or a foreign one.
fn ours<'a>(buft: ggml_backend_buffer_type_t) -> Option<&'a BuftCtx> {
    if buft.is_null() || !is_ours(buft) {
        log::error(
            "a buffer type entry was called with NULL or a buffer type that is not polycl's",
        );
        return None;
    }
    // SAFETY: one of polycl's buffer types, valid for the whole process.
    Some(unsafe { ctx(buft) })
}

unsafe extern "C" fn get_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
    guard("buft get_name", std::ptr::null(), || {
        ours(buft).map_or(std::ptr::null(), |c| c.name.as_ptr())
    })
}

unsafe extern "C" fn alloc_buffer(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    guard("alloc_buffer", std::ptr::null_mut(), || {
        let Some(c) = ours(buft) else {
            return std::ptr::null_mut();
        };
        match DeviceBuffer::alloc(&c.dev, size) {
            // SAFETY: ggml passed our buffer type.
            Ok(b) => unsafe { buffer::wrap(buft, b) },
            Err(e) => {
                log::error(&format!("{e}"));
                std::ptr::null_mut()
            }
        }
    })
}

unsafe extern "C" fn get_alignment(_: ggml_backend_buffer_type_t) -> usize {
    guard("buft get_alignment", BUFFER_ALIGNMENT, || BUFFER_ALIGNMENT)
}

unsafe extern "C" fn get_max_size(buft: ggml_backend_buffer_type_t) -> usize {
    guard("buft get_max_size", 0, || {
        ours(buft).map_or(0, |c| c.dev.max_alloc)
    })
}
