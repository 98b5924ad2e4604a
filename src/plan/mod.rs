//! Plans: IR lowered to kernel launches with arguments bound once, for one
//! device; cached by graph fingerprint so a decode step is a run of enqueues.

pub mod attn_o;
pub mod cache;
pub mod flash_attn;
pub mod fused_matmul;
pub mod fused_norm;
pub mod group_rope;
pub mod internal;
pub mod lower;
pub mod lower_state;
pub mod matmul_norm;
pub mod mul_mat;
pub mod mul_mv;
pub mod q8_cache;
pub mod request;
pub mod rerun;
pub mod rope_rot_store;
pub mod rope_store;

use crate::error::{Error, Result};
use crate::ir::{Graph, Place, Value};
use crate::runtime::executor::{Launch, Operand, LAUNCHES};
use crate::runtime::{Device, DeviceBuffer};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub struct Plan {
    pub device: Arc<Device>,
    pub launches: Vec<Launch>,
    /// Host buffers the launches read or write, kept alive with the plan.
    pub buffers: Vec<Arc<DeviceBuffer>>,
    /// Plan-owned memory (converted activations), reused step after step: the
    /// in-order queue finishes each consumer before the next producer runs.
    pub scratch: Option<DeviceBuffer>,
    pub free_epoch: u64,
    /// Q8_1 cache slots and the peer work of row-split matmuls.
    pub mm: mul_mat::MatmulState,
    /// Runs of launches that one launch replaces: for each launch index, the
    /// end of the run starting there and what runs it.
    pub merged: std::collections::HashMap<usize, (usize, Merged)>,
    /// Runs of launches handed off between two queues (runtime/handoff.rs).
    pub handoff: Option<crate::runtime::handoff::Chains>,
    /// How a compute whose hand-off wait gave up runs again before the
    /// host reads its results (rerun.rs); None where it may not, or where
    /// no wait can give up.
    rerun: Option<rerun::Rerun>,
}

impl crate::runtime::handoff::RunAgain for Plan {
    /// A run whose record the host's wait looked at (`Chains::defer`).
    fn run_again(self: Arc<Self>) -> Result<bool> {
        let Some(chains) = &self.handoff else {
            return Ok(false);
        };
        match chains.gave_up(&self.device, chains.landed())? {
            Some(gave_up) => self.after_give_up(gave_up, true).map(|()| true),
            None => Ok(false),
        }
    }
}

// SAFETY: a plan's OpenCL objects are handles that OpenCL lets any thread
// use, but for a kernel's arguments, which only a run sets. Its runs are one
// at a time: its backend's, which ggml makes from one thread at a time and
// which settle first (`Plan::run`), and the run again of a deferred check,
// made once that run has returned, under the device's lock that every
// settle takes (`Device::synchronize`).
unsafe impl Send for Plan {}
// SAFETY: as for Send.
unsafe impl Sync for Plan {}

/// One launch in place of a run of a plan's launches.
pub enum Merged {
    /// The step kernel (runtime/step.rs).
    Step(crate::runtime::step::Batch),
    /// An attention launch and the O projection's (attn_o.rs).
    AttnO(attn_o::Pair),
}

impl Merged {
    pub fn launch(&self) -> &Launch {
        match self {
            Merged::Step(b) => &b.launch,
            Merged::AttnO(p) => &p.launch,
        }
    }
}

/// Operand resolution while lowering.
pub struct Binder<'g> {
    pub graph: &'g Graph,
    pub device: Arc<Device>,
    buffers: BTreeMap<u64, Arc<DeviceBuffer>>,
    pub scratch: Option<(opencl3::types::cl_mem, usize)>,
    pub mm: mul_mat::MatmulState,
    /// Value -> Q8_1 cache slot of a matmul that reads it (through views that
    /// keep its memory and element order).
    q8_producers: std::collections::HashMap<Value, usize>,
}

/// Where a fused kernel writes the Q8_1 copy of its output: memory and byte
/// offset of packed 36-byte blocks, in the output's element order.
#[derive(Clone, Copy, Debug)]
pub struct Q8Target {
    pub mem: opencl3::types::cl_mem,
    pub offset: u64,
    /// The cache slot.
    pub slot: usize,
}

