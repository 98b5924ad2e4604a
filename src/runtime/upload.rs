//! Small host-to-device writes without a wait (`POLYCL_WRITE`, default
//! `batch`). A decode step starts with ggml set_tensor calls for its inputs
//! (llama: six, the embedded token, positions, mask, cache row indices) while
//! the GPU sits idle between tokens. A blocking clEnqueueWriteBuffer took
//! ~15 us of host time each on the H200 (six: 88-98 us a token), one that
//! does not wait ~9 us (53-56 us), docs/perf.md step 42, and a kernel launch
//! ~7 us (step 38). So:
//! - `batch`: a write small enough to travel in a kernel's arguments is held,
//!   unsent, until the device's next command (`Device::queue` sends it first),
//!   and every write held by then goes as one launch of
//!   `kernel_upload_scatter` (kernels/upload.cl): one launch a token instead
//!   of six transfers.
//! - `async` (and `batch`'s larger writes, up to 256 KiB): the bytes are
//!   copied to host memory that outlives the transfer and the write is
//!   enqueued without waiting. A copy is let go once its write's event says
//!   it has completed (checked at each such write and after each synchronize
//!   or blocking read).
//!
//! Either way the in-order queue runs the write before every later kernel,
//! copy and read of the device.

use super::device::Device;
use crate::config::WriteMode;
use crate::error::{ClContext, Error, Result};
use opencl3::command_queue as cq;
use opencl3::event::{Event, CL_COMPLETE};
use opencl3::kernel::Kernel;
use opencl3::types::{cl_mem, CL_NON_BLOCKING};
use std::ffi::c_void;
use std::sync::atomic::Ordering;

/// Largest write that does not wait; larger ones (weights) stay blocking.
const MAX_STAGED: usize = 256 << 10;

/// Words of `kernel_upload_scatter`'s by-value argument (UPLOAD_WORDS in
/// upload.cl): with its four buffer arguments it stays within the 1024 bytes
/// of arguments every OpenCL device accepts.
const BATCH_WORDS: usize = 240;
/// Buffers one batch writes to (the kernel's m0..m3).
const BATCH_SLOTS: usize = 4;
/// Work-items of the scatter launch, one work-group.
const SCATTER_WIDTH: usize = 64;

/// Writes held for one scatter launch.
#[derive(Default)]
struct Batch {
    /// The buffers written, as addresses (a `cl_mem` is not `Send`).
    mems: Vec<usize>,
    /// (slot in `mems`, byte offset, length) of each write, in order.
    writes: Vec<(usize, u64, usize)>,
    /// Each write's bytes, padded to 4.
    payload: Vec<u8>,
}

/// Words of a scatter argument for `writes` writes whose bytes, each padded
/// to 4, total `payload`: the count, three a write, then the bytes.
fn batch_words(writes: usize, payload: usize) -> usize {
    1 + 3 * writes + payload / 4
}

impl Batch {
    /// Whether a write of `len` bytes fits a batch of its own.
    fn fits_alone(len: usize) -> bool {
        batch_words(1, len.next_multiple_of(4)) <= BATCH_WORDS
    }

    fn slot(&self, mem: usize) -> Option<usize> {
        self.mems.iter().position(|&m| m == mem)
    }

    /// Whether a write of `len` bytes at `offset` of `mem` can join: room in
    /// the argument, a slot for its buffer, and no overlap with a write held
    /// (the launch writes them all at once, in no order).
    fn admits(&self, mem: usize, offset: u64, len: usize) -> bool {
        let slot = self.slot(mem);
        batch_words(
            self.writes.len() + 1,
            self.payload.len() + len.next_multiple_of(4),
        ) <= BATCH_WORDS
            && (slot.is_some() || self.mems.len() < BATCH_SLOTS)
            && !self.writes.iter().any(|&(s, o, l)| {
                Some(s) == slot && o < offset + len as u64 && offset < o + l as u64
            })
    }

    fn push(&mut self, mem: usize, offset: u64, data: &[u8]) {
        let slot = match self.slot(mem) {
            Some(s) => s,
            None => {
                self.mems.push(mem);
                self.mems.len() - 1
            }
        };
        self.writes.push((slot, offset, data.len()));
        self.payload.extend_from_slice(data);
        self.payload
            .resize(self.payload.len().next_multiple_of(4), 0);
    }

