//! MUL_MAT lowering: convert or quantize the activations into plan scratch
//! in the format the weight type's kernel wants (as ggml's CPU backend does),
//! then one matmul launch. `mul_mv::select` may swap in a faster kernel with
//! the same arguments for the device at hand.
//!
//! Two things make one matmul more than two launches:
//! * the Q8_1 activation cache (`q8_cache.rs`): decode-shaped Q8_1 activations
//!   get a scratch region per key, and the quantize launch is bound to its
//!   slot so a run can skip it;
//! * row-split weights (`-sm row`, `backend/split.rs`): the activation is
//!   converted once on the plan's (main) device, copied to each peer that
//!   holds rows, each device multiplies its rows, and the peers' partial
//!   results are copied into the main device's result. The peer work runs
//!   from hooks placed between the main device's launches; OpenCL events order
//!   the queues, so the host never waits.

use super::lower::{grid, type_suffix};
use super::q8_cache::{self, Key, Session, Table};
use super::Binder;
use crate::error::{Error, Result};
use crate::ggml::types::GgmlType::{self, F16, F32, Q4K, Q4_0, Q6K, Q8_0};
use crate::ir::{Graph, Node, Op, Place, Value};
use crate::runtime::executor::{ArgBinder, Launch, Operand};
use crate::runtime::peer::{self, Region, SplitTensor};
use crate::runtime::{counters, program, Device, DeviceBuffer};
use opencl3::event::Event;
use std::sync::Arc;

/// Work-group size of the portable matmul kernels: one group per output element.
pub const MM_WG: usize = 32;

/// A matmul kernel choice: every candidate takes the arguments of
/// `kernel_mul_mat_*` in `mul_mat.cl`.
pub struct MatmulKernel {
    pub program: &'static str,
    pub name: String,
    pub global: [usize; 3],
    pub local: [usize; 3],
}

/// How a weight type wants its activations: format name and bytes per row.
/// `fast_mv`: the fast kernels run (`mul_mv::fast_kquants`), whose K-quant
/// matvecs and tiles read Q8_1 like Q4_0; the portable ones read ggml's Q8_K.
pub fn activation_format(w: GgmlType, ne10: i64, fast_mv: bool) -> Option<(&'static str, u64)> {
    match w {
        F32 => None,
        F16 => Some(("kernel_convert_f16", 2 * ne10 as u64)),
        Q4_0 | Q8_0 => Some(("kernel_quantize_q8_1", (ne10 as u64 / 32) * 36)),
        Q4K | Q6K if fast_mv => Some(("kernel_quantize_q8_1", (ne10 as u64 / 32) * 36)),
        Q4K | Q6K => Some(("kernel_quantize_q8_k", (ne10 as u64 / 256) * 292)),
        _ => None,
    }
}

/// (weight, activation) of a matmul node, fused ones included (their first
/// weight: every weight of a fused matmul has one type and one row length).
pub fn matmul_operands(n: &Node) -> Option<(Value, Value)> {
    match n.op {
        Op::MulMat
        | Op::MulMatGroup
        | Op::MulMatGlu { .. }
        | Op::MulMatGroupRope(_)
        | Op::MulMatAddNorm { .. }
        | Op::MulMatNormed => Some((n.inputs[0], *n.inputs.last()?)),
        _ => None,
    }
}

/// Scratch bytes a node needs (converted activations of a matmul).
pub fn scratch_bytes(g: &Graph, n: &Node) -> usize {
    let Some((w, x)) = matmul_operands(n) else {
        return 0;
    };
    let w = g.ty(w);
    let x = g.ty(x);
    // Either format may be chosen at lowering: room for the larger.
    let row = [false, true]
        .iter()
        .filter_map(|&fast| activation_format(w.dtype, x.ne[0], fast))
        .map(|(_, row)| row)
        .max();
    match row {
        Some(row) => (row * (x.ne[1] * x.ne[2] * x.ne[3]) as u64) as usize,
        None => 0,
    }
}

fn align(n: u64) -> u64 {
    n.div_ceil(128) * 128
}

