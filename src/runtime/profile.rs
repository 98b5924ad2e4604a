//! `POLYCL_PROFILE=1`: GPU time per kernel from OpenCL profiling events,
//! because vendor profilers (Nsight Compute) do not see OpenCL kernels. Each
//! launch keeps its event; after a graph compute the queue is drained (which
//! serializes host and device: use it to see where GPU time goes, not to
//! measure tokens per second) and one log line sums the kernels' device time
//! by name, next to the span from the first kernel's start to the last one's
//! end (span minus busy = the GPU waiting for the host).
//!
//! `POLYCL_PROFILE=span`: only each compute's first and last launch get an
//! event and nothing is drained or waited for, so the run keeps its speed.
//! The line for a compute comes once its last kernel has ended, at a later
//! compute (in decode, the next: llama has read its logits by then), and
//! says where a token's time goes: the GPU's span, and the GPU's idle time
//! before it since the compute before ended (the host's time between
//! tokens: its own work, the read-back, the inputs' writes, polycl's graph
//! lookup and the first enqueue).

use crate::config::Profile;
use crate::log;
use opencl3::event::{Event, CL_COMPLETE};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

static PENDING: Mutex<Vec<(String, Event)>> = Mutex::new(Vec::new());

/// Every launch keeps its event (`POLYCL_PROFILE=1`).
pub fn per_kernel() -> bool {
    crate::config::get().profile == Profile::Kernels
}

/// Each compute's first and last launch keep theirs (`POLYCL_PROFILE=span`).
pub fn span() -> bool {
    crate::config::get().profile == Profile::Span
}

/// Whether queues record profiling times at all.
pub fn any() -> bool {
    matches!(
        crate::config::get().profile,
        Profile::Kernels | Profile::Span
    )
}

/// What the host did between two computes (`POLYCL_PROFILE=span`): the
/// ggml entries that move data or wait, timed, and when the last wait
/// returned and the next graph compute began.
#[derive(Default, Clone, Copy)]
pub struct HostGap {
    /// (calls, time inside them) of each HostCall, in its order.
    pub calls: [(u32, Duration); 5],
    pub first_wait_return: Option<Instant>,
    pub last_wait_return: Option<Instant>,
    pub compute_entry: Option<Instant>,
}

/// The ggml entries `HostGap` times.
#[derive(Clone, Copy)]
pub enum HostCall {
    SetTensor = 0,
    GetTensor = 1,
    Synchronize = 2,
    /// Not a wait: the read is enqueued (runtime/readback.rs).
    GetTensorAsync = 3,
    /// ggml's graph_optimize of each split (backend/optimize.rs), host
    /// work of llama's between two computes.
    GraphOptimize = 4,
}

static HOST_GAP: Mutex<Option<HostGap>> = Mutex::new(None);

/// Runs `f`, timed into the host gap when `POLYCL_PROFILE=span`.
pub fn host_call<T>(kind: HostCall, f: impl FnOnce() -> T) -> T {
    if !span() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    let mut g = HOST_GAP.lock();
    let g = g.get_or_insert_with(HostGap::default);
    let c = &mut g.calls[kind as usize];
    c.0 += 1;
    c.1 += t.elapsed();
    if matches!(kind, HostCall::GetTensor | HostCall::Synchronize) {
        let now = Instant::now();
        g.first_wait_return.get_or_insert(now);
        g.last_wait_return = Some(now);
    }
    r
}

/// Marks a graph compute's entry (`POLYCL_PROFILE=span`).
pub fn compute_entered() {
    if span() {
        HOST_GAP
            .lock()
            .get_or_insert_with(HostGap::default)
            .compute_entry = Some(Instant::now());
    }
}

/// One compute of `POLYCL_PROFILE=span`, reported at the next.
pub struct Span {
    pub first: Event,
    /// When the first launch was enqueued, on the host's clock.
    pub first_enqueued: Instant,
    pub last: Option<Event>,
    pub launches: u64,
    pub enqueue_us: f64,
    /// The host's time since the compute before.
    pub gap: HostGap,
}

/// Takes the host gap collected since the last compute.
pub fn take_host_gap() -> HostGap {
    HOST_GAP.lock().take().unwrap_or_default()
}

/// Per device (its clock is its own): its computes awaiting their lines, in
/// order, and the device time the last one logged ended. With several
/// devices the host's calls (`HostGap`) go to whichever device computes next.
static SPAN: Mutex<Vec<DeviceSpans>> = Mutex::new(Vec::new());

struct DeviceSpans {
    device: String,
    pending: VecDeque<Span>,
    logged_end: Option<u64>,
}

