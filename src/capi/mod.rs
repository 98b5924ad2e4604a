//! The public C API of `include/polycl.h`. Conventions (written once at the
//! top of the header): prefix `polycl_`, opaque handles with `_new`/`_free`
//! pairs (`_free(NULL)` is harmless), functions return a `PolyclStatus`,
//! outputs are written only on success, and `polycl_last_error()` gives the
//! calling thread's last error message.

// The extern "C" entry points take raw pointers from C: each checks them
// (NULL is an error status) and the rest of their contract is the header's,
// which Rust cannot express on a safe-looking `extern "C" fn`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod boundary;
pub mod decoder;
pub mod model;

use crate::error::Error;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};

/// Status codes of every polycl C function.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolyclStatus {
    Ok = 0,
    InvalidArgument = 1,
    InvalidGraph = 2,
    Unsupported = 3,
    NoDevice = 4,
    OutOfMemory = 5,
    DeviceError = 6,
    Internal = 7,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // try_with: a call made while the thread is exiting must not panic here,
    // outside the boundary's catch_unwind.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

pub(crate) fn status_of(e: &Error) -> PolyclStatus {
    match e {
        Error::InvalidArgument(_) | Error::Config(_) => PolyclStatus::InvalidArgument,
        Error::InvalidGraph(_) => PolyclStatus::InvalidGraph,
        Error::Unsupported(_) => PolyclStatus::Unsupported,
        Error::NoDevice(_) => PolyclStatus::NoDevice,
        Error::OutOfMemory { .. } => PolyclStatus::OutOfMemory,
        Error::OpenCl(..) | Error::Launch { .. } | Error::Build { .. } => PolyclStatus::DeviceError,
        Error::Panic(_) => PolyclStatus::Internal,
    }
}

/// Runs an API body: errors and panics become a status and the thread's last error.
pub(crate) fn api(what: &str, f: impl FnOnce() -> crate::error::Result<()>) -> PolyclStatus {
    let run = || {
        crate::fault::panic_point(what);
        f()
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|p| {
        Err(Error::Panic(format!(
            "{what}: {}",
            boundary::panic_message(p.as_ref())
        )))
    });
    match r {
        Ok(()) => {
            set_last_error("");
            PolyclStatus::Ok
        }
        Err(e) => {
            set_last_error(&e.to_string());
            status_of(&e)
        }
    }
}

/// The calling thread's last error message ("" after a success). The pointer
/// stays valid until the thread's next polycl call.
#[no_mangle]
pub extern "C" fn polycl_last_error() -> *const c_char {
    boundary::guard("polycl_last_error", c"".as_ptr(), || {
        LAST_ERROR
            .try_with(|e| e.borrow().as_ptr())
            .unwrap_or(c"".as_ptr())
    })
}

/// The library version as "MAJOR.MINOR.PATCH".
#[no_mangle]
pub extern "C" fn polycl_version() -> *const c_char {
    static V: &std::ffi::CStr = c"0.1.0";
    boundary::guard("polycl_version", V.as_ptr(), || V.as_ptr())
}

/// What polycl holds right now, over every device: for hosts and tests that
/// watch for leaks across many graph computes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolyclMemoryStats {
    /// Device buffers alive: ggml buffers, compiled weights, request memory
    /// and plan scratch.
    pub device_buffers: usize,
    /// Bytes of those buffers.
    pub device_bytes: usize,
    /// Execution plans alive (ggml backends' plan caches, infer requests).
    pub plans: usize,
}

/// Fills `*out_stats` with the current counters.
#[no_mangle]
pub extern "C" fn polycl_memory_stats(out_stats: *mut PolyclMemoryStats) -> PolyclStatus {
    api("polycl_memory_stats", || {
        if out_stats.is_null() {
            return Err(Error::InvalidArgument("out_stats is NULL".into()));
        }
        let (device_buffers, device_bytes) = crate::runtime::buffer::live();
        // SAFETY: checked non-null; the caller passes a writable struct.
        unsafe {
            *out_stats = PolyclMemoryStats {
                device_buffers,
                device_bytes,
                plans: crate::plan::live_plans(),
            }
        };
        Ok(())
    })
}

/// The number of usable OpenCL devices (0 when there is no OpenCL runtime).
#[no_mangle]
pub extern "C" fn polycl_device_count(out_count: *mut c_int) -> PolyclStatus {
    api("polycl_device_count", || {
        if out_count.is_null() {
            return Err(Error::InvalidArgument("out_count is NULL".into()));
        }
        let n = crate::runtime::devices().map(|d| d.len()).unwrap_or(0);
        // SAFETY: checked non-null; the caller passes a writable int.
        unsafe { *out_count = n as c_int };
        Ok(())
    })
}
