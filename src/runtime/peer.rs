//! Several devices at once: weights split by rows over devices, and the
//! transfers between devices.
//!
//! Devices of one OpenCL platform share one context (runtime/device.rs), so a
//! buffer of one is a valid argument on another's queue: a transfer is a
//! `clEnqueueCopyBuffer(Rect)` on one queue that waits for an event of the
//! other, and nothing blocks the host. Devices in different contexts fall back
//! to a staged copy through host memory (blocking; correct, not fast).

use super::buffer::DeviceBuffer;
use super::device::Device;
use crate::error::{Error, Result};
use opencl3::command_queue as cq;
use opencl3::event::Event;
use opencl3::types::{cl_event, cl_mem, CL_BLOCKING};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// Rows per split boundary: every device's share starts at a multiple of this
/// many rows, so a share is whole quant blocks and whole row tiles of the
/// matmul kernels (which test `ne01 % 4`).
pub const ROW_GRANULE: i64 = 16;

/// The most entries ggml's `tensor_split` holds (llama_max_devices()).
pub const MAX_SPLIT_DEVICES: usize = 16;

/// One device's share of a split weight.
pub struct SplitPart {
    pub device: Arc<Device>,
    /// Rows of the flattened weight (row r = i1 + ne1*(i2 + ne2*i3)).
    pub rows: Range<i64>,
    /// The rows' bytes on `device`, packed; None for an empty share.
    pub buf: Option<Arc<DeviceBuffer>>,
}

/// A weight whose rows live on several devices; ggml sees one tensor at a
/// fake address inside a split buffer.
pub struct SplitTensor {
    pub addr: u64,
    pub row_bytes: u64,
    pub nrows: i64,
    /// Index in `parts` of the device that owns the tensor's ops.
    pub main: usize,
    pub parts: Vec<SplitPart>,
}

impl SplitTensor {
    /// Allocates the shares of a weight of `nrows` rows split at `points`.
    pub fn new(
        addr: u64,
        row_bytes: u64,
        nrows: i64,
        devices: &[Arc<Device>],
        points: &[f32],
        main: usize,
    ) -> Result<SplitTensor> {
        let ranges = row_ranges(nrows, points);
        let mut parts = Vec::with_capacity(devices.len());
        for (d, rows) in devices.iter().zip(ranges) {
            let n = (rows.end - rows.start) as u64;
            let buf = if n > 0 {
                Some(DeviceBuffer::alloc(d, (n * row_bytes) as usize)?)
            } else {
                None
            };
            parts.push(SplitPart {
                device: d.clone(),
                rows,
                buf,
            });
        }
        Ok(SplitTensor {
            addr,
            row_bytes,
            nrows,
            main,
            parts,
        })
    }

    /// The byte ranges of `[offset, offset + len)` of the tensor that fall in
    /// each share: (part index, offset inside the share, offset inside the
    /// caller's data, length).
    pub fn pieces(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64, u64)> {
        let mut out = Vec::new();
        let end = offset + len;
        for (i, p) in self.parts.iter().enumerate() {
            let lo = p.rows.start as u64 * self.row_bytes;
            let hi = p.rows.end as u64 * self.row_bytes;
            let (a, b) = (offset.max(lo), end.min(hi));
            if a < b {
                out.push((i, a - lo, a - offset, b - a));
            }
        }
        out
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check(offset, data.len() as u64)?;
        for (i, at, from, n) in self.pieces(offset, data.len() as u64) {
            let buf = self.parts[i].buf.as_ref().expect("non-empty share");
            buf.write(at as usize, &data[from as usize..(from + n) as usize])?;
        }
        Ok(())
    }

    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len() as u64)?;
        for (i, at, from, n) in self.pieces(offset, out.len() as u64) {
            let buf = self.parts[i].buf.as_ref().expect("non-empty share");
            buf.read(at as usize, &mut out[from as usize..(from + n) as usize])?;
        }
        Ok(())
    }

    pub fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        self.check(offset, len)?;
        for (i, at, _, n) in self.pieces(offset, len) {
            let buf = self.parts[i].buf.as_ref().expect("non-empty share");
            buf.fill(at as usize, n as usize, value)?;
        }
        Ok(())
    }

    fn check(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.nrows as u64 * self.row_bytes;
        if offset.checked_add(len).is_none_or(|e| e > size) {
            return Err(Error::InvalidArgument(format!(
                "{len} bytes at offset {offset} are outside a split tensor of {size} bytes"
            )));
        }
        Ok(())
    }

    /// Releases the shares' memory (the plans holding them then drop).
    pub fn release(&self) {
        for p in &self.parts {
            if let Some(b) = &p.buf {
                DeviceBuffer::release(b.base);
            }
        }
    }
}

