//! The buffer vtable over a `DeviceBuffer`. The `ggml_backend_buffer` struct
//! itself comes from ggml-base (`ggml_backend_buffer_init`), which frees it.

use crate::capi::boundary::guard;
use crate::error::{Error, Result};
use crate::ggml::abi::*;
use crate::log;
use crate::runtime::profile::{host_call, HostCall};
use crate::runtime::{Device, DeviceBuffer};
use std::ffi::c_void;
use std::sync::Arc;

pub struct BufferCtx {
    pub buf: Arc<DeviceBuffer>,
}

fn iface() -> ggml_backend_buffer_i {
    ggml_backend_buffer_i {
        free_buffer: Some(free_buffer),
        get_base: Some(get_base),
        init_tensor: None,
        memset_tensor: Some(memset_tensor),
        set_tensor: Some(set_tensor),
        get_tensor: Some(get_tensor),
        set_tensor_2d: None,
        get_tensor_2d: None,
        cpy_tensor: Some(cpy_tensor),
        clear: Some(clear),
        reset: None,
    }
}

/// Hands `buf` to ggml-base as a new `ggml_backend_buffer`.
///
/// # Safety
/// `buft` must be one of polycl's buffer types.
pub unsafe fn wrap(
    buft: ggml_backend_buffer_type_t,
    buf: Arc<DeviceBuffer>,
) -> ggml_backend_buffer_t {
    let (size, base_addr) = (buf.size, buf.base);
    super::new_buffer(buft, iface(), BufferCtx { buf }, size, || {
        DeviceBuffer::release(base_addr)
    })
}

/// `b`'s context if it is one of polycl's buffers: non-NULL, with a context,
/// made by one of polycl's buffer types. None for anything else, which every
/// entry refuses instead of dereferencing.
fn ours<'a>(b: ggml_backend_buffer_t) -> Option<&'a BufferCtx> {
    // SAFETY: polycl's buffer types make buffers through `wrap`, whose
    // context is a BufferCtx.
    unsafe { super::buffer_context(b, super::buffer_type::is_ours) }
}

fn not_ours() -> Error {
    Error::InvalidArgument("buffer is NULL or not a polycl buffer".into())
}

/// The device a failed void entry on (`b`, `t`) is charged to: the buffer's,
/// else that of the buffer holding the tensor's data.
///
/// # Safety
/// `t` is NULL or a valid tensor.
unsafe fn charge(b: ggml_backend_buffer_t, t: *const ggml_tensor) -> Option<Arc<Device>> {
    if let Some(c) = ours(b) {
        return Some(c.buf.device.clone());
    }
    if t.is_null() {
        return None;
    }
    // SAFETY: non-NULL, and valid per the contract.
    let data = unsafe { (*t).data } as u64;
    DeviceBuffer::resolve(data).map(|(buf, _)| buf.device.clone())
}

/// The device buffer and byte offset of `t`'s data plus `offset`, checking `size`.
///
/// # Safety
/// `t` must be a valid tensor.
pub unsafe fn locate(
    t: *const ggml_tensor,
    offset: usize,
    size: usize,
) -> Result<(Arc<DeviceBuffer>, usize)> {
    if t.is_null() {
        return Err(Error::InvalidArgument("tensor is NULL".into()));
    }
    // SAFETY: caller guarantees t is valid.
    let data = unsafe { (*t).data } as u64;
    let (buf, off) = DeviceBuffer::resolve(data)
        .ok_or_else(|| Error::InvalidArgument("tensor is not in a polycl buffer".into()))?;
    let start = (off as usize).checked_add(offset);
    if start
        .and_then(|s| s.checked_add(size))
        .is_none_or(|e| e > buf.size)
    {
        return Err(Error::InvalidArgument(format!(
            "{size} bytes at offset {offset} of the tensor (buffer offset {off}) are outside its buffer of {} bytes",
            buf.size
        )));
    }
    Ok((buf, off as usize + offset))
}

