//! The hand-off (`POLYCL_HANDOFF`, docs/perf.md step 63): a decode step's
//! runs of decode kernels alternate between the device's queue and a second
//! in-order queue, and each launch's work-groups wait at their top on an
//! arrival counter that every work-group of the launch before increments
//! after its last store (kernels/handoff.cl). The counters, not the
//! queue, order the launches, so the GPU starts a launch's groups
//! while the one before drains: on the H200 a launch costs ~5.5 us beyond
//! its bytes, most of it ramp and drain (step 62), which the overlap probe
//! (`scripts/probe/overlap.c`) took 23% off a 7B layer's chain.
//!
//! Why it cannot deadlock on the queues: with two queues alternating, launch
//! i + 1 follows launch i - 1 on its queue, so only launches i and i + 1 are
//! ever in flight together, and a waiting launch waits only on the one
//! before it, which reached the device first: `Plan::run` flushes each
//! chained launch on its own as soon as it is enqueued (`flushes_each`). A
//! group that waits holds its place on the device; where the launch it waits
//! for could not get places beside it, the wait gives up after a poll budget
//! and counts itself in the failure record, which names the launch and which
//! `Chains::defer` reads behind each compute: not a hang, and not a wrong
//! result either, since the host's next wait for the device looks at the
//! record and runs that compute again in order (plan/rerun.rs) before the
//! host reads its results.
//!
//! A chain runs an odd number of launches, so that its first and last run
//! on the device's own queue: the first after everything enqueued before
//! it, and everything enqueued after the last (the next graph compute, a
//! read of the logits) after the whole chain, since the last launch waited
//! for its predecessor's groups, which waited for theirs.

