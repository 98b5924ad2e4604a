//! FLASH_ATTN_EXT lowering choices. GPUs, for the decode shape, get a
//! split-KV kernel of `fa_split.cl` (one work-group per query, KV chunk and
//! head; the last group of a query and head merges the chunks, so it is one
//! launch), so a single token fills the device: `kernel_fa_vec` (warps own
//! whole K/V rows) for F16 K/V with 8-byte aligned rows, and at long caches
//! `kernel_fa_long_*` (runs of 8 lanes a key, `long_kernel`; a KV head's
//! query heads together where they share it) where they are 16-byte
//! aligned, `kernel_fa_split` otherwise; for more queries (a prompt)
//! a tiled kernel, whose work-groups share each staged K/V tile among many
//! query rows: the tensor-core tile of `fa_mma.cl` where the mma kernels are
//! wanted and the shapes allow (`mma_applies`), else the float tile of
//! `fa_tile.cl`. Elsewhere (PoCL by default) the portable, CPU-exact kernel
//! runs.

use super::lower::grid;
use super::Binder;
use crate::config;
use crate::error::{ClContext, Result};
use crate::ggml::types::GgmlType;
use crate::ir::{Graph, Node, Op, Place, TensorType, Value};
use crate::runtime::buffer::finish_event;
use crate::runtime::executor::{ArgBinder, Launch, Operand};
use crate::runtime::Device;
use opencl3::command_queue as cq;
use opencl3::types::cl_mem;
use std::ffi::c_void;

/// KV positions per chunk of the split kernel: at most MAX_CHUNK, at least
/// one tile of keys (FA_TILE), and small enough that a short cache still
/// gives the device about `POLYCL_FA_GROUPS` (default 256) work-groups (a 7B
/// model's 32 heads at 256 positions would otherwise be 32 groups on a
/// 132-SM GPU). Fewer groups trade parallelism for the merge's round trips:
/// a head whose cache is one chunk skips the device-wide fence and the
/// arrival counter.
const MAX_CHUNK: i64 = 256;
const MIN_CHUNK: i64 = 32;
/// Queries per graph node up to which the split kernel is used.
const MAX_SPLIT_QUERIES: i64 = 8;
const FA_WG: usize = 64;
/// Work-items of `kernel_fa_vec` (FV_WG): four warps.
const FV_WG: usize = 128;

/// A power-of-two chunk of `k`'s positions, from `min` to MAX_CHUNK, such
/// that `groups` work-groups a chunk make about `POLYCL_FA_GROUPS` in all.
fn chunk_for(k: &TensorType, groups: i64, min: i64) -> i64 {
    ((k.ne[1] * groups).max(0) as u64)
        .div_ceil(config::get().fa_groups as u64)
        .max(1)
        .next_power_of_two()
        .clamp(min as u64, MAX_CHUNK as u64) as i64
}

/// Chunks of `chunk_len` positions that cover `k`'s.
fn chunk_count(k: &TensorType, chunk_len: i64) -> i64 {
    (k.ne[1].max(0) as u64).div_ceil(chunk_len as u64) as i64
}

/// The chunk of a kernel with a group a (query row, head) and chunk of at
/// least `min` positions: the vector kernels (MIN_CHUNK), the short one (a
/// step of its group).
fn chunk_from(q: &TensorType, k: &TensorType, min: i64) -> i64 {
    chunk_for(k, (q.ne[1] * q.ne[2] * q.ne[3]).max(1), min)
}

fn chunk(q: &TensorType, k: &TensorType) -> i64 {
    chunk_from(q, k, MIN_CHUNK)
}

fn chunks(q: &TensorType, k: &TensorType) -> i64 {
    chunk_count(k, chunk(q, k))
}

/// Work-items of `kernel_fa_long_*` (FL_WG): a key a work-item a step.
const FL_WG: i64 = 128;
/// Work-groups a compute unit that the long-cache kernel's default split
/// makes: on the H200 its 168 registers hold three 128-wide groups a
/// compute unit, and its groups step through their chunks without the
/// merge's round trips, so one wave of them is the split it needs.
const LONG_GROUPS_PER_CU: i64 = 3;

/// Work-groups a compute unit that the cols kernel's default split makes:
/// its ~210 registers (clang's sm_90 build) hold two 128-wide groups a
/// compute unit, and three a unit were two waves (on the H100 the 7B's
/// attention at 16384 positions spanned 113 us a layer so, 97 with two,
/// docs/perf.md step 79).
const COLS_GROUPS_PER_CU: i64 = 2;

/// Work-groups the long-cache kernel and the cols kernel split a graph's
/// cache into.
#[derive(Clone, Copy, Debug)]
struct SplitGroups {
    long: i64,
    cols: i64,
}

/// `POLYCL_FA_LONG_GROUPS` for both, or their own count a compute unit.
fn split_groups(device: &Device) -> Result<SplitGroups> {
    Ok(match config::get().fa_long_groups {
        Some(n) => SplitGroups {
            long: n as i64,
            cols: n as i64,
        },
        None => {
            let units = device.cl.max_compute_units().cl("clGetDeviceInfo")? as i64;
            SplitGroups {
                long: units * LONG_GROUPS_PER_CU,
                cols: units * COLS_GROUPS_PER_CU,
            }
        }
    })
}

/// The long-cache kernel's chunk: `groups` work-groups over its (query,
/// `heads` query heads) rows, a multiple of its step (FL_WG keys), and at
/// least the vector kernels' chunk (`chunk`), so that their partial states
/// (`partial_bytes`) hold its chunks too. Not a power of two: rounding up to
/// one halved the 7B's groups at 16384 positions (160 on 132 compute units).
fn long_chunk(q: &TensorType, k: &TensorType, groups: i64, heads: i64) -> i64 {
    let rows = (q.ne[1] * q.ne[2] / heads * q.ne[3]).max(1);
    let per_row = (groups / rows).max(1);
    let len = (k.ne[1].max(1) as u64).div_ceil(per_row as u64);
    let len = len.div_ceil(FL_WG as u64) as i64 * FL_WG;
    len.max(chunk(q, k))
}

