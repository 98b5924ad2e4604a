//! Kernel launches with arguments bound once at plan time; running a plan is a
//! run of enqueues on the device's in-order queue.

use super::buffer::finish_event;
use super::device::Device;
use crate::config::BufferAddresses;
use crate::error::{ClContext, Error, Result};
use opencl3::command_queue as cq;
use opencl3::event::Event;
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer, ClMem, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_ONLY};
use opencl3::types::cl_mem;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// One tensor as a kernel sees it: memory, byte offset, ggml ne and nb.
#[derive(Clone, Copy, Debug)]
pub struct Operand {
    pub mem: cl_mem,
    pub offset: u64,
    pub ne: [i64; 4],
    pub nb: [u64; 4],
}

/// Arguments bound in order, the way the `.cl` signatures list them.
///
/// Kernels named in `program::PACKED` take their scalars (offsets, shapes,
/// strides, flags) in one buffer of 8-byte slots, their last argument, in
/// binding order: NVIDIA's clEnqueueNDRangeKernel costs several microseconds
/// more per launch with ~500 bytes of scalar arguments than with buffers
/// alone (scripts/probe/enqueue-cost.c), and the decode step is ~260 launches.
/// `finish` uploads those slots.
pub struct ArgBinder<'k> {
    kernel: &'k Kernel,
    next: u32,
    /// The kernel's parameter count: binding past it is a signature that
    /// does not match its binder (a packed kernel missing from PACKED, say),
    /// which some drivers answer with a crash instead of an error.
    num_args: u32,
    pack: Option<Vec<u64>>,
    /// A packed kernel's buffer arguments, in order (for the step kernel).
    mems: Vec<cl_mem>,
    /// Whether the kernel writes each of `mems` (common.cl PK_SIG's W).
    written: Vec<bool>,
}

/// What a packed kernel was bound with: the uploaded scalars, and the same
/// buffers and slots again for the step kernel (runtime/step.rs), which runs
/// the kernel's body as one phase of a longer launch.
pub struct Packed {
    /// `slots`, uploaded: the kernel's last argument.
    pub params: Buffer<u64>,
    pub mems: Vec<cl_mem>,
    /// Whether the kernel writes each of `mems`.
    pub written: Vec<bool>,
    pub slots: Vec<u64>,
}

