//! The buffer vtable over a `DeviceBuffer`. The `ggml_backend_buffer` struct
//! itself comes from ggml-base (`ggml_backend_buffer_init`), which frees it.

use crate::capi::boundary::guard;
use crate::error::{Error, Result};
use crate::ggml::abi::*;
use crate::ggml::symbols::ggml_base;
use crate::log;
use crate::runtime::DeviceBuffer;
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
pub fn wrap(buft: ggml_backend_buffer_type_t, buf: Arc<DeviceBuffer>) -> ggml_backend_buffer_t {
    let Ok(base) = ggml_base() else {
        return std::ptr::null_mut();
    };
    let size = buf.size;
    let base_addr = buf.base;
    let ctx = Box::into_raw(Box::new(BufferCtx { buf }));
    // SAFETY: ggml_backend_buffer_init copies the iface and stores ctx.
    let b = unsafe { (base.buffer_init)(buft, iface(), ctx as *mut c_void, size) };
    if b.is_null() {
        // SAFETY: ctx was leaked above and not handed over.
        drop(unsafe { Box::from_raw(ctx) });
        DeviceBuffer::release(base_addr);
    }
    b
}

/// # Safety
/// `b` must be one of polycl's buffers.
unsafe fn ctx<'a>(b: ggml_backend_buffer_t) -> &'a BufferCtx {
    // SAFETY: our buffers carry a BufferCtx as context.
    unsafe { &*((*b).context as *const BufferCtx) }
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
    let start = off as usize + offset;
    if start.checked_add(size).is_none_or(|e| e > buf.size) {
        return Err(Error::InvalidArgument(format!(
            "{size} bytes at offset {start} are outside the tensor's buffer of {} bytes",
            buf.size
        )));
    }
    Ok((buf, start))
}

fn report(what: &str, r: Result<()>) {
    if let Err(e) = r {
        log::error(&format!("{what}: {e}"));
    }
}

unsafe extern "C" fn free_buffer(b: ggml_backend_buffer_t) {
    guard("free_buffer", (), || {
        // SAFETY: ggml calls this once per buffer, before deleting it.
        let c = unsafe { Box::from_raw((*b).context as *mut BufferCtx) };
        DeviceBuffer::release(c.buf.base);
    })
}

unsafe extern "C" fn get_base(b: ggml_backend_buffer_t) -> *mut c_void {
    // SAFETY: ggml passes our buffer.
    unsafe { ctx(b) }.buf.base as *mut c_void
}

unsafe extern "C" fn memset_tensor(
    _: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    guard("memset_tensor", (), || {
        // SAFETY: ggml passes a tensor in this buffer.
        report(
            "memset_tensor",
            unsafe { locate(t, offset, size) }.and_then(|(b, o)| b.fill(o, size, value)),
        )
    })
}

unsafe extern "C" fn set_tensor(
    _: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    guard("set_tensor", (), || {
        if data.is_null() && size > 0 {
            return log::error("set_tensor: data is NULL");
        }
        report(
            "set_tensor",
            // SAFETY: ggml passes a tensor in this buffer and `size` readable bytes.
            unsafe { locate(t, offset, size) }.and_then(|(b, o)| {
                let src = if size == 0 {
                    &[][..]
                } else {
                    unsafe { std::slice::from_raw_parts(data as *const u8, size) }
                };
                b.write(o, src)
            }),
        )
    })
}

unsafe extern "C" fn get_tensor(
    _: ggml_backend_buffer_t,
    t: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    guard("get_tensor", (), || {
        if data.is_null() && size > 0 {
            return log::error("get_tensor: data is NULL");
        }
        report(
            "get_tensor",
            // SAFETY: ggml passes a tensor in this buffer and `size` writable bytes.
            unsafe { locate(t, offset, size) }.and_then(|(b, o)| {
                let dst = if size == 0 {
                    &mut [][..]
                } else {
                    unsafe { std::slice::from_raw_parts_mut(data as *mut u8, size) }
                };
                b.read(o, dst)
            }),
        )
    })
}

unsafe extern "C" fn cpy_tensor(
    _: ggml_backend_buffer_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    guard("cpy_tensor", false, || {
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
    guard("clear", (), || {
        // SAFETY: ggml passes our buffer.
        let buf = &unsafe { ctx(b) }.buf;
        report("clear", buf.fill(0, buf.size, value))
    })
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