use super::device::Device;
use super::executor::Launch;
use super::program::BuildTarget;
use crate::config::Handoff;
use crate::error::{ClContext, Result};
use opencl3::command_queue as cq;
use opencl3::event::Event;
use opencl3::memory::{Buffer, ClMem};
use parking_lot::Mutex;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Slots a kernel built for the hand-off reads before its own (handoff.cl
/// HANDOFF_SLOTS).
pub const SLOTS: usize = 4;

/// The build option of a program whose packed kernels read those slots.
pub const DEFINE: &str = "-DPOLYCL_HANDOFF=1";

/// The name suffix of a program's hand-off variant (program.rs `program`):
/// the same sources built with `DEFINE`. A chained launch's kernel comes
/// from the variant; every other launch keeps the plain program, whose
/// kernels have no frame at all (the frame's slots and branches alone cost
/// the H200's 7B decode ~4%, docs/perf.md step 63).
pub const VARIANT: &str = "+handoff";

/// The packed kernels (program.rs `PACKED`) that may not be chained: their
/// groups do not all reach `PK_END`, their programs have no hand-off variant
/// (`variant_of`), or, the tensor-core GQA kernel, they were never measured
/// chained (its PK_END serves the group trace).
pub const NOT_CHAINED: &[&str] = &[
    "kernel_fused_rms_norm",
    "kernel_fused_rms_norm_wide",
    "kernel_rope_store_f32",
    "kernel_fa_split",
    "kernel_fa_gqa_d64",
    "kernel_fa_gqa_d128",
];

/// The hand-off `device` runs: `POLYCL_HANDOFF`, where the device can. Two
/// queues need a device that runs kernels of two queues at once (an NVIDIA
/// GPU here; elsewhere the serial form), and every form needs the counters'
/// device addresses (runtime/addresses.rs). The step kernel, which runs the
/// same kernels as phases of its own, excludes it, as does a kernel
/// launched twice for timing. Unasked, it is on only
/// where measured (compute capability 9.0 and later: the H200): the width
/// rule (`Chains::build`) reckons a compute unit's places as Hopper's, and
/// a GPU with fewer would give up waits, which costs wrong tokens until
/// `check` reports them.
pub fn mode(device: &Device) -> Handoff {
    let config = crate::config::get();
    let concurrent = device.is_nvidia && device.is_gpu;
    let measured = concurrent && device.nv_sm.is_some_and(|sm| sm >= 90);
    let asked = config
        .handoff
        .unwrap_or(if measured { Handoff::On } else { Handoff::Off });
    if device.handoff_gave_up.load(Ordering::Relaxed) {
        return Handoff::Off;
    }
    // A kernel launched twice for timing (`POLYCL_PROFILE_TWICE`) would
    // arrive twice at its counter.
    if asked == Handoff::Off
        || config.step == Some(true)
        || config.profile_twice.is_some()
        || !super::addresses::on(device)
    {
        return Handoff::Off;
    }
    if asked == Handoff::On && !concurrent {
        return Handoff::Serial;
    }
    asked
}

/// Give-ups a device survives with the hand-off on, each compute run
/// again (plan/rerun.rs): one that gives up now and then (launches flushed
/// in batches gave up in ~1 of 13000 1B decode steps on Hopper, docs/perf.md
/// steps 86-87) should not cost the rest of a process the hand-off's 8-12%,
/// while a GPU that gives up every compute runs only this many twice.
pub const GIVE_UPS_KEPT: u32 = 2;

/// Counts a compute on `device` whose hand-off wait gave up; whether the
/// device goes on with the hand-off (`rerun`: the compute runs again). Once
/// it does not, every plan's chained launches go to one queue (`on_second`)
/// and no later plan is handed off (`mode`).
pub fn give_up(device: &Device, rerun: bool) -> bool {
    let before = device.handoff_give_ups.fetch_add(1, Ordering::Relaxed);
    let keep = rerun && before < GIVE_UPS_KEPT;
    if !keep {
        device.handoff_gave_up.store(true, Ordering::Relaxed);
    }
    keep
}

/// The build options of a hand-off variant on `target`.
pub fn build_defines(target: &BuildTarget, config: &crate::config::Config) -> String {
    let sleep = config.handoff_sleep_ns;
    if sleep > 0 && target.nv_sm.is_none_or(|sm| sm >= 70) {
        format!("{DEFINE} -DHANDOFF_SLEEP={sleep}")
    } else {
        DEFINE.to_string()
    }
}

/// The hand-off variant of the program that holds kernel `name` (static
/// names: program.rs caches programs by name).
fn variant_of(name: &str) -> &'static str {
    if name.starts_with("kernel_mul_mv_group_rope_") {
        "group_rope+handoff"
    } else if name == "kernel_rope_rot_store_f32" {
        "rope_rot_store+handoff"
    } else if name.starts_with("kernel_fa_gqa_") {
        "fa_gqa+handoff"
    } else if name.starts_with("kernel_fa_") {
        "fa_split+handoff"
    } else {
        "mul_mv+handoff"
    }
}

/// A plan's chains: which queue each launch goes to, and the counters.
pub struct Chains {
    /// For each launch of the plan, whether it goes to the second queue
    /// (`on_second`).
    second: Vec<bool>,
    /// The first chained launch.
    pub first: usize,
    /// The serial form (one queue): each run's waits are checked after it.
    pub serial: bool,
    /// One counter a chained launch, then the failure record.
    counters: Buffer<u32>,
    /// The low half of the counters' device address: a failure record
    /// names the counter its wait polled, and so the launch that waited.
    counters_lo: u32,
    /// Each chained launch's index in the plan and kernel, in chain order
    /// (the order of their counters).
    chained_launches: Vec<(usize, String)>,
    /// Runs so far, and the failure record's read in flight (two queues,
    /// `POLYCL_HANDOFF_CHECK` above 1: `check`).
    runs: AtomicU64,
    pending: Mutex<Option<Event>>,
    /// Where the reads that do not wait land (`read_failures`): pinned, as
    /// a read into pageable memory that does not wait took NVIDIA's driver
    /// 0.1-6 ms (docs/perf.md step 53; behind every compute the 1B's
    /// llama-bench runs fell from ~1040 to 450-670 t/s, step 88).
    record_host: super::readback::Pinned,
}