/// Rows of `kernel_fa_gqa_*` (fa_gqa.cl): one m16n8k16 tile of query heads.
const GQA_ROWS: i64 = 16;
/// At least a 16-key tile for each of the GQA kernel's four warps.
const GQA_MIN_CHUNK: i64 = 64;

/// Query heads a KV head (G), where `k`'s heads divide `q`'s.
fn heads_per_kv(q: &TensorType, k: &TensorType) -> Option<i64> {
    (k.ne[2] > 0 && q.ne[2] % k.ne[2] == 0).then(|| q.ne[2] / k.ne[2])
}

/// Query heads a KV head, where the GQA kernel could take these shapes
/// (2 to 16 of them); the operands' own checks are `gqa_applies`.
fn gqa_ratio(q: &TensorType, k: &TensorType) -> Option<i64> {
    let ratio = heads_per_kv(q, k)?;
    (2..=GQA_ROWS).contains(&ratio).then_some(ratio)
}

/// The GQA kernel's work-groups along the queries: 16 / G queries each.
fn gqa_query_groups(q: &TensorType, ratio: i64) -> i64 {
    (q.ne[1].max(1) as u64).div_ceil((GQA_ROWS / ratio) as u64) as i64
}

/// The GQA kernel's chunk: as `chunk`, for its groups of a KV head's rows.
fn gqa_chunk(q: &TensorType, k: &TensorType, ratio: i64) -> i64 {
    let groups = gqa_query_groups(q, ratio) * k.ne[2] * q.ne[3].max(1);
    chunk_for(k, groups, GQA_MIN_CHUNK)
}

fn applies(g: &Graph, n: &Node, fast: bool) -> bool {
    if !fast || !matches!(n.op, Op::FlashAttn { .. }) {
        return false;
    }
    let q = g.ty(n.inputs[0]);
    q.ne[1] <= MAX_SPLIT_QUERIES
}

/// The fast kernels' rule (`mul_mv::wanted`), so that attention and matmuls
/// take the same side.
fn fast(device: &Device) -> bool {
    super::mul_mv::wanted(device)
}

fn counter_bytes(q: &TensorType) -> u64 {
    (q.ne[1] * q.ne[2] * q.ne[3] * 4) as u64
}

/// Partial states of every kernel family: a chunk count's worth per
/// (query, head), the most of the vector kernels', the GQA kernel's and the
/// cols kernel's (split into `groups.cols` work-groups).
fn partial_bytes(q: &TensorType, k: &TensorType, v: &TensorType, groups: SplitGroups) -> u64 {
    let gqa = gqa_ratio(q, k).map_or(0, |r| chunk_count(k, gqa_chunk(q, k, r)));
    let cols = heads_per_kv(q, k)
        .filter(|r| (1..=COLS).contains(r))
        .map_or(0, |r| chunk_count(k, cols_chunk(q, k, r, groups.cols)));
    let most = chunks(q, k).max(gqa).max(cols);
    (q.ne[1] * q.ne[2] * q.ne[3] * most * state_floats(v.ne[0]) * 4) as u64
}

/// Floats of one chunk's partial state (fa_split.cl `fa_state_floats`): M,
/// S, two unused, then the DV accumulator elements padded to a multiple of 4,
/// so that they start 16-byte aligned.
fn state_floats(dv: i64) -> i64 {
    4 + (dv + 3) / 4 * 4
}

fn align(n: u64) -> u64 {
    n.div_ceil(128) * 128
}

/// Flash attention's scratch, after the matmuls': one arrival counter per
/// (query, head) and the partial softmax states of the split kernels, then
/// the F16 copies of quantized K and V (`dequantized`). Every node of a plan
/// shares them (the in-order queue runs them one after the other, and each
/// split launch leaves its counters at 0), so the sizes are maxima.
#[derive(Clone, Copy, Debug, Default)]
struct Layout {
    counters: u64,
    partials: u64,
    dequantized: u64,
}

impl Layout {
    fn bytes(&self) -> u64 {
        self.counters + align(self.partials) + self.dequantized
    }
}

fn layout(g: &Graph, device: &Device) -> Layout {
    // Without the device's figure no split node is lowered (lower_split
    // asks again and fails), so any count serves.
    let groups = split_groups(device).unwrap_or(SplitGroups { long: 1, cols: 1 });
    let fast = fast(device);
    let mut l = Layout::default();
    for n in g
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::FlashAttn { .. }))
    {
        let [q, k, v] = [0, 1, 2].map(|i| g.ty(n.inputs[i]));
        if applies(g, n, fast) {
            l.counters = l.counters.max(align(counter_bytes(q)));
            l.partials = l.partials.max(partial_bytes(q, k, v, groups));
        }
        let offsets = [1, 2].map(|i| match g.output(n.inputs[i]).place {
            Place::Bound(m) => m.offset,
            Place::Internal => 1,
        });
        if !(applies(g, n, fast) && blocks_read(k, v, offsets)) {
            let copies = [k, v].iter().map(|t| f16_copy_bytes(t)).sum::<u64>();
            l.dequantized = l.dequantized.max(copies);
        }
    }
    l
}

/// Bytes of scratch flash attention needs in a plan of `g`.
pub fn scratch_bytes(g: &Graph, device: &Device) -> usize {
    layout(g, device).bytes() as usize
}

/// Bytes of the F16 copy of a quantized K or V operand, 128-aligned; 0 for
/// one the kernels read as it is.
fn f16_copy_bytes(t: &TensorType) -> u64 {
    if t.dtype.is_quantized() {
        align(t.nelements().max(0) as u64 * 2)
    } else {
        0
    }
}