impl<'k> ArgBinder<'k> {
    pub fn new(kernel: &'k Kernel) -> Self {
        let packed = kernel
            .function_name()
            .is_ok_and(|n| super::program::PACKED.contains(&n.as_str()));
        ArgBinder {
            kernel,
            next: 0,
            num_args: kernel.num_args().unwrap_or(u32::MAX),
            pack: packed.then(Vec::new),
            mems: Vec::new(),
            written: Vec::new(),
        }
    }
    /// Binds a packed kernel's buffers and scalars (a no-op for other
    /// kernels) and returns the buffer that holds the scalars, which must live
    /// as long as the launch. A kernel built to take buffers by address
    /// (runtime/addresses.rs) gets their device addresses as ulong arguments
    /// in their places.
    pub fn finish(mut self, device: &Device) -> Result<Option<Packed>> {
        let Some(mut slots) = self.pack.take() else {
            return Ok(None);
        };
        // Buffers, then the slots (common.cl PK_SIG), in every mode.
        if self.num_args as usize != self.mems.len() + 1 {
            return Err(self.arity_error());
        }
        if slots.is_empty() {
            slots.push(0);
        }
        bind_packed(device, self.kernel, self.mems, self.written, slots).map(Some)
    }
    /// A scalar: its slots when packed, else the value as one argument.
    fn scalar<T>(&mut self, slots: &[u64], v: &T) -> Result<&mut Self> {
        match self.pack.as_mut() {
            Some(pack) => {
                pack.extend_from_slice(slots);
                Ok(self)
            }
            None => self.raw(v),
        }
    }
    /// A buffer argument that the kernel only reads; a packed kernel's are
    /// bound by `finish`, which knows whether the kernel takes them by
    /// address.
    fn mem(&mut self, mem: &cl_mem) -> Result<&mut Self> {
        self.mem_of(mem, false)
    }
    fn mem_of(&mut self, mem: &cl_mem, written: bool) -> Result<&mut Self> {
        if self.pack.is_some() {
            self.mems.push(*mem);
            self.written.push(written);
            return Ok(self);
        }
        self.raw(mem)
    }
    fn check_index(&self) -> Result<()> {
        if self.next < self.num_args {
            return Ok(());
        }
        Err(self.arity_error())
    }
    fn arity_error(&self) -> Error {
        Error::Unsupported(format!(
            "kernel {} takes {} arguments; its binder passes {} (a packed kernel missing \
             from program::PACKED?)",
            self.kernel.function_name().unwrap_or_default(),
            self.num_args,
            self.next as usize + self.mems.len()
        ))
    }
    fn raw<T>(&mut self, v: &T) -> Result<&mut Self> {
        self.check_index()?;
        // SAFETY: T is a plain value whose size matches the kernel parameter at
        // this index by construction of the signatures (checked by the device
        // tests that launch every kernel).
        unsafe { self.kernel.set_arg(self.next, v) }.cl("clSetKernelArg")?;
        self.next += 1;
        Ok(self)
    }
    /// TENSOR/CTENSOR: pointer, offset, ne (long4), nb (ulong4); packed
    /// (PTENSOR + PK_TENSOR): the pointer, then 9 slots. A tensor the kernel
    /// reads; `tensor_out` for one it writes.
    pub fn tensor(&mut self, t: &Operand) -> Result<&mut Self> {
        self.tensor_of(t, false)
    }
    /// `tensor`, for a tensor the kernel writes (a packed kernel's W buffer,
    /// common.cl PK_SIG).
    pub fn tensor_out(&mut self, t: &Operand) -> Result<&mut Self> {
        self.tensor_of(t, true)
    }
    fn tensor_of(&mut self, t: &Operand, written: bool) -> Result<&mut Self> {
        self.mem_of(&t.mem, written)?;
        if let Some(pack) = self.pack.as_mut() {
            pack.push(t.offset);
            pack.extend(t.ne.map(|x| x as u64));
            pack.extend_from_slice(&t.nb);
            return Ok(self);
        }
        self.raw(&t.offset)?.raw(&t.ne)?.raw(&t.nb)
    }
    /// A pointer and a byte offset, of memory the kernel reads.
    pub fn ptr(&mut self, mem: cl_mem, offset: u64) -> Result<&mut Self> {
        self.mem(&mem)?.scalar(&[offset], &offset)
    }
    /// `ptr`, of memory the kernel writes.
    pub fn ptr_out(&mut self, mem: cl_mem, offset: u64) -> Result<&mut Self> {
        self.mem_of(&mem, true)?.scalar(&[offset], &offset)
    }
    pub fn i32(&mut self, v: i32) -> Result<&mut Self> {
        self.scalar(&[v as u32 as u64], &v)
    }
    pub fn u32(&mut self, v: u32) -> Result<&mut Self> {
        self.scalar(&[v as u64], &v)
    }
    pub fn f32(&mut self, v: f32) -> Result<&mut Self> {
        self.scalar(&[v.to_bits() as u64], &v)
    }
    pub fn u64x4(&mut self, v: [u64; 4]) -> Result<&mut Self> {
        self.scalar(&v, &v)
    }
    pub fn i64(&mut self, v: i64) -> Result<&mut Self> {
        self.scalar(&[v as u64], &v)
    }
    pub fn i64x4(&mut self, v: [i64; 4]) -> Result<&mut Self> {
        self.scalar(&v.map(|x| x as u64), &v)
    }
}

/// Sets a packed kernel's arguments: its buffers (by address where its
/// program takes them so), then the buffer of `slots`, made here.
pub fn bind_packed(
    device: &Device,
    kernel: &Kernel,
    mems: Vec<cl_mem>,
    written: Vec<bool>,
    mut slots: Vec<u64>,
) -> Result<Packed> {
    let mode = super::program::address_mode(device, kernel)?;
    set_buffers(device, kernel, mode, 0, &mems, &written)?;
    // SAFETY: `slots` is a live host array of slots.len() u64s, copied
    // by OpenCL before create returns (CL_MEM_COPY_HOST_PTR).
    let buf = unsafe {
        Buffer::<u64>::create(
            &device.context,
            CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
            slots.len(),
            slots.as_mut_ptr() as *mut c_void,
        )
    }
    .cl("clCreateBuffer")?;
    let mem = buf.get();
    // SAFETY: the last parameter, a buffer pointer.
    unsafe { kernel.set_arg(mems.len() as u32, &mem) }.cl("clSetKernelArg")?;
    Ok(Packed {
        params: buf,
        mems,
        written,
        slots,
    })
}

