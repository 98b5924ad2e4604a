//! `-sm row`: the split buffer type that llama asks for through the proc
//! address `ggml_backend_split_buffer_type(main_device, tensor_split)`.
//!
//! A split buffer has no memory of its own: ggml lays its tensors out at fake
//! addresses, and `init_tensor` gives each tensor one share of rows per
//! device (`runtime::peer::SplitTensor`), in proportion to the ratios and
//! starting at whole row granules. `set_tensor` scatters the rows, so weights
//! load straight into their devices. Only MUL_MAT may read a split weight
//! (`supports_op`), and only on the main device, whose plan runs the other
//! devices' shares and gathers the result (`plan/mul_mat.rs`).

use super::buffer::nbytes;
use crate::capi::boundary::guard;
use crate::ggml::abi::*;
use crate::ggml::ops::OP_MUL_MAT;
use crate::ggml::types::GgmlType;
use crate::log;
use crate::runtime::peer::{self, SplitTensor, MAX_SPLIT_DEVICES};
use crate::runtime::{Device, DeviceBuffer, BUFFER_ALIGNMENT};
use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::Arc;

/// One split buffer type: a main device and split points, made once per
/// distinct pair and never freed (ggml compares buffer types by address).
pub struct SplitBuft {
    pub main: usize,
    pub points: Vec<f32>,
    pub devices: Vec<Arc<Device>>,
    name: CString,
}

struct SplitBuffer {
    base: u64,
    buft: &'static SplitBuft,
}

/// The leaked split buffer types, by address.
fn bufts() -> &'static Mutex<Vec<(usize, &'static SplitBuft)>> {
    static B: Mutex<Vec<(usize, &'static SplitBuft)>> = Mutex::new(Vec::new());
    &B
}

/// The split buffer type behind `buft`, if it is one of polycl's.
pub fn lookup(buft: ggml_backend_buffer_type_t) -> Option<&'static SplitBuft> {
    if buft.is_null() {
        return None;
    }
    bufts()
        .lock()
        .iter()
        .find(|(a, _)| *a == buft as usize)
        .map(|(_, s)| *s)
}

/// The proc `ggml_backend_split_buffer_type`: NULL, with an error that says
/// why, for a main device that does not exist or bad ratios (llama then
/// places the weights in the devices' own buffers).
///
/// # Safety
/// `tensor_split` is NULL or points to `llama_max_devices()` (16) floats.
pub unsafe extern "C" fn split_buffer_type(
    main_device: c_int,
    tensor_split: *const f32,
) -> ggml_backend_buffer_type_t {
    guard(
        "ggml_backend_split_buffer_type",
        std::ptr::null_mut(),
        || {
            let plugin = super::reg::plugin();
            let n = plugin.devices.len();
            if main_device < 0 || main_device as usize >= n {
                log::error(&format!(
                    "ggml_backend_split_buffer_type: main device {main_device} does not exist \
                 (polycl has {n} device{})",
                    if n == 1 { "" } else { "s" }
                ));
                return std::ptr::null_mut();
            }
            let ratios = if tensor_split.is_null() {
                None
            } else {
                // SAFETY: ggml passes llama's array of llama_max_devices() floats.
                Some(unsafe { std::slice::from_raw_parts(tensor_split, MAX_SPLIT_DEVICES) })
            };
            let points = match peer::split_points(ratios, n) {
                Ok(p) => p,
                Err(e) => {
                    log::error(&format!(
                        "ggml_backend_split_buffer_type: {e}; -sm row is not used"
                    ));
                    return std::ptr::null_mut();
                }
            };
            get_or_make(main_device as usize, points)
        },
    )
}

