//! Device discovery: every OpenCL device that passes the capability check is
//! one polycl device, in platform order, filtered by `POLYCL_DEVICES`.

use crate::config;
use crate::error::{ClContext, Error, Result};
use crate::log;
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{Device as ClDevice, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_GPU};
use opencl3::platform::get_platforms;
use opencl3::program::Program;
use opencl3::types::cl_command_queue;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

pub struct Device {
    /// Index among polycl devices: the N of POLYCLN.
    pub index: usize,
    pub name: String,
    pub description: String,
    pub vendor: String,
    pub is_gpu: bool,
    pub is_nvidia: bool,
    /// A device of Mesa's rusticl platform: its compiler (Mesa 22.3, Debian
    /// 12's) crashed on the by-value struct of `kernel_upload_scatter` and
    /// its kernels reached wrong memory through buffer addresses, so both
    /// stay off there unless asked for (upload.rs, addresses.rs).
    pub is_rusticl: bool,
    /// NVIDIA compute capability as major * 10 + minor, from
    /// cl_nv_device_attribute_query; None elsewhere or where the driver does
    /// not report it.
    pub nv_sm: Option<u32>,
    pub global_mem: usize,
    pub max_alloc: usize,
    /// Work-items a work-group at most (`POLYCL_MAX_WORK_GROUP` may lower
    /// it); a kernel's own limit can be lower still (`plan/lower.rs grid`).
    pub max_work_group: usize,
    pub cl: ClDevice,
    /// Shared by every polycl device of the same platform, so buffers of one
    /// can be copied to another with clEnqueueCopyBuffer and events.
    pub context: Arc<Context>,
    pub platform: usize,
    /// One in-order queue per device: transfers and kernels are ordered by it,
    /// so a set_tensor after a graph compute sees its results. Commands go
    /// through `queue()` (upload.rs), which sends the writes held first.
    pub(crate) in_order: CommandQueue,
    /// The hand-off's second in-order queue (runtime/handoff.rs), made at
    /// its first use; ordered against `in_order` by the kernels' counters.
    pub(crate) second: OnceLock<std::result::Result<CommandQueue, Error>>,
    /// Whether `uploads` holds writes for a batch (read without its lock).
    pub(crate) batch_held: AtomicBool,
    /// Commands enqueued, counted once each enqueue call has returned.
    enqueued: AtomicU64,
    /// The count of commands known complete: `enqueued` as it was before a
    /// wait that drained the queue began (`synchronize`, a blocking read).
    drained: AtomicU64,
    pub allocated: AtomicUsize,
    /// Failures of void entries (set_tensor, synchronize, ...) that could not
    /// return a status; each backend on the device reports new ones from its
    /// next graph_compute.
    pub failures: AtomicU64,
    pub(crate) programs: Mutex<HashMap<&'static str, Arc<Program>>>,
    /// Work-groups the step kernel launches here, found once (0: none).
    pub(crate) step_groups: OnceLock<usize>,
    /// Whether the decode kernels take buffers by address, and the kernel
    /// that writes the addresses (runtime/addresses.rs), found once.
    pub(crate) addresses: OnceLock<Option<super::addresses::Patcher>>,
    /// Host copies of writes still in flight (`POLYCL_WRITE`, upload.rs).
    pub(crate) uploads: Mutex<super::upload::Uploads>,
    /// Reads in flight that do not wait, and their pinned staging
    /// (get_tensor_async, readback.rs).
    pub(crate) readbacks: Mutex<super::readback::Readbacks>,
    /// Whether a hand-off wait gave up here (runtime/handoff.rs): later
    /// plans are not handed off, and every earlier one's chained launches
    /// run on one queue.
    pub(crate) handoff_gave_up: AtomicBool,
    /// Computes here whose hand-off wait gave up (handoff.rs `give_up`).
    pub(crate) handoff_give_ups: std::sync::atomic::AtomicU32,
    /// The last compute's hand-off failure record, read behind it and not
    /// yet looked at (handoff.rs `DeferredCheck`, `Device::settle`). The
    /// lock is held while that compute runs again, which takes it again on
    /// the same thread (its copies settle too): another thread's settle
    /// waits for the run instead of starting one of its own beside it.
    pub(crate) deferred_check:
        parking_lot::ReentrantMutex<std::cell::RefCell<Option<super::handoff::DeferredCheck>>>,
    /// The group trace's buffer (`POLYCL_PROFILE=groups`, trace.rs), made
    /// at its first use; None where the device cannot trace.
    pub(crate) trace: OnceLock<Option<super::trace::Trace>>,
}