/// Sets `kernel`'s parameters `first..` to `mems`: each a buffer argument,
/// or its device address where `mode` passes it by address (a kernel built
/// for `mode`, common.cl PK_SIG), by whether the kernel writes it.
pub fn set_buffers(
    device: &Device,
    kernel: &Kernel,
    mode: BufferAddresses,
    first: u32,
    mems: &[cl_mem],
    written: &[bool],
) -> Result<()> {
    let by_address = |written: bool| match mode {
        BufferAddresses::Off => false,
        BufferAddresses::All => true,
        BufferAddresses::Reads => !written,
    };
    let addresses = if written.iter().any(|&w| by_address(w)) {
        super::addresses::resolve(device, mems)?
    } else {
        Vec::new()
    };
    for (i, (m, &w)) in mems.iter().zip(written).enumerate() {
        let index = first + i as u32;
        let set = if by_address(w) {
            // SAFETY: this parameter is a ulong address where the kernel
            // was built for `mode` (common.cl PK_ARG_ADDR).
            unsafe { kernel.set_arg(index, &addresses[i]) }
        } else {
            // SAFETY: this parameter is the buffer's pointer.
            unsafe { kernel.set_arg(index, m) }
        };
        set.cl("clSetKernelArg")?;
    }
    Ok(())
}

/// A kernel with its arguments bound and its NDRange.
pub struct Launch {
    pub kernel: Kernel,
    pub global: [usize; 3],
    pub local: Option<[usize; 3]>,
    pub dims: u32,
    /// Counted by kind for tests and logs: "mul_mat", "quantize", ...
    pub kind: &'static str,
    /// The packed scalars of a `program::PACKED` kernel (ArgBinder::finish).
    pub packed: Option<Packed>,
}

/// Launches since process start, for tests that assert launch counts.
pub static LAUNCHES: AtomicU64 = AtomicU64::new(0);

impl Launch {
    pub fn enqueue(&self, device: &Device) -> Result<()> {
        self.enqueue_timed(device, false).map(|_| ())
    }

    /// `enqueue`, on the hand-off's second queue where `second`.
    pub fn enqueue_at(&self, device: &Device, second: bool) -> Result<()> {
        self.enqueue_timed_at(device, false, second).map(|_| ())
    }

    /// `enqueue`, returning the first launch's profiling event when `timed`
    /// (or when `POLYCL_PROFILE=1` keeps every event, None: the profile holds it).
    pub fn enqueue_timed(&self, device: &Device, timed: bool) -> Result<Option<Event>> {
        self.enqueue_timed_at(device, timed, false)
    }

    fn enqueue_timed_at(
        &self,
        device: &Device,
        timed: bool,
        second: bool,
    ) -> Result<Option<Event>> {
        let ev = self.enqueue_once_at(device, timed, second)?;
        if let Some(twice) = &crate::config::get().profile_twice {
            if self.kernel.function_name().is_ok_and(|n| &n == twice) {
                self.enqueue_once_at(device, false, second)?;
            }
        }
        Ok(ev)
    }

    /// A launch of no work-items, which enqueues nothing.
    pub fn is_empty(&self) -> bool {
        self.global[..self.dims as usize].contains(&0)
    }

    /// A failed enqueue of a fixed-width launch, named: the driver may
    /// refuse a width that the device's limit allows (plan/lower.rs `grid`).
    fn refused(&self, device: &Device, e: Error) -> Error {
        match (e, self.local) {
            (Error::OpenCl(_, status), Some(l)) => Error::Launch {
                kernel: self.kernel.function_name().unwrap_or_default(),
                work_group: l[..self.dims as usize].iter().product(),
                kernel_limit: self.kernel.get_work_group_size(device.cl.id()).ok(),
                status,
            },
            (e, _) => e,
        }
    }

