//! Device-to-host reads that do not wait (ggml's get_tensor_async: llama's
//! logits after each decode step). Without them ggml synchronizes and then
//! reads, so the GPU's last kernel is followed by the host waking up and a
//! blocking read (~28 us for a 1B's 128 KiB of logits on the H200,
//! docs/perf.md step 53). Here the read is enqueued right behind the work
//! before it, so the device copies the bytes as soon as that work ends; the
//! host copies them on to the caller's memory when it next waits for the
//! queue (a synchronize or a blocking read).
//!
//! The device copies into pinned host memory (a `CL_MEM_ALLOC_HOST_PTR`
//! buffer, mapped once), not into the caller's pageable memory: NVIDIA's
//! driver took 0.1-6 ms a token for a read into pageable memory that does not
//! wait (step 53).

use super::device::Device;
use crate::error::{ClContext, Error, Result};
use opencl3::command_queue as cq;
use opencl3::error_codes::CL_MAP_FAILURE;
use opencl3::event::{Event, CL_COMPLETE};
use opencl3::memory::{Buffer, ClMem, CL_MAP_READ, CL_MAP_WRITE, CL_MEM_ALLOC_HOST_PTR};
use opencl3::types::{cl_mem, CL_BLOCKING, CL_NON_BLOCKING};
use std::ffi::c_void;

/// Largest read that is staged; a larger one reads blocking (still correct:
/// the caller's bytes are there earlier than promised).
const MAX_STAGED: usize = 4 << 20;
/// Staged reads start at multiples of this many bytes.
const STAGE_ALIGN: usize = 64;

/// A device's pinned staging memory and the reads in flight through it.
#[derive(Default)]
pub struct Readbacks {
    staging: Option<Staging>,
    /// Bytes of `staging` taken by the reads in flight.
    used: usize,
    /// Each read in flight.
    pending: Vec<StagedRead>,
    /// The serial the next read takes.
    next_serial: u64,
}

/// A read in flight through the staging.
struct StagedRead {
    event: Event,
    /// Where it lands in `staging`.
    from: usize,
    /// The caller's destination (an address: a pointer is not `Send`).
    to: usize,
    len: usize,
    /// What it reads (an address, as `to`) and from where: a read behind a
    /// compute that runs again reads again (`read_staged_again`).
    mem: usize,
    offset: usize,
    serial: u64,
}

/// The staging: a pinned host buffer, replaced by a larger one only when no
/// read is in flight; the last one lives as long as its device, which
/// `devices()` holds for the process.
type Staging = Pinned;

/// A pinned host buffer, mapped for as long as it lives: the device writes
/// into it at full speed without the host waiting (runtime/handoff.rs reads
/// its failure records into one). Released while mapped, its memory goes
/// once the commands that use it have completed (clReleaseMemObject); the
/// staging unmaps the one it replaces.
pub(crate) struct Pinned {
    buf: Buffer<u8>,
    /// The mapped pointer, as an address.
    at: usize,
    size: usize,
}

impl Pinned {
    /// The mapped memory's first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.at as *mut u8
    }
}

impl Readbacks {
    /// Copies the bytes of the reads whose events say they are complete on
    /// to their destinations and lets their room go; reads enqueued since the
    /// wait that called this began (another thread) stay in flight. A read
    /// that ended in an error (negative status) is dropped: the queue's wait
    /// reports the error.
    fn complete_done(&mut self) {
        let Some(s) = &self.staging else { return };
        self.pending
            .retain(|r| match r.event.command_execution_status() {
                Ok(st) if st.0 == CL_COMPLETE => {
                    // SAFETY: the device's read into `staging` at `from` is
                    // complete; `to` is the caller's `len` writable bytes,
                    // kept until its synchronize (read_async's contract).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            (s.at + r.from) as *const u8,
                            r.to as *mut u8,
                            r.len,
                        )
                    };
                    false
                }
                Ok(st) => st.0 >= 0,
                Err(_) => false,
            });
        if self.pending.is_empty() {
            self.used = 0;
        }
    }
}

impl Device {
    /// Room for `len` bytes of staging, made or grown where no read is in
    /// flight through it; None: the read goes blocking.
    fn stage(&self, r: &mut Readbacks, len: usize) -> Result<Option<usize>> {
        let from = r.used.next_multiple_of(STAGE_ALIGN);
        if r.staging.as_ref().is_some_and(|s| from + len <= s.size) {
            r.used = from + len;
            return Ok(Some(from));
        }
        if !r.pending.is_empty() {
            return Ok(None);
        }
        // Nothing is in flight through the old staging (if any): let it go.
        if let Some(old) = r.staging.take() {
            // SAFETY: the pointer is the old buffer's mapping, made by the
            // map below; no read in flight lands in it.
            let ev = unsafe {
                cq::enqueue_unmap_mem_object(
                    self.queue()?.get(),
                    old.buf.get(),
                    old.at as *mut c_void,
                    0,
                    std::ptr::null(),
                )
            };
            super::buffer::finish_event(ev, "clEnqueueUnmapMemObject")?;
        }
        let size = len.next_power_of_two().max(256 << 10);
        r.staging = Some(self.pinned(size)?);
        r.used = len;
        Ok(Some(0))
    }