fn get_or_make(main: usize, points: Vec<f32>) -> ggml_backend_buffer_type_t {
    let mut list = bufts().lock();
    if let Some((a, _)) = list
        .iter()
        .find(|(_, s)| s.main == main && s.points == points)
    {
        return *a as ggml_backend_buffer_type_t;
    }
    let plugin = super::reg::plugin();
    let devices: Vec<Arc<Device>> = plugin
        .devices
        .iter()
        // SAFETY: the plugin's devices are valid for the whole process.
        .map(|&d| unsafe { super::device::ctx(d) }.dev.clone())
        .collect();
    let shares: Vec<String> = points
        .iter()
        .zip(points.iter().skip(1).chain(std::iter::once(&1.0)))
        .map(|(a, b)| format!("{:.3}", b - a))
        .collect();
    log::info(&format!(
        "split buffer type: main device POLYCL{main}, row shares {}",
        shares.join("/")
    ));
    let ctx: &'static SplitBuft = Box::leak(Box::new(SplitBuft {
        main,
        points,
        devices,
        name: CString::new(format!("POLYCL{main}_Split")).unwrap_or_default(),
    }));
    let buft = Box::into_raw(Box::new(ggml_backend_buffer_type {
        iface: ggml_backend_buffer_type_i {
            get_name: Some(buft_get_name),
            alloc_buffer: Some(buft_alloc_buffer),
            get_alignment: Some(buft_get_alignment),
            get_max_size: None,
            get_alloc_size: None,
            is_host: None,
        },
        device: plugin.devices[main],
        context: ctx as *const SplitBuft as *mut c_void,
    }));
    list.push((buft as usize, ctx));
    buft
}

unsafe extern "C" fn buft_get_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
    guard("split buft get_name", std::ptr::null(), || {
        lookup(buft).map_or(std::ptr::null(), |s| s.name.as_ptr())
    })
}

unsafe extern "C" fn buft_get_alignment(_: ggml_backend_buffer_type_t) -> usize {
    guard("split buft get_alignment", BUFFER_ALIGNMENT, || {
        BUFFER_ALIGNMENT
    })
}

fn buffer_iface() -> ggml_backend_buffer_i {
    ggml_backend_buffer_i {
        free_buffer: Some(free_buffer),
        get_base: Some(get_base),
        init_tensor: Some(init_tensor),
        memset_tensor: Some(memset_tensor),
        set_tensor: Some(set_tensor),
        get_tensor: Some(get_tensor),
        set_tensor_2d: None,
        get_tensor_2d: None,
        cpy_tensor: None,
        clear: Some(clear),
        reset: None,
    }
}

unsafe extern "C" fn buft_alloc_buffer(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    guard("split alloc_buffer", std::ptr::null_mut(), || {
        let Some(s) = lookup(buft) else {
            return std::ptr::null_mut();
        };
        let base = DeviceBuffer::reserve_addresses(size);
        peer::add_range(base, size as u64);
        let ctx = SplitBuffer { base, buft: s };
        super::new_buffer(buft, buffer_iface(), ctx, size, || peer::remove_range(base))
    })
}

/// `b`'s context if it is one of polycl's split buffers (non-NULL, with a
/// context, of a split buffer type); None for anything else, which every
/// entry refuses instead of dereferencing.
fn ours<'a>(b: ggml_backend_buffer_t) -> Option<&'a SplitBuffer> {
    // SAFETY: the split buffer types make buffers in buft_alloc_buffer,
    // whose context is a SplitBuffer.
    unsafe { super::buffer_context(b, |t| lookup(t).is_some()) }
}

/// The device a failed void entry is charged to: the split's main device,
/// whose graph computes read the split tensors.
fn charge(b: ggml_backend_buffer_t) -> Option<Arc<Device>> {
    ours(b).and_then(|c| c.buft.devices.get(c.buft.main).cloned())
}

fn not_ours() -> crate::error::Error {
    crate::error::Error::InvalidArgument("buffer is NULL or not a polycl split buffer".into())
}

unsafe extern "C" fn free_buffer(b: ggml_backend_buffer_t) {
    guard("split free_buffer", (), || {
        if ours(b).is_none() {
            return log::error("split free_buffer: NULL or not a split buffer");
        }
        // SAFETY: ours; ggml calls this once per buffer, before deleting it.
        let c = unsafe { Box::from_raw((*b).context as *mut SplitBuffer) };
        // SAFETY: as above; a repeated free now finds no context and is refused.
        unsafe { (*b).context = std::ptr::null_mut() };
        peer::remove_range(c.base);
    })
}

