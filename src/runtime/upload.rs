//! Small host-to-device writes without a wait (`POLYCL_WRITE`, default
//! `async`). A decode step starts with ggml set_tensor calls for its inputs
//! (llama: six, the embedded token, positions, mask, cache row indices) while
//! the GPU sits idle between tokens. A blocking clEnqueueWriteBuffer took
//! ~15 us of host time each on the H200 (six: 88-98 us a token), one that
//! does not wait ~9 us (53-56 us), docs/perf.md step 42. So a small write's
//! bytes are copied to host memory that outlives the transfer, and the write
//! is enqueued without waiting: the in-order queue still runs it before every
//! later kernel, copy and read of the device. A copy is let go once its
//! write's event says it has completed (checked at each such write and after
//! each synchronize or blocking read).

use super::device::Device;
use crate::config::WriteMode;
use crate::error::{Error, Result};
use opencl3::command_queue as cq;
use opencl3::event::{Event, CL_COMPLETE};
use opencl3::types::{cl_mem, CL_NON_BLOCKING};
use std::ffi::c_void;

/// Largest write that does not wait; larger ones (weights) stay blocking.
const MAX_STAGED: usize = 256 << 10;

/// Host copies of a device's writes in flight, with their transfers' events.
#[derive(Default)]
pub struct Uploads {
    kept: Vec<(Event, Box<[u8]>)>,
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
    /// only after its write has read it.
    fn drop(&mut self) {
        for (e, _) in &self.kept {
            let _ = e.wait();
        }
    }
}

impl Device {
    /// Enqueues a write of `data` at `offset` of `mem` that does not wait,
    /// where `POLYCL_WRITE` allows and the write is small; false: the caller
    /// writes (blocking). The caller checked the range.
    pub(crate) fn write_staged(&self, mem: cl_mem, offset: usize, data: &[u8]) -> Result<bool> {
        if crate::config::get().write_mode == WriteMode::Blocking
            || data.is_empty()
            || data.len() > MAX_STAGED
        {
            return Ok(false);
        }
        let mut up = self.uploads.lock();
        up.release_done();
        // A boxed slice's bytes stay put when the box moves into `kept`.
        let copy: Box<[u8]> = data.into();
        // SAFETY: `copy` holds data.len() bytes and is kept until the write
        // has completed (its event says so); the range lies in `mem`.
        let ev = unsafe {
            cq::enqueue_write_buffer(
                self.queue.get(),
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
        up.kept.push((Event::new(ev), copy));
        Ok(true)
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
}