/// `locate` for a host transfer: also refuses ranges past the tensor's own
/// bytes, which would overwrite its neighbours in the buffer.
///
/// # Safety
/// `t` is NULL or a valid tensor.
unsafe fn locate_in_tensor(
    t: *const ggml_tensor,
    offset: usize,
    size: usize,
) -> Result<(Arc<DeviceBuffer>, usize)> {
    // SAFETY: NULL is refused by locate before any read; else valid.
    let (buf, start) = unsafe { locate(t, offset, size) }?;
    // SAFETY: locate refused NULL.
    let n = unsafe { nbytes(t) };
    if offset.checked_add(size).is_none_or(|e| e > n) {
        return Err(Error::InvalidArgument(format!(
            "{size} bytes at offset {offset} are outside the tensor's {n} bytes"
        )));
    }
    Ok((buf, start))
}

unsafe extern "C" fn free_buffer(b: ggml_backend_buffer_t) {
    guard("free_buffer", (), || {
        if ours(b).is_none() {
            return log::error("free_buffer: buffer is NULL or not a polycl buffer");
        }
        // SAFETY: ours; ggml calls this once per buffer, before deleting it.
        let c = unsafe { Box::from_raw((*b).context as *mut BufferCtx) };
        // SAFETY: as above; a repeated free now finds no context and is refused.
        unsafe { (*b).context = std::ptr::null_mut() };
        DeviceBuffer::release(c.buf.base);
    })
}

unsafe extern "C" fn get_base(b: ggml_backend_buffer_t) -> *mut c_void {
    guard("get_base", std::ptr::null_mut(), || match ours(b) {
        Some(c) => c.buf.base as *mut c_void,
        None => {
            log::error("get_base: buffer is NULL or not a polycl buffer");
            std::ptr::null_mut()
        }
    })
}

unsafe extern "C" fn memset_tensor(
    b: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    super::void_entry(
        "memset_tensor",
        // SAFETY: ggml passes NULL or a valid tensor.
        || unsafe { charge(b, t) },
        || {
            ours(b).ok_or_else(not_ours)?;
            // SAFETY: ggml passes NULL or a valid tensor.
            let (buf, o) = unsafe { locate_in_tensor(t, offset, size) }?;
            buf.fill(o, size, value)
        },
    )
}

unsafe extern "C" fn set_tensor(
    b: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    super::void_entry(
        "set_tensor",
        // SAFETY: ggml passes NULL or a valid tensor.
        || unsafe { charge(b, t) },
        || {
            ours(b).ok_or_else(not_ours)?;
            if data.is_null() && size > 0 {
                return Err(Error::InvalidArgument("data is NULL".into()));
            }
            // SAFETY: ggml passes NULL or a valid tensor.
            let (buf, o) = unsafe { locate_in_tensor(t, offset, size) }?;
            let src = if size == 0 {
                &[][..]
            } else {
                // SAFETY: non-NULL; the caller passes `size` readable bytes.
                unsafe { std::slice::from_raw_parts(data as *const u8, size) }
            };
            host_call(HostCall::SetTensor, || buf.write(o, src))
        },
    )
}

unsafe extern "C" fn get_tensor(
    b: ggml_backend_buffer_t,
    t: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    super::void_entry(
        "get_tensor",
        // SAFETY: ggml passes NULL or a valid tensor.
        || unsafe { charge(b, t) },
        || {
            ours(b).ok_or_else(not_ours)?;
            if data.is_null() && size > 0 {
                return Err(Error::InvalidArgument("data is NULL".into()));
            }
            // SAFETY: ggml passes NULL or a valid tensor.
            let (buf, o) = unsafe { locate_in_tensor(t, offset, size) }?;
            let dst = if size == 0 {
                &mut [][..]
            } else {
                // SAFETY: non-NULL; the caller passes `size` writable bytes.
                unsafe { std::slice::from_raw_parts_mut(data as *mut u8, size) }
            };
            host_call(HostCall::GetTensor, || buf.read(o, dst))
        },
    )
}