/// The failure record (kernels/handoff.cl `handoff_wait`): how many waits
/// gave up, and the low half of the address of the counter the last one
/// polled.
pub type FailureRecord = [u32; RECORD_WORDS];
const RECORD_WORDS: usize = 2;

/// A compute that runs again, in order, where a hand-off wait of its run
/// gave up (plan/rerun.rs).
pub trait RunAgain: Send + Sync {
    /// Once the failure record read behind the run (`Chains::defer`) has
    /// landed: runs again where a wait gave up; whether it did.
    fn run_again(self: Arc<Self>) -> Result<bool>;
}

/// A compute's failure record, read behind it without waiting (`defer`);
/// looked at once the host waits for the device.
pub struct DeferredCheck {
    read: Event,
    /// The first staged read enqueued after the compute (readback.rs):
    /// reads from it on read again where the compute runs again.
    pub reads_from: u64,
    compute: Arc<dyn RunAgain>,
}

impl DeferredCheck {
    /// After the queue drained: runs the compute again where a wait gave
    /// up; whether it did.
    pub fn settle(self) -> Result<bool> {
        self.read
            .wait()
            .cl("clWaitForEvents (the failure record)")?;
        self.compute.clone().run_again()
    }
}

impl Drop for DeferredCheck {
    fn drop(&mut self) {
        // The read in flight writes into the compute's pinned record: let
        // it land first.
        let _ = self.read.wait();
    }
}

impl Drop for Chains {
    fn drop(&mut self) {
        // The read in flight writes into `record_host`: let it land first.
        if let Some(read) = self.pending.get_mut().take() {
            let _ = read.wait();
        }
    }
}

impl Chains {
    /// Finds the chains of `launches` (maximal runs of launches that
    /// `eligible` admits, each of an odd count of at least 3) and binds each
    /// chained launch to its program's hand-off variant with its slots;
    /// None where there is none or the device runs no hand-off.
    pub fn build(
        device: &Device,
        launches: &mut [Launch],
        eligible: impl Fn(usize) -> bool,
    ) -> Result<Option<Chains>> {
        let mode = mode(device);
        if mode == Handoff::Off {
            return Ok(None);
        }
        let cus = device.cl.max_compute_units().unwrap_or(1).max(1) as usize;
        let widest = crate::config::get().handoff_width.saturating_mul(cus);
        // Each launch's work-items where it may be chained (a kernel name
        // query each), None where not: the width rule and the runs read it.
        let mut widths: Vec<Option<usize>> = (0..launches.len())
            .map(|i| (eligible(i) && chainable(&launches[i])).then(|| work_items(&launches[i])))
            .collect();
        unchain_wide_last(&mut widths, widest);
        let candidate = |i: usize| widths[i].is_some();
        if let (Handoff::On, Some(w)) = (mode, too_wide(&widths, widest)) {
            crate::log::debug(&format!(
                "{}: no hand-off: a launch of {w} work-items, more than {widest} \
                 (POLYCL_HANDOFF_WIDTH a compute unit)",
                device.name
            ));
            return Ok(None);
        }
        let runs = chain_runs(launches.len(), candidate);
        // Chains broken by launches that are not chained cost more than
        // they gain: on the H100 the 1B with a q8_0 or q4_0 cache (a chain
        // of 5 a layer, when kernel_rope_rot_store_f32 was not chained)
        // decoded ~3% slower handed off, and 20% with chains of 3
        // (docs/perf.md step 84), while one chain a step gains: 5-7% with
        // an F16 cache, 8% with a q8_0 cache (step 85).
        if mode == Handoff::On && runs.len() > 1 {
            crate::log::debug(&format!(
                "{}: no hand-off: {} chains (launches that are not chained break them)",
                device.name,
                runs.len()
            ));
            return Ok(None);
        }
        let chained: usize = runs.iter().map(|r| r.len()).sum();
        if chained == 0 {
            return Ok(None);
        }
        let mut zeros = vec![0u32; chained + RECORD_WORDS];
        let counters = super::step::upload(device, &mut zeros)?;
        let base = super::addresses::resolve(device, &[counters.get()])?[0];
        let failure = base + 4 * chained as u64;
        let mut second = vec![false; launches.len()];
        let mut chained_launches = Vec::with_capacity(chained);
        let mut k = 0u64;
        for run in &runs {
            for (p, i) in run.clone().enumerate() {
                let name = launches[i].kernel.function_name().unwrap_or_default();
                chained_launches.push((i, name));
                let wait = if p == 0 { 0 } else { base + 4 * (k - 1) };
                let want = if p == 0 { 0 } else { groups(&launches[i - 1]) };
                let rewind_own = u64::from(p + 1 == run.len()) << 32;
                let slots = [wait, want | rewind_own, base + 4 * k, failure];
                rebind(device, &mut launches[i], slots)?;
                second[i] = p % 2 == 1;
                k += 1;
            }
        }
        crate::log::debug(&format!(
            "{}: hand-off ({mode:?}): {chained} of {} launches in {} chains",
            device.name,
            launches.len(),
            runs.len()
        ));
        let serial = mode == Handoff::Serial;
        if serial {
            second.fill(false);
        }
        Ok(Some(Chains {
            first: runs[0].start,
            second,
            serial,
            counters,
            counters_lo: base as u32,
            chained_launches,
            runs: AtomicU64::new(0),
            pending: Mutex::new(None),
            record_host: device.pinned(std::mem::size_of::<FailureRecord>())?,
        }))
    }

