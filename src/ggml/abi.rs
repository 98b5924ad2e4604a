//! `#[repr(C)]` mirrors of the pinned ggml structs (llama-cpp-python 0.3.36,
//! ggml 0.25.3, GGML_BACKEND_API_VERSION 2). Offsets are asserted in tests.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

pub const GGML_MAX_DIMS: usize = 4;
pub const GGML_MAX_SRC: usize = 10;
pub const GGML_MAX_OP_PARAMS: usize = 64;
pub const GGML_MAX_NAME: usize = 64;
pub const GGML_BACKEND_API_VERSION: c_int = 2;

pub const TENSOR_FLAG_INPUT: i32 = 1;
pub const TENSOR_FLAG_OUTPUT: i32 = 2;
pub const TENSOR_FLAG_COMPUTE: i32 = 16;

pub const STATUS_ALLOC_FAILED: c_int = -2;
pub const STATUS_FAILED: c_int = -1;
pub const STATUS_SUCCESS: c_int = 0;

pub const DEV_TYPE_CPU: c_int = 0;
pub const DEV_TYPE_GPU: c_int = 1;
pub const DEV_TYPE_IGPU: c_int = 2;

pub const LOG_DEBUG: c_int = 1;
pub const LOG_INFO: c_int = 2;
pub const LOG_WARN: c_int = 3;
pub const LOG_ERROR: c_int = 4;

#[repr(C)]
pub struct ggml_tensor {
    pub type_: c_int,
    pub buffer: *mut ggml_backend_buffer,
    pub ne: [i64; GGML_MAX_DIMS],
    pub nb: [usize; GGML_MAX_DIMS],
    pub op: c_int,
    pub op_params: [i32; GGML_MAX_OP_PARAMS / 4],
    pub flags: i32,
    pub src: [*mut ggml_tensor; GGML_MAX_SRC],
    pub view_src: *mut ggml_tensor,
    pub view_offs: usize,
    pub data: *mut c_void,
    pub name: [c_char; GGML_MAX_NAME],
    pub extra: *mut c_void,
    pub padding: [c_char; 8],
}

#[repr(C)]
pub struct ggml_hash_set {
    pub size: usize,
    pub used: *mut u32,
    pub keys: *mut *mut ggml_tensor,
}

#[repr(C)]
pub struct ggml_cgraph {
    pub size: c_int,
    pub n_nodes: c_int,
    pub n_leafs: c_int,
    pub nodes: *mut *mut ggml_tensor,
    pub grads: *mut *mut ggml_tensor,
    pub grad_accs: *mut *mut ggml_tensor,
    pub leafs: *mut *mut ggml_tensor,
    pub use_counts: *mut i32,
    pub visited_hash_set: ggml_hash_set,
    pub order: c_int,
    pub uid: u64,
}

pub type ggml_backend_reg_t = *mut ggml_backend_reg;
pub type ggml_backend_dev_t = *mut ggml_backend_device;
pub type ggml_backend_buffer_type_t = *mut ggml_backend_buffer_type;
pub type ggml_backend_buffer_t = *mut ggml_backend_buffer;
pub type ggml_backend_t = *mut ggml_backend;
pub type ggml_backend_event_t = *mut ggml_backend_event;

#[repr(C)]
pub struct ggml_backend_reg_i {
    pub get_name: Option<unsafe extern "C" fn(ggml_backend_reg_t) -> *const c_char>,
    pub get_device_count: Option<unsafe extern "C" fn(ggml_backend_reg_t) -> usize>,
    pub get_device: Option<unsafe extern "C" fn(ggml_backend_reg_t, usize) -> ggml_backend_dev_t>,
    pub get_proc_address:
        Option<unsafe extern "C" fn(ggml_backend_reg_t, *const c_char) -> *mut c_void>,
}