/// Keeps `device`'s compute `this`, then logs its computes whose last kernel
/// has ended, oldest first. Nothing waits: a host that pipelines computes
/// (prompt ubatches) gets their lines later. In decode, where llama reads
/// each step's logits, the line of a step comes at the next.
pub fn span_next(device: &str, this: Option<Span>) {
    let mut all = SPAN.lock();
    let at = match all.iter().position(|d| d.device == device) {
        Some(i) => i,
        None => {
            all.push(DeviceSpans {
                device: device.to_string(),
                pending: VecDeque::new(),
                logged_end: None,
            });
            all.len() - 1
        }
    };
    let d = &mut all[at];
    d.pending.extend(this);
    while let Some(prev) = d.pending.front() {
        let last = prev.last.as_ref().unwrap_or(&prev.first);
        match last.command_execution_status() {
            Ok(s) if s.0 == CL_COMPLETE => {}
            Ok(s) if s.0 >= 0 => break,
            _ => {
                log::warn(&format!("{device}: span: a compute ended with an error"));
                d.pending.pop_front();
                continue;
            }
        }
        let times = (|| {
            Some((
                prev.first.profiling_command_queued().ok()?,
                prev.first.profiling_command_start().ok()?,
                last.profiling_command_end().ok()?,
            ))
        })();
        match times {
            Some((queued, start, end)) => {
                log::info(&format!(
                    "{device}: span: {} launches, enqueued in {:.1} us, first kernel started {:.1} us after its enqueue, GPU span {:.1} us{}",
                    prev.launches,
                    prev.enqueue_us,
                    us_between(queued, start),
                    us_between(start, end),
                    d.logged_end.map_or(String::new(), |e| gap_text(prev, queued, start, e)),
                ));
                d.logged_end = Some(end);
            }
            None => log::warn(&format!("{device}: span: no profiling times")),
        }
        d.pending.pop_front();
    }
}

fn us_between(a: u64, b: u64) -> f64 {
    b.saturating_sub(a) as f64 / 1e3
}

/// The GPU's idle time before compute `s` (first kernel queued and started
/// at device times `queued` and `start`; the compute before ended at
/// `prev_end`) and the host's part of it. The device clock is mapped to the
/// host's through the first launch: queued there at `s.first_enqueued`.
fn gap_text(s: &Span, queued: u64, start: u64, prev_end: u64) -> String {
    let mut t = format!(", GPU idle {:.1} us before it", us_between(prev_end, start));
    let g = &s.gap;
    let host_us = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e6;
    let signed_us = |a: Instant, b: Instant| host_us(a, b) - host_us(b, a);
    let before = Duration::from_nanos(queued.saturating_sub(prev_end));
    if let (Some(prev_end_host), Some(entry)) =
        (s.first_enqueued.checked_sub(before), g.compute_entry)
    {
        if let (Some(first), Some(last)) = (g.first_wait_return, g.last_wait_return) {
            t += &format!(
                "; the host's waits returned {:.1} us (first) and {:.1} us (last) after the GPU ended",
                signed_us(prev_end_host, first),
                signed_us(prev_end_host, last)
            );
            t += &format!(", then {:.1} us to the graph compute", host_us(last, entry));
        }
        t += &format!(
            ", and {:.1} us to its first enqueue",
            host_us(entry, s.first_enqueued)
        );
    }
    let [set, get, sync, get_async, optimize] = g.calls;
    t += &format!(
        "; set_tensor {} in {:.1} us, get_tensor {} in {:.1} us, synchronize {} in {:.1} us",
        set.0,
        set.1.as_secs_f64() * 1e6,
        get.0,
        get.1.as_secs_f64() * 1e6,
        sync.0,
        sync.1.as_secs_f64() * 1e6
    );
    t += &format!(
        ", get_tensor_async {} in {:.1} us, graph_optimize {} in {:.1} us",
        get_async.0,
        get_async.1.as_secs_f64() * 1e6,
        optimize.0,
        optimize.1.as_secs_f64() * 1e6
    );
    t
}

/// Keeps a launch's event until the compute's report (`POLYCL_PROFILE=1`).
pub fn record(kernel: String, ev: Event) {
    PENDING.lock().push((kernel, ev));
}

/// Logs the kernels recorded since the last report; the caller has drained
/// the queue, so every event is complete. Per kernel name: its device time
/// (end minus start, which overstates a short kernel by ~5 us on the H200,
/// docs/perf.md step 15) and its cost in the chain (the next launch's start
/// minus its own: what it adds to the compute while the GPU never waits for
/// the host), ordered by the latter.
pub fn report(device: &str) {
    let pending = std::mem::take(&mut *PENDING.lock());
    let times: Vec<(&str, u64, u64)> = pending
        .iter()
        .filter_map(|(name, ev)| {
            let s = ev.profiling_command_start().ok()?;
            let e = ev.profiling_command_end().ok()?;
            Some((name.as_str(), s, e.max(s)))
        })
        .collect();
    let (Some(first), Some(last)) = (times.first(), times.last()) else {
        return;
    };
    // (device time, chain time, launches) by name.
    let mut by_name: HashMap<&str, (u64, u64, usize)> = HashMap::new();
    let (mut busy, mut waited) = (0u64, 0u64);
    for (i, &(name, s, e)) in times.iter().enumerate() {
        let next = times.get(i + 1).map_or(e, |t| t.1.max(s));
        busy += e - s;
        waited += times.get(i + 1).map_or(0, |t| t.1.saturating_sub(e));
        let t = by_name.entry(name).or_default();
        t.0 += e - s;
        t.1 += next - s;
        t.2 += 1;
    }
    let mut top: Vec<_> = by_name.into_iter().collect();
    top.sort_by_key(|t| std::cmp::Reverse(t.1 .1));
    let us = |t: u64| t as f64 / 1e3;
    let kernels: Vec<String> = top
        .iter()
        .take(12)
        .map(|(n, (t, chain, c))| format!("{n} {:.1} us, chain {:.1} us ({c})", us(*t), us(*chain)))
        .collect();
    log::info(&format!(
        "{device}: profile: {} kernels, busy {:.1} us, span {:.1} us, idle between kernels {:.1} us; {}",
        pending.len(),
        us(busy),
        us(last.2.saturating_sub(first.1)),
        us(waited),
        kernels.join(", ")
    ));
}
