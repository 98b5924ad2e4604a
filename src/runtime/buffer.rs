//! Device buffers. Each buffer gets a unique fake base address that ggml uses
//! as `get_base`; a tensor is then resolved from its `data` pointer alone
//! (base range lookup), which the meta backend's temporaries require. Fake
//! addresses are never reused, so a plan keyed on addresses can never match a
//! buffer that replaced a freed one.

use super::device::Device;
use crate::config;
use crate::error::{ClContext, Error, Result};
use opencl3::command_queue as cq;
use opencl3::event::Event;
use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::types::{cl_event, cl_int, CL_BLOCKING};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Alignment polycl asks ggml for; kernels take explicit byte offsets, so this
/// only needs to cover the widest element loads.
pub const BUFFER_ALIGNMENT: usize = 128;

/// Most bytes one clEnqueueFillBuffer gets, and its pattern's size. NVIDIA's
/// OpenCL on the H200 never finished a fill of 2176 MiB (llama.cpp clearing
/// a 7B model's KV cache of 4352 positions); with a 1-byte pattern, it broke
/// the process's device context at offsets from 2 GiB to 4 GiB and wrote
/// wrong bytes at 4.5 GiB, where 16-byte patterns filled right at every
/// offset up to 5 GiB (scripts/probe/big-offsets.c, docs/perf.md step 40).
const FILL_PIECE: usize = 1 << 30;
const FILL_PATTERN: usize = 16;

const FAKE_BASE_START: u64 = 0x1000_0000_0000;
static NEXT_FAKE_BASE: AtomicU64 = AtomicU64::new(FAKE_BASE_START);
/// Bumped whenever a buffer is released, so plan caches can drop plans that
/// reference it.
static FREE_EPOCH: AtomicU64 = AtomicU64::new(0);

/// Device buffers alive (registered or scratch) and their bytes: what a
/// leak test watches, since memory is held until the last plan drops it.
static LIVE_BUFFERS: AtomicUsize = AtomicUsize::new(0);
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

fn count_new(size: usize) {
    LIVE_BUFFERS.fetch_add(1, Ordering::Relaxed);
    LIVE_BYTES.fetch_add(size, Ordering::Relaxed);
}

/// (device buffers alive, their bytes), over every device.
pub fn live() -> (usize, usize) {
    (
        LIVE_BUFFERS.load(Ordering::Relaxed),
        LIVE_BYTES.load(Ordering::Relaxed),
    )
}

/// Registered (ggml-visible and request) buffers, over every device.
pub fn registered() -> usize {
    registry().lock().len()
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // Writes held for a batch name this buffer's cl_mem: they go before
        // it is released (an enqueued command keeps its buffer alive).
        if self.device.send_batch_for(self.mem.get()).is_err() {
            self.device.mark_failed();
        }
        LIVE_BUFFERS.fetch_sub(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(self.size, Ordering::Relaxed);
    }
}

pub struct DeviceBuffer {
    /// Fake base address; also the buffer's id in IR memory references.
    pub base: u64,
    pub size: usize,
    pub device: Arc<Device>,
    pub mem: Buffer<u8>,
}

fn registry() -> &'static Mutex<BTreeMap<u64, Arc<DeviceBuffer>>> {
    static R: OnceLock<Mutex<BTreeMap<u64, Arc<DeviceBuffer>>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(BTreeMap::new()))
}