/// K and V as the kernels read them: as they are when F16, else (Q8_0 and
/// Q4_0 caches) an F16 copy in the scratch made by a launch pushed here,
/// the way llama.cpp's CUDA backend feeds quantized caches to its
/// tensor-core kernel. The copy costs a launch and the bytes of both forms
/// a step; decode kernels that read the blocks themselves would not.
pub fn dequantized(
    b: &mut Binder,
    n: &Node,
    ops: [Operand; 2],
    out: &mut Vec<Launch>,
) -> Result<([Operand; 2], [TensorType; 2])> {
    let g = b.graph;
    let types = [1, 2].map(|i| g.ty(n.inputs[i]).clone());
    if !types.iter().any(|t| t.dtype.is_quantized()) {
        return Ok((ops, types));
    }
    let l = layout(g, &b.device);
    let mut off = align(b.mm.scratch_bytes() as u64) + l.counters + align(l.partials);
    let scratch = match b.scratch {
        Some((mem, size)) if off + l.dequantized <= size as u64 => mem,
        _ => {
            return Err(crate::error::Error::InvalidGraph(format!(
                "FlashAttn '{}': no scratch for the F16 copy of its quantized K/V",
                n.name
            )))
        }
    };
    let mut result = (ops, types.clone());
    for (i, t) in types.iter().enumerate() {
        if !t.dtype.is_quantized() {
            continue;
        }
        let f16 = TensorType::contiguous(GgmlType::F16, t.ne);
        let copy = Operand {
            mem: scratch,
            offset: off,
            ne: f16.ne,
            nb: f16.nb,
        };
        out.push(super::lower::copy(
            b,
            &ops[i],
            t.dtype,
            &copy,
            GgmlType::F16,
        )?);
        off += f16_copy_bytes(t);
        result.0[i] = copy;
        result.1[i] = f16;
    }
    Ok(result)
}

/// What every flash-attention kernel takes: the operands [q, k, v, mask,
/// dst] and the scalars, bound in each kernel's order by `bind_inputs`
/// (q, k, v, mask, has_mask) and `bind_params` (scale, max_bias, m0, m1,
/// n_head_log2, softcap).
pub struct FaArgs {
    pub ops: [Operand; 5],
    /// Types of q, k and v as the kernels read them (`dequantized`).
    pub types: [TensorType; 3],
    pub has_mask: bool,
    /// scale (already divided by softcap), max_bias, m0, m1, softcap.
    pub params: [f32; 5],
    pub n_head_log2: u32,
}

impl FaArgs {
    pub fn bind_inputs(&self, a: &mut ArgBinder) -> Result<()> {
        let [q, k, v, mask, _] = &self.ops;
        a.tensor(q)?
            .tensor(k)?
            .tensor(v)?
            .tensor(mask)?
            .i32(self.has_mask as i32)?;
        Ok(())
    }
    pub fn bind_params(&self, a: &mut ArgBinder) -> Result<()> {
        let [scale, max_bias, m0, m1, softcap] = self.params;
        a.f32(scale)?
            .f32(max_bias)?
            .f32(m0)?
            .f32(m1)?
            .u32(self.n_head_log2)?
            .f32(softcap)?;
        Ok(())
    }
}

