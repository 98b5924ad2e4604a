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
use crate::ggml::abi::ggml_backend_reg_t;
use crate::log;
use crate::runtime::Device;
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