/// The split weight a matmul reads, if its weight lives in a split buffer.
pub fn split_weight(g: &Graph, n: &Node) -> Option<Arc<SplitTensor>> {
    match g.output(n.inputs[0]).place {
        Place::Bound(m) => peer::tensor_at(m.buffer + m.offset),
        Place::Internal => None,
    }
}

/// The cache key of a matmul's activation, if the cache applies: Q8_1
/// activations of the decode shape (contiguous, one column).
fn q8_key(g: &Graph, (w, xv): (Value, Value), device: &Device) -> Option<Key> {
    // Decode shape (checked below), so the fast matvec runs where wanted.
    let fast_mv = super::mul_mv::wanted(device);
    let (convert, row) = activation_format(g.ty(w).dtype, g.ty(xv).ne[0], fast_mv)?;
    let x = g.ty(xv);
    if convert != "kernel_quantize_q8_1" || x.ne[1..] != [1, 1, 1] || !x.is_contiguous() {
        return None;
    }
    let Place::Bound(data) = g.output(xv).place else {
        return None;
    };
    Some(Key {
        source: xv,
        data,
        device: device.index,
        ne10: x.ne[0],
        nrows: 1,
        padded_row: row,
    })
}

/// When peer work of a split matmul runs, relative to the main launches.
enum Hook {
    /// Copy the activation to the peers, launch their matmuls.
    Issue(usize),
    /// Copy the peers' partial results into the main result.
    Gather(usize),
}

struct PeerWork {
    device: Arc<Device>,
    /// Where the activation lands on the peer.
    act_dst: Region,
    launch: Launch,
    /// The peer's partial result: `rows` rows of `width` bytes, packed.
    partial: Region,
    /// Its place in the main result, rows `dst_pitch` bytes apart.
    dst: Region,
    dst_pitch: u64,
    width: u64,
    rows: u64,
}

struct SplitMatmul {
    /// The converted (or raw) activation on the main device.
    act_src: Region,
    act_len: u64,
    slot: Option<usize>,
    peers: Vec<PeerWork>,
}

/// Everything matmul lowering adds to a plan beyond its launches.
pub struct MatmulState {
    /// Main scratch: the shared conversion region at 0, then one region per
    /// cache slot.
    main_bytes: u64,
    /// Peer scratch: the main layout, then a region for raw (F32) activations,
    /// then the partial result region.
    raw_off: u64,
    partial_off: u64,
    peer_bytes: u64,
    pub q8: Table,
    splits: Vec<SplitMatmul>,
    /// (main launch index the hook runs before, hook), in order.
    hooks: Vec<(usize, Hook)>,
    peer_scratch: Vec<(usize, DeviceBuffer)>,
}

/// One run of a plan: the cache session and the peers' pending events.
pub struct RunState {
    pub q8: Session,
    next_hook: usize,
    pending: Vec<Vec<Event>>,
    touched: Vec<Arc<Device>>,
}

impl MatmulState {
    /// Lays out the scratch of every matmul of `graph` planned on `device`.
    pub fn new(graph: &Graph, device: &Device) -> MatmulState {
        let mut shared = 0u64;
        let mut raw = 0u64;
        let mut partial = 0u64;
        for n in graph.nodes.iter() {
            shared = shared.max(scratch_bytes(graph, n) as u64);
            if n.op != Op::MulMat {
                continue;
            }
            if let Some(st) = split_weight(graph, n) {
                let x = graph.ty(n.inputs[1]);
                if activation_format(st_type(graph, n), x.ne[0], false).is_none() {
                    raw = raw.max(x.span_bytes());
                }
                let cols = (x.ne[1] * x.ne[2] * x.ne[3]).max(0) as u64;
                for p in &st.parts {
                    partial = partial.max((p.rows.end - p.rows.start) as u64 * cols * 4);
                }
            }
        }
        let mut q8 = Table::default();
        let mut next = align(shared);
        for n in graph.nodes.iter() {
            if let Some(k) = matmul_operands(n).and_then(|wx| q8_key(graph, wx, device)) {
                let bytes = k.padded_row * k.nrows as u64;
                q8.slot(k, bytes, &mut next);
            }
        }
        let main_bytes = next;
        let raw_off = align(main_bytes);
        let partial_off = raw_off + align(raw);
        MatmulState {
            main_bytes,
            raw_off,
            partial_off,
            peer_bytes: partial_off + partial,
            q8,
            splits: Vec::new(),
            hooks: Vec::new(),
            peer_scratch: Vec::new(),
        }
    }

