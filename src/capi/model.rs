//! Compiling a converted model for a device list and running it: infer
//! requests with inputs and outputs by name, and, for stateful models, state
//! reset and reads of a variable's current value.
//!
//! Data crosses as contiguous bytes of the tensor's ggml type in ggml `ne`
//! order. A request is used by one thread at a time.

use super::decoder::{cstr, handle, handle_mut, out_ptr, PolyclModel, PolyclShape};
use super::{api, PolyclStatus};
use crate::decoder::foreign::ShapeDesc;
use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::plan::internal::nbytes;
use crate::plan::request::{Compiled, Request};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// A model whose weights live on each device of a list.
pub struct PolyclCompiledModel {
    inner: Arc<Compiled>,
}

/// Inputs, state variables and plans for one run of a compiled model on one
/// of its devices.
pub struct PolyclInferRequest {
    inner: Request,
}

/// Compiles `model` for devices `devices[0..n_devices]` (indices of polycl
/// devices: POLYCL0 is 0); NULL/0 means device 0 alone. Weights are uploaded
/// to every device in the list.
#[no_mangle]
pub extern "C" fn polycl_model_compile(
    model: *const PolyclModel,
    devices: *const i32,
    n_devices: usize,
    out_compiled: *mut *mut PolyclCompiledModel,
) -> PolyclStatus {
    api("polycl_model_compile", || {
        // SAFETY: NULL or a live model.
        let m = unsafe { handle(model, "model") }?;
        out_ptr(out_compiled, "out_compiled")?;
        if n_devices > 0 && devices.is_null() {
            return Err(Error::InvalidArgument("devices is NULL".into()));
        }
        let all = crate::runtime::devices().map_err(|e| e.clone())?;
        let wanted: Vec<i32> = if n_devices == 0 {
            vec![0]
        } else {
            // SAFETY: the host promises n_devices readable ints.
            unsafe { std::slice::from_raw_parts(devices, n_devices) }.to_vec()
        };
        let mut list = Vec::new();
        for d in wanted {
            let dev = usize::try_from(d)
                .ok()
                .and_then(|i| all.get(i))
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("device {d}: polycl has {} devices", all.len()))
                })?;
            list.push(dev.clone());
        }
        let inner = Compiled::new(&m.graph, &list)?;
        // SAFETY: checked non-null.
        unsafe { *out_compiled = Box::into_raw(Box::new(PolyclCompiledModel { inner })) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn polycl_compiled_model_free(compiled: *mut PolyclCompiledModel) {
    super::boundary::guard("polycl_compiled_model_free", (), || {
        if !compiled.is_null() {
            // SAFETY: made by polycl_model_compile, freed once.
            drop(unsafe { Box::from_raw(compiled) });
        }
    })
}

/// Makes an infer request that runs on device `device_slot` of the compiled
/// model's list. It keeps the compiled model alive.
#[no_mangle]
pub extern "C" fn polycl_infer_request_new(
    compiled: *const PolyclCompiledModel,
    device_slot: usize,
    out_request: *mut *mut PolyclInferRequest,
) -> PolyclStatus {
    api("polycl_infer_request_new", || {
        // SAFETY: NULL or a live compiled model.
        let c = unsafe { handle(compiled, "compiled") }?;
        out_ptr(out_request, "out_request")?;
        let inner = Request::new(c.inner.clone(), device_slot)?;
        // SAFETY: checked non-null.
        unsafe { *out_request = Box::into_raw(Box::new(PolyclInferRequest { inner })) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn polycl_infer_request_free(request: *mut PolyclInferRequest) {
    super::boundary::guard("polycl_infer_request_free", (), || {
        if !request.is_null() {
            // SAFETY: made by polycl_infer_request_new, freed once.
            drop(unsafe { Box::from_raw(request) });
        }
    })
}

/// Sets input `name` for the next infer: `shape` gives the actual dims (rank 1
/// to 4, every dim known), `data` holds `size` bytes of the input's type.
#[no_mangle]
pub extern "C" fn polycl_infer_request_set_input(
    request: *mut PolyclInferRequest,
    name: *const c_char,
    shape: *const PolyclShape,
    data: *const c_void,
    size: usize,
) -> PolyclStatus {
    api("polycl_infer_request_set_input", || {
        // SAFETY: NULL or a live request.
        let r = unsafe { handle_mut(request, "request") }?;
        let name = cstr(name, "name")?;
        // SAFETY: NULL or a readable shape.
        let shape = *unsafe { handle(shape, "shape") }?;
        if size > 0 && data.is_null() {
            return Err(Error::InvalidArgument("data is NULL".into()));
        }
        let bytes: &[u8] = if size == 0 {
            &[]
        } else {
            // SAFETY: the host promises `size` readable bytes.
            unsafe { std::slice::from_raw_parts(data as *const u8, size) }
        };
        r.inner.set_input(name, shape.rank, &shape.ne, bytes)
    })
}

/// Runs the model on the inputs set so far (synchronously); stateful models
/// read and commit their variables.
#[no_mangle]
pub extern "C" fn polycl_infer_request_infer(request: *mut PolyclInferRequest) -> PolyclStatus {
    api("polycl_infer_request_infer", || {
        // SAFETY: NULL or a live request.
        unsafe { handle_mut(request, "request") }?.inner.infer()
    })
}

fn write_info(
    ty: &TensorType,
    out_type: *mut i32,
    out_shape: *mut PolyclShape,
    out_size: *mut usize,
) -> Result<()> {
    out_ptr(out_type, "out_type")?;
    out_ptr(out_shape, "out_shape")?;
    out_ptr(out_size, "out_size")?;
    // SAFETY: all three checked non-null.
    unsafe {
        *out_type = ty.dtype.id() as i32;
        *out_shape = PolyclShape::from(ShapeDesc::of(ty));
        *out_size = nbytes(ty) as usize;
    }
    Ok(())
}

fn copy_out(bytes: &[u8], dst: *mut c_void, size: usize) -> Result<()> {
    if size != bytes.len() {
        return Err(Error::InvalidArgument(format!(
            "size {size}: the tensor has {} bytes",
            bytes.len()
        )));
    }
    if size > 0 {
        out_ptr(dst, "dst")?;
        // SAFETY: dst holds `size` writable bytes (host contract), checked non-null.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, size) };
    }
    Ok(())
}

/// Type, actual shape and byte size of output `name` of the last infer.
#[no_mangle]
pub extern "C" fn polycl_infer_request_output_info(
    request: *const PolyclInferRequest,
    name: *const c_char,
    out_type: *mut i32,
    out_shape: *mut PolyclShape,
    out_size: *mut usize,
) -> PolyclStatus {
    api("polycl_infer_request_output_info", || {
        // SAFETY: NULL or a live request.
        let r = unsafe { handle(request, "request") }?;
        let (ty, _) = r.inner.output(cstr(name, "name")?)?;
        write_info(&ty, out_type, out_shape, out_size)
    })
}

/// Copies output `name` of the last infer into `dst` (`size` must equal the
/// byte size polycl_infer_request_output_info gives).
#[no_mangle]
pub extern "C" fn polycl_infer_request_get_output(
    request: *const PolyclInferRequest,
    name: *const c_char,
    dst: *mut c_void,
    size: usize,
) -> PolyclStatus {
    api("polycl_infer_request_get_output", || {
        // SAFETY: NULL or a live request.
        let r = unsafe { handle(request, "request") }?;
        let (_, bytes) = r.inner.output(cstr(name, "name")?)?;
        copy_out(&bytes, dst, size)
    })
}

/// Resets every state variable to its initial value (an empty cache).
#[no_mangle]
pub extern "C" fn polycl_infer_request_reset_state(
    request: *mut PolyclInferRequest,
) -> PolyclStatus {
    api("polycl_infer_request_reset_state", || {
        // SAFETY: NULL or a live request.
        unsafe { handle_mut(request, "request") }?
            .inner
            .reset_state();
        Ok(())
    })
}

/// Type, current shape and byte size of state variable `variable_id`.
#[no_mangle]
pub extern "C" fn polycl_infer_request_state_info(
    request: *const PolyclInferRequest,
    variable_id: *const c_char,
    out_type: *mut i32,
    out_shape: *mut PolyclShape,
    out_size: *mut usize,
) -> PolyclStatus {
    api("polycl_infer_request_state_info", || {
        // SAFETY: NULL or a live request.
        let r = unsafe { handle(request, "request") }?;
        let (ty, _) = r.inner.state(cstr(variable_id, "variable_id")?)?;
        write_info(&ty, out_type, out_shape, out_size)
    })
}

/// Copies the current value of state variable `variable_id` into `dst`.
#[no_mangle]
pub extern "C" fn polycl_infer_request_get_state(
    request: *const PolyclInferRequest,
    variable_id: *const c_char,
    dst: *mut c_void,
    size: usize,
) -> PolyclStatus {
    api("polycl_infer_request_get_state", || {
        // SAFETY: NULL or a live request.
        let r = unsafe { handle(request, "request") }?;
        let (_, bytes) = r.inner.state(cstr(variable_id, "variable_id")?)?;
        copy_out(&bytes, dst, size)
    })
}