#[repr(C)]
pub struct ggml_backend_reg {
    pub api_version: c_int,
    pub iface: ggml_backend_reg_i,
    pub context: *mut c_void,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct ggml_backend_dev_caps {
    pub async_: bool,
    pub host_buffer: bool,
    pub buffer_from_host_ptr: bool,
    pub events: bool,
    pub mmap_support: bool,
}

#[repr(C)]
pub struct ggml_backend_dev_props {
    pub name: *const c_char,
    pub description: *const c_char,
    pub memory_free: usize,
    pub memory_total: usize,
    pub type_: c_int,
    pub device_id: *const c_char,
    pub caps: ggml_backend_dev_caps,
}

#[repr(C)]
pub struct ggml_backend_device_i {
    pub get_name: Option<unsafe extern "C" fn(ggml_backend_dev_t) -> *const c_char>,
    pub get_description: Option<unsafe extern "C" fn(ggml_backend_dev_t) -> *const c_char>,
    pub get_memory: Option<unsafe extern "C" fn(ggml_backend_dev_t, *mut usize, *mut usize)>,
    pub get_type: Option<unsafe extern "C" fn(ggml_backend_dev_t) -> c_int>,
    pub get_props: Option<unsafe extern "C" fn(ggml_backend_dev_t, *mut ggml_backend_dev_props)>,
    pub init_backend:
        Option<unsafe extern "C" fn(ggml_backend_dev_t, *const c_char) -> ggml_backend_t>,
    pub get_buffer_type:
        Option<unsafe extern "C" fn(ggml_backend_dev_t) -> ggml_backend_buffer_type_t>,
    pub get_host_buffer_type:
        Option<unsafe extern "C" fn(ggml_backend_dev_t) -> ggml_backend_buffer_type_t>,
    pub buffer_from_host_ptr: Option<
        unsafe extern "C" fn(
            ggml_backend_dev_t,
            *mut c_void,
            usize,
            usize,
        ) -> ggml_backend_buffer_t,
    >,
    pub supports_op: Option<unsafe extern "C" fn(ggml_backend_dev_t, *const ggml_tensor) -> bool>,
    pub supports_buft:
        Option<unsafe extern "C" fn(ggml_backend_dev_t, ggml_backend_buffer_type_t) -> bool>,
    pub offload_op: Option<unsafe extern "C" fn(ggml_backend_dev_t, *const ggml_tensor) -> bool>,
    pub event_new: Option<unsafe extern "C" fn(ggml_backend_dev_t) -> ggml_backend_event_t>,
    pub event_free: Option<unsafe extern "C" fn(ggml_backend_dev_t, ggml_backend_event_t)>,
    pub event_synchronize: Option<unsafe extern "C" fn(ggml_backend_dev_t, ggml_backend_event_t)>,
}

#[repr(C)]
pub struct ggml_backend_device {
    pub iface: ggml_backend_device_i,
    pub reg: ggml_backend_reg_t,
    pub context: *mut c_void,
}

#[repr(C)]
pub struct ggml_backend_graph_optimize_params {
    pub add_alloc_dep:
        Option<unsafe extern "C" fn(*mut c_void, *mut ggml_tensor, *mut ggml_tensor)>,
    pub user_data: *mut c_void,
}

#[repr(C)]
pub struct ggml_backend_i {
    pub get_name: Option<unsafe extern "C" fn(ggml_backend_t) -> *const c_char>,
    pub free: Option<unsafe extern "C" fn(ggml_backend_t)>,
    pub set_tensor_async:
        Option<unsafe extern "C" fn(ggml_backend_t, *mut ggml_tensor, *const c_void, usize, usize)>,
    pub get_tensor_async:
        Option<unsafe extern "C" fn(ggml_backend_t, *const ggml_tensor, *mut c_void, usize, usize)>,
    pub set_tensor_2d_async: Option<
        unsafe extern "C" fn(
            ggml_backend_t,
            *mut ggml_tensor,
            *const c_void,
            usize,
            usize,
            usize,
            usize,
            usize,
        ),
    >,
    pub get_tensor_2d_async: Option<
        unsafe extern "C" fn(
            ggml_backend_t,
            *const ggml_tensor,
            *mut c_void,
            usize,
            usize,
            usize,
            usize,
            usize,
        ),
    >,
    pub cpy_tensor_async: Option<
        unsafe extern "C" fn(
            ggml_backend_t,
            ggml_backend_t,
            *const ggml_tensor,
            *mut ggml_tensor,
        ) -> bool,
    >,
    pub synchronize: Option<unsafe extern "C" fn(ggml_backend_t)>,
    pub graph_plan_create:
        Option<unsafe extern "C" fn(ggml_backend_t, *const ggml_cgraph) -> *mut c_void>,
    pub graph_plan_free: Option<unsafe extern "C" fn(ggml_backend_t, *mut c_void)>,
    pub graph_plan_update:
        Option<unsafe extern "C" fn(ggml_backend_t, *mut c_void, *const ggml_cgraph)>,
    pub graph_plan_compute: Option<unsafe extern "C" fn(ggml_backend_t, *mut c_void) -> c_int>,
    pub graph_compute: Option<unsafe extern "C" fn(ggml_backend_t, *mut ggml_cgraph) -> c_int>,
    pub event_record: Option<unsafe extern "C" fn(ggml_backend_t, ggml_backend_event_t)>,
    pub event_wait: Option<unsafe extern "C" fn(ggml_backend_t, ggml_backend_event_t)>,
    pub graph_optimize: Option<
        unsafe extern "C" fn(
            ggml_backend_t,
            *mut ggml_cgraph,
            *mut ggml_backend_graph_optimize_params,
        ),
    >,
}

#[repr(C)]
pub struct ggml_backend {
    pub guid: *mut [u8; 16],
    pub iface: ggml_backend_i,
    pub device: ggml_backend_dev_t,
    pub context: *mut c_void,
}

#[repr(C)]
pub struct ggml_backend_event {
    pub device: ggml_backend_dev_t,
    pub context: *mut c_void,
}

#[repr(C)]
pub struct ggml_backend_buffer_type_i {
    pub get_name: Option<unsafe extern "C" fn(ggml_backend_buffer_type_t) -> *const c_char>,
    pub alloc_buffer:
        Option<unsafe extern "C" fn(ggml_backend_buffer_type_t, usize) -> ggml_backend_buffer_t>,
    pub get_alignment: Option<unsafe extern "C" fn(ggml_backend_buffer_type_t) -> usize>,
    pub get_max_size: Option<unsafe extern "C" fn(ggml_backend_buffer_type_t) -> usize>,
    pub get_alloc_size:
        Option<unsafe extern "C" fn(ggml_backend_buffer_type_t, *const ggml_tensor) -> usize>,
    pub is_host: Option<unsafe extern "C" fn(ggml_backend_buffer_type_t) -> bool>,
}

#[repr(C)]
pub struct ggml_backend_buffer_type {
    pub iface: ggml_backend_buffer_type_i,
    pub device: ggml_backend_dev_t,
    pub context: *mut c_void,
}

#[repr(C)]
pub struct ggml_backend_buffer_i {
    pub free_buffer: Option<unsafe extern "C" fn(ggml_backend_buffer_t)>,
    pub get_base: Option<unsafe extern "C" fn(ggml_backend_buffer_t) -> *mut c_void>,
    pub init_tensor: Option<unsafe extern "C" fn(ggml_backend_buffer_t, *mut ggml_tensor) -> c_int>,
    pub memset_tensor:
        Option<unsafe extern "C" fn(ggml_backend_buffer_t, *mut ggml_tensor, u8, usize, usize)>,
    pub set_tensor: Option<
        unsafe extern "C" fn(ggml_backend_buffer_t, *mut ggml_tensor, *const c_void, usize, usize),
    >,
    pub get_tensor: Option<
        unsafe extern "C" fn(ggml_backend_buffer_t, *const ggml_tensor, *mut c_void, usize, usize),
    >,
    pub set_tensor_2d: Option<
        unsafe extern "C" fn(
            ggml_backend_buffer_t,
            *mut ggml_tensor,
            *const c_void,
            usize,
            usize,
            usize,
            usize,
            usize,
        ),
    >,
    pub get_tensor_2d: Option<
        unsafe extern "C" fn(
            ggml_backend_buffer_t,
            *const ggml_tensor,
            *mut c_void,
            usize,
            usize,
            usize,
            usize,
            usize,
        ),
    >,
    pub cpy_tensor: Option<
        unsafe extern "C" fn(ggml_backend_buffer_t, *const ggml_tensor, *mut ggml_tensor) -> bool,
    >,
    pub clear: Option<unsafe extern "C" fn(ggml_backend_buffer_t, u8)>,
    pub reset: Option<unsafe extern "C" fn(ggml_backend_buffer_t)>,
}

#[repr(C)]
pub struct ggml_backend_buffer {
    pub iface: ggml_backend_buffer_i,
    pub buft: ggml_backend_buffer_type_t,
    pub context: *mut c_void,
    pub size: usize,
    pub usage: c_int,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn struct_layouts_match_the_pinned_ggml() {
        assert_eq!(size_of::<ggml_tensor>(), 336);
        assert_eq!(offset_of!(ggml_tensor, buffer), 8);
        assert_eq!(offset_of!(ggml_tensor, ne), 16);
        assert_eq!(offset_of!(ggml_tensor, nb), 48);
        assert_eq!(offset_of!(ggml_tensor, op), 80);
        assert_eq!(offset_of!(ggml_tensor, op_params), 84);
        assert_eq!(offset_of!(ggml_tensor, flags), 148);
        assert_eq!(offset_of!(ggml_tensor, src), 152);
        assert_eq!(offset_of!(ggml_tensor, view_src), 232);
        assert_eq!(offset_of!(ggml_tensor, view_offs), 240);
        assert_eq!(offset_of!(ggml_tensor, data), 248);
        assert_eq!(offset_of!(ggml_tensor, name), 256);
        assert_eq!(offset_of!(ggml_tensor, extra), 320);
        assert_eq!(size_of::<ggml_cgraph>(), 96);
        assert_eq!(offset_of!(ggml_cgraph, nodes), 16);
        assert_eq!(offset_of!(ggml_cgraph, leafs), 40);
        assert_eq!(offset_of!(ggml_cgraph, order), 80);
        assert_eq!(offset_of!(ggml_cgraph, uid), 88);
        assert_eq!(size_of::<ggml_backend_reg_i>(), 32);
        assert_eq!(size_of::<ggml_backend_reg>(), 48);
        assert_eq!(offset_of!(ggml_backend_reg, context), 40);
        assert_eq!(size_of::<ggml_backend_device_i>(), 120);
        assert_eq!(size_of::<ggml_backend_device>(), 136);
        assert_eq!(size_of::<ggml_backend_dev_caps>(), 5);
        assert_eq!(size_of::<ggml_backend_dev_props>(), 56);
        assert_eq!(offset_of!(ggml_backend_dev_props, type_), 32);
        assert_eq!(offset_of!(ggml_backend_dev_props, device_id), 40);
        assert_eq!(offset_of!(ggml_backend_dev_props, caps), 48);
        assert_eq!(size_of::<ggml_backend_i>(), 128);
        assert_eq!(offset_of!(ggml_backend_i, graph_compute), 96);
        assert_eq!(offset_of!(ggml_backend_i, graph_optimize), 120);
        assert_eq!(size_of::<ggml_backend>(), 152);
        assert_eq!(offset_of!(ggml_backend, device), 136);
        assert_eq!(size_of::<ggml_backend_event>(), 16);
        assert_eq!(size_of::<ggml_backend_buffer_type_i>(), 48);
        assert_eq!(size_of::<ggml_backend_buffer_type>(), 64);
        assert_eq!(size_of::<ggml_backend_buffer_i>(), 88);
        assert_eq!(offset_of!(ggml_backend_buffer_i, clear), 72);
        assert_eq!(size_of::<ggml_backend_buffer>(), 120);
        assert_eq!(offset_of!(ggml_backend_buffer, usage), 112);
        assert_eq!(size_of::<ggml_backend_graph_optimize_params>(), 16);
    }
}