/// Pushes the split launch if it applies; false leaves the node to the
/// portable kernel. `id` is the node's index in the graph.
pub fn lower_split(
    b: &mut Binder,
    id: usize,
    n: &Node,
    fa: &FaArgs,
    out: &mut Vec<Launch>,
) -> Result<bool> {
    let g = b.graph;
    if !applies(g, n, fast(&b.device)) {
        return Ok(false);
    }
    let Some((scratch, size)) = b.scratch else {
        return Ok(false);
    };
    let [q, k, v, _, dst] = fa.ops;
    let counters = layout(g, &b.device).counters;
    // The matmul scratch ends 128-aligned; aligning again only guards the
    // counters' atomics should that change (the size check then fails safe).
    let cnt_off = align(b.mm.scratch_bytes() as u64);
    let part_off = cnt_off + counters;
    let [tq, tk, tv] = &fa.types;
    // Quantized K/V only where the long-cache kernel reads them as they lie;
    // every other kernel takes the F16 copy (`dequantized`), so leave the
    // node to the caller for it.
    let long_blocks = long_blocks_kernel(tq, tk, tv, &k, &v);
    if (tk.dtype != GgmlType::F16 || tv.dtype != GgmlType::F16) && long_blocks.is_none() {
        return Ok(false);
    }
    let short = match long_blocks {
        Some(_) => None,
        None => short_kernel(b, tk, tv, &k, &v),
    };
    // From POLYCL_FA_LONG_KV the long-cache kernel comes before the
    // tensor-core GQA kernel: on the H100 the 1B (G = 8) decoded 584 tokens/s
    // at 4096 cached positions with it against 472 (docs/perf.md step 76),
    // ~630 against ~525 at 512 and 768 (step 77).
    // From POLYCL_FA_COLS_KV the tensor-core kernel with a KV head's query
    // heads as its tile's columns comes before both: on the H100 the 7B and
    // the 1B decoded ~4% faster with it at 16384 cached positions; at 4096
    // the 1B 6% slower, its 4 KV heads' caches cut into 64-key chunks whose
    // merge costs more than their loop (docs/perf.md steps 78, 79).
    let cols = match short {
        Some(_) => None,
        None => cols_applies(b, fa, [tq, tk, tv]),
    };
    let long = match (short, cols) {
        (None, None) => long_blocks.or_else(|| long_kernel(tq, tk, tv, &k, &v)),
        _ => None,
    };
    let gqa = match (short, long, cols) {
        (None, None, None) => gqa_applies(b, fa, [tq, tk, tv]),
        _ => None,
    };
    let one = match (gqa, short, long, cols) {
        (None, None, None, None) => one_kernel(b, tk, tv, &k, &v),
        _ => None,
    };
    let groups = split_groups(&b.device)?;
    let chunk_len = match (cols, gqa, short, one, long) {
        (Some(r), ..) => cols_chunk(tq, tk, r, groups.cols),
        (None, Some(r), ..) => gqa_chunk(tq, tk, r),
        (None, None, Some((_, step_keys)), _, _) => chunk_from(tq, tk, step_keys),
        (None, None, None, Some(_), _) => tk.ne[1].max(1),
        (None, None, None, None, Some((_, heads))) => long_chunk(tq, tk, groups.long, heads),
        (None, None, None, None, None) => chunk(tq, tk),
    };
    let n_chunks = chunk_count(tk, chunk_len);
    if counter_bytes(tq) > counters || part_off + partial_bytes(tq, tk, tv, groups) > size as u64 {
        return Ok(false);
    }
    zero_counters(b, scratch, cnt_off, counters)?;
    // The Q8_1 copy is one group's DV floats, whole blocks of a contiguous
    // F32 output; q8_target commits the matmul to it, so ask only then.
    // With the rotation fused in, the kernels write port 1 (the rotated
    // rows) and its copy.
    let rotation = match n.op {
        Op::FlashAttn { rotation, .. } => rotation,
        _ => 0,
    };
    let out_v = Value::new(id, (rotation != 0) as u32);
    let td = g.ty(out_v);
    let q8 = if v.ne[0] % 32 == 0 && td.dtype == GgmlType::F32 && td.is_contiguous() {
        b.q8_target(out_v)
    } else {
        None
    };
    let heads = (q.ne[2] * q.ne[3]) as usize;
    // The tensor-core kernels (fa_gqa.cl): a group a KV head's query heads,
    // 16 / G or 8 / G queries of them.
    let tensor_core = match (cols, gqa, q.ne[0] == 64) {
        (Some(r), _, true) => Some((cols_query_groups(tq, r), "kernel_fa_gqa_cols_d64")),
        (Some(r), _, false) => Some((cols_query_groups(tq, r), "kernel_fa_gqa_cols_d128")),
        (None, Some(r), true) => Some((gqa_query_groups(tq, r), "kernel_fa_gqa_d64")),
        (None, Some(r), false) => Some((gqa_query_groups(tq, r), "kernel_fa_gqa_d128")),
        (None, None, _) => None,
    };
    let (program, name, wg, global) = if let Some((query_groups, name)) = tensor_core {
        let groups = (query_groups * n_chunks) as usize;
        let kv_heads = (k.ne[2] * q.ne[3]) as usize;
        ("fa_gqa", name, FV_WG, [FV_WG, groups, kv_heads])
    } else {
        let (name, wg, sets) = match (short, one, long) {
            (Some((name, _)), _, _) => (name, FS_WG, heads),
            (None, Some(name), _) => (name, FO_WG, heads),
            (None, None, Some((name, per))) => (name, FL_WG as usize, heads / per as usize),
            (None, None, None) => {
                let (name, wg) = split_kernel(tk, tv, &k, &v);
                (name, wg, heads)
            }
        };
        (
            "fa_split",
            name,
            wg,
            [wg, (q.ne[1] * n_chunks) as usize, sets],
        )
    };
    out.push(grid(
        b,
        program,
        name,
        global,
        Some([wg, 1, 1]),
        "flash_attn",
        |a| {
            fa.bind_inputs(a)?;
            a.ptr_out(scratch, part_off)?
                .ptr_out(scratch, cnt_off)?
                .i32(chunk_len as i32)?
                .i32(n_chunks as i32)?;
            fa.bind_params(a)?;
            a.tensor_out(&dst)?;
            match q8 {
                Some(t) => a.i32(1)?.ptr_out(t.mem, t.offset)?,
                None => a.i32(0)?.ptr_out(scratch, 0)?,
            };
            a.i32(rotation)?;
            Ok(())
        },
    )?);
    Ok(true)
}

/// Work-items of `kernel_fa_short_*` (FS_WG) and keys a warp takes a step
/// (FS_KPW).
const FS_WG: usize = 512;
const FS_KPW: i64 = 4;

/// The short-cache kernel (`kernel_fa_short_*`, fa_split.cl) and the keys
/// one step of its whole group takes (its shortest chunk), where it takes
/// the node: the attention + O pair wanted (`POLYCL_ATTN_O`), K/V as the
/// vector kernels read them, head sizes up to 128, a cache of at most
/// `POLYCL_FA_SHORT_KV` positions, and work-groups of 512 on the device. At
/// such caches a chunk is one step, with no second set of rows in flight,
/// which keeps it at MulMatAddNorm's width, so the O projection after it
/// can share its launch (plan/attn_o.rs). Alone it is no faster than the
/// vector kernels (slower on the H200's 1B, docs/perf.md step 45).
fn short_kernel(
    b: &Binder,
    tk: &TensorType,
    tv: &TensorType,
    k: &Operand,
    v: &Operand,
) -> Option<(&'static str, i64)> {
    let config = config::get();
    if !config.attn_o {
        return None;
    }
    let lanes = wide_lanes(b, tk, tv, k, v, config.fa_short_kv)?;
    let name = if lanes == 16 {
        "kernel_fa_short_d64"
    } else {
        "kernel_fa_short_d128"
    };
    Some((name, FS_WG as i64 / lanes * FS_KPW))
}

/// Where a 512-wide vector body (the short and whole-cache kernels) can
/// take the node: K/V as the vector kernels read them, head sizes up to
/// 128, a cache of at most `max_kv` positions, work-groups of 512 on the
/// device, and no step kernel (which runs the vector kernel as a phase).
/// The lanes a key: a half-warp up to head size 64, a warp up to 128 (as
/// the vector kernels).
fn wide_lanes(
    b: &Binder,
    tk: &TensorType,
    tv: &TensorType,
    k: &Operand,
    v: &Operand,
    max_kv: u32,
) -> Option<i64> {
    let ok = vec_applies(tk, tv, k, v)
        && k.ne[0] <= 128
        && v.ne[0] <= 128
        && tk.ne[1] <= max_kv as i64
        && b.device.max_work_group >= FS_WG.max(FO_WG)
        && !crate::runtime::step::wanted();
    ok.then_some(if k.ne[0] <= 64 && v.ne[0] <= 64 {
        16
    } else {
        32
    })
}

/// Work-items of `kernel_fa_one_*` (FO_WG) and keys a warp takes a step
/// (FO_KPW).
const FO_WG: usize = 512;
const FO_KPW: i64 = 8;

