//! ggml plugin glue: the registry, devices, buffer types, buffers and the
//! backend stream, as the vtables of the pinned ggml ABI. Every entry runs
//! through `capi::boundary::guard`.

pub mod buffer;
pub mod buffer_type;
pub mod comm;
pub mod device;
pub mod optimize;
pub mod reg;
pub mod split;
pub mod stream;

use crate::capi::boundary::guard;
use crate::ggml::abi::{
    ggml_backend_buffer_i, ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_reg_t,
};
use crate::log;
use crate::runtime::Device;
use std::ffi::c_void;
use std::sync::Arc;

/// Runs a void vtable entry. A failure (an error or a panic) cannot be
/// returned, so it is charged to the device `charge` names: the next
/// graph_compute of every backend on that device reports it.
pub(crate) fn void_entry(
    what: &str,
    charge: impl FnOnce() -> Option<Arc<Device>>,
    f: impl FnOnce() -> crate::error::Result<()>,
) {
    let device = std::panic::catch_unwind(std::panic::AssertUnwindSafe(charge))
        .ok()
        .flatten();
    let ok = guard(what, false, || match f() {
        Ok(()) => true,
        Err(e) => {
            log::error(&format!("{what}: {e}"));
            false
        }
    });
    if !ok {
        if let Some(d) = device {
            d.mark_failed();
        }
    }
}

/// A new ggml buffer of type `buft` (ggml-base's `ggml_backend_buffer_init`)
/// with `iface`, whose context is `ctx` until its free_buffer entry takes it
/// back. NULL when ggml-base is unreachable or refuses the buffer; `ctx` is
/// then dropped and `undo` runs, so nothing the caller set up for the buffer
/// outlives it.
pub(crate) fn new_buffer<T>(
    buft: ggml_backend_buffer_type_t,
    iface: ggml_backend_buffer_i,
    ctx: T,
    size: usize,
    undo: impl FnOnce(),
) -> ggml_backend_buffer_t {
    let Ok(base) = crate::ggml::symbols::ggml_base() else {
        drop(ctx);
        undo();
        return std::ptr::null_mut();
    };
    let ctx = Box::into_raw(Box::new(ctx));
    // SAFETY: ggml_backend_buffer_init copies the iface and keeps ctx, a
    // live allocation that the buffer's free_buffer entry reclaims.
    let b = unsafe { (base.buffer_init)(buft, iface, ctx as *mut c_void, size) };
    if b.is_null() {
        // SAFETY: ctx came from Box::into_raw above and was not handed over.
        drop(unsafe { Box::from_raw(ctx) });
        undo();
    }
    b
}

/// `b`'s context as a `T` if `b` is non-NULL, has a context, and has a
/// buffer type that `is_type` accepts; None for anything else, which every
/// buffer entry refuses instead of dereferencing.
///
/// # Safety
/// Every buffer type that `is_type` accepts makes buffers whose context is
/// a live `T` (made by `new_buffer`).
pub(crate) unsafe fn buffer_context<'a, T>(
    b: ggml_backend_buffer_t,
    is_type: impl FnOnce(ggml_backend_buffer_type_t) -> bool,
) -> Option<&'a T> {
    if b.is_null() {
        return None;
    }
    // SAFETY: non-NULL; ggml passes a live buffer struct.
    let (buft, context) = unsafe { ((*b).buft, (*b).context) };
    if context.is_null() || buft.is_null() || !is_type(buft) {
        return None;
    }
    // SAFETY: the caller's contract: buffers of an accepted type carry a T.
    Some(unsafe { &*(context as *const T) })
}

/// The plugin's entry point: the same static registry on every call, or NULL
/// when the host's ggml is not the pinned one.
#[no_mangle]
pub extern "C" fn ggml_backend_init() -> ggml_backend_reg_t {
    guard("ggml_backend_init", std::ptr::null_mut(), || {
        if let Err(why) = crate::ggml::symbols::ggml_base() {
            // The host's logger may be unreachable; stderr always is.
            eprintln!("polycl: cannot initialise: {why}");
            log::error(&format!("cannot initialise: {why}"));
            return std::ptr::null_mut();
        }
        reg::registry()
    })
}

/// 0 when no usable OpenCL device exists (ggml then skips the plugin), else 1.
#[no_mangle]
pub extern "C" fn ggml_backend_score() -> std::ffi::c_int {
    guard("ggml_backend_score", 0, || {
        match crate::runtime::devices() {
            Ok(d) if !d.is_empty() => 1,
            Ok(_) => 0,
            Err(e) => {
                log::info(&format!("not offering any device: {e}"));
                0
            }
        }
    })
}