/// For every Q8_1 cache slot, the value whose kernel can write the copy: the
/// slot's source seen through views that keep its memory, element count and
/// contiguous layout.
fn q8_producers(
    graph: &Graph,
    mm: &mul_mat::MatmulState,
) -> std::collections::HashMap<Value, usize> {
    let mut out = std::collections::HashMap::new();
    for (slot, key) in mm.q8.keys().iter().enumerate() {
        let v = graph.reshaped_source(key.source);
        out.entry(v).or_insert(slot);
    }
    out
}

impl<'g> Binder<'g> {
    /// Where the kernel producing `v` should also write `v` as Q8_1 blocks, if
    /// a decode-shaped matmul reads it: the slot is then the producer's to
    /// fill and the matmul launches no quantize kernel. Call only when the
    /// kernel will write it.
    pub fn q8_target(&mut self, v: Value) -> Option<Q8Target> {
        let slot = *self.q8_producers.get(&v)?;
        if crate::plan::q8_cache::mode() == 0 || self.mm.q8.is_prefilled(slot) {
            return None;
        }
        let (mem, _) = self.scratch?;
        self.mm.q8.prefill(slot);
        Some(Q8Target {
            mem,
            offset: self.mm.q8.region(slot).0,
            slot,
        })
    }

    /// Keeps `buf` alive with the plan, which drops when it is freed.
    pub fn keep(&mut self, buf: Arc<DeviceBuffer>) {
        self.buffers.insert(buf.base, buf);
    }

    pub fn operand(&mut self, v: Value) -> Result<Operand> {
        let out = self.graph.output(v);
        match out.place {
            Place::Bound(m) => {
                let buf = match self.buffers.get(&m.buffer) {
                    Some(b) => b.clone(),
                    None => {
                        let b = DeviceBuffer::by_base(m.buffer).ok_or_else(|| {
                            Error::InvalidGraph(format!(
                                "value %{}:{} names a freed buffer (or a row-split weight outside MUL_MAT)",
                                v.node, v.port
                            ))
                        })?;
                        if !Arc::ptr_eq(&b.device, &self.device) {
                            return Err(Error::InvalidGraph(format!(
                                "tensor '{}' lives on {} but the graph runs on {}",
                                self.graph.nodes[v.node].name, b.device.name, self.device.name
                            )));
                        }
                        self.buffers.insert(m.buffer, b.clone());
                        b
                    }
                };
                let span = out.ty.span_bytes();
                if m.offset + span > buf.size as u64 {
                    return Err(Error::InvalidGraph(format!(
                        "tensor '{}' ({} bytes at offset {}) overruns its buffer of {} bytes",
                        self.graph.nodes[v.node].name, span, m.offset, buf.size
                    )));
                }
                Ok(Operand {
                    mem: buf.cl_mem() as _,
                    offset: m.offset,
                    ne: out.ty.ne,
                    nb: out.ty.nb,
                })
            }
            Place::Internal => Err(Error::Unsupported(format!(
                "value %{}:{} has no memory: unplaced tensors are not supported on this path",
                v.node, v.port
            ))),
        }
    }
}

/// Plans alive in the process (every backend's cache and every request):
/// a leak test asserts it stays bounded.
static LIVE_PLANS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub fn live_plans() -> usize {
    LIVE_PLANS.load(std::sync::atomic::Ordering::Relaxed)
}