/// The whole-cache kernel (`kernel_fa_one_*`, fa_split.cl), where it takes
/// the node: K/V as the vector kernels read them, head sizes up to 128, a
/// cache of at most `POLYCL_FA_ONE_KV` positions that is one step of the
/// group's loads (256 positions at head sizes up to 64, 128 up to 128), and
/// work-groups of 512 on the device. One group a query head then takes the
/// whole cache and writes the result itself, without a split's partial
/// states, device-wide fence, arrival counter and merge: on the H200 the
/// 1B's GPU span a token ~1% shorter; the 7B's 256 positions in two steps
/// took 12.3 us a launch against the split's 11.6, so a cache of more than
/// one step stays split (docs/perf.md step 52), unless the O projection may
/// join the launch by heads (`POLYCL_ATTN_OH`, plan/attn_o.rs), which saves
/// a launch: then two steps.
fn one_kernel(
    b: &Binder,
    tk: &TensorType,
    tv: &TensorType,
    k: &Operand,
    v: &Operand,
) -> Option<&'static str> {
    let config = config::get();
    let lanes = wide_lanes(b, tk, tv, k, v, config.fa_one_kv)?;
    let steps = if config.attn_oh { 2 } else { 1 };
    if tk.ne[1] > (FO_WG as i64 / lanes) * FO_KPW * steps {
        return None;
    }
    Some(if lanes == 16 {
        "kernel_fa_one_d64"
    } else {
        "kernel_fa_one_d128"
    })
}

/// The long-cache kernel over Q8_0 or Q4_0 K and V (`kernel_fa_long_q8_*`,
/// `kernel_fa_long_q4_*`, the same choice of query heads a group), where it
/// takes the node (`blocks_read`).
fn long_blocks_kernel(
    tq: &TensorType,
    tk: &TensorType,
    tv: &TensorType,
    k: &Operand,
    v: &Operand,
) -> Option<(&'static str, i64)> {
    if !blocks_read(tk, tv, [k.offset, v.offset]) {
        return None;
    }
    long_variant(tq, tk, k.ne[0], tk.dtype)
}

/// Whether decode attention reads Q8_0 or Q4_0 K and V (one type, at byte
/// offsets `offsets`) as their blocks lie: from `POLYCL_FA_Q8_KV`
/// positions, head sizes 64 and 128 (DK = DV), blocks packed along each row
/// and rows 2-byte aligned (a lane loads the scale and the quants as
/// halfwords) with strides that fit the 32 bits the kernel steps keys by,
/// and no step kernel. The layout reserves no F16 copy for such a node.
fn blocks_read(tk: &TensorType, tv: &TensorType, offsets: [u64; 2]) -> bool {
    let min_kv = config::get().fa_q8_kv;
    let rows_ok = |t: &TensorType, offset: u64| {
        matches!(t.dtype, GgmlType::Q8_0 | GgmlType::Q4_0)
            && t.dtype == tk.dtype
            && t.nb[0] == t.dtype.block_bytes() as u64
            && offset.is_multiple_of(2)
            && t.nb[1..].iter().all(|s| s.is_multiple_of(2))
            && t.nb[1] <= u32::MAX as u64
    };
    min_kv > 0
        && tk.ne[1] >= min_kv as i64
        && rows_ok(tk, offsets[0])
        && rows_ok(tv, offsets[1])
        && matches!(tk.ne[0], 64 | 128)
        && tk.ne[0] == tv.ne[0]
        && !crate::runtime::step::wanted()
}

/// The long-cache kernel (`kernel_fa_long_*`, fa_split.cl) and the query
/// heads a work-group of it takes, where it takes the node: a cache of at
/// least `POLYCL_FA_LONG_KV` positions, K/V as the vector kernels read them,
/// DK = DV of 64 or 128, every row 16-byte aligned (a lane loads 8 halves at
/// once), and no step kernel (whose program holds only `kernel_fa_vec`). A
/// run of 8 lanes a key and one exponential a lane a step, where the vector
/// kernels spend a warp a key and every key's exponential on every lane
/// (docs/perf.md step 74). It comes before the tensor-core GQA kernel.
/// Where query heads share a KV head and `POLYCL_FA_LONG_HEADS` allows, a
/// `_gqa` kernel takes `long_heads` of them a group, so each K and V row is
/// read once for them all (step 75); by default a group takes one head, the
/// fastest on the H100, whose L2 served the other heads' reads (step 76).
fn long_kernel(
    tq: &TensorType,
    tk: &TensorType,
    tv: &TensorType,
    k: &Operand,
    v: &Operand,
) -> Option<(&'static str, i64)> {
    let min_kv = config::get().fa_long_kv;
    let ok = min_kv > 0
        && tk.ne[1] >= min_kv as i64
        && vec_applies(tk, tv, k, v)
        && k.ne[0] == v.ne[0]
        && rows_aligned(k, 16)
        && rows_aligned(v, 16)
        && !crate::runtime::step::wanted();
    if !ok {
        return None;
    }
    long_variant(tq, tk, k.ne[0], GgmlType::F16)
}

/// The long-cache kernel for head size `d` (64 or 128) and the query heads a
/// group of it takes (`long_heads`), over K/V of `kv` (F16, Q8_0 or Q4_0).
fn long_variant(
    tq: &TensorType,
    tk: &TensorType,
    d: i64,
    kv: GgmlType,
) -> Option<(&'static str, i64)> {
    let heads = long_heads(tq, tk, d, config::get().fa_long_heads);
    // A shape without a kernel of `heads` query heads takes one head a group.
    let find = |heads: i64| LONG_KERNELS.iter().find(|(shape, _)| *shape == (d, heads));
    let &((_, heads), [f16, q8_0, q4_0]) = find(heads).or_else(|| find(1))?;
    let name = match kv {
        GgmlType::F16 => f16,
        GgmlType::Q8_0 => q8_0,
        GgmlType::Q4_0 => q4_0,
        _ => return None,
    };
    Some((name, heads))
}

