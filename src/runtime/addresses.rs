//! Buffers passed to the decode kernels by device address
//! (`POLYCL_BUFFER_ADDRESSES=1`; off by default). NVIDIA's
//! clEnqueueNDRangeKernel costs the host ~0.4 us more for each buffer
//! argument a kernel takes (scripts/probe/enqueue-args.c, docs/perf.md step
//! 46), and a decode kernel takes 3-16; a 1B model's decode step, ~110
//! launches, is bound by the host's enqueues. Where this is on, the packed
//! kernels of the programs in program.rs `BY_ADDRESS` are built with
//! POLYCL_ADDR (common.cl `PK_SIG`): their one argument is their slots, the
//! first of which hold the addresses of the buffers they use, written on the
//! device when the plan binds the launch (`kernel_pk_addresses`), from
//! buffer arguments, so that each address is the one the driver itself
//! gives kernels.
//!
//! On the H200 (step 46) this halved the host's time a 1B token (1239 ->
//! 664 us) but made the GPU's longer: with every packed kernel by address,
//! the attention kernels held 207 registers instead of 168 and a 7B token
//! took 4-9% longer. The attention programs now keep their buffer
//! arguments, and a 7B token still takes ~7% longer (step 47: the bodies
//! are not slower back to back, and read-only slots do not help), so the
//! default stays off.
//!
//! OpenCL does not promise that a buffer keeps one address: a driver may
//! move a buffer between the devices of a context, and it would not know
//! that a kernel reaches a buffer it was not given. So this is only ever on
//! for a device alone in its context, after a kernel that reads and writes
//! through addresses gave the right results there.

use super::device::Device;
use super::executor::enqueue_without_event;
use crate::error::{ClContext, Error, Result};
use crate::log;
use opencl3::command_queue as cq;
use opencl3::kernel::Kernel;
use opencl3::memory::ClMem;
use opencl3::types::cl_mem;
use parking_lot::Mutex;
use std::ffi::c_void;

const SOURCE: &str = include_str!("kernels/addresses.cl");
/// Buffer arguments of one `kernel_pk_addresses` launch.
const PER_LAUNCH: usize = 16;

/// The device's kernel that writes addresses into slots, where kernels take
/// buffers by address; its arguments are set and enqueued under the lock.
pub(crate) struct Patcher {
    kernel: Mutex<Kernel>,
}

/// Whether `device`'s packed kernels take their buffers by address: decided
/// once, before the first program that holds them is built.
pub fn on(device: &Device) -> bool {
    patcher(device).is_some()
}

fn patcher(device: &Device) -> Option<&Patcher> {
    device
        .addresses
        .get_or_init(|| {
            let asked = crate::config::get().buffer_addresses;
            if asked != Some(true) {
                return None;
            }
            let alone = device.context.devices().len() == 1;
            if !alone {
                log::warn(&format!(
                    "{}: POLYCL_BUFFER_ADDRESSES=1 ignored: the device shares its OpenCL \
                     context with others, where a driver may move buffers between them",
                    device.name
                ));
                return None;
            }
            match check(device) {
                Ok(kernel) => {
                    log::debug(&format!(
                        "{}: decode kernels take their buffers by address",
                        device.name
                    ));
                    Some(Patcher {
                        kernel: Mutex::new(kernel),
                    })
                }
                Err(e) => {
                    log::warn(&format!(
                        "{}: buffers stay kernel arguments; the address check failed: {e}",
                        device.name
                    ));
                    None
                }
            }
        })
        .as_ref()
}

/// Writes the addresses of `mems` into `pk`'s first slots, on the device's
/// queue, so that every later command sees them.
pub fn write(device: &Device, pk: cl_mem, mems: &[cl_mem]) -> Result<()> {
    let p = patcher(device).ok_or_else(|| {
        Error::Unsupported(format!(
            "{}: a kernel built for buffers by address, on a device without them",
            device.name
        ))
    })?;
    enqueue_writes(device, &p.kernel.lock(), pk, mems)
}

fn enqueue_writes(device: &Device, kernel: &Kernel, pk: cl_mem, mems: &[cl_mem]) -> Result<()> {
    for (chunk, ms) in mems.chunks(PER_LAUNCH).enumerate() {
        let first = (chunk * PER_LAUNCH) as u32;
        let n = ms.len() as u32;
        // SAFETY: the parameters are a buffer, two uints and 16 buffers, in
        // that order (addresses.cl); slots past n get pk itself, unread.
        unsafe {
            kernel.set_arg(0, &pk).cl("clSetKernelArg")?;
            kernel.set_arg(1, &first).cl("clSetKernelArg")?;
            kernel.set_arg(2, &n).cl("clSetKernelArg")?;
            for i in 0..PER_LAUNCH {
                let m = ms.get(i).copied().unwrap_or(pk);
                kernel.set_arg(3 + i as u32, &m).cl("clSetKernelArg")?;
            }
        }
        let one = [1usize, 1, 1];
        // SAFETY: every argument is set; the caller keeps pk and the buffers
        // alive (a plan's launch owns its slots and its buffers' owners outlive
        // the plan), and OpenCL copies the arguments at enqueue.
        unsafe {
            enqueue_without_event(
                device.queue()?.get(),
                kernel.get(),
                1,
                one.as_ptr(),
                one.as_ptr(),
            )?;
        }
    }
    Ok(())
}

/// Builds the kernels, then copies a buffer through addresses alone and
/// checks every value: the device's answer to whether a kernel can reach a
/// buffer it was not given.
fn check(device: &Device) -> Result<Kernel> {
    let program = super::program::build_source_with(device, "addresses", SOURCE, "")?;
    let create = |name: &str| {
        Kernel::create(&program, name).map_err(|e| {
            Error::Unsupported(format!(
                "kernel {name} in program addresses: status {}",
                e.0
            ))
        })
    };
    let patch = create("kernel_pk_addresses")?;
    let copy = create("kernel_address_check")?;
    const N: usize = 4096;
    let mut src: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let src_buf = super::step::upload(device, &mut src)?;
    let dst_buf = super::step::upload(device, &mut vec![0f32; N])?;
    let pk = super::step::upload(device, &mut [0u64; 2])?;
    enqueue_writes(device, &patch, pk.get(), &[src_buf.get(), dst_buf.get()])?;
    let p = pk.get();
    // SAFETY: kernel_address_check's one parameter is a buffer pointer.
    unsafe { copy.set_arg(0, &p) }.cl("clSetKernelArg")?;
    let (global, local) = ([N, 1, 1], [64usize, 1, 1]);
    // SAFETY: the argument is set and pk, src and dst live to the end of
    // this function, after the blocking read below.
    unsafe {
        enqueue_without_event(
            device.queue()?.get(),
            copy.get(),
            1,
            global.as_ptr(),
            local.as_ptr(),
        )?;
    }
    let mut out = vec![0f32; N];
    // SAFETY: `out` is a live host array of N floats and the read is
    // blocking, so OpenCL is done with it when this returns.
    let ev = unsafe {
        cq::enqueue_read_buffer(
            device.queue()?.get(),
            dst_buf.get(),
            opencl3::types::CL_BLOCKING,
            0,
            N * 4,
            out.as_mut_ptr() as *mut c_void,
            0,
            std::ptr::null(),
        )
    };
    super::buffer::finish_event(ev, "clEnqueueReadBuffer")?;
    let wrong = (0..N).filter(|&i| out[i] != 2.0 * i as f32 + 1.0).count();
    if wrong > 0 {
        return Err(Error::Unsupported(format!(
            "{wrong} of {N} values copied through buffer addresses were wrong"
        )));
    }
    Ok(patch)
}