    fn enqueue_once_at(&self, device: &Device, timed: bool, second: bool) -> Result<Option<Event>> {
        if self.is_empty() {
            return Ok(None);
        }
        if crate::fault::queue() {
            // CL_OUT_OF_RESOURCES: what a device that lost its queue answers.
            return Err(crate::error::Error::OpenCl("clEnqueueNDRangeKernel", -5));
        }
        let local = self.local.as_ref().map_or(std::ptr::null(), |l| l.as_ptr());
        LAUNCHES.fetch_add(1, Ordering::Relaxed);
        super::counters::launched(self.kind);
        if super::trace::on() {
            if let Some(p) = &self.packed {
                let name = self.kernel.function_name().unwrap_or_default();
                super::trace::record_launch(name, p.params.get());
            }
        }
        let every = super::profile::per_kernel();
        if !every && !timed {
            // SAFETY: every argument was bound at plan time and the buffers they
            // name are kept alive by the plan that owns this launch.
            return unsafe {
                enqueue_without_event(
                    device.queue_at(second)?.get(),
                    self.kernel.get(),
                    self.dims,
                    self.global.as_ptr(),
                    local,
                )
            }
            .map(|_| None)
            .map_err(|e| self.refused(device, e));
        }
        // SAFETY: as above.
        let ev = unsafe {
            cq::enqueue_nd_range_kernel(
                device.queue_at(second)?.get(),
                self.kernel.get(),
                self.dims,
                std::ptr::null(),
                self.global.as_ptr(),
                local,
                0,
                std::ptr::null(),
            )
        };
        let e = Event::new(
            ev.map_err(|s| self.refused(device, Error::OpenCl("clEnqueueNDRangeKernel", s)))?,
        );
        if timed {
            return Ok(Some(e));
        }
        let name = self.kernel.function_name().unwrap_or_default();
        super::profile::record(name, e);
        Ok(None)
    }
}

/// Enqueues `kernel` on `queue` asking for no event object (`raw_enqueue`),
/// which saves its creation and release per launch; where the loader's symbol
/// was not found, through opencl3, releasing the event it returns.
///
/// # Safety
/// `queue` and `kernel` are live, every argument of `kernel` is set and the
/// buffers they name outlive the command; `global` points at `dims` sizes and
/// `local` at `dims` sizes or is null.
pub(crate) unsafe fn enqueue_without_event(
    queue: opencl3::types::cl_command_queue,
    kernel: opencl3::types::cl_kernel,
    dims: u32,
    global: *const usize,
    local: *const usize,
) -> Result<()> {
    if let Some(f) = raw_enqueue() {
        // SAFETY: the caller's promises; a null event pointer asks for no event.
        let status = unsafe {
            f(
                queue,
                kernel,
                dims,
                std::ptr::null(),
                global,
                local,
                0,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        return if status == 0 {
            Ok(())
        } else {
            Err(Error::OpenCl("clEnqueueNDRangeKernel", status))
        };
    }
    // SAFETY: the caller's promises.
    let ev = unsafe {
        cq::enqueue_nd_range_kernel(
            queue,
            kernel,
            dims,
            std::ptr::null(),
            global,
            local,
            0,
            std::ptr::null(),
        )
    };
    finish_event(ev, "clEnqueueNDRangeKernel")
}

type EnqueueNdRange = unsafe extern "C" fn(
    opencl3::types::cl_command_queue,
    opencl3::types::cl_kernel,
    u32,
    *const usize,
    *const usize,
    *const usize,
    u32,
    *const opencl3::types::cl_event,
    *mut opencl3::types::cl_event,
) -> i32;

/// clEnqueueNDRangeKernel from the ICD loader that opencl3 already opened,
/// called directly so a launch needs no event object (opencl3 always asks
/// for one). None falls back to opencl3.
fn raw_enqueue() -> Option<EnqueueNdRange> {
    static F: std::sync::OnceLock<Option<EnqueueNdRange>> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        // SAFETY: RTLD_NOLOAD only returns a handle to the already loaded loader;
        // the symbol has the OpenCL 1.2 signature above.
        unsafe {
            let h = libc::dlopen(
                c"libOpenCL.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_NOLOAD,
            );
            if h.is_null() {
                return None;
            }
            let p = libc::dlsym(h, c"clEnqueueNDRangeKernel".as_ptr());
            if p.is_null() {
                None
            } else {
                Some(std::mem::transmute::<*mut libc::c_void, EnqueueNdRange>(p))
            }
        }
    })
}