    /// Bytes of the main device's scratch.
    pub fn scratch_bytes(&self) -> usize {
        self.main_bytes as usize
    }

    fn peer_mem(&mut self, dev: &Arc<Device>) -> Result<opencl3::types::cl_mem> {
        if let Some((_, b)) = self.peer_scratch.iter().find(|(i, _)| *i == dev.index) {
            return Ok(b.cl_mem() as _);
        }
        let b = DeviceBuffer::alloc_scratch(dev, self.peer_bytes.max(1) as usize)?;
        let mem = b.cl_mem() as _;
        self.peer_scratch.push((dev.index, b));
        Ok(mem)
    }

    /// Starts a run: an empty cache.
    pub fn begin(&self) -> RunState {
        RunState {
            q8: self.q8.session(),
            next_hook: 0,
            pending: (0..self.splits.len()).map(|_| Vec::new()).collect(),
            touched: Vec::new(),
        }
    }

    /// Whether main launch `i` needs nothing from the host before it: no peer
    /// work and no Q8_1 cache decision (the step kernel may run it).
    pub fn plain(&self, i: usize) -> bool {
        self.q8.launch_slot(i).is_none() && !self.hooks.iter().any(|(at, _)| *at == i)
    }

    /// Runs the peer work due before main launch `i`; says whether launch `i`
    /// itself must run (false: the cache holds what it would compute).
    pub fn before(&self, main: &Device, i: usize, l: &Launch, s: &mut RunState) -> Result<bool> {
        self.hooks_until(main, i, s)?;
        let run = match self.q8.launch_slot(i) {
            Some(slot) => s.q8.quantize(slot),
            None => true,
        };
        if run && l.kind == "quantize" {
            s.q8.stats.quantize += 1;
        }
        Ok(run)
    }

    /// Ends a run after `n` main launches: the remaining peer work, flushes,
    /// and the end of the cache's graph compute.
    pub fn finish(&self, main: &Device, n: usize, mut s: RunState) -> Result<q8_cache::Stats> {
        self.hooks_until(main, n, &mut s)?;
        for d in &s.touched {
            d.flush()?;
        }
        Ok(s.q8.close(&main.name))
    }

    fn hooks_until(&self, main: &Device, i: usize, s: &mut RunState) -> Result<()> {
        while let Some((at, h)) = self.hooks.get(s.next_hook) {
            if *at > i {
                break;
            }
            s.next_hook += 1;
            match h {
                Hook::Issue(k) => self.issue(main, *k, s)?,
                Hook::Gather(k) => self.gather(main, *k, s)?,
            }
        }
        Ok(())
    }

    fn issue(&self, main: &Device, k: usize, s: &mut RunState) -> Result<()> {
        let sm = &self.splits[k];
        let mut ready: Option<Event> = None;
        let mut events = Vec::with_capacity(sm.peers.len());
        for p in &sm.peers {
            let copy = match sm.slot {
                Some(slot) => s.q8.peer_copy(slot, p.device.index),
                None => true,
            };
            if copy {
                if ready.is_none() {
                    ready = Some(peer::marker(main)?);
                    main.flush()?;
                }
                let wait: Vec<&Event> = ready.iter().collect();
                // On the peer's queue, so its matmul is ordered after the copy.
                drop(peer::copy(
                    &p.device, main, sm.act_src, &p.device, p.act_dst, sm.act_len, &wait,
                )?);
                counters::peer_copy();
                s.q8.stats.peer_copies += 1;
            }
            p.launch.enqueue(&p.device)?;
            counters::peer_launch();
            events.push(peer::marker(&p.device)?);
            p.device.flush()?;
            if !s.touched.iter().any(|d| Arc::ptr_eq(d, &p.device)) {
                s.touched.push(p.device.clone());
            }
        }
        s.pending[k] = events;
        Ok(())
    }