/// Row ranges of `nrows` rows for split points `points` (the cumulative start
/// fraction of each device; see `split_points`). Boundaries are multiples of
/// `ROW_GRANULE` rows, except that the rows after the last device with a share
/// are not left over: a device whose share runs to the end takes them.
pub fn row_ranges(nrows: i64, points: &[f32]) -> Vec<Range<i64>> {
    let n = points.len();
    let boundary = |f: f32| -> i64 {
        if f >= 1.0 {
            nrows
        } else {
            let r = (nrows as f64 * f as f64).floor() as i64;
            (r - r % ROW_GRANULE).clamp(0, nrows)
        }
    };
    (0..n)
        .map(|d| {
            let lo = boundary(points[d]);
            let hi = if d + 1 < n {
                boundary(points[d + 1])
            } else {
                nrows
            };
            lo..hi.max(lo)
        })
        .collect()
}

/// Cumulative split points from ggml's `tensor_split` (one ratio per device,
/// `MAX_SPLIT_DEVICES` entries, or none): entry d is the fraction of rows
/// before device d. No ratios, or all zero (what llama passes without `-ts`),
/// split evenly. Negative, NaN or infinite ratios, or a share for a device that
/// does not exist, are errors that say so.
pub fn split_points(ratios: Option<&[f32]>, n_devices: usize) -> Result<Vec<f32>> {
    if n_devices == 0 {
        return Err(Error::NoDevice("no device to split rows over".into()));
    }
    let even = || {
        (0..n_devices)
            .map(|d| d as f32 / n_devices as f32)
            .collect()
    };
    let Some(r) = ratios else {
        return Ok(even());
    };
    for (i, &x) in r.iter().enumerate() {
        if !x.is_finite() || x < 0.0 {
            return Err(Error::InvalidArgument(format!(
                "tensor split ratio {i} is {x}: ratios must be finite and not negative"
            )));
        }
        if x > 0.0 && i >= n_devices {
            return Err(Error::InvalidArgument(format!(
                "tensor split gives device {i} a share of {x}, but polycl has only {n_devices} device{}",
                if n_devices == 1 { "" } else { "s" }
            )));
        }
    }
    let used = &r[..r.len().min(n_devices)];
    let sum: f64 = used.iter().map(|&x| x as f64).sum();
    if sum == 0.0 {
        return Ok(even());
    }
    let mut acc = 0.0f64;
    let mut out = Vec::with_capacity(n_devices);
    for d in 0..n_devices {
        out.push((acc / sum) as f32);
        acc += used.get(d).copied().unwrap_or(0.0) as f64;
    }
    Ok(out)
}

struct Registry {
    /// Split buffers: fake base -> size (so `resolve` finds their tensors).
    ranges: BTreeMap<u64, u64>,
    /// Split tensors by their fake data address.
    tensors: BTreeMap<u64, Arc<SplitTensor>>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| {
        Mutex::new(Registry {
            ranges: BTreeMap::new(),
            tensors: BTreeMap::new(),
        })
    })
}

/// Registers a split buffer's fake address range.
pub fn add_range(base: u64, size: u64) {
    registry().lock().ranges.insert(base, size);
}

/// Forgets a split buffer and releases every tensor in it.
pub fn remove_range(base: u64) {
    let mut r = registry().lock();
    let Some(size) = r.ranges.remove(&base) else {
        return;
    };
    let addrs: Vec<u64> = r
        .tensors
        .range(base..=base + size)
        .map(|(a, _)| *a)
        .collect();
    for a in addrs {
        if let Some(t) = r.tensors.remove(&a) {
            t.release();
        }
    }
}

pub fn add_tensor(t: SplitTensor) -> Arc<SplitTensor> {
    let t = Arc::new(t);
    if let Some(old) = registry().lock().tensors.insert(t.addr, t.clone()) {
        old.release();
    }
    t
}

/// The split tensors of the split buffer at `base` (`size` bytes).
pub fn tensors_in(base: u64, size: u64) -> Vec<Arc<SplitTensor>> {
    registry()
        .lock()
        .tensors
        .range(base..=base + size)
        .map(|(_, t)| t.clone())
        .collect()
}

/// The split tensor whose data starts at `addr`.
pub fn tensor_at(addr: u64) -> Option<Arc<SplitTensor>> {
    registry().lock().tensors.get(&addr).cloned()
}

/// Buffer id and offset of fake address `addr`: a device buffer's, or a split
/// buffer's (whose tensors only split-aware lowering may touch).
pub fn resolve(addr: u64) -> Option<(u64, u64)> {
    if let Some((b, off)) = DeviceBuffer::resolve(addr) {
        return Some((b.base, off));
    }
    let r = registry().lock();
    let (&base, &size) = r.ranges.range(..=addr).next_back()?;
    (addr - base <= size).then_some((base, addr - base))
}