    /// Whether launch `i` goes to the second queue: never once a wait gave
    /// up on `device` (`gave_up`), where the chained launches of every plan
    /// run on one queue and each launch's wait is met before it starts.
    pub fn on_second(&self, i: usize, gave_up: bool) -> bool {
        self.second[i] && !gave_up
    }

    /// Whether launch `i` is flushed on its own as soon as it is enqueued:
    /// a chained launch on two queues. Flushed in batches, a queue's later
    /// launches reached the device before the other queue's launches they
    /// wait for, whenever the host paused between the two flushes for
    /// longer than a launch runs; their groups then held the places that
    /// those launches needed, and waits gave up (H200, 1B: 1 run in 20 of
    /// llama-bench failed, docs/perf.md step 86). On a quiet H100 it cost the
    /// 1B nothing measurable (step 87).
    pub fn flushes_each(&self, i: usize, gave_up: bool) -> bool {
        !self.serial
            && !gave_up
            && self
                .chained_launches
                .binary_search_by_key(&i, |(at, _)| *at)
                .is_ok()
    }

    /// Whether every run reads the failure record (`POLYCL_HANDOFF_CHECK=1`,
    /// the default): a wait that gave up is then found before the host
    /// reads the run's results (`defer`), and the run goes again in order.
    pub fn checks_each(&self) -> bool {
        crate::config::get().handoff_check_every == 1
    }

    /// What went wrong if a wait of the runs so far gave up, after which
    /// the counters start again from zero (`give_up` says what the device
    /// does next); for the runs that `defer` does not take (a plan that
    /// may not run again, a second run, `POLYCL_HANDOFF_CHECK` above 1).
    /// Every `POLYCL_HANDOFF_CHECK`-th run reads the failure
    /// record: waiting where that is every run or in the serial form (on
    /// one queue no wait gives up but behind a launch that never arrived:
    /// tests), so the record is the run's just enqueued; otherwise without
    /// waiting, and a later run looks at what came back, so a wait that
    /// gave up (a launch that could not get places beside the one waiting
    /// for it) fails a compute a few runs later.
    pub fn check(&self, device: &Device) -> Result<Option<String>> {
        let every = crate::config::get().handoff_check_every;
        if !self
            .runs
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(every)
        {
            return Ok(None);
        }
        let [failed, polled] = if self.serial || self.checks_each() {
            self.failures(device)?
        } else {
            let mut pending = self.pending.lock();
            let mut record = [0; RECORD_WORDS];
            if let Some(read) = pending.as_ref() {
                let status = read.command_execution_status().map(|s| s.0);
                if status != Ok(opencl3::event::CL_COMPLETE) {
                    return Ok(None);
                }
                record = self.landed();
                *pending = None;
            }
            if record[0] == 0 {
                *pending = Some(self.read_failures(device)?);
            }
            record
        };
        self.gave_up(device, [failed, polled])
    }