/// A device's queue lent for one enqueue (`Device::queue`); the command is
/// counted when this is dropped, after the enqueue call has returned.
pub(crate) struct Enqueue<'d> {
    device: &'d Device,
    queue: cl_command_queue,
}

impl Enqueue<'_> {
    pub(crate) fn get(&self) -> cl_command_queue {
        self.queue
    }
}

impl Drop for Enqueue<'_> {
    fn drop(&mut self) {
        self.device.count_enqueued();
    }
}

impl Device {
    /// The device's in-order queue, for a command about to be enqueued: the
    /// writes held for a batch go first (upload.rs), so the command sees
    /// them. Use it within the enqueue's statement:
    /// `cq::enqueue_...(device.queue()?.get(), ...)`.
    pub(crate) fn queue(&self) -> Result<Enqueue<'_>> {
        self.send_held()?;
        Ok(Enqueue {
            device: self,
            queue: self.in_order.get(),
        })
    }

    /// `queue`, or the hand-off's second queue where `second`.
    pub(crate) fn queue_at(&self, second: bool) -> Result<Enqueue<'_>> {
        if !second {
            return self.queue();
        }
        self.send_held()?;
        Ok(Enqueue {
            device: self,
            queue: self.second_queue()?.get(),
        })
    }

    /// The hand-off's second queue, made with the first queue's properties.
    pub(crate) fn second_queue(&self) -> Result<&CommandQueue> {
        self.second
            .get_or_init(|| {
                let properties = if super::profile::any() {
                    opencl3::command_queue::CL_QUEUE_PROFILING_ENABLE
                } else {
                    0
                };
                // SAFETY: `cl` is a device of `context` (discovery made the
                // context from it).
                #[allow(deprecated)]
                unsafe { CommandQueue::create(&self.context, self.cl.id(), properties) }
                    .cl("clCreateCommandQueue")
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    pub(crate) fn count_enqueued(&self) {
        self.enqueued.fetch_add(1, Ordering::Release);
    }

    /// The count to pass to `drained_to` once a wait that begins now has
    /// returned.
    pub(crate) fn enqueued_now(&self) -> u64 {
        self.enqueued.load(Ordering::Acquire)
    }

    /// Every command counted by `seen` (from `enqueued_now`) is complete.
    pub(crate) fn drained_to(&self, seen: u64) {
        self.drained.fetch_max(seen, Ordering::AcqRel);
    }

    /// Whether every command enqueued so far is known complete. A command
    /// whose enqueue call has not returned yet is not counted; it is ordered
    /// by nothing against a wait that runs meanwhile on another thread.
    pub fn idle(&self) -> bool {
        self.drained.load(Ordering::Acquire) == self.enqueued.load(Ordering::Acquire)
    }

    pub fn free_memory(&self) -> usize {
        self.global_mem
            .saturating_sub(self.allocated.load(Ordering::Relaxed))
    }

    /// Records a failure that a void entry could not report itself.
    pub fn mark_failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether programs get NVIDIA's inline PTX (`-DPOLYCL_NVIDIA`): its
    /// dp4a needs sm_61; older NVIDIA GPUs run the portable fallbacks.
    pub fn nvidia_ptx(&self) -> bool {
        nv_at_least(self.is_nvidia, self.nv_sm, SM_DP4A)
    }

    /// Warps a work-group of the decode GLU kernel (`POLYCL_GLU_WARPS`, the
    /// mul_mv program's GLU_WARPS and its launches' width): 8, which every
    /// device that runs the fast kernels takes, where the device's
    /// work-groups can not be as wide as asked.
    pub fn glu_warps(&self) -> usize {
        let asked = crate::config::get().glu_warps.unwrap_or(8) as usize;
        if self.max_work_group >= asked * 32 {
            asked
        } else {
            8
        }
    }

    /// Whether the tensor-core kernels build here: `mma.sync` m16n8k32 (s8)
    /// and m16n8k16 (f16) and `cp.async` need sm_80.
    pub fn has_mma(&self) -> bool {
        nv_at_least(self.is_nvidia, self.nv_sm, SM_MMA)
    }
}

/// The compute capability dp4a needs (the inline PTX of `-DPOLYCL_NVIDIA`).
pub(crate) const SM_DP4A: u32 = 61;
/// The compute capability mma.sync (m16n8k32 s8, m16n8k16 f16) and cp.async need.
pub(crate) const SM_MMA: u32 = 80;

/// Whether an NVIDIA device of compute capability `sm` runs PTX that needs
/// `min`; a driver that does not report its capability is taken to be recent
/// (every NVIDIA OpenCL driver of the last decade reports it).
pub(crate) fn nv_at_least(is_nvidia: bool, sm: Option<u32>, min: u32) -> bool {
    is_nvidia && sm.is_none_or(|sm| sm >= min)
}

static DEVICES: OnceLock<std::result::Result<Vec<Arc<Device>>, Error>> = OnceLock::new();

/// The usable devices, discovered once. An error means polycl has nothing to offer.
pub fn devices() -> std::result::Result<&'static [Arc<Device>], &'static Error> {
    match DEVICES.get_or_init(discover) {
        Ok(d) => Ok(d.as_slice()),
        Err(e) => Err(e),
    }
}

/// Why a device is not usable, or None if it is.
fn capability_problem(d: &ClDevice) -> Option<String> {
    let c_version = d.opencl_c_version().unwrap_or_default();
    // "OpenCL C 1.2 ..." or later: the kernels are OpenCL C 1.2.
    let ok_version = c_version
        .split_whitespace()
        .nth(2)
        .and_then(|v| {
            let mut it = v.split('.');
            Some((
                it.next()?.parse::<u32>().ok()?,
                it.next()?.parse::<u32>().ok()?,
            ))
        })
        .map(|(maj, min)| (maj, min) >= (1, 2))
        .unwrap_or(false);
    if !ok_version {
        return Some(format!("needs OpenCL C 1.2, device reports '{c_version}'"));
    }
    match d.max_work_group_size() {
        Ok(n) if n >= 64 => {}
        Ok(n) => return Some(format!("max work-group size {n} < 64")),
        Err(e) => return Some(format!("cannot query work-group size ({})", e.0)),
    }
    None
}

fn discover() -> Result<Vec<Arc<Device>>> {
    let cfg = config::get();
    for p in &cfg.problems {
        log::warn(p);
    }
    let platforms = get_platforms().map_err(|e| {
        Error::NoDevice(format!(
            "no OpenCL platform (status {}): is an ICD loader (libOpenCL.so.1) and a driver installed?",
            e.0
        ))
    })?;
    let mut found = Vec::new();
    for (pi, p) in platforms.iter().enumerate() {
        let ids = match p.get_devices(CL_DEVICE_TYPE_ALL) {
            Ok(ids) => ids,
            Err(_) => continue,
        };
        for id in ids {
            let d = ClDevice::new(id);
            match capability_problem(&d) {
                None => found.push((pi, d)),
                Some(why) => log::info(&format!(
                    "skipping OpenCL device '{}': {why}",
                    d.name().unwrap_or_default()
                )),
            }
        }
    }
    let selected: Vec<(usize, ClDevice)> = match &cfg.devices {
        None => found,
        Some(list) => {
            let mut sel = Vec::new();
            for &i in list {
                match found.get(i) {
                    Some(d) => sel.push(*d),
                    None => log::warn(&format!(
                        "POLYCL_DEVICES names device {i}, but only {} usable OpenCL devices exist",
                        found.len()
                    )),
                }
            }
            sel
        }
    };
    if selected.is_empty() {
        return Err(Error::NoDevice(
            "no OpenCL device passed the capability check".into(),
        ));
    }
    let mut contexts: HashMap<usize, Arc<Context>> = HashMap::new();
    for (pi, _) in &selected {
        if !contexts.contains_key(pi) {
            let ids: Vec<_> = selected
                .iter()
                .filter(|(p, _)| p == pi)
                .map(|(_, d)| d.id())
                .collect();
            let ctx = Context::from_devices(&ids, &[], None, std::ptr::null_mut())
                .cl("clCreateContext")?;
            contexts.insert(*pi, Arc::new(ctx));
        }
    }
    let mut out = Vec::new();
    for (index, (pi, d)) in selected.into_iter().enumerate() {
        let context = contexts[&pi].clone();
        let properties = if super::profile::any() {
            opencl3::command_queue::CL_QUEUE_PROFILING_ENABLE
        } else {
            0
        };
        // SAFETY: d is a device of `context` (the context was made from it).
        #[allow(deprecated)]
        let queue = unsafe { CommandQueue::create(&context, d.id(), properties) }
            .cl("clCreateCommandQueue")?;
        let dev_type = d.dev_type().unwrap_or(0);
        let vendor = d.vendor().unwrap_or_default();
        let name = d.name().unwrap_or_default();
        let is_nvidia = vendor.to_ascii_lowercase().contains("nvidia");
        let nv_sm = if is_nvidia {
            match (
                d.compute_capability_major_nv(),
                d.compute_capability_minor_nv(),
            ) {
                (Ok(major), Ok(minor)) => Some(major * 10 + minor),
                _ => None,
            }
        } else {
            None
        };
        let dev = Device {
            index,
            name: format!("POLYCL{index}"),
            description: name.trim().to_string(),
            is_nvidia,
            is_rusticl: platforms[pi].name().is_ok_and(|n| n.trim() == "rusticl"),
            nv_sm,
            vendor,
            is_gpu: dev_type & CL_DEVICE_TYPE_GPU != 0,
            global_mem: d.global_mem_size().unwrap_or(0) as usize,
            max_alloc: d.max_mem_alloc_size().unwrap_or(0) as usize,
            max_work_group: d
                .max_work_group_size()
                .unwrap_or(0)
                .min(config::get().max_work_group.unwrap_or(usize::MAX)),
            cl: d,
            context,
            platform: pi,
            in_order: queue,
            second: OnceLock::new(),
            batch_held: AtomicBool::new(false),
            enqueued: AtomicU64::new(0),
            drained: AtomicU64::new(0),
            allocated: AtomicUsize::new(0),
            failures: AtomicU64::new(0),
            programs: Mutex::new(HashMap::new()),
            step_groups: OnceLock::new(),
            addresses: OnceLock::new(),
            uploads: Mutex::new(Default::default()),
            readbacks: Mutex::new(Default::default()),
            deferred_check: parking_lot::ReentrantMutex::new(std::cell::RefCell::new(None)),
            handoff_gave_up: AtomicBool::new(false),
            handoff_give_ups: std::sync::atomic::AtomicU32::new(0),
            trace: OnceLock::new(),
        };
        log::info(&format!(
            "{}: {} ({}, {} MiB, max buffer {} MiB)",
            dev.name,
            dev.description,
            if dev.is_gpu {
                "GPU"
            } else {
                "non-GPU OpenCL device"
            },
            dev.global_mem >> 20,
            dev.max_alloc >> 20
        ));
        out.push(Arc::new(dev));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::nv_at_least;

    #[test]
    fn ptx_features_follow_the_compute_capability() {
        // dp4a (sm_61) and mma.sync / cp.async (sm_80).
        assert!(nv_at_least(true, Some(90), 80));
        assert!(nv_at_least(true, Some(80), 80));
        assert!(!nv_at_least(true, Some(75), 80));
        assert!(nv_at_least(true, Some(75), 61));
        assert!(!nv_at_least(true, Some(52), 61));
        // Unreported: taken to be recent; never for other vendors.
        assert!(nv_at_least(true, None, 80));
        assert!(!nv_at_least(false, None, 61));
        assert!(!nv_at_least(false, Some(90), 61));
    }
}