    /// The scatter kernel's argument (upload.cl says the layout).
    fn words(&self) -> [u32; BATCH_WORDS] {
        let mut w = [0u32; BATCH_WORDS];
        w[0] = self.writes.len() as u32;
        for (i, &(slot, offset, len)) in self.writes.iter().enumerate() {
            w[1 + 3 * i] = (slot as u32) << 24 | len as u32;
            w[2 + 3 * i] = offset as u32;
            w[3 + 3 * i] = (offset >> 32) as u32;
        }
        let at = batch_words(self.writes.len(), 0);
        for (k, c) in self.payload.chunks_exact(4).enumerate() {
            w[at + k] = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
        }
        w
    }
}

/// A device's small writes: the batch held and the host copies of writes in
/// flight, with their transfers' events.
#[derive(Default)]
pub struct Uploads {
    kept: Vec<(Event, Box<[u8]>)>,
    batch: Batch,
    /// `kernel_upload_scatter`, made at the first batch sent.
    scatter: Option<Kernel>,
    /// The scatter kernel could not be made here: every write goes `async`.
    no_batch: bool,
}

impl Uploads {
    /// Lets go of the copies whose writes are over: complete, or ended with
    /// an error (a negative status; the queue's next wait reports it).
    fn release_done(&mut self) {
        self.kept.retain(
            |(e, _)| !matches!(e.command_execution_status(), Ok(s) if s.0 == CL_COMPLETE || s.0 < 0),
        );
    }
}

impl Drop for Uploads {
    /// A device's queue may be released before its uploads (field order), and
    /// releasing a queue does not wait for its commands: each copy is freed
    /// only after its write has read it. (A batch still held here belongs to
    /// buffers that were all released with their device: nothing reads it.)
    fn drop(&mut self) {
        for (e, _) in &self.kept {
            let _ = e.wait();
        }
    }
}

impl Device {
    /// Sends the writes held for a batch, if any (`Device::queue`).
    pub(crate) fn send_held(&self) -> Result<()> {
        if self.batch_held.load(Ordering::Acquire) {
            self.send_batch(&mut self.uploads.lock())?;
        }
        Ok(())
    }

    /// Holds or enqueues a write of `data` at `offset` of `mem` that does not
    /// wait, where `POLYCL_WRITE` allows and the write is small; false: the
    /// caller writes (blocking). The caller checked the range.
    pub(crate) fn write_staged(&self, mem: cl_mem, offset: usize, data: &[u8]) -> Result<bool> {
        let mode = crate::config::get().write_mode;
        if mode == WriteMode::Blocking || data.is_empty() || data.len() > MAX_STAGED {
            // A blocking write enqueues through `queue`, after the batch.
            return Ok(false);
        }
        let mut up = self.uploads.lock();
        let (mem_id, at) = (mem as usize, offset as u64);
        if mode == WriteMode::Batch && !up.no_batch && Batch::fits_alone(data.len()) {
            if !up.batch.admits(mem_id, at, data.len()) {
                self.send_batch(&mut up)?;
            }
            up.batch.push(mem_id, at, data);
            self.batch_held.store(true, Ordering::Release);
            return Ok(true);
        }
        self.send_batch(&mut up)?;
        up.release_done();
        self.enqueue_copy(&mut up, mem, offset, data)?;
        Ok(true)
    }

    /// Enqueues a non-blocking write of a host copy of `data`, kept until the
    /// write has completed.
    fn enqueue_copy(
        &self,
        up: &mut Uploads,
        mem: cl_mem,
        offset: usize,
        data: &[u8],
    ) -> Result<()> {
        // A boxed slice's bytes stay put when the box moves into `kept`.
        let copy: Box<[u8]> = data.into();
        // SAFETY: `copy` holds data.len() bytes and is kept until the write
        // has completed (its event says so); the caller checked that the
        // range lies in `mem`.
        let ev = unsafe {
            cq::enqueue_write_buffer(
                self.in_order.get(),
                mem,
                CL_NON_BLOCKING,
                offset,
                copy.len(),
                copy.as_ptr() as *const c_void,
                0,
                std::ptr::null(),
            )
        }
        .map_err(|s| Error::OpenCl("clEnqueueWriteBuffer", s))?;
        self.count_enqueued();
        up.kept.push((Event::new(ev), copy));
        Ok(())
    }