/// The long-cache kernels by (head size, query heads a group), over F16,
/// Q8_0 and Q4_0 K/V.
#[rustfmt::skip]
const LONG_KERNELS: &[((i64, i64), [&str; 3])] = &[
    ((64, 1), ["kernel_fa_long_d64", "kernel_fa_long_q8_d64", "kernel_fa_long_q4_d64"]),
    ((64, 2), ["kernel_fa_long_gqa2_d64", "kernel_fa_long_q8_gqa2_d64", "kernel_fa_long_q4_gqa2_d64"]),
    ((64, 4), ["kernel_fa_long_gqa4_d64", "kernel_fa_long_q8_gqa4_d64", "kernel_fa_long_q4_gqa4_d64"]),
    ((128, 1), ["kernel_fa_long_d128", "kernel_fa_long_q8_d128", "kernel_fa_long_q4_d128"]),
    ((128, 2), ["kernel_fa_long_gqa2_d128", "kernel_fa_long_q8_gqa2_d128", "kernel_fa_long_q4_gqa2_d128"]),
];

/// Query heads a group of the long-cache kernel takes at head size `d`: the
/// most of 4 and 2 that divides the G query heads of a KV head, at most
/// `most_heads` (`POLYCL_FA_LONG_HEADS`) and 4 / (64-wide pieces of a row),
/// so that a group's q and accumulators, one of each a head, stay within 64
/// registers; else 1.
fn long_heads(q: &TensorType, k: &TensorType, d: i64, most_heads: u32) -> i64 {
    let ratio = heads_per_kv(q, k);
    let most = (most_heads as i64).min(4 / (d / 64).max(1));
    [4, 2]
        .into_iter()
        .find(|&h| h <= most && ratio.is_some_and(|g| g % h == 0))
        .unwrap_or(1)
}

/// The split-KV kernel of `fa_split.cl` for these K/V and its work-group size.
fn split_kernel(
    tk: &TensorType,
    tv: &TensorType,
    k: &Operand,
    v: &Operand,
) -> (&'static str, usize) {
    if vec_applies(tk, tv, k, v) {
        // One 128-wide slice of a row a lane: fewer registers, and room for
        // the next step's loads (fa_split.cl fa_vec_body); up to 64, a key
        // a half-warp, so no lane idles.
        if k.ne[0] <= 64 && v.ne[0] <= 64 {
            ("kernel_fa_vec_d64", FV_WG)
        } else if k.ne[0] <= 128 && v.ne[0] <= 128 {
            ("kernel_fa_vec_d128", FV_WG)
        } else {
            ("kernel_fa_vec", FV_WG)
        }
    } else {
        ("kernel_fa_split", FA_WG)
    }
}

/// Query heads a KV head where the GQA kernel (`fa_gqa.cl`) takes the node:
/// 2 to 16 query heads a KV head, the operands both tensor-core kernels
/// take with 4-byte aligned K and V rows (a fragment is one 4-byte load),
/// and a cache of at least `POLYCL_FA_GQA_MIN_KV` positions (at the shortest
/// caches the vector kernel's 8x more work-groups finished sooner on the
/// H200, docs/perf.md step 42).
fn gqa_applies(b: &Binder, fa: &FaArgs, [tq, tk, tv]: [&TensorType; 3]) -> Option<i64> {
    let ok = tensor_core_operands(b, fa, [tq, tk, tv], 4)
        && tk.ne[1] >= config::get().fa_gqa_min_kv as i64;
    ok.then(|| gqa_ratio(tq, tk)).flatten()
}

/// What both tensor-core decode kernels (fa_gqa.cl) need of the operands:
/// the mma kernels wanted, head size 64 or 128 (DK = DV), F32 Q, F16 K and V
/// rows of contiguous halves `align`-byte aligned whose row strides fit the
/// 32 bits they step keys by, and a mask whose element stride does too.
fn tensor_core_operands(
    b: &Binder,
    fa: &FaArgs,
    [tq, tk, tv]: [&TensorType; 3],
    align: u64,
) -> bool {
    let [q, k, v, mask, _] = &fa.ops;
    let rows_ok =
        |o: &Operand| o.nb[0] == 2 && rows_aligned(o, align) && o.nb[1] <= u32::MAX as u64;
    super::mul_mv::mma_wanted(&b.device)
        && tq.dtype == GgmlType::F32
        && tk.dtype == GgmlType::F16
        && tv.dtype == GgmlType::F16
        && matches!(q.ne[0], 64 | 128)
        && k.ne[0] == q.ne[0]
        && v.ne[0] == q.ne[0]
        && rows_ok(k)
        && rows_ok(v)
        && (!fa.has_mask || mask.nb[0] <= u32::MAX as u64)
}

/// Columns of `kernel_fa_gqa_cols_*` (fa_gqa.cl): one m16n8k16 tile's n.
const COLS: i64 = 8;
/// Keys one step of its four warps takes (16 a warp).
const COLS_STEP: i64 = 64;

/// Query heads a KV head where the long-cache kernel on tensor cores
/// (`kernel_fa_gqa_cols_*`) takes the node: a cache of at least
/// `POLYCL_FA_COLS_KV` positions, 1 to 8 query heads a KV head (with 1, a
/// group's columns are 8 queries, one at a decode step: its key loop reads
/// K and V with 16-byte loads and a few mma instructions a tile, where the
/// long kernel spends ~600 a lane a step), and the operands both
/// tensor-core kernels take with 16-byte aligned K and V rows (a lane loads
/// 16 bytes at once).
fn cols_applies(b: &Binder, fa: &FaArgs, [tq, tk, tv]: [&TensorType; 3]) -> Option<i64> {
    let cfg = config::get();
    let ok = cfg.fa_cols_kv > 0
        && tk.ne[1] >= cfg.fa_cols_kv as i64
        && !crate::runtime::step::wanted()
        && tensor_core_operands(b, fa, [tq, tk, tv], 16);
    let ratio = heads_per_kv(tq, tk)?;
    (ok && (1..=COLS).contains(&ratio)).then_some(ratio)
}

/// The cols kernel's work-groups along the queries: 8 / G queries each.
fn cols_query_groups(q: &TensorType, ratio: i64) -> i64 {
    (q.ne[1].max(1) as u64).div_ceil((COLS / ratio) as u64) as i64
}

