//! The ggml-base functions polycl calls, resolved from the host process at
//! `ggml_backend_init` time instead of linked at build time, so the library
//! builds with cargo alone. The host (llama.cpp, test-backend-ops, ...) has
//! libggml-base.so loaded in its global scope, so `dlsym(RTLD_DEFAULT, name)`
//! finds the functions; when the plugin was dlopen'ed by something that loaded
//! libggml-base RTLD_LOCAL, we look in an already loaded `libggml-base.so`
//! (RTLD_NOLOAD) before giving up.

use super::abi::*;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

pub type BufferInitFn = unsafe extern "C" fn(
    ggml_backend_buffer_type_t,
    ggml_backend_buffer_i,
    *mut c_void,
    usize,
) -> ggml_backend_buffer_t;
pub type LogCallback = unsafe extern "C" fn(c_int, *const c_char, *mut c_void);
pub type LogGetFn = unsafe extern "C" fn(*mut Option<LogCallback>, *mut *mut c_void);

pub struct GgmlBase {
    pub buffer_init: BufferInitFn,
    pub log_get: Option<LogGetFn>,
    pub version: String,
}

/// The ggml release line whose ABI the mirrors in `abi.rs` describe.
pub const PINNED_GGML_VERSION_PREFIX: &str = "0.25.";

static BASE: OnceLock<Result<GgmlBase, String>> = OnceLock::new();

unsafe fn lookup(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no preconditions.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if !p.is_null() {
        return p;
    }
    for lib in [c"libggml-base.so.0", c"libggml-base.so"] {
        // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded library.
        let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if !h.is_null() {
            // SAFETY: h is a valid handle returned just above.
            let p = unsafe { libc::dlsym(h, name.as_ptr()) };
            if !p.is_null() {
                return p;
            }
        }
    }
    std::ptr::null_mut()
}

fn resolve() -> Result<GgmlBase, String> {
    // SAFETY: lookup only calls dlsym/dlopen with NUL-terminated names.
    let init = unsafe { lookup(c"ggml_backend_buffer_init") };
    if init.is_null() {
        return Err(
            "the host process does not export ggml_backend_buffer_init: \
                    polycl must be loaded by a ggml host (libggml-base.so, ggml 0.25.x)"
                .into(),
        );
    }
    // SAFETY: lookup as above.
    let log_get = unsafe { lookup(c"ggml_log_get") };
    // SAFETY: lookup as above.
    let version_fn = unsafe { lookup(c"ggml_version") };
    if version_fn.is_null() {
        return Err(
            "the host's ggml has no ggml_version(): it predates the pinned ggml 0.25.x".into(),
        );
    }
    // SAFETY: ggml_version is `const char *ggml_version(void)` returning a static string.
    let version = unsafe {
        let f =
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> *const c_char>(version_fn);
        let p = f();
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    if !version.starts_with(PINNED_GGML_VERSION_PREFIX) {
        return Err(format!(
            "the host's ggml is version {version:?}, but polycl mirrors the ABI of ggml {PINNED_GGML_VERSION_PREFIX}x"
        ));
    }
    Ok(GgmlBase {
        version,
        // SAFETY: the symbol is ggml's ggml_backend_buffer_init, whose C signature
        // is BufferInitFn at the pinned version.
        buffer_init: unsafe { std::mem::transmute::<*mut c_void, BufferInitFn>(init) },
        log_get: if log_get.is_null() {
            None
        } else {
            // SAFETY: ggml_log_get(ggml_log_callback *, void **) at the pinned version.
            Some(unsafe { std::mem::transmute::<*mut c_void, LogGetFn>(log_get) })
        },
    })
}

/// The resolved ggml-base functions, or why they could not be found.
pub fn ggml_base() -> Result<&'static GgmlBase, &'static str> {
    match BASE.get_or_init(resolve) {
        Ok(b) => Ok(b),
        Err(e) => Err(e.as_str()),
    }
}