    /// Enqueues the writes held, as one scatter launch (or, where its kernel
    /// cannot be made, one write each). Called with the uploads locked.
    /// `batch_held` turns false only once they are enqueued: a thread whose
    /// `queue` read it false while they were still being sent would enqueue
    /// its command before them (ctest's reliability_threads saw a compute
    /// read its inputs before their writes).
    fn send_batch(&self, up: &mut Uploads) -> Result<()> {
        let batch = std::mem::take(&mut up.batch);
        let sent = self.enqueue_batch(up, batch);
        self.batch_held.store(false, Ordering::Release);
        sent
    }

    fn enqueue_batch(&self, up: &mut Uploads, batch: Batch) -> Result<()> {
        if batch.writes.is_empty() {
            return Ok(());
        }
        self.make_scatter(up);
        let Some(k) = &up.scatter else {
            let mut at = 0;
            for &(slot, offset, len) in &batch.writes {
                let mem = batch.mems[slot] as cl_mem;
                let bytes = &batch.payload[at..at + len];
                at += len.next_multiple_of(4);
                self.enqueue_copy(up, mem, offset as usize, bytes)?;
            }
            return Ok(());
        };
        let words = batch.words();
        for s in 0..BATCH_SLOTS {
            let mem = batch.mems.get(s).copied().unwrap_or(batch.mems[0]) as cl_mem;
            // SAFETY: argument s of kernel_upload_scatter is a global buffer;
            // `mem` is a live buffer of this device's context (its owner has
            // not been dropped: DeviceBuffer's drop sends the batch first).
            unsafe { k.set_arg(s as u32, &mem) }.cl("clSetKernelArg")?;
        }
        // SAFETY: argument 4 is upload_batch, BATCH_WORDS 32-bit words, as
        // `words` is; OpenCL copies it at the call.
        unsafe { k.set_arg(BATCH_SLOTS as u32, &words) }.cl("clSetKernelArg")?;
        let size = [SCATTER_WIDTH];
        // SAFETY: every argument was set above, its buffers live (as above);
        // one 1-D work-group.
        unsafe {
            super::executor::enqueue_without_event(
                self.in_order.get(),
                k.get(),
                1,
                size.as_ptr(),
                size.as_ptr(),
            )
        }?;
        self.count_enqueued();
        Ok(())
    }

    /// Makes `kernel_upload_scatter` once; where it cannot be made, every
    /// write goes on its own from then on.
    fn make_scatter(&self, up: &mut Uploads) {
        if up.scatter.is_some() || up.no_batch {
            return;
        }
        // The argument's words are the host's bytes: a device of the other
        // byte order would read them swapped. Mesa's rusticl (device.rs
        // `is_rusticl`) crashed in its compiler on the by-value argument, at
        // the first launch, where no error can be caught: expected there, so
        // said only as a debug line.
        let made = if self.is_rusticl {
            Err(Error::Unsupported(
                "Mesa's rusticl, whose compiler crashed on the kernel's by-value argument".into(),
            ))
        } else if self.cl.endian_little().unwrap_or(false) == cfg!(target_endian = "little") {
            super::program::kernel(self, "upload", "kernel_upload_scatter")
        } else {
            Err(Error::Unsupported(
                "a device of the other byte order".into(),
            ))
        };
        match made {
            Ok(k) => up.scatter = Some(k),
            Err(e) => {
                let line = format!(
                    "{}: no batched writes ({e}); each small write goes on its own",
                    self.name
                );
                if self.is_rusticl {
                    crate::log::debug(&line)
                } else {
                    crate::log::warn(&line)
                }
                up.no_batch = true;
            }
        }
    }

    /// Sends the writes held, if any target `mem` (its buffer is about to be
    /// released).
    pub(crate) fn send_batch_for(&self, mem: cl_mem) -> Result<()> {
        let mut up = self.uploads.lock();
        if up.batch.mems.contains(&(mem as usize)) {
            self.send_batch(&mut up)?;
        }
        Ok(())
    }

    /// After the queue drained (synchronize, a blocking read): lets go of
    /// the copies whose writes are done. By their events, not all of them:
    /// another thread sharing the queue may have enqueued a write since the
    /// drain began (tests/reliability_threads.rs found that).
    pub(crate) fn uploads_drained(&self) {
        self.uploads.lock().release_done();
    }

    /// Host copies still held (tests).
    pub fn uploads_in_flight(&self) -> usize {
        self.uploads.lock().kept.len()
    }

    /// Writes held for the next batch (tests).
    pub fn writes_held(&self) -> usize {
        self.uploads.lock().batch.writes.len()
    }
}