impl Drop for Plan {
    fn drop(&mut self) {
        LIVE_PLANS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Plan {
    pub fn build(graph: &Graph, device: &Arc<Device>) -> Result<Plan> {
        let mm = mul_mat::MatmulState::new(graph, device);
        // Matmul activations first, then flash attention's split-KV partials,
        // then the matvec+norm counter.
        let fa_bytes = flash_attn::scratch_bytes(graph, device);
        let scratch_bytes = (mm.scratch_bytes() + fa_bytes).max(matmul_norm::scratch_end(
            graph,
            mm.scratch_bytes(),
            fa_bytes,
        ));
        let scratch = if scratch_bytes > 0 {
            Some(DeviceBuffer::alloc_scratch(device, scratch_bytes)?)
        } else {
            None
        };
        let q8_producers = q8_producers(graph, &mm);
        let mut binder = Binder {
            graph,
            device: device.clone(),
            buffers: BTreeMap::new(),
            scratch: scratch.as_ref().map(|s| (s.cl_mem() as _, s.size)),
            mm,
            q8_producers,
        };
        let mut launches = Vec::new();
        let _addresses = crate::runtime::addresses::BindScope::begin();
        for (i, n) in graph.nodes.iter().enumerate() {
            lower::lower(&mut binder, i, n, &mut launches)?;
        }
        // The hand-off chains the launches that a merge would replace (and
        // the merges read the slots it fills); the step kernel takes runs of
        // launches that a pair would split.
        let handoff =
            crate::runtime::handoff::Chains::build(device, &mut launches, |i| binder.mm.plain(i))?;
        let merged = if handoff.is_some() {
            Default::default()
        } else if crate::runtime::step::wanted() {
            crate::runtime::step::batches(device, &launches, |i| binder.mm.plain(i))?
                .into_iter()
                .map(|(start, end, batch)| (start, (end, Merged::Step(batch))))
                .collect()
        } else {
            attn_o::pairs(device, &launches, |i| binder.mm.plain(i))?
                .into_iter()
                .map(|(start, pair)| (start, (start + 2, Merged::AttnO(pair))))
                .collect()
        };
        LIVE_PLANS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Plan {
            merged,
            device: device.clone(),
            launches,
            buffers: binder.buffers.into_values().collect(),
            scratch,
            free_epoch: DeviceBuffer::free_epoch(),
            mm: binder.mm,
            rerun: match &handoff {
                Some(chains) if chains.checks_each() => rerun::Rerun::new(graph, device)?,
                _ => None,
            },
            handoff,
        })
    }

    /// Enqueues every launch; returns without waiting (ggml's compute is
    /// async) but where the hand-off's failure record is read behind it
    /// and the plan may not run again (`Chains::check`).
    pub fn run(self: &Arc<Self>) -> Result<()> {
        // The compute before may run again: not after this one has begun.
        self.device.settle()?;
        self.run_as(false)
    }

    /// `run`; `in_order`: the chained launches on one queue (a second run).
    fn run_as(self: &Arc<Self>, in_order: bool) -> Result<()> {
        let gave_up = in_order || self.device.handoff_gave_up.load(Ordering::Relaxed);
        if let Some(rerun) = self.rerun.as_ref().filter(|_| !gave_up) {
            rerun.save()?;
        }
        let mut s = self.mm.begin();
        // The device starts on a batch only once it is flushed: flushing every
        // few launches lets it run a token's first kernels while the host
        // enqueues the rest, instead of after the last one.
        let every = crate::config::get().flush_every;
        let mut since_flush = 0;
        // Whether the oldest launch not yet flushed went to the second queue.
        let mut oldest_on_second = false;
        let mut step_end = 0;
        // POLYCL_PROFILE=span: the first launch is timed, and each launch is
        // held back one iteration (enqueued at the top of the next, so the
        // order is unchanged) until the loop ends, where the last one is timed.
        // The enqueues' start, the launch count then and the host's gap since
        // the compute before: only where span asks, off the per-token path.
        let span = crate::runtime::profile::span().then(|| {
            let start = (std::time::Instant::now(), LAUNCHES.load(Ordering::Relaxed));
            (start, crate::runtime::profile::take_host_gap())
        });
        let mut first = None;
        let mut held: Option<(&Launch, bool)> = None;
        let second = |i: usize| (self.handoff.as_ref()).is_some_and(|c| c.on_second(i, gave_up));
        let flush_each =
            |i: usize| (self.handoff.as_ref()).is_some_and(|c| c.flushes_each(i, gave_up));
        // POLYCL_FAULT=handoff: a chain's first launch left out.
        let left_out = (self.handoff.as_ref())
            .filter(|_| crate::fault::handoff())
            .map(|c| c.first);
        for (i, l) in self.launches.iter().enumerate() {
            if let Some((h, on_second)) = held.take() {
                h.enqueue_at(&self.device, on_second)?;
            }
            let run = self.mm.before(&self.device, i, l, &mut s)?;
            let merged = self.merged.get(&i);
            let (l, run) = match merged {
                // Plain launches (MatmulState::plain): `run` is true for each.
                Some((end, m)) => {
                    step_end = *end;
                    (m.launch(), true)
                }
                None => (l, run && i >= step_end),
            };
            let run = run && left_out != Some(i);
            if run {
                if span.is_none() {
                    l.enqueue_at(&self.device, second(i))?;
                } else if first.is_none() {
                    let at = std::time::Instant::now();
                    first = l.enqueue_timed(&self.device, true)?.map(|e| (e, at));
                } else if !l.is_empty() {
                    // An empty launch enqueues nothing, so it has no event
                    // to time as the last.
                    held = Some((l, second(i)));
                }
                if since_flush == 0 {
                    oldest_on_second = second(i);
                }
                since_flush += 1;
                // A step launch is a run of launches: the device starts on
                // it at once. A pair counts as one launch. A chained launch
                // on two queues reaches the device after the one it waits
                // for only if each is flushed in turn (handoff.rs).
                let each = flush_each(i);
                if each && since_flush == 1 && span.is_none() {
                    // The one launch not yet flushed: its queue alone.
                    self.device.flush_queue(second(i))?;
                    since_flush = 0;
                } else if since_flush == every
                    || each
                    || matches!(merged, Some((_, Merged::Step(_))))
                {
                    self.device.flush_from(oldest_on_second)?;
                    since_flush = 0;
                }
            }
        }
        let last = match held {
            // The last launch of a plan with chains ends one on the first
            // queue (handoff.rs), where the span's events are.
            Some((h, _)) => h.enqueue_timed(&self.device, true)?,
            None => None,
        };
        self.mm.finish(&self.device, self.launches.len(), s)?;
        self.device
            .flush_from(since_flush > 0 && oldest_on_second)?;
        if let Some(chains) = &self.handoff {
            // A plan has a rerun only where every run's record is read.
            if !gave_up && self.rerun.is_some() {
                chains.defer(&self.device, self.clone())?;
            } else if let Some(gave_up) = chains.check(&self.device)? {
                return self.after_give_up(gave_up, false);
            }
        }
        if crate::runtime::profile::per_kernel() {
            self.device.synchronize()?;
            crate::runtime::profile::report(&self.device.name);
        }
        if crate::runtime::trace::on() {
            self.device.synchronize()?;
            // A diagnostic that cannot read its records costs its lines, not
            // the compute.
            if let Err(e) = crate::runtime::trace::report(&self.device) {
                crate::log::warn(&format!("{}: groups: no report: {e}", self.device.name));
            }
        }
        if let Some(((t0, n0), gap)) = span {
            let this = first.map(|(first, first_enqueued)| crate::runtime::profile::Span {
                first,
                first_enqueued,
                last,
                launches: LAUNCHES.load(Ordering::Relaxed) - n0,
                enqueue_us: t0.elapsed().as_secs_f64() * 1e6,
                gap,
            });
            crate::runtime::profile::span_next(&self.device.name, this);
        }
        Ok(())
    }

    /// After a hand-off wait of this plan's run gave up (`gave_up` says
    /// where; `deferred`: found by the host's wait, `Chains::defer`): the
    /// run again, in order, or the error where the plan may not run again.
    fn after_give_up(self: &Arc<Self>, gave_up: String, deferred: bool) -> Result<()> {
        // A plan has a rerun only where the record is read behind each
        // compute (`Plan::build`), so this one's results are the wrong ones.
        let rerun = self.rerun.as_ref();
        let kept = crate::runtime::handoff::give_up(&self.device, rerun.is_some());
        let Some(rerun) = rerun else {
            return Err(crate::error::Error::Unsupported(format!(
                "{gave_up} (a compute's results are wrong; the device runs without \
                 the hand-off from now on; POLYCL_HANDOFF=0 turns it off from the start)"
            )));
        };
        // Nothing has read this compute's results yet, and its inputs are
        // as they were before it: it runs again, in order.
        rerun.restore()?;
        crate::log::warn(&format!(
            "{gave_up}; the compute runs again in order{}, and the device goes on {} \
             (POLYCL_HANDOFF=0 turns it off from the start)",
            if deferred {
                " before the host's wait returns"
            } else {
                ""
            },
            if kept {
                "with the hand-off"
            } else {
                "without the hand-off"
            }
        ));
        self.run_as(true)
    }

    /// Whether every buffer the plan names is still registered.
    pub fn buffers_alive(&self) -> bool {
        self.buffers
            .iter()
            .all(|b| DeviceBuffer::by_base(b.base).is_some())
    }

    /// The kernels a run enqueues, in order (a merged run is its one
    /// kernel); Q8_1 cache hits may skip some quantize kernels.
    pub fn kernel_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        let mut i = 0;
        while i < self.launches.len() {
            if let Some((end, m)) = self.merged.get(&i) {
                names.push(m.launch().kernel.function_name().unwrap_or_default());
                i = *end;
            } else {
                names.push(self.launches[i].kernel.function_name().unwrap_or_default());
                i += 1;
            }
        }
        names
    }

    pub fn count(&self, kind: &str) -> usize {
        self.launches.iter().filter(|l| l.kind == kind).count()
    }
}