impl DeviceBuffer {
    /// Allocates `size` bytes on `device` and registers the buffer.
    pub fn alloc(device: &Arc<Device>, size: usize) -> Result<Arc<DeviceBuffer>> {
        let size = size.max(1);
        let oom = |detail: String| Error::OutOfMemory {
            device: device.index,
            bytes: size,
            detail,
        };
        // Whole words: a kernel may load the word that holds a tensor's last
        // byte.
        let words = size.next_multiple_of(4);
        if words > device.max_alloc {
            return Err(oom(format!(
                "larger than the device's max buffer size {}",
                device.max_alloc
            )));
        }
        if crate::fault::alloc() {
            return Err(oom("refused by POLYCL_FAULT=alloc".into()));
        }
        if let Some(limit) = config::get().mem_limit {
            let used = device.allocated.load(Ordering::Relaxed);
            if used + size > limit {
                return Err(oom(format!(
                    "POLYCL_MEM_LIMIT_MB allows {limit} bytes, {used} in use"
                )));
            }
        }
        // SAFETY: no host pointer is passed, so the buffer owns fresh device memory.
        let mem = unsafe {
            Buffer::<u8>::create(
                &device.context,
                CL_MEM_READ_WRITE,
                words,
                std::ptr::null_mut(),
            )
        }
        .map_err(|e| oom(format!("clCreateBuffer status {}", e.0)))?;
        let span = (size as u64).div_ceil(4096) * 4096 + 4096;
        let base = NEXT_FAKE_BASE.fetch_add(span, Ordering::Relaxed);
        count_new(size);
        let buf = Arc::new(DeviceBuffer {
            base,
            size,
            device: device.clone(),
            mem,
        });
        device.allocated.fetch_add(size, Ordering::Relaxed);
        registry().lock().insert(base, buf.clone());
        Ok(buf)
    }

    /// Allocates and registers nothing: scratch memory owned by a plan.
    pub fn alloc_scratch(device: &Arc<Device>, size: usize) -> Result<DeviceBuffer> {
        let size = size.max(1);
        if crate::fault::alloc() {
            return Err(Error::OutOfMemory {
                device: device.index,
                bytes: size,
                detail: "scratch: refused by POLYCL_FAULT=alloc".into(),
            });
        }
        // SAFETY: as in alloc.
        let mem = unsafe {
            Buffer::<u8>::create(
                &device.context,
                CL_MEM_READ_WRITE,
                size,
                std::ptr::null_mut(),
            )
        }
        .map_err(|e| Error::OutOfMemory {
            device: device.index,
            bytes: size,
            detail: format!("scratch: clCreateBuffer status {}", e.0),
        })?;
        count_new(size);
        Ok(DeviceBuffer {
            base: 0,
            size,
            device: device.clone(),
            mem,
        })
    }