    fn gather(&self, main: &Device, k: usize, s: &mut RunState) -> Result<()> {
        let sm = &self.splits[k];
        let events = std::mem::take(&mut s.pending[k]);
        for (p, done) in sm.peers.iter().zip(events.iter()) {
            // On the main queue, so everything after it sees the whole result.
            let g = peer::copy_rows(
                main,
                &p.device,
                p.partial,
                p.width,
                main,
                p.dst,
                p.dst_pitch,
                p.width,
                p.rows,
                &[done],
            )?;
            // The peer's next matmul reuses the partial region: it waits.
            peer::barrier(&p.device, &[&g])?;
            p.device.flush()?;
            counters::gather();
        }
        Ok(())
    }
}

/// The weight type of a matmul.
fn st_type(g: &Graph, n: &Node) -> GgmlType {
    g.ty(n.inputs[0]).dtype
}

/// The activation conversion of `x` into `scratch` at `offset`, for weights `wt`.
/// Q8_1 for the fast kernels (`fast`) comes from the coalesced quantizer in
/// `mul_mv.cl`; the portable kernels keep the CPU's exact bytes.
fn convert_launch(
    b: &Binder,
    convert: &str,
    x: &Operand,
    scratch: opencl3::types::cl_mem,
    offset: u64,
    fast: bool,
) -> Result<Launch> {
    let rows = [x.ne[1] as usize, (x.ne[2] * x.ne[3]) as usize];
    if fast && convert == "kernel_quantize_q8_1" {
        const WG: usize = 128;
        let global = [(x.ne[0] as usize).div_ceil(WG) * WG, rows[0], rows[1]];
        return grid(
            b,
            "mul_mv",
            "kernel_quantize_q8_1_fast",
            global,
            Some([WG, 1, 1]),
            "quantize",
            |a| {
                a.tensor(x)?.ptr(scratch, offset)?;
                Ok(())
            },
        );
    }
    let blocks = match convert {
        "kernel_convert_f16" => x.ne[0],
        "kernel_quantize_q8_1" => x.ne[0] / 32,
        _ => x.ne[0] / 256,
    };
    grid(
        b,
        "mul_mat",
        convert,
        [blocks as usize, rows[0], rows[1]],
        None,
        "quantize",
        |a| {
            a.tensor(x)?.ptr(scratch, offset)?;
            Ok(())
        },
    )
}

fn portable(wt: GgmlType, w: &Operand, x: &Operand) -> Result<MatmulKernel> {
    Ok(MatmulKernel {
        program: "mul_mat",
        name: format!("kernel_mul_mat_{}", type_suffix(wt)?),
        global: [
            MM_WG * w.ne[1] as usize,
            x.ne[1] as usize,
            (x.ne[2] * x.ne[3]) as usize,
        ],
        local: [MM_WG, 1, 1],
    })
}

/// Activation arguments of a matmul kernel: memory, byte offset, strides.
pub(crate) type Act = (opencl3::types::cl_mem, u64, [u64; 4]);

pub(crate) fn bind_mm(
    a: &mut ArgBinder,
    w: &Operand,
    act: Act,
    x: &Operand,
    dst: &Operand,
) -> Result<()> {
    a.tensor(w)?
        .ptr(act.0, act.1)?
        .u64x4(act.2)?
        .i64x4(x.ne)?
        .tensor_out(dst)?;
    Ok(())
}

pub fn lower(b: &mut Binder, n: &Node, v: Value, out: &mut Vec<Launch>) -> Result<()> {
    if let Some(st) = split_weight(b.graph, n) {
        return lower_split(b, n, v, &st, out);
    }
    let g = b.graph;
    let wt = g.ty(n.inputs[0]).dtype;
    let w = b.operand(n.inputs[0])?;
    let x = b.operand(n.inputs[1])?;
    let dst = b.operand(v)?;
    let xt = g.ty(n.inputs[1]).dtype;
    let (act, k) = match super::mul_mv::select_raw(&b.device, wt, xt, &w, &x) {
        Some(k) => ((x.mem, x.offset, x.nb), k),
        None => (
            activation(
                b,
                (n.inputs[0], n.inputs[1]),
                &x,
                super::mul_mv::fast_kquants(&b.device),
                out,
            )?
            .0,
            super::mul_mv::select(&b.device, wt, &w, &x).unwrap_or(portable(wt, &w, &x)?),
        ),
    };
    out.push(grid(
        b,
        k.program,
        &k.name,
        k.global,
        Some(k.local),
        "mul_mat",
        |a| bind_mm(a, &w, act, &x, &dst),
    )?);
    Ok(())
}

