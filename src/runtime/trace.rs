//! `POLYCL_PROFILE=groups`: a timeline of every work-group of the decode
//! kernels, read from the GPU's own clock (kernels/trace.cl), because
//! profiling events see a launch only as a whole: not when its groups
//! start, how long its last ones trail behind the first, or, with the
//! hand-off (handoff.rs), how long its groups wait and how far they overlap
//! the launch before. NVIDIA only (%globaltimer, %smid), and only where the
//! kernels take buffers by address (addresses.rs), which gives the trace
//! buffer's address to the programs' build options; the traced programs are
//! built cold and not cached on disk (that address is the run's own).
//!
//! After each graph compute the queue is drained and one log line per
//! kernel name sums its launches (as `POLYCL_PROFILE=1` does), then one
//! line per launch of the compute's first `DETAIL` launches. Times are
//! us, relative to the compute's first group's start:
//! - `gap`: the launch's first group start minus the launch before's last
//!   group end (negative where they overlap);
//! - `starts`: its last group start minus its first (the launch's waves);
//! - `tail`: its last group end minus its first group end;
//! - `group`: the mean group's run, start to end, and `wait` the mean hand-off
//!   wait inside it;
//! - `sms`: the SMs its groups ran on; `SM groups`: the most groups one SM
//!   ran and the mean over the SMs used; `SM end p50`: the median SM's last
//!   group end after the launch's first start. Where the launch's span is
//!   well past it, a few SMs that ran more groups than the rest end it.

use super::device::Device;
use crate::error::{ClContext, Error, Result};
use crate::log;
use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::types::cl_mem;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ptr;

/// The build option that holds the trace buffer's address (trace.cl), which
/// also marks a program built for this run alone (program.rs: not cached).
pub(crate) const ADDRESS_DEFINE: &str = "POLYCL_TRACE_AT";
/// Records the buffer holds; more are counted, not written.
const CAPACITY: usize = 1 << 20;
/// Bytes of a record (trace.cl: four ulongs) and of the header before them.
const RECORD: usize = 32;
/// Launches of each compute described one by one, after the sums by name.
const DETAIL: usize = 12;

/// A device's trace buffer and its device address.
pub struct Trace {
    buffer: Buffer<u8>,
    address: u64,
}

/// The launches of the compute being traced: kernel name and slots buffer
/// (its cl_mem as an integer: a handle, never dereferenced here).
static LAUNCHES: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

/// Whether this run traces groups at all.
pub fn on() -> bool {
    crate::config::get().profile == crate::config::Profile::Groups
}

/// The trace `device` writes to, made at its first use; None where the
/// device cannot trace (the log says why, once).
fn trace(device: &Device) -> Option<&Trace> {
    device
        .trace
        .get_or_init(|| {
            let made = (|| -> Result<Trace> {
                if !device.nvidia_ptx() {
                    return Err(Error::Unsupported(
                        "the group trace reads NVIDIA's %globaltimer".into(),
                    ));
                }
                if !super::addresses::on(device) {
                    return Err(Error::Unsupported(
                        "the group trace needs buffers by address".into(),
                    ));
                }
                // SAFETY: no host pointer; the buffer is filled before use.
                let buffer = unsafe {
                    Buffer::<u8>::create(
                        &device.context,
                        CL_MEM_READ_WRITE,
                        RECORD * (CAPACITY + 1),
                        ptr::null_mut(),
                    )
                }
                .cl("clCreateBuffer")?;
                let address = super::addresses::resolve(device, &[buffer.get()])?[0];
                let t = Trace { buffer, address };
                t.rewind(device)?;
                Ok(t)
            })();
            made.map_err(|e| log::warn(&format!("{}: no group trace: {e}", device.name)))
                .ok()
        })
        .as_ref()
}

impl Trace {
    /// Sets the count of records written back to 0.
    fn rewind(&self, device: &Device) -> Result<()> {
        super::addresses::write_blocking(device, self.buffer.get(), &[0u32])
    }
}

/// The build options of a traced program for `device` (empty where it is
/// not traced): the buffer's address and capacity.
pub fn build_defines(device: &Device) -> String {
    if !on() {
        return String::new();
    }
    trace(device).map_or_else(String::new, |t| {
        format!(
            "-D{ADDRESS_DEFINE}={:#x}ul -DPOLYCL_TRACE_CAP={CAPACITY}u",
            t.address
        )
    })
}

/// Keeps a launch's name and slots for the compute's report.
pub fn record_launch(name: String, slots: cl_mem) {
    LAUNCHES.lock().push((name, slots as usize));
}

/// One launch's groups, summed from its records.
#[derive(Default, Clone)]
struct Groups {
    count: usize,
    first_start: u64,
    last_start: u64,
    first_end: u64,
    last_end: u64,
    run: u64,
    wait: u64,
    /// Per SM (trace.cl keeps 8 bits of its id): groups run there and the
    /// last one's end. A launch whose groups pile up on some SMs ends when
    /// those do, whatever the others' share.
    per_sm: Vec<(u32, u64)>,
}