    /// Removes the buffer from the registry; memory is released when the last
    /// plan holding it is dropped.
    pub fn release(base: u64) {
        if let Some(b) = registry().lock().remove(&base) {
            b.device.allocated.fetch_sub(b.size, Ordering::Relaxed);
            FREE_EPOCH.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn by_base(base: u64) -> Option<Arc<DeviceBuffer>> {
        registry().lock().get(&base).cloned()
    }

    /// The buffer containing fake address `addr`, with the offset inside it.
    pub fn resolve(addr: u64) -> Option<(Arc<DeviceBuffer>, u64)> {
        let reg = registry().lock();
        let (_, b) = reg.range(..=addr).next_back()?;
        let off = addr - b.base;
        if off <= b.size as u64 {
            Some((b.clone(), off))
        } else {
            None
        }
    }

    /// A fresh fake address range of `size` bytes that no buffer will ever
    /// use (for buffers whose memory lives elsewhere, like split buffers).
    pub fn reserve_addresses(size: usize) -> u64 {
        let span = (size as u64).div_ceil(4096) * 4096 + 4096;
        NEXT_FAKE_BASE.fetch_add(span, Ordering::Relaxed)
    }

    pub fn free_epoch() -> u64 {
        FREE_EPOCH.load(Ordering::Relaxed)
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(Error::InvalidArgument(format!(
                "access of {len} bytes at offset {offset} outside a buffer of {} bytes",
                self.size
            )));
        }
        Ok(())
    }

    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        self.device.settle()?;
        if data.is_empty() || self.device.write_staged(self.mem.get(), offset, data)? {
            return Ok(());
        }
        // SAFETY: the write is blocking, so `data` outlives the transfer, and the
        // range was checked against the buffer size.
        let ev = unsafe {
            cq::enqueue_write_buffer(
                self.device.queue()?.get(),
                self.mem.get(),
                CL_BLOCKING,
                offset,
                data.len(),
                data.as_ptr() as *const c_void,
                0,
                std::ptr::null(),
            )
        };
        finish_event(ev, "clEnqueueWriteBuffer")
    }

    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        self.device.settle()?;
        let queue = self.device.queue()?;
        // Counted after any batch the queue sent, before the read itself.
        let seen = self.device.enqueued_now();
        // SAFETY: blocking read into a live slice, range checked.
        let ev = unsafe {
            cq::enqueue_read_buffer(
                queue.get(),
                self.mem.get(),
                CL_BLOCKING,
                offset,
                out.len(),
                out.as_mut_ptr() as *mut c_void,
                0,
                std::ptr::null(),
            )
        };
        drop(queue);
        finish_event(ev, "clEnqueueReadBuffer")?;
        // The read returned after every command before it, and is counted.
        self.device.drained_to(seen + 1);
        self.device.uploads_drained();
        self.device.readbacks_drained();
        Ok(())
    }

    /// `read` without waiting (ggml's get_tensor_async, runtime/readback.rs):
    /// the device copies the bytes after every command enqueued before this,
    /// and the device's next synchronize (or blocking read) puts them in
    /// `out`. Reads that cannot be staged read blocking, which is correct
    /// too: the bytes are there earlier than promised.
    ///
    /// # Safety
    /// `out` must stay valid for writes of `len` bytes, and unread by the
    /// caller, until the device's next synchronize has returned.
    pub unsafe fn read_async(&self, offset: usize, out: *mut u8, len: usize) -> Result<()> {
        self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: range checked; the caller's contract is passed on.
        if unsafe { self.device.read_staged(self.mem.get(), offset, out, len) }? {
            return Ok(());
        }
        // SAFETY: the caller passes `len` writable bytes at `out`.
        self.read(offset, unsafe { std::slice::from_raw_parts_mut(out, len) })
    }

    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.fill_pieces(offset, len, value, FILL_PIECE)
    }

    /// `fill`, each enqueued fill at most `piece` bytes (rounded down to a
    /// multiple of FILL_PATTERN, at least one; 0 is an error). The bytes
    /// outside FILL_PATTERN alignment at either end are written instead.
    pub fn fill_pieces(&self, offset: usize, len: usize, value: u8, piece: usize) -> Result<()> {
        self.check(offset, len)?;
        if piece == 0 {
            return Err(Error::InvalidArgument("a fill in pieces of 0 bytes".into()));
        }
        self.device.settle()?;
        let end = offset + len;
        let mid0 = offset.next_multiple_of(FILL_PATTERN).min(end);
        let mid1 = (end / FILL_PATTERN * FILL_PATTERN).max(mid0);
        let pattern = [value; FILL_PATTERN];
        self.write(offset, &pattern[..mid0 - offset])?;
        self.write(mid1, &pattern[..end - mid1])?;
        let piece = (piece / FILL_PATTERN).max(1) * FILL_PATTERN;
        let mut at = mid0;
        while at < mid1 {
            let n = piece.min(mid1 - at);
            // SAFETY: the pattern is copied at enqueue time; range checked,
            // and `at` and `n` are multiples of the pattern's size.
            let ev = unsafe {
                cq::enqueue_fill_buffer(
                    self.device.queue()?.get(),
                    self.mem.get(),
                    pattern.as_ptr() as *const c_void,
                    FILL_PATTERN,
                    at,
                    n,
                    0,
                    std::ptr::null(),
                )
            };
            finish_event(ev, "clEnqueueFillBuffer")?;
            at += n;
        }
        Ok(())
    }

    /// Device-side copy into `dst` (same device), ordered on the device queue.
    pub fn copy_to(
        &self,
        src_off: usize,
        dst: &DeviceBuffer,
        dst_off: usize,
        len: usize,
    ) -> Result<()> {
        self.check(src_off, len)?;
        dst.check(dst_off, len)?;
        if len == 0 {
            return Ok(());
        }
        self.device.settle()?;
        // SAFETY: both ranges checked; both buffers live in the same context.
        let ev = unsafe {
            cq::enqueue_copy_buffer(
                self.device.queue()?.get(),
                self.mem.get(),
                dst.mem.get(),
                src_off,
                dst_off,
                len,
                0,
                std::ptr::null(),
            )
        };
        finish_event(ev, "clEnqueueCopyBuffer")
    }

    pub fn cl_mem(&self) -> *mut c_void {
        self.mem.get()
    }
}