/// Converts `x` as the weight type wants (if it does) into the main scratch:
/// the cache slot's region for a cacheable activation, else the shared
/// region. Returns the activation arguments (memory, offset, strides) and
/// the cache slot.
pub(crate) fn activation(
    b: &mut Binder,
    wx: (Value, Value),
    x: &Operand,
    fast_mv: bool,
    out: &mut Vec<Launch>,
) -> Result<(Act, Option<usize>)> {
    let g = b.graph;
    let wt = g.ty(wx.0).dtype;
    let Some((convert, row)) = activation_format(wt, x.ne[0], fast_mv) else {
        return Ok(((x.mem, x.offset, x.nb), None));
    };
    let (scratch, _) = b
        .scratch
        .ok_or_else(|| Error::InvalidGraph("matmul without scratch".into()))?;
    let slot = if fast_mv == super::mul_mv::wanted(&b.device) {
        q8_key(g, wx, &b.device).and_then(|k| b.mm.q8.find(&k))
    } else {
        None
    };
    let offset = slot.map_or(0, |s| b.mm.q8.region(s).0);
    let nb = [
        0,
        row,
        row * x.ne[1] as u64,
        row * (x.ne[1] * x.ne[2]) as u64,
    ];
    match slot {
        // The producer's fused kernel already wrote the Q8_1 copy there.
        Some(s) if b.mm.q8.is_prefilled(s) => return Ok(((scratch, offset, nb), slot)),
        Some(s) => b.mm.q8.bind_launch(out.len(), s),
        None => {}
    }
    out.push(convert_launch(b, convert, x, scratch, offset, fast_mv)?);
    Ok(((scratch, offset, nb), slot))
}

/// The weight rows one device holds, as a kernel operand.
fn share_operand(st: &SplitTensor, part: usize, full: &crate::ir::TensorType) -> Result<Operand> {
    let p = &st.parts[part];
    let buf = p
        .buf
        .as_ref()
        .ok_or_else(|| Error::InvalidGraph("an empty weight share has no memory".into()))?;
    let rows = p.rows.end - p.rows.start;
    let mut nb = full.nb;
    nb[2] = nb[1] * rows as u64;
    nb[3] = nb[2];
    Ok(Operand {
        mem: buf.cl_mem() as _,
        offset: 0,
        ne: [full.ne[0], rows, 1, 1],
        nb,
    })
}