    /// What went wrong where `record` says waits gave up, after which the
    /// counters start again from zero; None where none did.
    pub fn gave_up(&self, device: &Device, record: FailureRecord) -> Result<Option<String>> {
        let [failed, polled] = record;
        if failed == 0 {
            return Ok(None);
        }
        // A launch behind a wait that gave up may still run on the second
        // queue: its arrivals must land before the counters are zeroed.
        if let Some(Ok(second)) = device.second.get() {
            second.finish().cl("clFinish")?;
        }
        let zeros = vec![0u32; self.chained_launches.len() + RECORD_WORDS];
        super::addresses::write_blocking(device, self.counters.get(), &zeros)?;
        Ok(Some(format!(
            "{}: {failed} hand-off waits gave up on the launch before theirs{}",
            device.name,
            waiter_text(&self.chained_launches, self.counters_lo, polled)
        )))
    }

    /// Reads the failure record behind the run just enqueued on `device`,
    /// without waiting; the host's next wait for the device looks at it
    /// (`Device::synchronize`), and `compute` runs again there if a wait
    /// gave up. The host waits for a decode step's logits anyway: a wait
    /// for the record alone, behind every compute, cost the 1B 1.5-2.0%
    /// (H100, docs/perf.md step 87).
    pub fn defer(&self, device: &Device, compute: Arc<dyn RunAgain>) -> Result<()> {
        let read = self.read_failures(device)?;
        let check = DeferredCheck {
            read,
            reads_from: device.next_readback(),
            compute,
        };
        // The one before was looked at before this run began (`Device::settle`).
        *device.deferred_check.lock().borrow_mut() = Some(check);
        Ok(())
    }

    /// Enqueues a read of the failure record into `record_host`, not
    /// waited for; one at a time (`check` keeps it until it completes,
    /// and a plan's next run settles its deferred check first).
    fn read_failures(&self, device: &Device) -> Result<Event> {
        // SAFETY: `record_host` holds a record and lives with these chains,
        // whose Drop waits for the read in flight, as does a deferred
        // check's, which keeps its plan and so these chains alive.
        let ev = unsafe {
            cq::enqueue_read_buffer(
                device.queue()?.get(),
                self.counters.get(),
                opencl3::types::CL_NON_BLOCKING,
                self.record_offset(),
                std::mem::size_of::<FailureRecord>(),
                self.record_host.ptr() as *mut c_void,
                0,
                std::ptr::null(),
            )
        }
        .map_err(|s| crate::error::Error::OpenCl("clEnqueueReadBuffer", s))?;
        Ok(Event::new(ev))
    }

    /// The record the last `read_failures` brought, once its event is
    /// complete.
    pub fn landed(&self) -> FailureRecord {
        let mut words = [0u32; RECORD_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            // SAFETY: `record_host` holds RECORD_WORDS aligned words, and
            // the read that wrote them is complete (the callers'); volatile,
            // as the device wrote them behind the compiler's back.
            *w = unsafe { std::ptr::read_volatile((self.record_host.ptr() as *const u32).add(i)) };
        }
        words
    }

    /// The failure record so far (blocking: the serial form).
    pub fn failures(&self, device: &Device) -> Result<FailureRecord> {
        let mut words = [0u32; RECORD_WORDS];
        super::addresses::read_blocking(
            device,
            self.counters.get(),
            self.record_offset(),
            &mut words,
        )?;
        Ok(words)
    }