/// The backend vtable's `get_tensor_async` (backend/stream.rs): `size` bytes
/// of `t` from `offset` into `data`, read by the device after the work
/// enqueued on `backend` so far, without waiting for it; ggml's next
/// synchronize of the backend waits for the read. Without this entry ggml
/// synchronizes and then reads: a decode token's logits then cost a host
/// round trip after the device's last kernel. A tensor in a buffer of
/// another device is read at once (its own queue orders it); one outside
/// polycl's plain buffers (a split buffer) goes through its buffer's
/// get_tensor after the backend synchronized, as ggml's fallback does.
pub(crate) unsafe extern "C" fn get_tensor_async(
    backend: ggml_backend_t,
    t: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    super::void_entry(
        "get_tensor_async",
        || super::stream::ours(backend).map(|c| c.dev.clone()),
        || {
            let dev = super::stream::ours(backend)
                .ok_or_else(|| {
                    Error::InvalidArgument("get_tensor_async: NULL or not a polycl backend".into())
                })?
                .dev
                .clone();
            if data.is_null() && size > 0 {
                return Err(Error::InvalidArgument("data is NULL".into()));
            }
            if t.is_null() {
                return Err(Error::InvalidArgument("tensor is NULL".into()));
            }
            // SAFETY: non-NULL; ggml passes a valid tensor.
            let data_at = unsafe { (*t).data } as u64;
            if DeviceBuffer::resolve(data_at).is_none() {
                // SAFETY: non-NULL; ggml passes a valid tensor.
                let b = unsafe { (*t).buffer };
                // SAFETY: ggml passes NULL or a live buffer.
                let read = (!b.is_null())
                    .then(|| unsafe { (*b).iface.get_tensor })
                    .flatten();
                let read = read.ok_or_else(|| {
                    Error::InvalidArgument(
                        "tensor is neither in a polycl buffer nor in a buffer that reads".into(),
                    )
                })?;
                dev.synchronize()?;
                // SAFETY: the tensor's own buffer's entry, as ggml_backend_tensor_get calls it.
                unsafe { read(b, t, data, offset, size) };
                return Ok(());
            }
            // SAFETY: non-NULL and valid per the contract.
            let (buf, o) = unsafe { locate_in_tensor(t, offset, size) }?;
            host_call(HostCall::GetTensorAsync, || {
                if Arc::ptr_eq(&buf.device, &dev) {
                    // SAFETY: ggml keeps `data` (`size` writable bytes) until
                    // it synchronizes the backend, which waits for the read.
                    unsafe { buf.read_async(o, data as *mut u8, size) }
                } else {
                    let dst = if size == 0 {
                        &mut [][..]
                    } else {
                        // SAFETY: non-NULL; the caller passes `size` writable bytes.
                        unsafe { std::slice::from_raw_parts_mut(data as *mut u8, size) }
                    };
                    buf.read(o, dst)
                }
            })
        },
    )
}

unsafe extern "C" fn cpy_tensor(
    b: ggml_backend_buffer_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    guard("cpy_tensor", false, || {
        if ours(b).is_none() || src.is_null() || dst.is_null() {
            log::error("cpy_tensor: NULL or foreign buffer or tensor");
            return false;
        }
        // SAFETY: ggml passes valid tensors; src may live anywhere, and `locate`
        // only accepts data inside polycl's registered buffers.
        unsafe {
            let size = nbytes(src);
            let (Ok((sb, so)), Ok((db, doff))) = (locate(src, 0, size), locate(dst, 0, size))
            else {
                return false;
            };
            if !Arc::ptr_eq(&sb.device, &db.device) {
                return false;
            }
            match sb.copy_to(so, &db, doff, size) {
                Ok(()) => true,
                Err(e) => {
                    log::error(&format!("cpy_tensor: {e}"));
                    false
                }
            }
        }
    })
}

unsafe extern "C" fn clear(b: ggml_backend_buffer_t, value: u8) {
    super::void_entry(
        "clear",
        || ours(b).map(|c| c.buf.device.clone()),
        || {
            let c = ours(b).ok_or_else(not_ours)?;
            c.buf.fill(0, c.buf.size, value)
        },
    )
}

/// ggml_nbytes for a contiguous-or-strided tensor.
///
/// # Safety
/// `t` must be a valid tensor of a known type.
pub unsafe fn nbytes(t: *const ggml_tensor) -> usize {
    // SAFETY: caller guarantees validity.
    let t = unsafe { &*t };
    let Some(ty) = crate::ggml::types::GgmlType::from_id(t.type_) else {
        return 0;
    };
    if t.ne.iter().any(|&n| n <= 0) {
        return 0;
    }
    let blck = ty.block_elems() as i64;
    if blck == 1 {
        let mut n = ty.block_bytes();
        for d in 0..4 {
            n += (t.ne[d] as usize - 1) * t.nb[d];
        }
        n
    } else {
        let mut n = t.ne[0] as usize * t.nb[0] / blck as usize;
        for d in 1..4 {
            n += (t.ne[d] as usize - 1) * t.nb[d];
        }
        n
    }
}