/// The cols kernel's chunk: `groups` work-groups over its (query group, KV
/// head) rows, a multiple of its step. Below the vector kernels' 256
/// positions where that many groups want it (`partial_bytes` counts its
/// chunks): with them a 768-position cache was 12 groups on the H100, which
/// decoded the 1B 13% slower than the long kernel (docs/perf.md step 78).
fn cols_chunk(q: &TensorType, k: &TensorType, ratio: i64, groups: i64) -> i64 {
    let rows = (cols_query_groups(q, ratio) * k.ne[2] * q.ne[3].max(1)).max(1);
    let per_row = (groups / rows).max(1);
    let len = (k.ne[1].max(1) as u64).div_ceil(per_row as u64);
    len.div_ceil(COLS_STEP as u64) as i64 * COLS_STEP
}

/// Whether every row of `o` (its offset and each stride past the first)
/// starts `bytes`-aligned.
fn rows_aligned(o: &Operand, bytes: u64) -> bool {
    o.offset.is_multiple_of(bytes) && o.nb[1..].iter().all(|s| s.is_multiple_of(bytes))
}

/// Whether `kernel_fa_vec` can read K and V: F16 rows whose every 4-element
/// group starts 8-byte aligned (it loads them as one 8-byte word), a key's
/// row stride that fits the 32 bits it steps keys by, and head sizes it
/// holds in registers.
fn vec_applies(tk: &TensorType, tv: &TensorType, k: &Operand, v: &Operand) -> bool {
    let rows_ok = |t: &TensorType, o: &Operand| {
        t.dtype == GgmlType::F16
            && o.nb[0] == 2
            && o.ne[0] % 4 == 0
            && o.ne[0] <= 256
            && rows_aligned(o, 8)
            && o.nb[1] <= u32::MAX as u64
    };
    rows_ok(tk, k) && rows_ok(tv, v)
}

/// Whether the tensor-core tile (`fa_mma.cl`) takes the node: where the
/// mma kernels are wanted, for head sizes 64 and 128 (DK = DV), Q rows of
/// contiguous floats 8-byte aligned (two a load), K and V rows of contiguous
/// halves 4-byte aligned (two a load), an F16 mask or none.
fn mma_applies(b: &Binder, fa: &FaArgs) -> bool {
    let [q, k, v, mask, _] = &fa.ops;
    super::mul_mv::mma_wanted(&b.device)
        && matches!(q.ne[0], 64 | 128)
        && k.ne[0] == q.ne[0]
        && v.ne[0] == q.ne[0]
        && q.nb[0] == 4
        && rows_aligned(q, 8)
        && k.nb[0] == 2
        && v.nb[0] == 2
        && rows_aligned(k, 4)
        && rows_aligned(v, 4)
        && (!fa.has_mask || mask.nb[0] == 2)
}

/// Pushes the tiled launch for GPUs (any query count the split kernel did
/// not take, which is the prompt shape, or the decode shape when the plan has
/// no scratch); false leaves the node to the portable kernel.
pub fn lower_tiled(b: &mut Binder, n: &Node, fa: &FaArgs, out: &mut Vec<Launch>) -> Result<bool> {
    if !fast(&b.device) || !matches!(n.op, Op::FlashAttn { .. }) {
        return Ok(false);
    }
    let [tq, tk, tv] = &fa.types;
    if tq.dtype != GgmlType::F32 || tk.dtype != GgmlType::F16 || tv.dtype != GgmlType::F16 {
        return Ok(false);
    }
    let [q, k, v, _, dst] = fa.ops;
    let d = q.ne[0].max(v.ne[0]);
    // (program, name, query rows per group, work-items): the kernel's own tiling.
    let (program, name, rows, wg) = if mma_applies(b, fa) {
        let name = if d == 64 {
            "kernel_fa_mma_d64"
        } else {
            "kernel_fa_mma_d128"
        };
        ("fa_mma", name, 64, 128)
    } else {
        match d {
            1..=128 => ("fa_tile", "kernel_fa_tile_d128", 32, 128),
            129..=256 => ("fa_tile", "kernel_fa_tile_d256", 16, 64),
            _ => return Ok(false),
        }
    };
    // The kernel maps KV heads as h / (n_head / n_head_kv).
    if k.ne[2] <= 0 || q.ne[2] % k.ne[2] != 0 || q.ne[1] <= 0 {
        return Ok(false);
    }
    let groups = (q.ne[1] as usize).div_ceil(rows);
    let heads = (q.ne[2] * q.ne[3]) as usize;
    out.push(grid(
        b,
        program,
        name,
        [wg, groups, heads],
        Some([wg, 1, 1]),
        "flash_attn",
        |a| {
            fa.bind_inputs(a)?;
            fa.bind_params(a)?;
            a.tensor_out(&dst)?;
            Ok(())
        },
    )?);
    Ok(true)
}