fn lower_split(
    b: &mut Binder,
    n: &Node,
    v: Value,
    st: &Arc<SplitTensor>,
    out: &mut Vec<Launch>,
) -> Result<()> {
    let g = b.graph;
    let wty = g.ty(n.inputs[0]).clone();
    let wt = wty.dtype;
    let name = &g.nodes[n.inputs[0].node].name;
    if wty.ne[2] != 1 || wty.ne[3] != 1 || st.nrows != wty.ne[1] {
        return Err(Error::Unsupported(format!(
            "split weight '{name}' must be a 2-D matrix of {} rows",
            st.nrows
        )));
    }
    let main_dev = st.parts[st.main].device.clone();
    if !Arc::ptr_eq(&main_dev, &b.device) {
        return Err(Error::InvalidGraph(format!(
            "split weight '{name}' belongs to {} but the graph runs on {}",
            main_dev.name, b.device.name
        )));
    }
    let x = b.operand(n.inputs[1])?;
    let dst = b.operand(v)?;
    if dst.nb[0] != 4
        || dst.nb[2] != dst.nb[1] * dst.ne[1] as u64
        || dst.nb[3] != dst.nb[2] * dst.ne[2] as u64
    {
        return Err(Error::Unsupported(format!(
            "split matmul '{}' needs a result with packed columns",
            n.name
        )));
    }
    for p in &st.parts {
        if let Some(buf) = &p.buf {
            b.keep(buf.clone());
        }
    }
    // One activation for every device: the fast kernels' format only if every
    // device runs them, else the portable kernels everywhere.
    let fast_mv = st
        .parts
        .iter()
        .all(|p| p.rows.is_empty() || super::mul_mv::fast_kquants(&p.device));
    let pick = |dev: &Device, w: &Operand| -> Result<MatmulKernel> {
        let fast = if fast_mv || !matches!(wt, Q4K | Q6K) {
            super::mul_mv::select(dev, wt, w, &x)
        } else {
            None
        };
        fast.map_or_else(|| portable(wt, w, &x), Ok)
    };
    let (act, slot) = activation(b, (n.inputs[0], n.inputs[1]), &x, fast_mv, out)?;
    let cols = (x.ne[1] * x.ne[2] * x.ne[3]) as u64;
    let raw = activation_format(wt, x.ne[0], fast_mv).is_none();
    let (act_src, act_len, peer_act) = if raw {
        (
            Region {
                mem: x.mem,
                offset: x.offset,
            },
            g.ty(n.inputs[1]).span_bytes(),
            b.mm.raw_off,
        )
    } else {
        let (_, row) = activation_format(wt, x.ne[0], fast_mv).expect("converted");
        (
            Region {
                mem: act.0,
                offset: act.1,
            },
            row * cols,
            act.1,
        )
    };
    let peer_nb = if raw { x.nb } else { act.2 };
    let k = b.mm.splits.len();
    let mut peers = Vec::new();
    for (i, p) in st.parts.iter().enumerate() {
        if i == st.main || p.rows.is_empty() {
            continue;
        }
        let mem = b.mm.peer_mem(&p.device)?;
        let w = share_operand(st, i, &wty)?;
        let rows = p.rows.end - p.rows.start;
        let partial = Operand {
            mem,
            offset: b.mm.partial_off,
            ne: [rows, x.ne[1], x.ne[2], x.ne[3]],
            nb: [
                4,
                4 * rows as u64,
                4 * (rows * x.ne[1]) as u64,
                4 * (rows * x.ne[1] * x.ne[2]) as u64,
            ],
        };
        let kk = pick(&p.device, &w)?;
        let kernel = program::kernel(&p.device, kk.program, &kk.name)?;
        let mut args = ArgBinder::new(&kernel);
        bind_mm(&mut args, &w, (mem, peer_act, peer_nb), &x, &partial)?;
        let params = args.finish(&p.device)?;
        peers.push(PeerWork {
            device: p.device.clone(),
            act_dst: Region {
                mem,
                offset: peer_act,
            },
            launch: Launch {
                kernel,
                global: kk.global,
                local: Some(kk.local),
                dims: 3,
                kind: "mul_mat",
                packed: params,
            },
            partial: Region {
                mem,
                offset: b.mm.partial_off,
            },
            dst: Region {
                mem: dst.mem,
                offset: dst.offset + p.rows.start as u64 * 4,
            },
            dst_pitch: dst.nb[1],
            width: 4 * rows as u64,
            rows: cols,
        });
    }
    let has_peers = !peers.is_empty();
    b.mm.splits.push(SplitMatmul {
        act_src,
        act_len,
        slot,
        peers,
    });
    if has_peers {
        b.mm.hooks.push((out.len(), Hook::Issue(k)));
    }
    let mp = &st.parts[st.main];
    if !mp.rows.is_empty() {
        let w = share_operand(st, st.main, &wty)?;
        let rows = mp.rows.end - mp.rows.start;
        let d = Operand {
            offset: dst.offset + mp.rows.start as u64 * 4,
            ne: [rows, dst.ne[1], dst.ne[2], dst.ne[3]],
            ..dst
        };
        let kk = pick(&b.device, &w)?;
        out.push(grid(
            b,
            kk.program,
            &kk.name,
            kk.global,
            Some(kk.local),
            "mul_mat",
            |a| bind_mm(a, &w, act, &x, &d),
        )?);
    }
    if has_peers {
        b.mm.hooks.push((out.len(), Hook::Gather(k)));
    }
    Ok(())
}
