//! `POLYCL_PROFILE=1`: GPU time per kernel from OpenCL profiling events,
//! because vendor profilers (Nsight Compute) do not see OpenCL kernels. Each
//! launch keeps its event; after a graph compute the queue is drained (which
//! serializes host and device: use it to see where GPU time goes, not to
//! measure tokens per second) and one log line sums the kernels' device time
//! by name, next to the span from the first kernel's start to the last one's
//! end (span minus busy = the GPU waiting for the host).

use crate::log;
use opencl3::event::Event;
use parking_lot::Mutex;
use std::collections::HashMap;

static PENDING: Mutex<Vec<(String, Event)>> = Mutex::new(Vec::new());

pub fn enabled() -> bool {
    crate::config::get().profile
}

/// Keeps a launch's event until the compute's report.
pub fn record(kernel: String, ev: Event) {
    PENDING.lock().push((kernel, ev));
}

/// Logs the kernels recorded since the last report; the caller has drained
/// the queue, so every event is complete.
pub fn report(device: &str) {
    let pending = std::mem::take(&mut *PENDING.lock());
    if pending.is_empty() {
        return;
    }
    let mut by_name: HashMap<String, (u64, usize)> = HashMap::new();
    let (mut first, mut last, mut busy) = (u64::MAX, 0u64, 0u64);
    for (name, ev) in &pending {
        let (Ok(s), Ok(e)) = (ev.profiling_command_start(), ev.profiling_command_end()) else {
            continue;
        };
        let d = e.saturating_sub(s);
        first = first.min(s);
        last = last.max(e);
        busy += d;
        let t = by_name.entry(name.clone()).or_default();
        t.0 += d;
        t.1 += 1;
    }
    let mut top: Vec<_> = by_name.into_iter().collect();
    top.sort_by_key(|t| std::cmp::Reverse(t.1 .0));
    let kernels: Vec<String> = top
        .iter()
        .take(10)
        .map(|(n, (t, c))| format!("{n} {:.1} us ({c})", *t as f64 / 1e3))
        .collect();
    log::info(&format!(
        "{device}: profile: {} kernels, busy {:.1} us, span {:.1} us; {}",
        pending.len(),
        busy as f64 / 1e3,
        last.saturating_sub(first) as f64 / 1e3,
        kernels.join(", ")
    ));
}