impl Device {
    /// Waits for the commands enqueued. ggml synchronizes before each input
    /// it copies, six times a decode step, so:
    /// - writes held for a batch stay held: their bytes are copied already,
    ///   and every later command sends them first (sending them here made
    ///   each input a launch and a wait, docs/perf.md step 43);
    /// - a queue with nothing enqueued since it last drained is not waited
    ///   for (its staged reads, readback.rs, are complete and copied on);
    /// - the last compute's hand-off failure record is looked at
    ///   (handoff.rs `DeferredCheck`) before the staged reads reach their
    ///   callers: where a wait gave up, the compute runs again and the
    ///   reads behind it read again.
    pub fn synchronize(&self) -> Result<()> {
        // Where idle, another thread's wait may have drained the queue and
        // not yet copied the staged reads on (readback.rs): they are
        // complete.
        if !self.idle() {
            let seen = self.enqueued_now();
            // The hand-off's second queue needs no wait of its own: every
            // chain ends on this queue with a launch that waited for the
            // second queue's last one to arrive, after its last store
            // (handoff.rs).
            self.in_order.finish().cl("clFinish")?;
            self.drained_to(seen);
            self.uploads_drained();
        }
        let deferred = self.deferred_check.lock();
        let check = deferred.borrow_mut().take();
        if let Some(check) = check {
            let reads_from = check.reads_from;
            if check.settle()? {
                self.read_staged_again(reads_from)?;
                return self.synchronize();
            }
        }
        drop(deferred);
        self.readbacks_drained();
        Ok(())
    }

    /// Looks at the last compute's failure record where it is not yet
    /// (`synchronize`), before a command that changes what a second run
    /// of that compute would read, or reads what it wrote; nothing to do
    /// where the host waited for the device since (a decode step's logits).
    pub(crate) fn settle(&self) -> Result<()> {
        if self.deferred_check.lock().borrow().is_some() {
            return self.synchronize();
        }
        Ok(())
    }
    pub fn flush(&self) -> Result<()> {
        self.flush_from(true)
    }

    /// Flushes both queues, the hand-off's second first where
    /// `second_first`. A plan flushes first the queue that holds the oldest
    /// launch not yet flushed: a chained launch's groups, submitted before
    /// the launch they wait for, hold places on the device that launch then
    /// may not find (a wait that gives up, runtime/handoff.rs).
    pub fn flush_from(&self, second_first: bool) -> Result<()> {
        if second_first {
            self.flush_queue(true)?;
        }
        self.flush_queue(false)?;
        if !second_first {
            self.flush_queue(true)?;
        }
        Ok(())
    }

    /// Flushes the hand-off's second queue (where there is one) or the
    /// device's own.
    pub fn flush_queue(&self, second: bool) -> Result<()> {
        if second {
            return match self.second.get() {
                Some(Ok(q)) => q.flush().cl("clFlush"),
                _ => Ok(()),
            };
        }
        cq::flush(self.queue()?.get()).map_err(|s| Error::OpenCl("clFlush", s))
    }
}

/// Releases the event an enqueue returned (we order through the in-order queue).
pub(crate) fn finish_event(
    ev: std::result::Result<cl_event, cl_int>,
    call: &'static str,
) -> Result<()> {
    match ev {
        Ok(e) => {
            drop(Event::new(e));
            Ok(())
        }
        Err(code) => Err(Error::OpenCl(call, code)),
    }
}