/// Zeroes the arrival counters once, when the plan is built: the kernel puts
/// each back to 0 after its merge, so no run needs a launch for it. Every
/// split node of the plan enqueues the fill (it is idempotent and ordered
/// before the plan's first run by the in-order queue), which keeps this free
/// of state about which node came first.
fn zero_counters(b: &Binder, scratch: cl_mem, offset: u64, len: u64) -> Result<()> {
    let pattern = [0u8; 4];
    // SAFETY: `scratch` is the plan's live scratch buffer, `offset + len` lies
    // inside it (the layout above reserves the counters there), the pattern
    // is copied at enqueue time, and nothing else uses the range until the
    // plan runs on this same in-order queue.
    let ev = unsafe {
        cq::enqueue_fill_buffer(
            b.device.queue()?.get(),
            scratch,
            pattern.as_ptr() as *const c_void,
            pattern.len(),
            offset as usize,
            len as usize,
            0,
            std::ptr::null(),
        )
    };
    finish_event(ev, "clEnqueueFillBuffer")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(dtype: GgmlType, ne: [i64; 4]) -> TensorType {
        TensorType::contiguous(dtype, ne)
    }

    /// The partial-state scratch holds every chunk state any kernel family
    /// writes: the GQA kernel's chunks are sized for its groups of a KV
    /// head's rows, so its chunk count can exceed the vector kernels' (step
    /// 39's first build overran the scratch that way), and the cols kernel's
    /// for its share of the device's groups.
    #[test]
    fn partial_states_fit_every_kernel_family() {
        for (n_q, n_head, n_head_kv, n_kv, d) in [
            (1, 32, 4, 16384, 64),
            (1, 32, 4, 256, 64),
            (1, 32, 4, 768, 64),
            (3, 32, 8, 1024, 128),
            (3, 24, 8, 4096, 64),
            (8, 12, 1, 113, 128),
            (1, 16, 16, 4096, 128),
        ] {
            let q = ty(GgmlType::F32, [d, n_q, n_head, 1]);
            let k = ty(GgmlType::F16, [d, n_kv, n_head_kv, 1]);
            let v = k.clone();
            let per_chunk = (n_q * n_head * state_floats(d) * 4) as u64;
            let vec_chunks = chunks(&q, &k) as u64;
            for (long, cols) in [(1, 1), (396, 264), (264, 396), (100_000, 100_000)] {
                let bytes = partial_bytes(&q, &k, &v, SplitGroups { long, cols });
                assert!(bytes >= vec_chunks * per_chunk);
                for heads in [1, 2, 4] {
                    let lc = long_chunk(&q, &k, long, heads);
                    assert!(lc >= chunk(&q, &k) && lc % FL_WG == 0);
                    assert!(bytes >= chunk_count(&k, lc) as u64 * per_chunk);
                }
                if let Some(ratio) = heads_per_kv(&q, &k).filter(|r| (1..=COLS).contains(r)) {
                    let cc = cols_chunk(&q, &k, ratio, cols);
                    assert!(cc >= COLS_STEP && cc % COLS_STEP == 0);
                    assert!(bytes >= chunk_count(&k, cc) as u64 * per_chunk);
                }
            }
            if let Some(ratio) = gqa_ratio(&q, &k) {
                let c = gqa_chunk(&q, &k, ratio);
                assert!((GQA_MIN_CHUNK..=MAX_CHUNK).contains(&c) && c.count_ones() == 1);
                let gqa_chunks = (n_kv as u64).div_ceil(c as u64);
                let one = SplitGroups { long: 1, cols: 1 };
                assert!(partial_bytes(&q, &k, &v, one) >= gqa_chunks * per_chunk);
            } else {
                assert!(n_head == n_head_kv || n_head / n_head_kv > GQA_ROWS);
            }
        }
    }

    /// A quantized K or V's F16 copy takes two bytes an element, rounded up
    /// to 128 so that the next copy's rows stay 16-byte aligned (what the
    /// tensor-core kernels load at once); F16 operands need none.
    #[test]
    fn f16_copies_of_quantized_caches_stay_aligned() {
        for dtype in [GgmlType::Q8_0, GgmlType::Q4_0] {
            for ne in [[64, 113, 4, 1], [128, 1, 1, 1], [64, 256, 8, 3]] {
                let bytes = f16_copy_bytes(&ty(dtype, ne));
                let f16 = ty(GgmlType::F16, ne);
                assert!(bytes >= f16.span_bytes() && bytes.is_multiple_of(128));
                assert!(bytes < f16.span_bytes() + 128);
            }
        }
        assert_eq!(f16_copy_bytes(&ty(GgmlType::F16, [64, 113, 4, 1])), 0);
        let l = Layout {
            counters: 128,
            partials: 100,
            dequantized: 256,
        };
        assert_eq!(l.bytes(), 128 + 128 + 256);
    }

    /// The long kernel's heads a group divide G, and head size 128 takes at
    /// most 2 (POLYCL_FA_LONG_HEADS=4); with 1 (the default) every group
    /// takes one head.
    #[test]
    fn long_heads_divide_the_query_heads_of_a_kv_head() {
        for (n_head, n_head_kv, d, want) in [
            (32, 4, 64, 4),
            (32, 4, 128, 2),
            (32, 8, 64, 4),
            (16, 8, 64, 2),
            (12, 4, 64, 1),
            (24, 4, 64, 2),
            (32, 32, 64, 1),
            (32, 32, 128, 1),
            (8, 1, 128, 2),
        ] {
            let q = ty(GgmlType::F32, [d, 1, n_head, 1]);
            let k = ty(GgmlType::F16, [d, 2048, n_head_kv, 1]);
            let heads = long_heads(&q, &k, d, 4);
            assert_eq!(heads, want, "{n_head} heads on {n_head_kv}, head size {d}");
            assert_eq!((n_head / n_head_kv) % heads, 0);
            assert_eq!(long_heads(&q, &k, d, 2), want.min(2));
            assert_eq!(long_heads(&q, &k, d, 1), 1);
        }
    }

    #[test]
    fn gqa_rows_cover_every_query_head() {
        // G query heads a KV head, 16 / G queries a group: every (query,
        // head) row falls in exactly one group.
        for (n_q, ratio) in [(1, 8), (3, 4), (5, 16), (2, 2), (7, 3)] {
            let q = ty(GgmlType::F32, [64, n_q, 8 * ratio, 1]);
            let per_group = GQA_ROWS / ratio;
            let groups = gqa_query_groups(&q, ratio);
            assert!(groups * per_group >= n_q);
            assert!((groups - 1) * per_group < n_q);
            assert!(per_group * ratio <= GQA_ROWS);
        }
        let q = ty(GgmlType::F32, [64, 1, 32, 1]);
        assert_eq!(gqa_ratio(&q, &ty(GgmlType::F16, [64, 10, 4, 1])), Some(8));
        assert_eq!(gqa_ratio(&q, &ty(GgmlType::F16, [64, 10, 32, 1])), None);
        assert_eq!(gqa_ratio(&q, &ty(GgmlType::F16, [64, 10, 1, 1])), None);
        assert_eq!(state_floats(64), 68);
        assert_eq!(state_floats(66), 72);
    }
}