    /// The failure record's byte offset: after one counter a chained launch.
    fn record_offset(&self) -> usize {
        4 * self.chained_launches.len()
    }
}

/// Names the launch whose wait polled the counter at low address `polled`
/// (a failure record's second word) and the one it waited on, from the
/// chained launches in counter order and the counters' low address.
fn waiter_text(chained_launches: &[(usize, String)], counters_lo: u32, polled: u32) -> String {
    let offset = polled.wrapping_sub(counters_lo);
    let k = (offset / 4) as usize;
    match (chained_launches.get(k), chained_launches.get(k + 1)) {
        (Some((i0, k0)), Some((i1, k1))) if offset.is_multiple_of(4) => {
            format!(", the last in launch {i1} ({k1}) waiting on launch {i0} ({k0})")
        }
        _ => String::new(),
    }
}

/// Whether `l` may be chained: a packed kernel outside `NOT_CHAINED` (so its
/// program has a hand-off variant), at a fixed work-group size (its groups
/// are counted from its grid).
fn chainable(l: &Launch) -> bool {
    l.packed.is_some()
        && !l.is_empty()
        && l.local.is_some()
        && l.kernel.function_name().is_ok_and(|n| {
            super::program::PACKED.contains(&n.as_str()) && !NOT_CHAINED.contains(&n.as_str())
        })
}

/// The first width over `widest` among a plan's chainable launches
/// (`widths`: a chainable launch's work-items, None for the others) but
/// its last launch (the lm head, which no one waits on), if any: then the
/// plan gets no hand-off. Where a launch that another waits on is wider
/// than the device holds at once, its later groups find places held by the
/// next launch's waiting ones (the 7B's Q/K/V launch, docs/perf.md step
/// 63), and a chain broken there lets the second queue run two launches
/// ahead. A wide launch followed by one that is not chainable counts too:
/// the 7B's runs of multi-wave launches were slower chained every way
/// measured (step 63), and with a quantized cache its Q/K/V launch was
/// followed by the then unchainable rope + rotation + cache write, so
/// counting only the launches a chained one waits on handed the 7B off
/// (step 82).
fn too_wide(widths: &[Option<usize>], widest: usize) -> Option<usize> {
    let but_last = widths.len().saturating_sub(1);
    widths[..but_last]
        .iter()
        .flatten()
        .copied()
        .find(|&w| w > widest)
}

/// Leaves a plan's last launch (the lm head) out of its chain where it is
/// wider than the device holds at once: its first groups would take every
/// place the launch it waits on has not yet filled, and on the H200 the
/// 1B's lm head (4000 groups) gave up 2960 waits in one run of twenty
/// (docs/perf.md step 86). Unchained, it runs on the device's queue after
/// the chain's last launch.
fn unchain_wide_last(widths: &mut [Option<usize>], widest: usize) {
    if let Some(last) = widths.last_mut() {
        if last.is_some_and(|w| w > widest) {
            *last = None;
        }
    }
}

/// The chains of `n` launches: maximal runs of those `candidate` admits,
/// each cut to an odd count (so that its last launch runs on the device's
/// queue) of at least 3.
fn chain_runs(n: usize, candidate: impl Fn(usize) -> bool) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < n {
        if !candidate(i) {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && candidate(i) {
            i += 1;
        }
        let start = if (i - start) % 2 == 0 {
            start + 1
        } else {
            start
        };
        if i - start >= 3 {
            runs.push(start..i);
        }
    }
    runs
}

/// Work-items of a launch.
fn work_items(l: &Launch) -> usize {
    l.global[..l.dims as usize].iter().product()
}

/// Work-groups of a launch with a fixed work-group size.
fn groups(l: &Launch) -> u64 {
    let local = l.local.unwrap_or([1, 1, 1]);
    (0..l.dims as usize)
        .map(|d| l.global[d].div_ceil(local[d].max(1)) as u64)
        .product()
}