unsafe extern "C" fn get_base(b: ggml_backend_buffer_t) -> *mut c_void {
    guard("split get_base", std::ptr::null_mut(), || {
        ours(b).map_or(std::ptr::null_mut(), |c| c.base as *mut c_void)
    })
}

unsafe extern "C" fn init_tensor(b: ggml_backend_buffer_t, t: *mut ggml_tensor) -> c_int {
    guard("split init_tensor", STATUS_FAILED, || {
        let Some(c) = ours(b) else {
            log::error("split init_tensor: NULL or not a split buffer");
            return STATUS_FAILED;
        };
        if t.is_null() {
            log::error("split init_tensor: tensor is NULL");
            return STATUS_FAILED;
        }
        // SAFETY: non-NULL; ggml passes a tensor placed in this buffer.
        let t = unsafe { &*t };
        if !t.view_src.is_null() {
            // A view reads its parent's shares (the parent was initialised).
            return STATUS_SUCCESS;
        }
        let Some(ty) = GgmlType::from_id(t.type_) else {
            log::error("split init_tensor: a tensor of a type unknown to polycl");
            return STATUS_FAILED;
        };
        let nrows = t.ne[1] * t.ne[2] * t.ne[3];
        let row_bytes = ty.row_bytes(t.ne[0]);
        // SAFETY: t is a valid tensor.
        if row_bytes * nrows as u64 != unsafe { nbytes(t) } as u64 {
            log::error("split init_tensor: only contiguous tensors can be split by rows");
            return STATUS_FAILED;
        }
        let s = c.buft;
        match SplitTensor::new(
            t.data as u64,
            row_bytes,
            nrows,
            &s.devices,
            &s.points,
            s.main,
        ) {
            Ok(st) => {
                peer::add_tensor(st);
                STATUS_SUCCESS
            }
            Err(e) => {
                log::error(&format!("split init_tensor: {e}"));
                STATUS_ALLOC_FAILED
            }
        }
    })
}

/// The split tensor `t` reads, and `t`'s byte offset inside it.
///
/// # Safety
/// `t` must be a valid tensor.
unsafe fn locate(t: *const ggml_tensor) -> Option<(Arc<SplitTensor>, u64)> {
    if t.is_null() {
        return None;
    }
    // SAFETY: caller guarantees validity.
    let t = unsafe { &*t };
    let (root, offs) = if t.view_src.is_null() {
        (t.data as u64, 0)
    } else {
        // SAFETY: view_src of a valid tensor is a valid tensor.
        (unsafe { (*t.view_src).data } as u64, t.view_offs as u64)
    };
    peer::tensor_at(root).map(|s| (s, offs))
}

/// The split tensor behind `t` and the byte offset of `offset` in it, with
/// `size` bytes checked against the tensor's own bytes.
///
/// # Safety
/// `t` is NULL or a valid tensor.
unsafe fn locate_range(
    t: *const ggml_tensor,
    offset: usize,
    size: usize,
) -> crate::error::Result<(Arc<SplitTensor>, u64)> {
    use crate::error::Error;
    if t.is_null() {
        return Err(Error::InvalidArgument("tensor is NULL".into()));
    }
    // SAFETY: non-NULL and valid per the contract.
    let n = unsafe { nbytes(t) };
    if offset.checked_add(size).is_none_or(|e| e > n) {
        return Err(Error::InvalidArgument(format!(
            "{size} bytes at offset {offset} are outside the tensor's {n} bytes"
        )));
    }
    // SAFETY: as above.
    let (s, o) =
        unsafe { locate(t) }.ok_or_else(|| Error::InvalidArgument("not a split tensor".into()))?;
    Ok((s, o + offset as u64))
}