impl Groups {
    fn add(&mut self, start: u64, end: u64, sm: usize, wait: u64) {
        if self.count == 0 {
            (self.first_start, self.last_start) = (start, start);
            (self.first_end, self.last_end) = (end, end);
        }
        self.count += 1;
        self.first_start = self.first_start.min(start);
        self.last_start = self.last_start.max(start);
        self.first_end = self.first_end.min(end);
        self.last_end = self.last_end.max(end);
        self.run += end.saturating_sub(start);
        self.wait += wait;
        if self.per_sm.len() <= sm {
            self.per_sm.resize(sm + 1, (0, 0));
        }
        let on_sm = &mut self.per_sm[sm];
        on_sm.0 += 1;
        on_sm.1 = on_sm.1.max(end);
    }

    fn sms(&self) -> usize {
        self.per_sm.iter().filter(|s| s.0 > 0).count()
    }
}

/// Figures a launch has, in the order `figures` gives them.
const FIGURES: usize = 9;

/// Per launch: gap, starts, tail, span, mean group run and mean wait (us),
/// then the most groups one SM ran, the mean of the SMs used, and the
/// median SM's last end (us after the launch's first start: against the
/// span, how far the last SMs trail).
fn figures(g: &Groups, prev_end: Option<u64>) -> [f64; FIGURES] {
    let us = |ns: i64| ns as f64 / 1e3;
    let n = g.count.max(1) as f64;
    let mut ends: Vec<u64> = g.per_sm.iter().filter(|s| s.0 > 0).map(|s| s.1).collect();
    ends.sort_unstable();
    let median_end = ends.get(ends.len() / 2).copied().unwrap_or(g.first_start);
    [
        prev_end.map_or(0.0, |p| us(g.first_start as i64 - p as i64)),
        us((g.last_start - g.first_start) as i64),
        us((g.last_end - g.first_end) as i64),
        us((g.last_end - g.first_start) as i64),
        g.run as f64 / n / 1e3,
        g.wait as f64 / n / 1e3,
        g.per_sm.iter().map(|s| s.0).max().unwrap_or(0) as f64,
        n / ends.len().max(1) as f64,
        us(median_end.saturating_sub(g.first_start) as i64),
    ]
}

/// Logs the compute's launches from their groups' records and rewinds the
/// buffer; the caller has drained the queue.
pub fn report(device: &Device) -> Result<()> {
    let launches = std::mem::take(&mut *LAUNCHES.lock());
    let Some(t) = trace(device) else {
        return Ok(());
    };
    let mut head = [0u8; 4];
    super::addresses::read_blocking(device, t.buffer.get(), 0, &mut head)?;
    let written = u32::from_ne_bytes(head) as usize;
    let kept = written.min(CAPACITY);
    let mut raw = vec![0u8; kept * RECORD];
    if kept > 0 {
        // Inside the buffer: at most CAPACITY records after the header.
        super::addresses::read_blocking(device, t.buffer.get(), RECORD, &mut raw)?;
    }
    t.rewind(device)?;
    // The slots' addresses name the launches.
    let mems: Vec<cl_mem> = launches.iter().map(|l| l.1 as cl_mem).collect();
    let addresses = if mems.is_empty() {
        Vec::new()
    } else {
        super::addresses::resolve(device, &mems)?
    };
    let named: Vec<(&str, u64)> = launches
        .iter()
        .zip(addresses)
        .map(|(l, a)| (l.0.as_str(), a))
        .collect();
    if written > kept {
        log::warn(&format!(
            "{}: groups: {written} records, the first {kept} kept",
            device.name
        ));
    }
    for line in summarize(&raw, &named) {
        log::info(&format!("{}: groups: {line}", device.name));
    }
    Ok(())
}

