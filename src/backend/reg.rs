//! The registry singleton and its devices: stable pointers for the whole process.

use super::buffer_type;
use super::device::{self, DeviceCtx};
use crate::capi::boundary::guard;
use crate::ggml::abi::*;
use crate::log;
use crate::runtime;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::OnceLock;

pub struct Plugin {
    pub reg: *mut ggml_backend_reg,
    pub devices: Vec<*mut ggml_backend_device>,
}

// SAFETY: the pointers are leaked, immutable after creation and only read.
unsafe impl Send for Plugin {}
// SAFETY: as above.
unsafe impl Sync for Plugin {}

static PLUGIN: OnceLock<Plugin> = OnceLock::new();
const REG_NAME: &CStr = c"POLYCL";

fn build() -> Plugin {
    let reg = Box::into_raw(Box::new(ggml_backend_reg {
        api_version: GGML_BACKEND_API_VERSION,
        iface: ggml_backend_reg_i {
            get_name: Some(reg_get_name),
            get_device_count: Some(reg_get_device_count),
            get_device: Some(reg_get_device),
            get_proc_address: Some(reg_get_proc_address),
        },
        context: std::ptr::null_mut(),
    }));
    let mut devices = Vec::new();
    match runtime::devices() {
        Ok(devs) => {
            for d in devs {
                let ctx = Box::into_raw(Box::new(DeviceCtx {
                    dev: d.clone(),
                    name: CString::new(d.name.clone()).unwrap_or_default(),
                    description: CString::new(d.description.clone()).unwrap_or_default(),
                    buft: std::ptr::null_mut(),
                }));
                let dev = Box::into_raw(Box::new(ggml_backend_device {
                    iface: device::iface(),
                    reg,
                    context: ctx as *mut c_void,
                }));
                // SAFETY: ctx was just leaked and is exclusively ours here.
                unsafe { (*ctx).buft = buffer_type::new(dev, d.clone()) };
                devices.push(dev);
            }
        }
        Err(e) => log::warn(&format!("registering no devices: {e}")),
    }
    Plugin { reg, devices }
}

pub fn plugin() -> &'static Plugin {
    PLUGIN.get_or_init(build)
}

pub fn registry() -> ggml_backend_reg_t {
    plugin().reg
}

unsafe extern "C" fn reg_get_name(_: ggml_backend_reg_t) -> *const c_char {
    guard("reg_get_name", REG_NAME.as_ptr(), || REG_NAME.as_ptr())
}

unsafe extern "C" fn reg_get_device_count(_: ggml_backend_reg_t) -> usize {
    guard("reg_get_device_count", 0, || plugin().devices.len())
}

unsafe extern "C" fn reg_get_device(_: ggml_backend_reg_t, index: usize) -> ggml_backend_dev_t {
    guard("reg_get_device", std::ptr::null_mut(), || {
        plugin()
            .devices
            .get(index)
            .copied()
            .unwrap_or(std::ptr::null_mut())
    })
}

unsafe extern "C" fn reg_get_proc_address(
    _: ggml_backend_reg_t,
    name: *const c_char,
) -> *mut c_void {
    guard("reg_get_proc_address", std::ptr::null_mut(), || {
        if name.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: ggml passes a NUL-terminated proc name.
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        match name {
            b"ggml_backend_set_n_threads" => super::stream::set_n_threads as *mut c_void,
            b"ggml_backend_split_buffer_type" => super::split::split_buffer_type as *mut c_void,
            b"ggml_backend_comm_init" => super::comm::comm_init as *mut c_void,
            b"ggml_backend_comm_allreduce_tensor" => {
                super::comm::comm_allreduce_tensor as *mut c_void
            }
            b"ggml_backend_comm_free" => super::comm::comm_free as *mut c_void,
            _ => std::ptr::null_mut(),
        }
    })
}
