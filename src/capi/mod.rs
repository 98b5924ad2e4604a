//! The public C API of `include/polycl.h`. Conventions (written once at the
//! top of the header): prefix `polycl_`, opaque handles with `_new`/`_free`
//! pairs (`_free(NULL)` is harmless), functions return a `PolyclStatus`,
//! outputs are written only on success, and `polycl_last_error()` gives the
//! calling thread's last error message.

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
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

pub(crate) fn status_of(e: &Error) -> PolyclStatus {
    match e {
        Error::InvalidArgument(_) | Error::Config(_) => PolyclStatus::InvalidArgument,
        Error::InvalidGraph(_) => PolyclStatus::InvalidGraph,
        Error::Unsupported(_) => PolyclStatus::Unsupported,
        Error::NoDevice(_) => PolyclStatus::NoDevice,
        Error::OutOfMemory { .. } => PolyclStatus::OutOfMemory,
        Error::OpenCl(..) | Error::Build { .. } => PolyclStatus::DeviceError,
        Error::Panic(_) => PolyclStatus::Internal,
    }
}

/// Runs an API body: errors and panics become a status and the thread's last error.
pub(crate) fn api(what: &str, f: impl FnOnce() -> crate::error::Result<()>) -> PolyclStatus {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
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
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The library version as "MAJOR.MINOR.PATCH".
#[no_mangle]
pub extern "C" fn polycl_version() -> *const c_char {
    static V: &std::ffi::CStr = c"0.1.0";
    V.as_ptr()
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