/// The report's lines from the records in `raw` (trace.cl's layout) and the
/// compute's launches in enqueue order (kernel name, slots address): one
/// line of sums by kernel name, then one a launch for the first `DETAIL`.
fn summarize(raw: &[u8], launches: &[(&str, u64)]) -> Vec<String> {
    let mut by_pk: HashMap<u64, Groups> = HashMap::new();
    let records = raw.len() / RECORD;
    for r in raw.chunks_exact(RECORD) {
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&r[8 * i..8 * i + 8]);
            u64::from_ne_bytes(b)
        };
        let (start, end, pk, packed) = (word(0), word(1), word(2), word(3));
        let sm = ((packed >> 24) & 0xFF) as usize;
        by_pk
            .entry(pk)
            .or_default()
            .add(start, end.max(start), sm, packed >> 32);
    }
    // By first start; a launch traced twice (POLYCL_PROFILE_TWICE) shows
    // once, one whose kernel has no PK_END not at all.
    let mut order: Vec<(&str, Groups)> = launches
        .iter()
        .filter_map(|&(name, a)| by_pk.remove(&a).map(|g| (name, g)))
        .collect();
    order.sort_by_key(|(_, g)| g.first_start);
    let Some(origin) = order.first().map(|(_, g)| g.first_start) else {
        return Vec::new();
    };
    let span_end = order
        .iter()
        .map(|(_, g)| g.last_end)
        .max()
        .unwrap_or(origin);
    let text = |f: &[f64; FIGURES]| {
        format!(
            "gap {:.2}, starts {:.2}, tail {:.2}, span {:.2}, group {:.2}, wait {:.2}, \
             SM groups max {:.1} mean {:.1}, SM end p50 {:.2}",
            f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]
        )
    };
    // Sums by name: launches, groups, and each figure.
    let mut sums: Vec<(&str, usize, usize, [f64; FIGURES])> = Vec::new();
    let mut detail = Vec::new();
    let mut prev_end = None;
    for (i, (name, g)) in order.iter().enumerate() {
        let f = figures(g, prev_end);
        prev_end = Some(g.last_end);
        match sums.iter_mut().find(|s| s.0 == *name) {
            Some(s) => {
                s.1 += 1;
                s.2 += g.count;
                for (sum, v) in s.3.iter_mut().zip(f) {
                    *sum += v;
                }
            }
            None => sums.push((name, 1, g.count, f)),
        }
        if i < DETAIL {
            detail.push(format!(
                "#{i} {name} at {:.2}: {} groups on {} SMs, {}",
                (g.first_start - origin) as f64 / 1e3,
                g.count,
                g.sms(),
                text(&f)
            ));
        }
    }
    let means: Vec<String> = sums
        .iter()
        .map(|(name, n, groups, f)| {
            let mean = f.map(|v| v / *n as f64);
            format!("{name} x{n} ({} groups): {}", groups / n, text(&mean))
        })
        .collect();
    let mut lines = vec![format!(
        "{} launches traced of {}, {records} records, span {:.1} us; means a launch, us: {}",
        order.len(),
        launches.len(),
        (span_end - origin) as f64 / 1e3,
        means.join("; ")
    )];
    lines.extend(detail);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(start: u64, end: u64, pk: u64, group: u64, sm: u64, wait: u64) -> Vec<u8> {
        [start, end, pk, group | sm << 24 | wait << 32]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect()
    }

    #[test]
    fn launches_are_summed_by_name_in_the_order_they_ran() {
        // Two launches of kernel a around one of b, the second a overlapping
        // b's tail (a hand-off) and waiting 300 ns in each group.
        let raw: Vec<u8> = [
            record(1_000, 3_000, 0x10, 0, 0, 0),
            record(1_200, 4_000, 0x10, 1, 1, 0),
            record(6_000, 9_000, 0x20, 0, 0, 0),
            record(8_500, 11_000, 0x30, 0, 1, 300),
            record(8_700, 12_000, 0x30, 1, 1, 300),
            // A launch of another compute: not named, not shown.
            record(1, 2, 0x99, 0, 0, 0),
        ]
        .concat();
        let lines = summarize(&raw, &[("a", 0x10), ("b", 0x20), ("a", 0x30), ("c", 0x40)]);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(
            lines[0].starts_with("3 launches traced of 4, 6 records, span 11.0 us"),
            "{}",
            lines[0]
        );
        // a: gaps 0 and -0.5, starts 0.2 both, tails 1.0 both, spans 3.0
        // and 3.5, group runs 2.4 and 2.9, waits 0 and 0.3.
        assert!(
            lines[0].contains(
                "a x2 (2 groups): gap -0.25, starts 0.20, tail 1.00, span 3.25, group 2.65, wait 0.15"
            ),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains("b x1 (1 groups): gap 2.00, starts 0.00, tail 0.00, span 3.00"),
            "{}",
            lines[0]
        );
        assert_eq!(
            lines[3],
            "#2 a at 7.50: 2 groups on 1 SMs, gap -0.50, starts 0.20, tail 1.00, span 3.50, \
             group 2.90, wait 0.30, SM groups max 2.0 mean 2.0, SM end p50 3.50"
        );
        assert!(summarize(&[], &[("a", 0x10)]).is_empty());
    }

    #[test]
    fn groups_piled_on_one_sm_show_as_its_late_end() {
        // SM 0 runs three groups one after another, SMs 1 and 2 one each.
        let raw: Vec<u8> = [
            record(0, 1_000, 0x10, 0, 0, 0),
            record(0, 1_000, 0x10, 1, 1, 0),
            record(0, 1_000, 0x10, 2, 2, 0),
            record(1_000, 2_000, 0x10, 3, 0, 0),
            record(2_000, 3_000, 0x10, 4, 0, 0),
        ]
        .concat();
        let lines = summarize(&raw, &[("a", 0x10)]);
        assert!(
            lines[1].ends_with(
                "span 3.00, group 1.00, wait 0.00, SM groups max 3.0 mean 1.7, SM end p50 1.00"
            ),
            "{}",
            lines[1]
        );
    }
}