    /// `size` bytes of pinned host memory, mapped.
    pub(crate) fn pinned(&self, size: usize) -> Result<Pinned> {
        // SAFETY: no host pointer is passed; the driver allocates host memory.
        let buf = unsafe {
            Buffer::<u8>::create(
                &self.context,
                CL_MEM_ALLOC_HOST_PTR,
                size,
                std::ptr::null_mut(),
            )
        }
        .cl("clCreateBuffer (pinned staging)")?;
        let mut at: cl_mem = std::ptr::null_mut();
        // SAFETY: a blocking map of the whole fresh buffer; the pointer it
        // returns stays valid while the buffer lives and stays mapped.
        let ev = unsafe {
            cq::enqueue_map_buffer(
                self.queue()?.get(),
                buf.get(),
                CL_BLOCKING,
                CL_MAP_READ | CL_MAP_WRITE,
                0,
                size,
                &mut at,
                0,
                std::ptr::null(),
            )
        };
        super::buffer::finish_event(ev, "clEnqueueMapBuffer")?;
        if at.is_null() {
            return Err(Error::OpenCl("clEnqueueMapBuffer", CL_MAP_FAILURE));
        }
        Ok(Pinned {
            buf,
            at: at as usize,
            size,
        })
    }

    /// After the queue drained (synchronize, a blocking read): the staged
    /// reads that are complete reach their callers' memory.
    pub(crate) fn readbacks_drained(&self) {
        self.readbacks.lock().complete_done();
    }

    /// The serial of the next staged read: the reads from it on are
    /// enqueued after whatever the caller just enqueued.
    pub(crate) fn next_readback(&self) -> u64 {
        self.readbacks.lock().next_serial
    }

    /// Enqueues again the staged reads in flight from serial `first` on,
    /// into the same staging, behind a compute that ran again
    /// (runtime/handoff.rs `DeferredCheck`): their bytes were the first
    /// run's, and have not reached their callers yet.
    pub(crate) fn read_staged_again(&self, first: u64) -> Result<()> {
        let mut r = self.readbacks.lock();
        let at = r.staging.as_ref().map_or(0, |s| s.at);
        for read in r.pending.iter_mut().filter(|read| read.serial >= first) {
            // SAFETY: as in `read_staged`, which enqueued the same read: the
            // caller's buffer and destination stay valid until its
            // synchronize, which has not returned; the staging range is
            // this read's alone.
            read.event = unsafe {
                self.enqueue_staged(read.mem as cl_mem, read.offset, read.len, at + read.from)
            }?;
        }
        Ok(())
    }

    /// Enqueues a read of `len` bytes at `offset` of `mem` into the staging
    /// at address `at`, not waited for.
    ///
    /// # Safety
    /// `mem` holds `offset + len` bytes; `at` is `len` bytes of the mapped
    /// staging that no other read in flight uses.
    unsafe fn enqueue_staged(
        &self,
        mem: cl_mem,
        offset: usize,
        len: usize,
        at: usize,
    ) -> Result<Event> {
        // SAFETY: the caller's contract; the staging lives with the device.
        unsafe {
            cq::enqueue_read_buffer(
                self.queue()?.get(),
                mem,
                CL_NON_BLOCKING,
                offset,
                len,
                at as *mut c_void,
                0,
                std::ptr::null(),
            )
        }
        .map(Event::new)
        .map_err(|code| Error::OpenCl("clEnqueueReadBuffer", code))
    }
}

impl Device {
    /// A read of `len` bytes at `offset` of `mem` that does not wait: the
    /// device copies them after every command enqueued before this, into
    /// pinned staging, and the next synchronize (or blocking read) copies
    /// them on to `out`. False: not staged (larger than MAX_STAGED, or the
    /// staging is full), for the caller to read blocking.
    ///
    /// # Safety
    /// `mem` holds `offset + len` bytes; `out` stays valid for writes of
    /// `len` bytes, and unread by the caller, until the device's next
    /// synchronize has returned.
    pub(crate) unsafe fn read_staged(
        &self,
        mem: cl_mem,
        offset: usize,
        out: *mut u8,
        len: usize,
    ) -> Result<bool> {
        if len > MAX_STAGED {
            return Ok(false);
        }
        let mut r = self.readbacks.lock();
        let Some(from) = self.stage(&mut r, len)? else {
            return Ok(false);
        };
        let at = r.staging.as_ref().map_or(0, |s| s.at) + from;
        // SAFETY: the caller's range; `at` is `len` bytes of the mapped
        // staging, which no other read in flight uses.
        match unsafe { self.enqueue_staged(mem, offset, len, at) } {
            Ok(event) => {
                let serial = r.next_serial;
                r.next_serial += 1;
                r.pending.push(StagedRead {
                    event,
                    from,
                    to: out as usize,
                    len,
                    mem: mem as usize,
                    offset,
                    serial,
                });
                Ok(true)
            }
            Err(e) => {
                if r.pending.is_empty() {
                    r.used = 0;
                }
                Err(e)
            }
        }
    }
}
