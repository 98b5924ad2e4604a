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
    /// Each read in flight: its event, where it lands in `staging`, and the
    /// caller's destination (an address: a pointer is not `Send`) and length.
    pending: Vec<(Event, usize, usize, usize)>,
}

/// A pinned host buffer, mapped while it serves (replaced by a larger one
/// only when no read is in flight; the last one lives as long as its
/// device, which `devices()` holds for the process).
struct Staging {
    buf: Buffer<u8>,
    /// The mapped pointer, as an address.
    at: usize,
    size: usize,
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
            .retain(|(e, from, to, len)| match e.command_execution_status() {
                Ok(st) if st.0 == CL_COMPLETE => {
                    // SAFETY: the device's read into `staging` at `from` is
                    // complete; `to` is the caller's `len` writable bytes,
                    // kept until its synchronize (read_async's contract).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            (s.at + from) as *const u8,
                            *to as *mut u8,
                            *len,
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
        r.staging = Some(Staging {
            buf,
            at: at as usize,
            size,
        });
        r.used = len;
        Ok(Some(0))
    }

    /// After the queue drained (synchronize, a blocking read): the staged
    /// reads that are complete reach their callers' memory.
    pub(crate) fn readbacks_drained(&self) {
        self.readbacks.lock().complete_done();
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
        // staging, which no other read in flight uses and which lives with
        // the device.
        let ev = unsafe {
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
        };
        match ev {
            Ok(e) => {
                r.pending.push((Event::new(e), from, out as usize, len));
                Ok(true)
            }
            Err(code) => {
                if r.pending.is_empty() {
                    r.used = 0;
                }
                Err(Error::OpenCl("clEnqueueReadBuffer", code))
            }
        }
    }
}
