//! The one FFI boundary helper: every `extern "C"` entry runs its body through
//! `guard`, so a panic becomes a logged error and a default return value,
//! never an unwind into C or C++.

use crate::log;
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Runs `f`; on panic logs `what` and returns `default`.
pub fn guard<T>(what: &str, default: T, f: impl FnOnce() -> T) -> T {
    let run = || {
        crate::fault::panic_point(what);
        f()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(v) => v,
        Err(p) => {
            log::error(&format!("panic in {what}: {}", panic_message(p.as_ref())));
            default
        }
    }
}