/// Puts `l`'s kernel from its program's hand-off variant, its slots
/// behind the hand-off's `slots`, and binds it again.
fn rebind(device: &Device, l: &mut Launch, slots: [u64; SLOTS]) -> Result<()> {
    let name = l.kernel.function_name().cl("clGetKernelInfo")?;
    let kernel = super::program::kernel(device, variant_of(&name), &name)?;
    let Some(packed) = l.packed.take() else {
        return Err(crate::error::Error::Unsupported(format!(
            "{name}: a chained launch without packed slots"
        )));
    };
    let mut all = slots.to_vec();
    all.extend_from_slice(&packed.slots);
    l.packed = Some(super::executor::bind_packed(
        device,
        &kernel,
        packed.mems,
        packed.written,
        all,
    )?);
    l.kernel = kernel;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::program::{PACKED, PROGRAMS};
    use crate::runtime::DeviceBuffer;

    /// A compute whose run again writes 5s where the host reads its
    /// results: `failed` says its record found a wait that gave up.
    struct Compute {
        buf: Arc<DeviceBuffer>,
        failed: bool,
        runs: AtomicU64,
    }

    impl RunAgain for Compute {
        fn run_again(self: Arc<Self>) -> Result<bool> {
            self.runs.fetch_add(1, Ordering::Relaxed);
            if self.failed {
                self.buf.write(0, &[5; 8])?;
            }
            Ok(self.failed)
        }
    }

    /// Leaves `compute`'s record for the host's next wait, as `defer` does,
    /// behind a staged read of its result.
    fn deferred(device: &Device, compute: &Arc<Compute>, out: &mut [u8; 8]) -> Result<()> {
        let reads_from = device.next_readback();
        // SAFETY: `out` outlives the test's synchronize, which lands the read.
        unsafe { compute.buf.read_async(0, out.as_mut_ptr(), out.len()) }?;
        let check = DeferredCheck {
            read: super::super::peer::marker(device)?,
            reads_from,
            compute: compute.clone(),
        };
        *device.deferred_check.lock().borrow_mut() = Some(check);
        Ok(())
    }

    /// The host's wait (a synchronize) runs a compute whose record says a
    /// wait gave up again before it returns, and the staged read behind the
    /// compute reads again, so the host gets the second run's bytes; with
    /// a clean record the read is the first run's. A write before any wait
    /// looks at the record first (`Device::settle`).
    #[test]
    fn the_hosts_wait_runs_a_failed_compute_again_and_reads_again() -> Result<()> {
        let devices =
            crate::runtime::device::devices().expect("an OpenCL device (install pocl-opencl-icd)");
        let device = &devices[0];
        for failed in [true, false] {
            let buf = DeviceBuffer::alloc(device, 64)?;
            buf.write(0, &[1; 8])?;
            let compute = Arc::new(Compute {
                buf,
                failed,
                runs: AtomicU64::new(0),
            });
            let mut out = [0u8; 8];
            deferred(device, &compute, &mut out)?;
            device.synchronize()?;
            assert_eq!(out, if failed { [5; 8] } else { [1; 8] });
            assert_eq!(compute.runs.load(Ordering::Relaxed), 1);
            let mut again = [0u8; 8];
            deferred(device, &compute, &mut again)?;
            compute.buf.write(8, &[2; 8])?;
            assert_eq!(compute.runs.load(Ordering::Relaxed), 2);
            assert!(device.deferred_check.lock().borrow().is_none());
        }
        Ok(())
    }

    /// A plan whose wide launch is followed by an unchainable one (the 7B
    /// with a quantized cache before step 85: Q/K/V, then the rope +
    /// rotation + cache write) gets no hand-off; its last launch (the lm
    /// head) may be wide.
    #[test]
    fn a_wide_chainable_launch_but_the_last_refuses_the_hand_off() {
        let widest = 1024 * 132;
        let one_b = [Some(26_624), None, Some(8_192), Some(65_536), Some(400_000)];
        assert_eq!(too_wide(&one_b, widest), None);
        let seven_b = [Some(393_216), None, Some(16_384), Some(65_536), Some(8_192)];
        assert_eq!(too_wide(&seven_b, widest), Some(393_216));
        assert_eq!(too_wide(&[], widest), None);
    }

    /// The lm head wider than the device leaves the chain; one that fits,
    /// or a wide launch before the last, stays.
    #[test]
    fn only_a_wide_last_launch_leaves_the_chain() {
        let widest = 1024 * 132;
        let mut one_b = [None, Some(26_624), Some(8_192), Some(400_000)];
        unchain_wide_last(&mut one_b, widest);
        assert_eq!(one_b, [None, Some(26_624), Some(8_192), None]);
        let mut narrow = [Some(400_000), Some(8_192)];
        unchain_wide_last(&mut narrow, widest);
        assert_eq!(narrow, [Some(400_000), Some(8_192)]);
        unchain_wide_last(&mut [], widest);
    }

    /// A decode step's chains: one over a step whose first launch, the
    /// norm, is not chained, and one a layer where a launch that is not
    /// chained breaks every layer (as a quantized cache's rope and rotation
    /// did before step 85), which `Chains::build` then does not hand off.
    #[test]
    fn chains_are_odd_runs_of_three_or_more() {
        let f16_step = |i: usize| i > 0;
        assert_eq!(chain_runs(32, f16_step), vec![1..32]);
        // Layers of 6 launches whose second is not chained: runs of 5.
        let broken = |i: usize| i > 0 && i % 6 != 1;
        assert_eq!(chain_runs(6 * 3 + 2, broken), vec![2..7, 8..13, 14..19]);
        // A run of 4 is cut to its last 3.
        assert_eq!(chain_runs(5, |i| i > 0), vec![2..5]);
        assert_eq!(
            chain_runs(4, |i| i != 2),
            Vec::<std::ops::Range<usize>>::new()
        );
    }

    /// A failure record's counter address names the launch that waited on
    /// it (the next in the chain); an address that is no chained launch's
    /// counter, or whose waiter is not in the chain, names none.
    #[test]
    fn a_failure_record_names_the_waiting_launch() {
        let chain: Vec<(usize, String)> = [(1, "a"), (2, "b"), (3, "c")]
            .iter()
            .map(|(i, n)| (*i, n.to_string()))
            .collect();
        let lo = 0xffff_fff8u32; // the counters' low half may wrap
        assert_eq!(
            waiter_text(&chain, lo, lo.wrapping_add(4)),
            ", the last in launch 3 (c) waiting on launch 2 (b)"
        );
        assert_eq!(
            waiter_text(&chain, lo, lo),
            ", the last in launch 2 (b) waiting on launch 1 (a)"
        );
        assert_eq!(waiter_text(&chain, lo, lo.wrapping_add(8)), "");
        assert_eq!(waiter_text(&chain, lo, lo.wrapping_add(2)), "");
        assert_eq!(waiter_text(&chain, lo, lo.wrapping_sub(4)), "");
    }

    /// Every packed kernel that may be chained is in its hand-off variant's
    /// program: one missing from `NOT_CHAINED` failed the 1B's decode on the
    /// H100, whose launches are chained (session 48).
    #[test]
    fn chained_kernels_are_in_their_variant_programs() {
        for name in PACKED.iter().filter(|n| !NOT_CHAINED.contains(n)) {
            let program = variant_of(name).strip_suffix(VARIANT).unwrap();
            let (_, sources) = PROGRAMS.iter().find(|(p, _)| *p == program).unwrap();
            assert!(
                sources.contains(&crate::runtime::program::HANDOFF),
                "{program}"
            );
            assert!(
                sources.iter().any(|s| s.contains(name)),
                "{name} is not in program {program}"
            );
        }
    }
}