unsafe extern "C" fn memset_tensor(
    b: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    super::void_entry(
        "split memset_tensor",
        || charge(b),
        || {
            ours(b).ok_or_else(not_ours)?;
            // SAFETY: ggml passes NULL or a tensor of this buffer.
            let (s, o) = unsafe { locate_range(t, offset, size) }?;
            s.fill(o, size as u64, value)
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
        "split set_tensor",
        || charge(b),
        || {
            ours(b).ok_or_else(not_ours)?;
            if size == 0 {
                return Ok(());
            }
            if data.is_null() {
                return Err(crate::error::Error::InvalidArgument("data is NULL".into()));
            }
            // SAFETY: ggml passes NULL or a tensor of this buffer.
            let (s, o) = unsafe { locate_range(t, offset, size) }?;
            // SAFETY: non-NULL; the caller passes `size` readable bytes.
            let src = unsafe { std::slice::from_raw_parts(data as *const u8, size) };
            s.write(o, src)
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
        "split get_tensor",
        || charge(b),
        || {
            ours(b).ok_or_else(not_ours)?;
            if size == 0 {
                return Ok(());
            }
            if data.is_null() {
                return Err(crate::error::Error::InvalidArgument("data is NULL".into()));
            }
            // SAFETY: ggml passes NULL or a tensor of this buffer.
            let (s, o) = unsafe { locate_range(t, offset, size) }?;
            // SAFETY: non-NULL; the caller passes `size` writable bytes.
            let dst = unsafe { std::slice::from_raw_parts_mut(data as *mut u8, size) };
            s.read(o, dst)
        },
    )
}

unsafe extern "C" fn clear(b: ggml_backend_buffer_t, value: u8) {
    super::void_entry(
        "split clear",
        || charge(b),
        || {
            let c = ours(b).ok_or_else(not_ours)?;
            // SAFETY: ours: a live buffer struct.
            let size = unsafe { (*b).size } as u64;
            for s in peer::tensors_in(c.base, size) {
                s.fill(0, s.nrows as u64 * s.row_bytes, value)?;
            }
            Ok(())
        },
    )
}

/// `supports_op` for ops that read a split buffer: Some(false) refuses the
/// op, Some(true) or None leave the answer to the op table. Only MUL_MAT may
/// read a split weight, as its first source, on the main device, for the
/// weight types and shapes the split lowering handles.
///
/// # Safety
/// `op` must be a valid tensor whose srcs are valid or NULL.
pub unsafe fn supports_op(dev_index: usize, op: *const ggml_tensor) -> Option<bool> {
    // SAFETY: caller guarantees validity.
    let op = unsafe { &*op };
    let mut split_src = None;
    for (i, &s) in op.src.iter().enumerate() {
        if s.is_null() {
            continue;
        }
        // SAFETY: a valid src; its buffer is NULL or a valid (maybe dummy) buffer.
        let buft = unsafe {
            let b = (*s).buffer;
            if b.is_null() {
                continue;
            }
            (*b).buft
        };
        if let Some(sb) = lookup(buft) {
            if split_src.is_some() {
                return Some(false);
            }
            split_src = Some((i, sb));
        }
    }
    let (i, sb) = split_src?;
    if op.op != OP_MUL_MAT || i != 0 || sb.main != dev_index {
        return Some(false);
    }
    // SAFETY: src 0 is non-null (found above).
    let w = unsafe { &*op.src[0] };
    let ty = GgmlType::from_id(w.type_);
    let ok_type = matches!(
        ty,
        Some(GgmlType::Q4_0 | GgmlType::Q8_0 | GgmlType::Q4K | GgmlType::Q6K)
    ) || (matches!(ty, Some(GgmlType::F16 | GgmlType::F32)) && w.ne[1] % 4 == 0);
    // F16/F32 kernels pick the CPU's lane structure by `ne01 % 4`; shares keep
    // it only when the whole matrix has it.
    if !ok_type || w.ne[2] != 1 || w.ne[3] != 1 {
        return Some(false);
    }
    None
}

/// Whether `buft` is a split buffer type whose main device is `dev_index`.
pub fn is_split_of(buft: ggml_backend_buffer_type_t, dev_index: usize) -> bool {
    lookup(buft).is_some_and(|s| s.main == dev_index)
}
