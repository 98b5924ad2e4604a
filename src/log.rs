//! Logging through ggml's logger when a ggml host is present (so llama's
//! `llama_log_set` sees our lines), else to stderr.

use crate::ggml::abi::{LOG_DEBUG, LOG_ERROR, LOG_INFO, LOG_WARN};
use crate::ggml::symbols::ggml_base;
use std::ffi::{c_int, CString};

pub fn log(level: c_int, msg: &str) {
    if level == LOG_DEBUG && !crate::config::get().verbose {
        return;
    }
    let line = format!("polycl: {msg}\n");
    if let Ok(base) = ggml_base() {
        if let Some(get) = base.log_get {
            let mut cb = None;
            let mut ud = std::ptr::null_mut();
            // SAFETY: ggml_log_get writes the current callback and user data.
            unsafe { get(&mut cb, &mut ud) };
            if let (Some(cb), Ok(c)) = (cb, CString::new(line.clone())) {
                // SAFETY: ggml's log callback takes (level, NUL-terminated text, user data).
                unsafe { cb(level, c.as_ptr(), ud) };
                return;
            }
        }
    }
    eprint!("{line}");
}

pub fn info(msg: &str) {
    log(LOG_INFO, msg)
}
pub fn warn(msg: &str) {
    log(LOG_WARN, msg)
}
pub fn error(msg: &str) {
    log(LOG_ERROR, msg)
}
pub fn debug(msg: &str) {
    log(LOG_DEBUG, msg)
}