/// Whether two devices can exchange data with OpenCL copies and events.
pub fn linked(a: &Device, b: &Device) -> bool {
    Arc::ptr_eq(&a.context, &b.context)
}

/// A transfer is a queue operation: `POLYCL_FAULT=queue@N` can make it fail
/// the way a device that died mid-compute does.
fn fault_check(_dev: &Device) -> Result<()> {
    if crate::fault::queue() {
        return Err(Error::OpenCl("peer transfer (injected fault)", -5));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Enqueue helpers. Every one returns after enqueueing; the caller flushes the
// queues another queue waits on (an unflushed command may never start).

fn wait_list(wait: &[&Event]) -> Vec<cl_event> {
    wait.iter().map(|e| e.get()).collect()
}

fn ptr_or_null(v: &[cl_event]) -> *const cl_event {
    if v.is_empty() {
        std::ptr::null()
    } else {
        v.as_ptr()
    }
}

/// An event that completes when everything enqueued on `dev` so far has.
pub fn marker(dev: &Device) -> Result<Event> {
    fault_check(dev)?;
    // Whoever waits for the marker reads the last compute's results.
    dev.settle()?;
    // SAFETY: a valid queue and an empty wait list.
    let e = unsafe { cq::enqueue_marker_with_wait_list(dev.queue()?.get(), 0, std::ptr::null()) }
        .map_err(|c| Error::OpenCl("clEnqueueMarkerWithWaitList", c))?;
    Ok(Event::new(e))
}

/// Makes everything enqueued on `dev` after this wait for `wait`.
pub fn barrier(dev: &Device, wait: &[&Event]) -> Result<()> {
    if wait.is_empty() {
        return Ok(());
    }
    fault_check(dev)?;
    let w = wait_list(wait);
    // SAFETY: the wait list holds live events of this context.
    let e = unsafe {
        cq::enqueue_barrier_with_wait_list(dev.queue()?.get(), w.len() as u32, w.as_ptr())
    }
    .map_err(|c| Error::OpenCl("clEnqueueBarrierWithWaitList", c))?;
    drop(Event::new(e));
    Ok(())
}

pub fn flush(dev: &Device) -> Result<()> {
    dev.flush()
}

/// A buffer region: memory, byte offset.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    pub mem: cl_mem,
    pub offset: u64,
}

/// Copies `len` bytes from `src` (memory of `src_dev`) to `dst` (memory of
/// `dst_dev`), enqueued on `on` (one of the two) after `wait`. Linked devices:
/// one OpenCL copy, returns its event. Otherwise: a blocking copy through the
/// host, returns a marker of `dst_dev`.
#[allow(clippy::too_many_arguments)]
pub fn copy(
    on: &Device,
    src_dev: &Device,
    src: Region,
    dst_dev: &Device,
    dst: Region,
    len: u64,
    wait: &[&Event],
) -> Result<Event> {
    fault_check(on)?;
    src_dev.settle()?;
    dst_dev.settle()?;
    if !linked(src_dev, dst_dev) {
        return staged(src_dev, src, dst_dev, dst, &[(0, 0, len)]);
    }
    let w = wait_list(wait);
    // SAFETY: both regions lie in live buffers of the shared context (the
    // callers size them from the plan's scratch and the tensors' spans); the
    // wait list holds live events.
    let e = unsafe {
        cq::enqueue_copy_buffer(
            on.queue()?.get(),
            src.mem,
            dst.mem,
            src.offset as usize,
            dst.offset as usize,
            len as usize,
            w.len() as u32,
            ptr_or_null(&w),
        )
    }
    .map_err(|c| Error::OpenCl("clEnqueueCopyBuffer", c))?;
    Ok(Event::new(e))
}

/// Copies `rows` rows of `width` bytes from `src` (row pitch `src_pitch`) to
/// `dst` (row pitch `dst_pitch`); otherwise as `copy`.
#[allow(clippy::too_many_arguments)]
pub fn copy_rows(
    on: &Device,
    src_dev: &Device,
    src: Region,
    src_pitch: u64,
    dst_dev: &Device,
    dst: Region,
    dst_pitch: u64,
    width: u64,
    rows: u64,
    wait: &[&Event],
) -> Result<Event> {
    if rows == 1 || (src_pitch == width && dst_pitch == width) {
        return copy(on, src_dev, src, dst_dev, dst, width * rows, wait);
    }
    fault_check(on)?;
    src_dev.settle()?;
    dst_dev.settle()?;
    if !linked(src_dev, dst_dev) {
        let pieces: Vec<(u64, u64, u64)> = (0..rows)
            .map(|r| (r * src_pitch, r * dst_pitch, width))
            .collect();
        return staged(src_dev, src, dst_dev, dst, &pieces);
    }
    let w = wait_list(wait);
    let src_origin = [src.offset as usize, 0, 0];
    let dst_origin = [dst.offset as usize, 0, 0];
    let region = [width as usize, rows as usize, 1];
    // SAFETY: origins, region and pitches describe ranges inside live buffers of
    // the shared context (checked by the plan against the tensors' spans).
    let e = unsafe {
        cq::enqueue_copy_buffer_rect(
            on.queue()?.get(),
            src.mem,
            dst.mem,
            src_origin.as_ptr(),
            dst_origin.as_ptr(),
            region.as_ptr(),
            src_pitch as usize,
            0,
            dst_pitch as usize,
            0,
            w.len() as u32,
            ptr_or_null(&w),
        )
    }
    .map_err(|c| Error::OpenCl("clEnqueueCopyBufferRect", c))?;
    Ok(Event::new(e))
}

/// Devices in different contexts: finish the source, read each piece
/// (src offset, dst offset, length) to the host and write it to the
/// destination, blocking.
fn staged(
    src_dev: &Device,
    src: Region,
    dst_dev: &Device,
    dst: Region,
    pieces: &[(u64, u64, u64)],
) -> Result<Event> {
    src_dev.synchronize()?;
    for &(so, dof, len) in pieces {
        let mut host = vec![0u8; len as usize];
        // SAFETY: blocking read into a live vector of `len` bytes.
        let ev = unsafe {
            cq::enqueue_read_buffer(
                src_dev.queue()?.get(),
                src.mem,
                CL_BLOCKING,
                (src.offset + so) as usize,
                len as usize,
                host.as_mut_ptr() as *mut c_void,
                0,
                std::ptr::null(),
            )
        };
        super::buffer::finish_event(ev, "clEnqueueReadBuffer")?;
        // SAFETY: blocking write from a live vector.
        let ev = unsafe {
            cq::enqueue_write_buffer(
                dst_dev.queue()?.get(),
                dst.mem,
                CL_BLOCKING,
                (dst.offset + dof) as usize,
                len as usize,
                host.as_ptr() as *const c_void,
                0,
                std::ptr::null(),
            )
        };
        super::buffer::finish_event(ev, "clEnqueueWriteBuffer")?;
    }
    marker(dst_dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_split_without_ratios() {
        assert_eq!(split_points(None, 2).unwrap(), vec![0.0, 0.5]);
        assert_eq!(split_points(Some(&[0.0; 16]), 2).unwrap(), vec![0.0, 0.5]);
    }

    #[test]
    fn ratios_are_normalized() {
        let mut r = [0.0f32; 16];
        r[0] = 3.0;
        r[1] = 1.0;
        assert_eq!(split_points(Some(&r), 2).unwrap(), vec![0.0, 0.75]);
        assert_eq!(row_ranges(128, &[0.0, 0.75]), vec![0..96, 96..128]);
        assert_eq!(row_ranges(100, &[0.0, 0.75]), vec![0..64, 64..100]);
    }

    #[test]
    fn zero_shares_get_no_rows() {
        let mut r = [0.0f32; 16];
        r[0] = 1.0;
        let p = split_points(Some(&r), 2).unwrap();
        assert_eq!(row_ranges(100, &p), vec![0..100, 100..100]);
        let mut r = [0.0f32; 16];
        r[1] = 1.0;
        let p = split_points(Some(&r), 2).unwrap();
        assert_eq!(row_ranges(100, &p), vec![0..0, 0..100]);
    }

    #[test]
    fn bad_ratios_are_errors_that_say_why() {
        let mut r = [0.0f32; 16];
        r[0] = -1.0;
        r[1] = 2.0;
        assert!(split_points(Some(&r), 2)
            .unwrap_err()
            .to_string()
            .contains("not negative"));
        r[0] = f32::NAN;
        assert!(split_points(Some(&r), 2)
            .unwrap_err()
            .to_string()
            .contains("finite"));
        let mut r = [0.0f32; 16];
        r[0] = 1.0;
        r[2] = 1.0;
        assert!(split_points(Some(&r), 2)
            .unwrap_err()
            .to_string()
            .contains("only 2 devices"));
    }

    #[test]
    fn boundaries_are_granule_aligned() {
        for n in [16i64, 100, 128, 768, 1000] {
            for f in [0.1f32, 0.25, 0.5, 0.6, 0.75, 0.9] {
                let r = row_ranges(n, &[0.0, f]);
                assert_eq!(r[0].start, 0);
                assert_eq!(r[0].end, r[1].start);
                assert_eq!(r[1].end, n);
                assert_eq!(r[0].end % ROW_GRANULE, 0);
            }
        }
    }
}
