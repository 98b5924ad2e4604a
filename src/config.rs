//! Every environment variable polycl reads, read once, in one table.
//!
//! | variable | values | meaning |
//! |---|---|---|
//! | `POLYCL_DEVICES` | comma list of indices into the usable OpenCL devices, e.g. `0,2` | which devices become POLYCL0, POLYCL1, ... (default: all) |
//! | `POLYCL_LOG` | `0` or `1` | `1` logs debug lines (plans built, cache hits) |
//! | `POLYCL_PLAN_CACHE` | positive integer | plans kept per backend (default 64) |
//! | `POLYCL_PROGRAM_CACHE` | a folder, or `0` | where built kernel binaries are kept across runs (default `$XDG_CACHE_HOME/polycl` or `~/.cache/polycl`); `0` disables |
//! | `POLYCL_FAST_KERNELS` | `0` or `1` | `1`: fast (not CPU-bit-exact) matmul kernels on every device; `0`: portable kernels everywhere (default: fast on GPUs whose work-groups hold at least 256 work-items, `plan/mul_mv.rs` `wanted`) |
//! | `POLYCL_MAX_WORK_GROUP` | 64 to 65536 | treat every device as allowing at most this many work-items a work-group, below what it reports (tests: what GPUs with narrower work-groups get) |
//! | `POLYCL_MEM_LIMIT_MB` | positive integer | refuse device allocations beyond this many MiB per device (fault testing) |
//! | `POLYCL_FUSE` | `0` or `1` | `1` (default): on devices that run the fast kernels, fuse decode-step ops (norm, matmul groups, GLU, rope + cache writes) into fewer launches; `0`: one launch per op |
//! | `POLYCL_FUSE_SKIP` | comma list of fusion pass names (`passes/fuse/mod.rs` NAMES: `row_select`, `rms_norm`, `matmul_glu`, `matmul_group`, `rope_store`, `rope_rot_store`, `group_rope`, `fa_rotation`, `matmul_norm`), or empty | skip these passes, for measuring what each one buys (default empty: every pass runs) |
//! | `POLYCL_MMA` | `0` or `1` | prompt-size quantized matmuls and flash attention (head sizes 64 and 128) with tensor-core tiles (`mma.sync` on NVIDIA; a portable emulation elsewhere, for tests): default on for NVIDIA devices of compute capability 8.0 or later (`mma.sync` m16n8k32 and `cp.async`), off elsewhere |
//! | `POLYCL_FLUSH_EVERY` | positive integer | flush the queue after this many launches of a graph compute, so the device starts while the host enqueues (default 16) |
//! | `POLYCL_MMA_TILE` | `WM,WN,MT,NT,KB`, e.g. `2,2,2,4,4` | shape of the tensor-core prompt tile (`mul_mm_mma.cl`): WM x WN warps (WM, WN in 1, 2, 4; WM*WN in 2, 4, 8), each MT x NT m16n8 tiles (MT in 1, 2, 4; NT in 1, 2, 4, 8), so WM*MT*16 weight rows by WN*NT*8 tokens, KB (1, 2, 4, 8) 32-element blocks per local-memory stage (Q4_0 at least 2, Q8_0 half as many, at least 2; Q4_K always 4); its local memory must fit in 48 KiB (default `2,2,4,4,4`, 128 rows x 64 tokens): a tuning knob, swept per GPU |
//! | `POLYCL_MV_UNROLL` | 1 to 16 | Q8_1 blocks each lane of a decode matvec has in flight per row, for every weight type (default 4, and for Q4_0 1 with `POLYCL_MV_LOADS=pairs` or 2 with `words`: the best measured on the H200, docs/perf.md steps 32 and 67): a tuning knob for memory-level parallelism, measured per GPU with `scripts/bench-gpu.sh` |
//! | `POLYCL_MV_LOADS` | `words` or `pairs` | how the Q4_0 decode matvecs load their blocks on rows of more than 64 blocks: `pairs` (default), a lane two adjacent blocks as whole aligned words; `words`, a lane a block, as aligned 4-byte words with a select for its alignment (`kernels/mul_mv.cl` MV_PAIRS; on the H200 the 7B Q4_0's decode span 3.4% shorter with pairs, docs/perf.md step 61) |
//! | `POLYCL_GLU_WARPS` | 4, 8 or 16 | warps a work-group of the decode GLU kernel (gate and up matvecs + swiglu), which makes 32 rows, so each warp takes 32 / warps of them in sequence, for every GLU. Default: 8 (on the H200 the 7B Q4_0's GLU took 24.1 us a launch at 8 and 26.8 at 16, the Q8_0's 31.1 and 38.3, docs/perf.md step 44), and 16 for a Q4_0 GLU on NVIDIA whose 512-wide groups are at most two a compute unit (the 1B's: 11% less GLU time, step 51, `plan/fused_matmul.rs` `glu_shape`); a device whose work-groups can not be that wide gets 8; not 32, whose 1024 work-items a group NVIDIA only runs at up to 64 registers, which the K-quant GLU kernels exceed: a tuning knob |
//! | `POLYCL_MVN_SPLIT` | `1` or `2` | warps a row pair of the decode matvec + norm kernel (MulMatAddNorm), each over its share of the row. Default: 2 for a Q4_0 one on NVIDIA with at most half as many work-groups as compute units (a 1B model's) and rows of at least 128 blocks (`kernel_mul_mv_norm2_q4_0`, 1024 wide: half the round trips a warp), unless the attention + O pair is on; 1 otherwise. `2` splits Q4_0 and Q8_0 ones (`kernel_mul_mv_norm2_q8_0`; on the H200 the 7B Q8_0 ran no faster with it, docs/perf.md step 73) wherever the device takes 1024 work-items a group: a tuning knob |
//! | `POLYCL_WRITE` | `batch`, `async` or `blocking` | ggml's small tensor writes (a decode step's inputs): `batch` (default; `async` on Mesa's rusticl, upload.rs) holds writes that fit one kernel's arguments (960 bytes, of which each write's address and length take 12) until the device's next command and makes them one launch, and enqueues other writes up to 256 KiB as `async` does; `async` enqueues each write up to 256 KiB from a host copy without waiting for it (the device's in-order queue still runs it before anything enqueued later); `blocking` waits for each |
//! | `POLYCL_FA_GROUPS` | 1 to 65536 | decode flash attention: about how many work-groups the vector and GQA kernels split a graph's KV cache into (each takes a power-of-two chunk of 32 to 256 positions of one head; a head that is one chunk skips the merge's fence and arrival counter), default 256: a tuning knob, measured per GPU with `llama-bench` |
//! | `POLYCL_FA_GQA_MIN_KV` | 0 to 2147483647 | decode flash attention: the shortest KV cache (positions, as the graph holds it: llama pads to 256) that the grouped-query tensor-core kernel takes where it applies and the long-cache kernel does not (from `POLYCL_FA_LONG_KV`); shorter ones go to the vector kernel (default 512: on the H200 the 1B's attention at 256 positions took 12.8 us a layer with the vector kernel, 17.0 with the GQA kernel, docs/perf.md step 42; at 4096, 29.2 and 25.1, step 41): a tuning knob |
//! | `POLYCL_FA_ONE_KV` | 0 to 2147483647 | decode flash attention: the longest KV cache (positions, as the graph holds it) that one 512-wide work-group a query head takes whole (`kernel_fa_one_*`: no partial states, counter or merge), where that is one step of its loads (256 positions at head sizes up to 64, 128 up to 128; two steps with `POLYCL_ATTN_OH`), the vector kernels apply and neither the GQA kernel nor the attention + O pair takes the node (default 256, llama's shortest padded cache; 0: never; on the H200 the 1B's GPU span a token ~1% shorter, docs/perf.md step 52) |
//! | `POLYCL_FA_LONG_KV` | 0 to 2147483647 | decode flash attention: the shortest KV cache (positions, as the graph holds it) that the long-cache kernel takes (`kernel_fa_long_*`: 8 lanes a key with 16-byte loads and one exponential a lane a step, llama.cpp's CUDA shape; `kernel_fa_long_gqa*`: up to 4 query heads of a KV head a group, `POLYCL_FA_LONG_HEADS`), where the vector or the tensor-core GQA kernels would and K/V rows are 16-byte aligned with DK = DV of 64 or 128 (default 512: on the H200 the 7B Q4_0 at depth 1024 decoded ~10% faster with it, at 256 and 512 positions no faster, docs/perf.md step 74; on the H100 the 1B, 8 query heads a KV head, 24% faster at 4096 than with the GQA kernel, step 76, and 20-24% at 512 and 768, step 77; at 256 no faster, so those stay with the vector and whole-cache kernels; 0: never): a tuning knob |
//! | `POLYCL_FA_LONG_GROUPS` | 1 to 65536 | decode flash attention: how many work-groups the long-cache kernel and the cols kernel (`POLYCL_FA_COLS_KV`) split a graph's cache into (chunks a multiple of 128 and 64 positions; default 3 a compute unit for the long-cache kernel, one wave of its 168-register groups on the H200, and 2 for the cols kernel, one wave of its ~210-register groups): a tuning knob |
//! | `POLYCL_FA_LONG_HEADS` | 1, 2 or 4 | decode flash attention: the most query heads of one KV head that a work-group of the long-cache kernel takes (`kernel_fa_long_gqa4_d64`, `_gqa2_d64`, `_gqa2_d128`; a group holds q and an accumulator a head, so head size 128 takes at most 2), where that many divide the heads a KV head has; default 1, a head a group, every K/V row read once a head (from L2 after the first: on the H100 the 1B decoded 583 tokens/s at 4096 cached positions with 1, 568 with 2, 537 with 4, docs/perf.md step 76): a tuning knob |
//! | `POLYCL_FA_COLS_KV` | 0 to 2147483647 | decode flash attention on GPUs with tensor cores: the shortest KV cache (positions, as the graph holds it) that the tensor-core kernel with a KV head's query heads as its tile's columns takes (`kernel_fa_gqa_cols_*`: 1 to 8 query heads a KV head at head size 64 or 128, each K/V row read once for all of them with 16-byte loads), before the long-cache kernel (default 16384: on the H100 the 7B Q4_0 and the 1B decoded ~4% faster with it there; at 4096 cached positions the 7B the same, the 1B 6% slower, docs/perf.md step 79; 0: never): a tuning knob |
//! | `POLYCL_FA_Q8_KV` | 0 to 2147483647 | decode flash attention over a Q8_0 or Q4_0 K and V cache of one type (`-ctk q8_0 -ctv q8_0`, `q4_0`): the shortest cache (positions, as the graph holds it) that the long-cache kernel reads as its blocks lie (`kernel_fa_long_q8_*`, `kernel_fa_long_q4_*`, head sizes 64 and 128: 34 or 18 bytes a 32 elements where the F16 copy every other kernel reads costs a launch, 64 bytes written and 64 read); shorter ones and other shapes go through the F16 copy (default 1, every cache; 0: never): a tuning knob |
//! | `POLYCL_FA_ONE_FENCE` | `0` or `1` | decode flash attention split into chunks: `1` (default): each work-group publishes its chunk's state with one device fence, its first work-item's after the group barrier (the form of CUDA's grid sync); `0`: one a work-item. On the H100 the 7B Q4_0 decoded 1.0% faster with one, the 7B Q8_0 and the 1B the same (docs/perf.md step 79) |
//! | `POLYCL_ATTN_O` | `0` or `1` | `1`: a decode step's short-cache attention (`kernel_fa_short_*`) and the O projection that reads it run as one launch, by ticket (`plan/attn_o.rs`); `0` (default): two launches, the attention by the vector kernels (on the H200 the pair measured no faster: its launch cost the host more, docs/perf.md step 45; with the host's cost down, the 1B ran 3-5% slower with it, step 49) |
//! | `POLYCL_ATTN_OH` | `0` or `1` | `1`: where one work-group a head takes a decode step's whole cache and the O projection after it is a Q4_0 or Q8_0 MulMatAddNorm, one launch does both by heads (`kernels/attn_oh.cl`, `plan/attn_o.rs`): each head's groups multiply its output by its columns of W_o and add into the row in 64-bit fixed point, and the last group does the epilogue; with it, one group a head also takes caches of two steps (256 positions at head sizes up to 128); `0` (default): two launches (on the H200 the launch by heads made the 1B's GPU span 55-78 us a token longer and the 7B's ~255 us, docs/perf.md step 59) |
//! | `POLYCL_ATTN_OH_SPLIT` | 1 to 8 | with `POLYCL_ATTN_OH`: work-groups a head, each taking its share of W_o's rows (default: the device's compute units over the heads, 1 to 8): a tuning knob |
//! | `POLYCL_FA_SHORT_KV` | 0 to 2147483647 | with `POLYCL_ATTN_O=1`: the longest KV cache (positions, as the graph holds it) whose decode attention takes the short-cache kernel, which the pair needs (default 256, llama's shortest padded cache; 0: never) |
//! | `POLYCL_ATTN_O_MAXRREG` | 32 to 128 | NVIDIA: cap the attention + O projection kernels' registers per work-item (`-cl-nv-maxrregcount`), so that two of their 512-wide work-groups fit on a compute unit (default: no cap; a tuning knob) |
//! | `POLYCL_BUFFER_ADDRESSES` | `0`, `1` or `reads` | which buffers the decode kernels (program.rs `BY_ADDRESS`: matvec, norm, rope, attention, the attention + O pair) take as their device addresses, ulong arguments read back once when a plan binds a launch, instead of buffer arguments (`runtime/addresses.rs`): `1` (default) all, `reads` the ones a kernel only reads, `0` none; not by default on Mesa's rusticl (device.rs `is_rusticl`); only on a device alone in its OpenCL context that passes a check at first use, elsewhere buffers stay arguments. NVIDIA's enqueue costs ~0.4 us a buffer argument and ~0.05 us a ulong; on the H200 a 1B token took ~170-270 us less of the host's time and the 7B's GPU time did not change (docs/perf.md step 48) |
//! | `POLYCL_HANDOFF` | `0`, `1` or `serial` | `1` (default on NVIDIA GPUs of compute capability 9.0 and later, where it was measured): a decode step's runs of decode kernels alternate between two in-order queues, and each launch's work-groups wait at their top on an arrival counter that every work-group of the launch before increments at its end (`runtime/handoff.rs`), so a launch's groups start while the one before drains; only for plans whose every such launch fits `POLYCL_HANDOFF_WIDTH` and whose chained launches form one chain (chains broken by a launch that is not chained were slower: docs/perf.md step 84) (on the H200 the 1B Q4_0 decoded 8-12% faster; the 7B's Q/K/V launch is wider, and the 7B's chains ended at it were 13% slower, docs/perf.md step 63); `1` on another NVIDIA GPU is for trying (a GPU that holds fewer groups a compute unit gives up waits: the compute that finds one runs again in order, see `POLYCL_HANDOFF_CHECK`, and from the third such compute the device goes on without the hand-off); `serial`: the same counters on the one queue (tests); `0` (default elsewhere): one queue, no counters |
//! | `POLYCL_HANDOFF_WIDTH` | 1 to 1048576 | with `POLYCL_HANDOFF=1`: a plan is handed off only if none of its chainable decode launches but the last (the lm head) has more work-items than this many a compute unit (default 1024: the later groups of a launch that does not fit on the device at once find their places held by its successor's waiting groups, and the 7B's multi-wave launches were slower chained every way measured) |
//! | `POLYCL_HANDOFF_CHECK` | 1 to 1048576 | with the hand-off on two queues: computes between two reads of its failure record (default 1: read behind every compute and looked at when the host next waits for the device, so that a wait that gave up, whose compute's results are wrong, is found before the host reads them, and that compute runs again in order after its overwritten inputs are copied back (`plan/rerun.rs`), and the reads behind it read again; a plan that may not run again (state variables) waits for its record behind each compute and fails with an error; more: read every that many computes without waiting, and a wait that gave up fails a later compute with an error) |
//! | `POLYCL_HANDOFF_SLEEP` | 0 to 10000 | with `POLYCL_HANDOFF`, NVIDIA sm_70 and later: nanoseconds a waiting work-group sleeps between polls of its counter (default 0: it polls without pause) |
//! | `POLYCL_STEP` | `0` or `1` | `1`: run each run of fused decode kernels as one persistent launch with grid-wide barriers between them (`kernels/step.cl`; one work-group on CPU devices, for tests); `0` (default): one launch per kernel. It measured no faster on the H200 (docs/perf.md step 10) |
//! | `POLYCL_STEP_GROUPS` | 1 to 32 | work-groups of the step kernel per compute unit, tried first by the residency check (default 4) |
//! | `POLYCL_STEP_MAXRREG` | 32 to 255 | NVIDIA: cap the step kernel's registers per work-item (`-cl-nv-maxrregcount`), so more of its work-groups fit on a compute unit (default: no cap) |
//! | `POLYCL_STEP_MAX_MB` | 0 to 65536 | a kernel joins a step launch only if its weights take at most this many MiB (default 8): large matvecs run faster as launches of their own |
//! | `POLYCL_PROFILE` | `0`, `1`, `span` or `groups` | `1`: log each graph compute's GPU time per kernel from OpenCL profiling events, and each kernel's cost in the launch chain (the next launch's start minus its own), which events on every launch make the host slower to feed (drains the queue after every compute: for finding where time goes, not for speed figures); `span`: events on each compute's first and last launch only, nothing drained, and one line a compute (at the next one) with the host's enqueue time, how long the first kernel waited to start, the GPU's span from the first kernel's start to the last one's end, and how long the GPU sat idle since the compute before: where a token's time goes between the host and the device; `groups` (NVIDIA, buffers by address): each decode kernel's work-groups timed by the GPU's own clock, the queue drained after every compute, and lines a compute of each launch's gap to the one before, its waves, its tail, its groups' run and hand-off wait (runtime/trace.rs) |
//! | `POLYCL_PROFILE_TWICE` | a kernel name, e.g. `kernel_mul_mv_q4_0` | benchmarks only: launch every launch of that kernel twice, so the difference in a benchmark's time is what the kernel costs inside the real launch chain (profiling events overstate short kernels by ~5 us on the H200, docs/perf.md step 15); the results are wrong |
//! | `POLYCL_Q8_CACHE` | `0`, `1` or `2` | graph-scoped Q8_1 activation cache: `0` off, `1` on (default), `2` on and hit/miss counters logged once per graph compute |
//! | `POLYCL_FAULT` | comma list of `panic:ENTRY`, `alloc`, `build`, `queue`, `handoff`, each optionally `@N` | tests only: make the N-th such event fail once (see `fault.rs`) |

use crate::error::{Error, Result};
use std::sync::OnceLock;

#[derive(Debug, Clone, Default)]
pub struct Config {
    pub devices: Option<Vec<usize>>,
    pub verbose: bool,
    pub plan_cache_size: usize,
    pub mem_limit: Option<usize>,
    /// Work-items a work-group at most, below the device's own limit
    /// (`POLYCL_MAX_WORK_GROUP`, tests).
    pub max_work_group: Option<usize>,
    /// Injected faults (`POLYCL_FAULT`), for reliability tests.
    pub faults: Vec<crate::fault::Fault>,
    pub fast_kernels: Option<bool>,
    /// Fusion passes on fast-kernel devices (`POLYCL_FUSE`, default on).
    pub fuse: bool,
    /// Fusion passes not to run (`POLYCL_FUSE_SKIP`).
    pub fuse_skip: Vec<String>,
    /// Tensor-core prompt matmuls and attention (`POLYCL_MMA`); None: on
    /// NVIDIA sm_80 and later (`Device::has_mma`).
    pub mma: Option<bool>,
    /// Launches between queue flushes in a graph compute (`POLYCL_FLUSH_EVERY`).
    pub flush_every: usize,
    /// Loop unroll of the decode matvecs' block loop (`POLYCL_MV_UNROLL`);
    /// None: per type (`mv_unrolls`).
    pub mv_unroll: Option<u32>,
    /// The Q4_0 decode matvecs take two blocks a lane at a time
    /// (`POLYCL_MV_LOADS=pairs`, the default) instead of one.
    pub mv_pairs: bool,
    /// Target work-groups of the split-KV decode attention (`POLYCL_FA_GROUPS`).
    pub fa_groups: u32,
    /// Warps a work-group of the decode GLU kernel (`POLYCL_GLU_WARPS`);
    /// None: 8, or 16 for GLUs of few work-groups (plan/fused_matmul.rs).
    pub glu_warps: Option<u32>,
    /// Warps a row pair of MulMatAddNorm (`POLYCL_MVN_SPLIT`); None: by shape
    /// (plan/matmul_norm.rs).
    pub mvn_split: Option<u32>,
    /// Shortest cache of the GQA decode attention kernel (`POLYCL_FA_GQA_MIN_KV`).
    pub fa_gqa_min_kv: u32,
    /// Longest cache of the short decode attention kernel (`POLYCL_FA_SHORT_KV`).
    pub fa_short_kv: u32,
    /// Longest cache that one work-group a head takes whole (`POLYCL_FA_ONE_KV`).
    pub fa_one_kv: u32,
    /// Shortest cache of the long-cache decode attention kernel
    /// (`POLYCL_FA_LONG_KV`; 0: never).
    pub fa_long_kv: u32,
    /// Work-groups the long-cache kernel splits a cache into
    /// (`POLYCL_FA_LONG_GROUPS`); None: three a compute unit.
    pub fa_long_groups: Option<u32>,
    /// Most query heads a group of the long-cache kernel takes
    /// (`POLYCL_FA_LONG_HEADS`: 1, 2 or 4; 1 by default: on the H100 the 1B
    /// decoded fastest with one, its KV heads' rows read again from L2,
    /// docs/perf.md step 76).
    pub fa_long_heads: u32,
    /// The shortest cache that the tensor-core kernel with a KV head's query
    /// heads as its tile's columns takes (`POLYCL_FA_COLS_KV`, 0: never).
    pub fa_cols_kv: u32,
    /// The shortest Q8_0 or Q4_0 cache that the long-cache kernel reads as its blocks
    /// lie (`POLYCL_FA_Q8_KV`, 0: never).
    pub fa_q8_kv: u32,
    /// One device fence a group where the split attention publishes a
    /// chunk (`POLYCL_FA_ONE_FENCE`, default on: the 7B Q4_0 decoded 1.0%
    /// faster on the H100, docs/perf.md step 79).
    pub fa_one_fence: bool,
    /// Attention and O projection in one launch (`POLYCL_ATTN_O`, default off).
    pub attn_o: bool,
    /// Attention and O projection in one launch by heads (`POLYCL_ATTN_OH`,
    /// default off).
    pub attn_oh: bool,
    /// Work-groups a head of that launch (`POLYCL_ATTN_OH_SPLIT`).
    pub attn_oh_split: Option<usize>,
    /// Register cap of those kernels on NVIDIA (`POLYCL_ATTN_O_MAXRREG`).
    pub attn_o_maxrreg: Option<u32>,
    /// Tensor-core prompt tile shape (`POLYCL_MMA_TILE`).
    pub mma_tile: MmaTile,
    /// How small tensor writes are enqueued (`POLYCL_WRITE`).
    pub write_mode: WriteMode,
    /// Profiling events and what the log says of them (`POLYCL_PROFILE`).
    pub profile: Profile,
    /// A kernel launched twice for timing (`POLYCL_PROFILE_TWICE`).
    pub profile_twice: Option<String>,
    /// The persistent step kernel (`POLYCL_STEP`); None: off.
    pub step: Option<bool>,
    /// Launches handed off between two queues by counters (`POLYCL_HANDOFF`);
    /// None: on where measured (runtime/handoff.rs `mode`).
    pub handoff: Option<Handoff>,
    /// Nanoseconds between a waiting group's polls (`POLYCL_HANDOFF_SLEEP`).
    pub handoff_sleep_ns: u32,
    /// Work-items a compute unit that a launch may have and still be waited
    /// on by counters (`POLYCL_HANDOFF_WIDTH`).
    pub handoff_width: usize,
    /// Computes between two reads of the hand-off's failure record
    /// (`POLYCL_HANDOFF_CHECK`): 1 reads it behind every compute, looked
    /// at when the host next waits, and runs a compute whose wait gave up
    /// again in order; more reads it
    /// every that many without waiting, and a wait that gave up fails a
    /// later compute.
    pub handoff_check_every: u64,
    /// Which decode-kernel buffers go by device address
    /// (`POLYCL_BUFFER_ADDRESSES`, runtime/addresses.rs); None: not asked,
    /// `All` where the device allows it.
    pub buffer_addresses: Option<BufferAddresses>,
    /// Step kernel work-groups per compute unit (`POLYCL_STEP_GROUPS`).
    pub step_groups_per_cu: usize,
    /// Largest weights (MiB) of a step phase (`POLYCL_STEP_MAX_MB`).
    pub step_max_mb: usize,
    /// Register cap of the step kernel on NVIDIA (`POLYCL_STEP_MAXRREG`).
    pub step_maxrreg: Option<u32>,
    pub program_cache_dir: Option<std::path::PathBuf>,
    /// 0 off, 1 on, 2 on with counters in the log.
    pub q8_cache: u8,
    /// Problems found while reading; logged once at init, each names its variable.
    pub problems: Vec<String>,
}

/// What `POLYCL_WRITE` asks for (runtime/upload.rs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WriteMode {
    /// Writes small enough for one kernel's arguments wait, unsent, for the
    /// device's next command and go as one launch; other small ones as `Async`.
    #[default]
    Batch,
    Async,
    Blocking,
}

/// What `POLYCL_HANDOFF` asks for (runtime/handoff.rs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Handoff {
    /// One queue, no counters.
    #[default]
    Off,
    /// Two queues alternating, ordered by the counters alone.
    On,
    /// The counters on the one queue, where the queue's order already
    /// satisfies every wait: the frame's results, for tests.
    Serial,
}

/// What `POLYCL_BUFFER_ADDRESSES` asks for: which buffers of the decode
/// kernels are passed as device addresses (ulong arguments) instead of
/// buffer arguments (runtime/addresses.rs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BufferAddresses {
    /// `0`: every buffer an argument.
    Off,
    /// `1`: every buffer by address (the default where the device allows it).
    #[default]
    All,
    /// `reads`: the buffers a kernel only reads by address, the ones it
    /// writes as arguments.
    Reads,
}

/// What `POLYCL_PROFILE` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Profile {
    #[default]
    Off,
    /// Every launch's event, the queue drained after each compute.
    Kernels,
    /// Events on each compute's first and last launch only.
    Span,
    /// Every decode work-group's start and end (runtime/trace.rs).
    Groups,
}

impl Config {
    /// Unroll of the decode matvecs' block loop: (Q4_0, every other type).
    /// On the H200 (tg128 fa1, 2 / 4 / 8): the 7B Q4_0 ran 437 / 428 / 417
    /// tokens/s (its blocks then loaded as words), the Q8_0 326 / 328 / 321. With its
    /// pairs (the default) the Q4_0 words are only the fallback for rows the
    /// pairs do not fit, and 1 there (with the Q/K/V + rope kernel's late
    /// epilogue) made the 7B Q4_0 1.8% faster and left the 1B's as it was
    /// (docs/perf.md step 67).
    pub fn mv_unrolls(&self) -> (u32, u32) {
        let q4_0 = if self.mv_pairs { 1 } else { 2 };
        self.mv_unroll.map_or((q4_0, 4), |n| (n, n))
    }
}

/// Shape of the tensor-core prompt tile of `mul_mm_mma.cl`: `wm` x `wn`
/// warps, each `mt` x `nt` m16n8 tiles, `kb` 32-element blocks per stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmaTile {
    pub wm: usize,
    pub wn: usize,
    pub mt: usize,
    pub nt: usize,
    pub kb: usize,
}

impl Default for MmaTile {
    fn default() -> Self {
        // 128 weight rows x 64 tokens: on the H200, 7B pp512 4251 tokens/s
        // against 3479 for 64x64 (Q4_0; Q8_0 3782 vs 3162), the 1B 8% slower
        // (docs/perf.md step 16).
        MmaTile {
            wm: 2,
            wn: 2,
            mt: 4,
            nt: 4,
            kb: 4,
        }
    }
}

/// Local memory a work-group may use: NVIDIA's static limit, which the
/// kernel's fixed-size local arrays cannot exceed.
const MMA_LOCAL_LIMIT: usize = 48 << 10;

/// Stages of the raw-staged mma tiles in local memory at once: one
/// computing while the next is copied (cp.async). Three measured no faster
/// on the H200 with the smaller stages they need to fit (docs/perf.md step 18).
const MMA_NBUF: usize = 2;

impl MmaTile {
    /// Work-items per work-group (32 per warp).
    pub fn work_items(&self) -> usize {
        32 * self.wm * self.wn
    }

    /// Weight rows per tile.
    pub fn rows(&self) -> usize {
        self.wm * self.mt * 16
    }

    /// Tokens per tile.
    pub fn tokens(&self) -> usize {
        self.wn * self.nt * 8
    }

    /// Bytes of local memory the largest of the tile's kernels declares,
    /// with the emulation's 6 ints per work-item (not declared on NVIDIA,
    /// counted anyway so one shape is valid everywhere):
    /// - Q6_K (`kernel_mul_mm_mma_q6_k`): int8 rows of MMA_S ints for weights
    ///   and tokens, two floats per weight unit, a (d, s) pair per token block;
    /// - Q4_0 / Q8_0 (MMA_RAW_KERNEL): MMA_NBUF stages of blocks as they lie
    ///   in memory, 18 / 34 bytes a weight block and 36 a Q8_1 block, with
    ///   MMA_RKB_Q4_0 / MMA_RKB_Q8_0 blocks a stage;
    /// - Q4_K (MMA_RAW_KERNEL): MMA_NBUF stages of 4 units, a weight row's
    ///   codes in 18 words, 4 Q8_1 blocks a token, 8 decoded scales a row.
    pub fn local_bytes(&self) -> usize {
        let stride = self.kb * 8 + if self.kb == 1 { 0 } else { 8 };
        let q6_k = 4
            * ((self.rows() + self.tokens()) * stride
                + self.kb * self.rows() * 2
                + self.kb * self.tokens() * 2);
        let raw = |rkb: usize, bb: usize| MMA_NBUF * rkb * (self.rows() * bb + self.tokens() * 36);
        let q4_0 = raw(self.kb.max(2), 18);
        let q8_0 = raw((self.kb / 2).max(2), 34);
        let q4_k = MMA_NBUF * (self.rows() * (18 * 4 + 8 * 4) + self.tokens() * 4 * 36);
        [q6_k, q4_0, q8_0, q4_k].into_iter().max().unwrap_or(0) + 4 * self.work_items() * 6
    }

    /// The kernel's build options.
    pub fn defines(&self) -> String {
        format!(
            "-DMMA_WM={} -DMMA_WN={} -DMMA_MT={} -DMMA_NT={} -DMMA_KB={} -DMMA_NBUF={MMA_NBUF}",
            self.wm, self.wn, self.mt, self.nt, self.kb
        )
    }
}

fn parse_mma_tile(v: &str) -> std::result::Result<MmaTile, String> {
    let n: Vec<usize> = v
        .split(',')
        .map(|p| p.trim().parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| "expected five integers WM,WN,MT,NT,KB".to_string())?;
    let [wm, wn, mt, nt, kb] = n[..] else {
        return Err("expected five integers WM,WN,MT,NT,KB".to_string());
    };
    let t = MmaTile { wm, wn, mt, nt, kb };
    if ![1, 2, 4].contains(&wm) || ![1, 2, 4].contains(&wn) || ![2, 4, 8].contains(&(wm * wn)) {
        return Err(format!(
            "WM={wm}, WN={wn}: each must be 1, 2 or 4 and WM*WN 2, 4 or 8"
        ));
    }
    if ![1, 2, 4].contains(&mt) || ![1, 2, 4, 8].contains(&nt) || ![1, 2, 4, 8].contains(&kb) {
        return Err(format!(
            "MT={mt}, NT={nt}, KB={kb}: MT must be 1, 2 or 4, NT and KB 1, 2, 4 or 8"
        ));
    }
    let bytes = t.local_bytes();
    if bytes > MMA_LOCAL_LIMIT {
        return Err(format!(
            "needs {bytes} bytes of local memory, more than {MMA_LOCAL_LIMIT}"
        ));
    }
    Ok(t)
}

/// A `0`/`1` setting that is off unless it is `1`; anything else is a
/// problem, and off.
fn off_unless_one(
    get: &dyn Fn(&str) -> Option<String>,
    name: &str,
    problems: &mut Vec<String>,
) -> bool {
    switch(get, name, false, problems)
}

/// `0` or `1` in `name`, or `default` where it is unset or bad (with a
/// problem saying so).
fn switch(
    get: &dyn Fn(&str) -> Option<String>,
    name: &str,
    default: bool,
    problems: &mut Vec<String>,
) -> bool {
    match get(name).as_deref().map(str::trim) {
        None => default,
        Some("0") => false,
        Some("1") => true,
        Some(v) => {
            problems.push(format!(
                "{name}={v:?}: expected 0 or 1; using {}",
                u8::from(default)
            ));
            default
        }
    }
}

/// A count of KV cache positions in `name` (0 to i32::MAX, the kernels'
/// int), or `default` where it is unset or bad (with a problem saying so).
fn positions(
    get: &dyn Fn(&str) -> Option<String>,
    name: &str,
    default: u32,
    problems: &mut Vec<String>,
) -> u32 {
    let Some(v) = get(name) else { return default };
    match v.trim().parse::<u32>() {
        Ok(n) if n <= i32::MAX as u32 => n,
        _ => {
            problems.push(format!(
                "{name}={v:?}: expected an integer from 0 to 2147483647; using {default}"
            ));
            default
        }
    }
}

/// Reads the configuration through `get` (the environment in `get()`; a
/// table in tests).
pub fn parse(get: &dyn Fn(&str) -> Option<String>) -> Config {
    let mut c = Config {
        plan_cache_size: 64,
        q8_cache: 1,
        fuse: true,
        fuse_skip: Vec::new(),
        flush_every: 16,
        mv_pairs: true,
        fa_groups: 256,
        glu_warps: None,
        mvn_split: None,
        fa_gqa_min_kv: 512,
        fa_short_kv: 256,
        fa_one_kv: 256,
        fa_long_kv: 512,
        fa_long_groups: None,
        fa_long_heads: 1,
        fa_cols_kv: 16384,
        fa_q8_kv: 1,
        fa_one_fence: true,
        attn_o: false,
        attn_oh: false,
        attn_oh_split: None,
        attn_o_maxrreg: None,
        step_groups_per_cu: 4,
        step_max_mb: 8,
        handoff_width: 1024,
        handoff_check_every: 1,
        ..Default::default()
    };
    if let Some(v) = get("POLYCL_DEVICES") {
        match parse_devices(&v) {
            Ok(d) => c.devices = Some(d),
            Err(e) => c.problems.push(e.to_string()),
        }
    }
    if let Some(v) = get("POLYCL_LOG") {
        match v.trim() {
            "0" | "" => {}
            "1" => c.verbose = true,
            _ => c
                .problems
                .push(format!("POLYCL_LOG={v:?}: expected 0 or 1; ignored")),
        }
    }
    if let Some(v) = get("POLYCL_PLAN_CACHE") {
        match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => c.plan_cache_size = n,
            _ => c.problems.push(format!(
                "POLYCL_PLAN_CACHE={v:?}: expected a positive integer; using 64"
            )),
        }
    }
    c.program_cache_dir = match get("POLYCL_PROGRAM_CACHE") {
        Some(v) if v.trim() == "0" => None,
        Some(v) if std::path::Path::new(v.trim()).is_file() => {
            c.problems.push(format!(
                "POLYCL_PROGRAM_CACHE={v:?}: names a file, expected a folder or 0; not caching programs"
            ));
            None
        }
        Some(v) if !v.trim().is_empty() => Some(std::path::PathBuf::from(v.trim())),
        _ => get("XDG_CACHE_HOME")
            .filter(|x| !x.is_empty())
            .map(std::path::PathBuf::from)
            .or_else(|| get("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
            .map(|d| d.join("polycl")),
    };
    if let Some(v) = get("POLYCL_FAST_KERNELS") {
        match v.trim() {
            "0" => c.fast_kernels = Some(false),
            "1" => c.fast_kernels = Some(true),
            _ => c.problems.push(format!(
                "POLYCL_FAST_KERNELS={v:?}: expected 0 or 1; using the default"
            )),
        }
    }
    if let Some(v) = get("POLYCL_FUSE") {
        match v.trim() {
            "0" => c.fuse = false,
            "1" => c.fuse = true,
            _ => c
                .problems
                .push(format!("POLYCL_FUSE={v:?}: expected 0 or 1; fusing")),
        }
    }
    if let Some(v) = get("POLYCL_FUSE_SKIP") {
        c.fuse_skip.clear();
        for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if crate::passes::fuse::NAMES.contains(&name) {
                c.fuse_skip.push(name.to_string());
            } else {
                c.problems.push(format!(
                    "POLYCL_FUSE_SKIP={v:?}: no fusion pass is called {name:?}; ignored"
                ));
            }
        }
    }
    if let Some(v) = get("POLYCL_MMA") {
        match v.trim() {
            "0" => c.mma = Some(false),
            "1" => c.mma = Some(true),
            _ => c.problems.push(format!(
                "POLYCL_MMA={v:?}: expected 0 or 1; using the default"
            )),
        }
    }
    if let Some(v) = get("POLYCL_FLUSH_EVERY") {
        match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => c.flush_every = n,
            _ => c.problems.push(format!(
                "POLYCL_FLUSH_EVERY={v:?}: expected a positive integer; using 16"
            )),
        }
    }
    if let Some(v) = get("POLYCL_MV_UNROLL") {
        match v.trim().parse::<u32>() {
            Ok(n) if (1..=16).contains(&n) => c.mv_unroll = Some(n),
            _ => c.problems.push(format!(
                "POLYCL_MV_UNROLL={v:?}: expected an integer from 1 to 16; using the defaults by type"
            )),
        }
    }
    if let Some(v) = get("POLYCL_MV_LOADS") {
        match v.trim() {
            "words" => c.mv_pairs = false,
            "pairs" => c.mv_pairs = true,
            _ => c.problems.push(format!(
                "POLYCL_MV_LOADS={v:?}: expected words or pairs; using pairs"
            )),
        }
    }
    if let Some(v) = get("POLYCL_MAX_WORK_GROUP") {
        match v.trim().parse::<usize>() {
            Ok(n) if (64..=65536).contains(&n) => c.max_work_group = Some(n),
            _ => c.problems.push(format!(
                "POLYCL_MAX_WORK_GROUP={v:?}: expected an integer from 64 to 65536; using the device's limit"
            )),
        }
    }
    if let Some(v) = get("POLYCL_GLU_WARPS") {
        match v.trim().parse::<u32>() {
            Ok(n) if [4, 8, 16].contains(&n) => c.glu_warps = Some(n),
            _ => c.problems.push(format!(
                "POLYCL_GLU_WARPS={v:?}: expected 4, 8 or 16; using the default"
            )),
        }
    }
    if let Some(v) = get("POLYCL_MVN_SPLIT") {
        match v.trim().parse::<u32>() {
            Ok(n) if [1, 2].contains(&n) => c.mvn_split = Some(n),
            _ => c.problems.push(format!(
                "POLYCL_MVN_SPLIT={v:?}: expected 1 or 2; using the default"
            )),
        }
    }
    if let Some(v) = get("POLYCL_WRITE") {
        match v.trim() {
            "batch" => c.write_mode = WriteMode::Batch,
            "async" => c.write_mode = WriteMode::Async,
            "blocking" => c.write_mode = WriteMode::Blocking,
            _ => c.problems.push(format!(
                "POLYCL_WRITE={v:?}: expected batch, async or blocking; using batch"
            )),
        }
    }
    if let Some(v) = get("POLYCL_MMA_TILE") {
        match parse_mma_tile(&v) {
            Ok(t) => c.mma_tile = t,
            Err(e) => c
                .problems
                .push(format!("POLYCL_MMA_TILE={v:?}: {e}; using 2,2,4,4,4")),
        }
    }
    if let Some(v) = get("POLYCL_BUFFER_ADDRESSES") {
        match v.trim() {
            "0" => c.buffer_addresses = Some(BufferAddresses::Off),
            "1" => c.buffer_addresses = Some(BufferAddresses::All),
            "reads" => c.buffer_addresses = Some(BufferAddresses::Reads),
            _ => c.problems.push(format!(
                "POLYCL_BUFFER_ADDRESSES={v:?}: expected 0, 1 or reads; using the default"
            )),
        }
    }
    if let Some(v) = get("POLYCL_HANDOFF") {
        match v.trim() {
            "0" => c.handoff = Some(Handoff::Off),
            "1" => c.handoff = Some(Handoff::On),
            "serial" => c.handoff = Some(Handoff::Serial),
            _ => c.problems.push(format!(
                "POLYCL_HANDOFF={v:?}: expected 0, 1 or serial; using the default"
            )),
        }
    }
    if let Some(v) = get("POLYCL_HANDOFF_SLEEP") {
        match v.trim().parse::<u32>() {
            Ok(n) if n <= 10_000 => c.handoff_sleep_ns = n,
            _ => c.problems.push(format!(
                "POLYCL_HANDOFF_SLEEP={v:?}: expected an integer from 0 to 10000; using 0"
            )),
        }
    }
    if let Some(v) = get("POLYCL_HANDOFF_WIDTH") {
        match v.trim().parse::<usize>() {
            Ok(n) if (1..=1 << 20).contains(&n) => c.handoff_width = n,
            _ => c.problems.push(format!(
                "POLYCL_HANDOFF_WIDTH={v:?}: expected an integer from 1 to 1048576; using 1024"
            )),
        }
    }
    if let Some(v) = get("POLYCL_HANDOFF_CHECK") {
        match v.trim().parse::<u64>() {
            Ok(n) if (1..=1 << 20).contains(&n) => c.handoff_check_every = n,
            _ => c.problems.push(format!(
                "POLYCL_HANDOFF_CHECK={v:?}: expected an integer from 1 to 1048576; using 1"
            )),
        }
    }
    if let Some(v) = get("POLYCL_STEP") {
        match v.trim() {
            "0" => c.step = Some(false),
            "1" => c.step = Some(true),
            _ => c.problems.push(format!(
                "POLYCL_STEP={v:?}: expected 0 or 1; using the default"
            )),
        }
    }
    if let Some(v) = get("POLYCL_STEP_GROUPS") {
        match v.trim().parse::<usize>() {
            Ok(n) if (1..=32).contains(&n) => c.step_groups_per_cu = n,
            _ => c.problems.push(format!(
                "POLYCL_STEP_GROUPS={v:?}: expected an integer from 1 to 32; using 4"
            )),
        }
    }
    if let Some(v) = get("POLYCL_STEP_MAXRREG") {
        match v.trim().parse::<u32>() {
            Ok(n) if (32..=255).contains(&n) => c.step_maxrreg = Some(n),
            _ => c.problems.push(format!(
                "POLYCL_STEP_MAXRREG={v:?}: expected an integer from 32 to 255; no cap"
            )),
        }
    }
    if let Some(v) = get("POLYCL_FA_GROUPS") {
        match v.trim().parse::<u32>() {
            Ok(n) if (1..=65536).contains(&n) => c.fa_groups = n,
            _ => c.problems.push(format!(
                "POLYCL_FA_GROUPS={v:?}: expected an integer from 1 to 65536; using 256"
            )),
        }
    }
    c.fa_gqa_min_kv = positions(
        get,
        "POLYCL_FA_GQA_MIN_KV",
        c.fa_gqa_min_kv,
        &mut c.problems,
    );
    c.fa_short_kv = positions(get, "POLYCL_FA_SHORT_KV", c.fa_short_kv, &mut c.problems);
    c.fa_one_kv = positions(get, "POLYCL_FA_ONE_KV", c.fa_one_kv, &mut c.problems);
    c.fa_long_kv = positions(get, "POLYCL_FA_LONG_KV", c.fa_long_kv, &mut c.problems);
    if let Some(v) = get("POLYCL_FA_LONG_GROUPS") {
        match v.trim().parse::<u32>() {
            Ok(n) if (1..=65536).contains(&n) => c.fa_long_groups = Some(n),
            _ => c.problems.push(format!(
                "POLYCL_FA_LONG_GROUPS={v:?}: expected an integer from 1 to 65536; using 3 a compute unit"
            )),
        }
    }
    if let Some(v) = get("POLYCL_FA_LONG_HEADS") {
        match v.trim().parse::<u32>() {
            Ok(n @ (1 | 2 | 4)) => c.fa_long_heads = n,
            _ => c.problems.push(format!(
                "POLYCL_FA_LONG_HEADS={v:?}: expected 1, 2 or 4; using 1"
            )),
        }
    }
    c.fa_cols_kv = positions(get, "POLYCL_FA_COLS_KV", c.fa_cols_kv, &mut c.problems);
    c.fa_q8_kv = positions(get, "POLYCL_FA_Q8_KV", c.fa_q8_kv, &mut c.problems);
    c.fa_one_fence = switch(get, "POLYCL_FA_ONE_FENCE", true, &mut c.problems);
    c.attn_o = off_unless_one(get, "POLYCL_ATTN_O", &mut c.problems);
    c.attn_oh = off_unless_one(get, "POLYCL_ATTN_OH", &mut c.problems);
    if let Some(v) = get("POLYCL_ATTN_OH_SPLIT") {
        match v.trim().parse::<usize>() {
            Ok(n) if (1..=8).contains(&n) => c.attn_oh_split = Some(n),
            _ => c.problems.push(format!(
                "POLYCL_ATTN_OH_SPLIT={v:?}: expected an integer from 1 to 8; using the default"
            )),
        }
    }
    if let Some(v) = get("POLYCL_ATTN_O_MAXRREG") {
        match v.trim().parse::<u32>() {
            Ok(n) if (32..=128).contains(&n) => c.attn_o_maxrreg = Some(n),
            _ => c.problems.push(format!(
                "POLYCL_ATTN_O_MAXRREG={v:?}: expected an integer from 32 to 128; no cap"
            )),
        }
    }
    if let Some(v) = get("POLYCL_STEP_MAX_MB") {
        match v.trim().parse::<usize>() {
            Ok(n) if n <= 65536 => c.step_max_mb = n,
            _ => c.problems.push(format!(
                "POLYCL_STEP_MAX_MB={v:?}: expected an integer from 0 to 65536; using 8"
            )),
        }
    }
    if let Some(v) = get("POLYCL_PROFILE") {
        match v.trim() {
            "0" => c.profile = Profile::Off,
            "1" => c.profile = Profile::Kernels,
            "span" => c.profile = Profile::Span,
            "groups" => c.profile = Profile::Groups,
            _ => c.problems.push(format!(
                "POLYCL_PROFILE={v:?}: expected 0, 1, span or groups; not profiling"
            )),
        }
    }
    if let Some(v) = get("POLYCL_PROFILE_TWICE") {
        let name = v.trim();
        if name.is_empty() {
            c.problems.push(format!(
                "POLYCL_PROFILE_TWICE={v:?}: expected a kernel name; launching once"
            ));
        } else {
            c.profile_twice = Some(name.to_string());
        }
    }
    if let Some(v) = get("POLYCL_Q8_CACHE") {
        match v.trim() {
            "0" => c.q8_cache = 0,
            "1" => c.q8_cache = 1,
            "2" => c.q8_cache = 2,
            _ => c.problems.push(format!(
                "POLYCL_Q8_CACHE={v:?}: expected 0, 1 or 2; using 1"
            )),
        }
    }
    if let Some(v) = get("POLYCL_MEM_LIMIT_MB") {
        match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => c.mem_limit = Some(n << 20),
            _ => c.problems.push(format!(
                "POLYCL_MEM_LIMIT_MB={v:?}: expected a positive integer; no limit"
            )),
        }
    }
    if let Some(v) = get("POLYCL_FAULT") {
        match crate::fault::parse(&v) {
            Ok(f) => c.faults = f,
            Err(e) => c
                .problems
                .push(format!("POLYCL_FAULT={v:?}: {e}; no fault injected")),
        }
    }
    c
}

fn parse_devices(v: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match part.parse::<usize>() {
            Ok(i) if !out.contains(&i) => out.push(i),
            Ok(i) => {
                return Err(Error::Config(format!(
                    "POLYCL_DEVICES={v:?}: device {i} listed twice"
                )))
            }
            Err(_) => {
                return Err(Error::Config(format!(
                    "POLYCL_DEVICES={v:?}: expected a comma list of device indices like 0,1"
                )))
            }
        }
    }
    if out.is_empty() {
        return Err(Error::Config(format!(
            "POLYCL_DEVICES={v:?}: names no device"
        )));
    }
    Ok(out)
}

static CONFIG: OnceLock<Config> = OnceLock::new();

pub fn get() -> &'static Config {
    CONFIG.get_or_init(|| {
        let (mut c, asked) = parse_asking(&|k| std::env::var(k).ok());
        let set = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
        c.problems.extend(unknown_vars(set, &asked));
        c
    })
}

/// `parse`, and the names of the variables it read.
fn parse_asking(get: &dyn Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
    let asked = std::cell::RefCell::new(Vec::new());
    let c = parse(&|k| {
        asked.borrow_mut().push(k.to_string());
        get(k)
    });
    (c, asked.into_inner())
}

/// Variables of the project's own scripts and tests, never read by the
/// library: their runs pass them on to every process they start.
const HARNESS_VARS: &[&str] = &[
    "POLYCL_LIB",
    "POLYCL_LIB_OLD",
    "POLYCL_ROOT",
    "POLYCL_CACHE",
    "POLYCL_TIMEOUT",
    "POLYCL_TEST_DEVICE",
    "POLYCL_TEST_OPS",
    "POLYCL_PTXAS",
    "POLYCL_NVPTX_ONLY",
    "POLYCL_GENERATED_HEADER",
    "POLYCL_GGML_BASE",
    "POLYCL_GGML_CPU",
    "POLYCL_LONG_RUN_STEPS",
    "POLYCL_THREAD_RUNS",
    "POLYCL_OP_PARAMS_RUNS",
];

/// A problem for each `POLYCL_` variable in `set` that `parse` did not ask
/// for (`asked`): a misspelt name, or a setting since removed, would
/// otherwise change nothing without a word.
fn unknown_vars(set: impl Iterator<Item = String>, asked: &[String]) -> Vec<String> {
    let mut unknown: Vec<String> = set
        .filter(|k| k.starts_with("POLYCL_"))
        .filter(|k| !asked.contains(k) && !HARNESS_VARS.contains(&k.as_str()))
        .collect();
    unknown.sort();
    unknown
        .into_iter()
        .map(|k| format!("{k} is not a polycl setting (src/config.rs lists them); ignored"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variables `parse` reads.
    fn asked() -> Vec<String> {
        parse_asking(&|_| None).1
    }

    #[test]
    fn unknown_variables_are_reported() {
        let set = [
            "POLYCL_FA_LONG_K",
            "POLYCL_LOG",
            "POLYCL_LIB",
            "HOME",
            "POLYCL_MV_LEAN",
        ];
        let problems = unknown_vars(set.iter().map(|s| s.to_string()), &asked());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("POLYCL_FA_LONG_K is not a polycl setting"));
        assert!(problems[1].starts_with("POLYCL_MV_LEAN is not a polycl setting"));
    }

    #[test]
    fn the_table_lists_every_variable_read() {
        // The module's table (`//! | `POLYCL_...` |` rows) and `parse` name
        // the same variables, so that the check above never calls a listed
        // setting unknown and the table misses none.
        let mut listed: Vec<String> = include_str!("config.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! | `"))
            .filter_map(|l| l.split('`').next())
            .filter(|n| n.starts_with("POLYCL_"))
            .map(str::to_string)
            .collect();
        // HOME and XDG_CACHE_HOME too: the program cache's default folder.
        let mut read: Vec<String> = asked()
            .into_iter()
            .filter(|r| r.starts_with("POLYCL_"))
            .collect();
        listed.sort();
        read.sort();
        read.dedup();
        assert_eq!(listed, read);
        assert!(HARNESS_VARS.iter().all(|h| !read.iter().any(|r| r == h)));
    }

    fn with(vars: &[(&str, &str)]) -> Config {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        parse(&move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults() {
        let c = with(&[]);
        assert_eq!(c.devices, None);
        assert_eq!(c.plan_cache_size, 64);
        assert!(c.problems.is_empty());
    }

    #[test]
    fn write_modes() {
        assert_eq!(with(&[]).write_mode, WriteMode::Batch);
        let c = with(&[("POLYCL_WRITE", "blocking")]);
        assert_eq!(c.write_mode, WriteMode::Blocking);
        let c = with(&[("POLYCL_WRITE", "async")]);
        assert_eq!(c.write_mode, WriteMode::Async);
        let c = with(&[("POLYCL_WRITE", "pinned")]);
        assert_eq!(c.write_mode, WriteMode::Batch);
        assert!(c.problems[0].contains("POLYCL_WRITE"));
    }

    #[test]
    fn profile_modes() {
        assert_eq!(with(&[]).profile, Profile::Off);
        assert_eq!(with(&[("POLYCL_PROFILE", "1")]).profile, Profile::Kernels);
        assert_eq!(with(&[("POLYCL_PROFILE", " span ")]).profile, Profile::Span);
        assert_eq!(
            with(&[("POLYCL_PROFILE", "groups")]).profile,
            Profile::Groups
        );
        let c = with(&[("POLYCL_PROFILE", "all")]);
        assert_eq!(c.profile, Profile::Off);
        assert!(c.problems[0].contains("POLYCL_PROFILE"));
    }

    #[test]
    fn profile_twice_names_a_kernel() {
        let c = with(&[("POLYCL_PROFILE_TWICE", " kernel_fa_vec ")]);
        assert_eq!(c.profile_twice.as_deref(), Some("kernel_fa_vec"));
        assert!(c.problems.is_empty());
        let c = with(&[("POLYCL_PROFILE_TWICE", " ")]);
        assert_eq!(c.profile_twice, None);
        assert!(c.problems[0].contains("POLYCL_PROFILE_TWICE"));
    }

    #[test]
    fn garbage_values_name_their_variable() {
        let c = with(&[
            ("POLYCL_DEVICES", "zero"),
            ("POLYCL_LOG", "yes"),
            ("POLYCL_PLAN_CACHE", "-3"),
        ]);
        assert_eq!(c.problems.len(), 3);
        assert!(c.problems[0].contains("POLYCL_DEVICES"));
        assert!(c.problems[1].contains("POLYCL_LOG"));
        assert!(c.problems[2].contains("POLYCL_PLAN_CACHE"));
        assert_eq!(
            with(&[("POLYCL_DEVICES", "1, 0")]).devices,
            Some(vec![1, 0])
        );
        assert!(!with(&[("POLYCL_DEVICES", "1,1")]).problems.is_empty());
    }

    #[test]
    fn matvec_unroll_per_type_unless_set() {
        assert_eq!(with(&[]).mv_unrolls(), (1, 4));
        assert_eq!(with(&[("POLYCL_MV_LOADS", "words")]).mv_unrolls(), (2, 4));
        assert_eq!(with(&[("POLYCL_MV_UNROLL", "8")]).mv_unrolls(), (8, 8));
        assert!(with(&[]).mv_pairs);
        assert!(!with(&[("POLYCL_MV_LOADS", " words ")]).mv_pairs);
        let c = with(&[("POLYCL_MV_LOADS", "wide")]);
        assert!(c.mv_pairs);
        assert!(c.problems[0].contains("POLYCL_MV_LOADS"));
        let c = with(&[("POLYCL_MV_UNROLL", "17")]);
        assert_eq!(c.mv_unrolls(), (1, 4));
        assert!(c.problems[0].contains("POLYCL_MV_UNROLL"));
    }

    #[test]
    fn flash_attention_groups() {
        assert_eq!(with(&[]).fa_groups, 256);
        assert_eq!(with(&[]).glu_warps, None);
        assert_eq!(with(&[]).max_work_group, None);
        assert_eq!(
            with(&[("POLYCL_MAX_WORK_GROUP", "256")]).max_work_group,
            Some(256)
        );
        for bad in ["32", "65537", "wide"] {
            let c = with(&[("POLYCL_MAX_WORK_GROUP", bad)]);
            assert_eq!(c.max_work_group, None);
            assert!(c.problems[0].contains("POLYCL_MAX_WORK_GROUP"));
        }
        assert_eq!(with(&[("POLYCL_GLU_WARPS", "16")]).glu_warps, Some(16));
        assert_eq!(with(&[]).mvn_split, None);
        assert_eq!(with(&[("POLYCL_MVN_SPLIT", "2")]).mvn_split, Some(2));
        let c = with(&[("POLYCL_MVN_SPLIT", "4")]);
        assert_eq!(c.mvn_split, None);
        assert!(c.problems[0].contains("POLYCL_MVN_SPLIT"));
        for bad in ["12", "32", "x"] {
            let c = with(&[("POLYCL_GLU_WARPS", bad)]);
            assert_eq!(c.glu_warps, None);
            assert!(c.problems[0].contains("POLYCL_GLU_WARPS"));
        }
        assert_eq!(with(&[("POLYCL_FA_GROUPS", "32")]).fa_groups, 32);
        for bad in ["0", "65537", "many"] {
            let c = with(&[("POLYCL_FA_GROUPS", bad)]);
            assert_eq!(c.fa_groups, 256);
            assert!(
                c.problems[0].contains("POLYCL_FA_GROUPS"),
                "{:?}",
                c.problems
            );
        }
    }

    #[test]
    fn step_kernel_settings() {
        let c = with(&[]);
        assert_eq!((c.step, c.step_groups_per_cu, c.step_max_mb), (None, 4, 8));
        assert_eq!(c.step_maxrreg, None);
        let c = with(&[
            ("POLYCL_STEP", "1"),
            ("POLYCL_STEP_GROUPS", "2"),
            ("POLYCL_STEP_MAX_MB", "64"),
            ("POLYCL_STEP_MAXRREG", "96"),
        ]);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert_eq!(c.step, Some(true));
        assert_eq!((c.step_groups_per_cu, c.step_max_mb), (2, 64));
        assert_eq!(c.step_maxrreg, Some(96));
        let c = with(&[
            ("POLYCL_STEP", "yes"),
            ("POLYCL_STEP_GROUPS", "0"),
            ("POLYCL_STEP_MAX_MB", "x"),
            ("POLYCL_STEP_MAXRREG", "8"),
        ]);
        assert_eq!(c.problems.len(), 4);
        for v in ["POLYCL_STEP=", "GROUPS", "MAX_MB", "MAXRREG"] {
            assert!(
                c.problems.iter().any(|p| p.contains(v)),
                "{v}: {:?}",
                c.problems
            );
        }
        assert_eq!((c.step, c.step_groups_per_cu, c.step_max_mb), (None, 4, 8));
    }

    #[test]
    fn handoff_settings() {
        let c = with(&[]);
        assert_eq!((c.handoff, c.handoff_sleep_ns), (None, 0));
        assert_eq!(c.handoff_width, 1024);
        assert_eq!(
            with(&[("POLYCL_HANDOFF_WIDTH", "4096")]).handoff_width,
            4096
        );
        assert_eq!(with(&[("POLYCL_HANDOFF_WIDTH", "0")]).problems.len(), 1);
        assert_eq!(c.handoff_check_every, 1);
        let every = with(&[("POLYCL_HANDOFF_CHECK", "64")]);
        assert_eq!(every.handoff_check_every, 64);
        assert_eq!(with(&[("POLYCL_HANDOFF_CHECK", "0")]).problems.len(), 1);
        for (v, want) in [
            ("0", Handoff::Off),
            ("1", Handoff::On),
            ("serial", Handoff::Serial),
        ] {
            let c = with(&[("POLYCL_HANDOFF", v), ("POLYCL_HANDOFF_SLEEP", "128")]);
            assert!(c.problems.is_empty(), "{:?}", c.problems);
            assert_eq!((c.handoff, c.handoff_sleep_ns), (Some(want), 128));
        }
        let c = with(&[("POLYCL_HANDOFF", "yes"), ("POLYCL_HANDOFF_SLEEP", "-1")]);
        assert_eq!(c.problems.len(), 2, "{:?}", c.problems);
        assert_eq!((c.handoff, c.handoff_sleep_ns), (None, 0));
    }

    #[test]
    fn buffer_address_settings() {
        assert_eq!(with(&[]).buffer_addresses, None);
        for (v, want) in [
            ("0", BufferAddresses::Off),
            ("1", BufferAddresses::All),
            ("reads", BufferAddresses::Reads),
        ] {
            let c = with(&[("POLYCL_BUFFER_ADDRESSES", v)]);
            assert!(c.problems.is_empty(), "{:?}", c.problems);
            assert_eq!(c.buffer_addresses, Some(want));
        }
        let c = with(&[("POLYCL_BUFFER_ADDRESSES", "yes")]);
        assert_eq!(c.buffer_addresses, None);
        assert!(c.problems.len() == 1 && c.problems[0].contains("POLYCL_BUFFER_ADDRESSES"));
    }

    #[test]
    fn attention_and_o_settings() {
        let c = with(&[]);
        assert_eq!(
            (c.fa_short_kv, c.attn_o, c.attn_o_maxrreg),
            (256, false, None)
        );
        let c = with(&[
            ("POLYCL_FA_SHORT_KV", "0"),
            ("POLYCL_ATTN_O", "1"),
            ("POLYCL_ATTN_O_MAXRREG", "64"),
        ]);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert_eq!(
            (c.fa_short_kv, c.attn_o, c.attn_o_maxrreg),
            (0, true, Some(64))
        );
        let c = with(&[
            ("POLYCL_FA_SHORT_KV", "-1"),
            ("POLYCL_ATTN_O", "on"),
            ("POLYCL_ATTN_O_MAXRREG", "255"),
        ]);
        assert_eq!(c.problems.len(), 3);
        for v in ["FA_SHORT_KV", "ATTN_O=", "MAXRREG"] {
            assert!(
                c.problems.iter().any(|p| p.contains(v)),
                "{v}: {:?}",
                c.problems
            );
        }
        assert_eq!(
            (c.fa_short_kv, c.attn_o, c.attn_o_maxrreg),
            (256, false, None)
        );
    }

    #[test]
    fn whole_cache_attention_setting() {
        assert_eq!(
            with(&[("POLYCL_ATTN_OH_SPLIT", "3")]).attn_oh_split,
            Some(3)
        );
        let c = with(&[("POLYCL_ATTN_OH_SPLIT", "9")]);
        assert!(c.attn_oh_split.is_none() && c.problems.len() == 1);
        assert!(!with(&[]).attn_oh);
        let c = with(&[("POLYCL_ATTN_O", " 2")]);
        assert!(!c.attn_o && c.problems[0].contains("POLYCL_ATTN_O=\"2\""));
        assert!(with(&[("POLYCL_ATTN_OH", "1")]).attn_oh);
        let c = with(&[("POLYCL_ATTN_OH", "yes")]);
        assert!(!c.attn_oh && c.problems.len() == 1 && c.problems[0].contains("POLYCL_ATTN_OH"));
        assert_eq!(with(&[]).fa_one_kv, 256);
        let c = with(&[("POLYCL_FA_ONE_KV", "0")]);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert_eq!(c.fa_one_kv, 0);
        let c = with(&[("POLYCL_FA_ONE_KV", "all")]);
        assert!(c.problems.len() == 1 && c.problems[0].contains("POLYCL_FA_ONE_KV"));
        assert_eq!(c.fa_one_kv, 256);
        assert_eq!(with(&[]).fa_long_kv, 512);
        assert_eq!(with(&[("POLYCL_FA_LONG_KV", "0")]).fa_long_kv, 0);
        let c = with(&[("POLYCL_FA_LONG_KV", "-1")]);
        assert!(c.problems.len() == 1 && c.problems[0].contains("POLYCL_FA_LONG_KV"));
        assert_eq!(c.fa_long_kv, 512);
        assert_eq!(with(&[]).fa_long_groups, None);
        assert_eq!(
            with(&[("POLYCL_FA_LONG_GROUPS", "528")]).fa_long_groups,
            Some(528)
        );
        let c = with(&[("POLYCL_FA_LONG_GROUPS", "0")]);
        assert!(c.problems.len() == 1 && c.fa_long_groups.is_none());
        assert_eq!(with(&[]).fa_long_heads, 1);
        assert_eq!(with(&[("POLYCL_FA_LONG_HEADS", "2")]).fa_long_heads, 2);
        assert_eq!(with(&[("POLYCL_FA_LONG_HEADS", "4")]).fa_long_heads, 4);
        for bad in ["3", "8", "0", "two"] {
            let c = with(&[("POLYCL_FA_LONG_HEADS", bad)]);
            assert!(c.problems.len() == 1 && c.problems[0].contains("POLYCL_FA_LONG_HEADS"));
            assert_eq!(c.fa_long_heads, 1);
        }
        assert_eq!(with(&[]).fa_cols_kv, 16384);
        assert_eq!(with(&[("POLYCL_FA_COLS_KV", "0")]).fa_cols_kv, 0);
        let c = with(&[("POLYCL_FA_COLS_KV", "yes")]);
        assert!(c.problems.len() == 1 && c.problems[0].contains("POLYCL_FA_COLS_KV"));
        assert_eq!(c.fa_cols_kv, 16384);
        assert_eq!(with(&[]).fa_q8_kv, 1);
        assert_eq!(with(&[("POLYCL_FA_Q8_KV", "0")]).fa_q8_kv, 0);
        assert_eq!(with(&[("POLYCL_FA_Q8_KV", "-1")]).fa_q8_kv, 1);
        assert!(with(&[]).fa_one_fence);
        assert!(with(&[("POLYCL_FA_ONE_FENCE", "1")]).fa_one_fence);
        assert!(!with(&[("POLYCL_FA_ONE_FENCE", "0")]).fa_one_fence);
        let c = with(&[("POLYCL_FA_ONE_FENCE", "2")]);
        assert!(c.fa_one_fence && c.problems[0].contains("using 1"));
    }

    #[test]
    fn mma_tile_shapes() {
        let c = with(&[]);
        assert_eq!(c.mma_tile, MmaTile::default());
        assert_eq!(
            c.mma_tile.defines(),
            "-DMMA_WM=2 -DMMA_WN=2 -DMMA_MT=4 -DMMA_NT=4 -DMMA_KB=4 -DMMA_NBUF=2"
        );
        assert_eq!(
            (
                c.mma_tile.work_items(),
                c.mma_tile.rows(),
                c.mma_tile.tokens()
            ),
            (128, 128, 64)
        );
        // Q4_K's two raw stages: 128 rows of 18 words and 8 scales, 64
        // tokens of 4 x 36 bytes; 128 x 6 ints of scratch.
        assert_eq!(c.mma_tile.local_bytes(), 2 * (128 * 104 + 64 * 144) + 3072);
        let c = with(&[("POLYCL_MMA_TILE", " 2, 4,2,2,2")]);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let t = c.mma_tile;
        assert_eq!((t.work_items(), t.rows(), t.tokens()), (256, 64, 64));
        assert_eq!(with(&[("POLYCL_MMA_TILE", "1,2,4,2,8")]).mma_tile.kb, 8);
        for bad in [
            "2,2,2,4",
            "2,2,2,4,4,4",
            "2,x,2,4,4",
            "3,2,2,4,4",
            "1,1,2,4,4",
            "4,4,2,4,4",
            "2,2,8,4,4",
            "2,2,2,16,4",
            "2,2,2,4,3",
            // 128x64 at KB=8: 55 KiB of staged rows alone.
            "4,2,2,4,8",
            // 64x64 at KB=8: Q4_0's two raw stages are 54 KiB.
            "2,2,2,4,8",
            // 64x128: Q4_K's two raw stages (4 units each) and the scratch
            // of 256 work-items are 55 KiB.
            "2,4,2,4,2",
        ] {
            let c = with(&[("POLYCL_MMA_TILE", bad)]);
            assert_eq!(c.mma_tile, MmaTile::default(), "{bad}");
            assert_eq!(c.problems.len(), 1, "{bad}");
            assert!(c.problems[0].contains("POLYCL_MMA_TILE"), "{bad}");
        }
        assert!(with(&[("POLYCL_MMA_TILE", "4,2,2,4,8")]).problems[0].contains("local memory"));
    }

    #[test]
    fn fuse_skip_names_passes() {
        assert!(with(&[]).fuse_skip.is_empty());
        assert!(with(&[("POLYCL_FUSE_SKIP", "")]).fuse_skip.is_empty());
        let c = with(&[("POLYCL_FUSE_SKIP", "matmul_norm, group_rope")]);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert_eq!(c.fuse_skip, ["matmul_norm", "group_rope"]);
        let c = with(&[("POLYCL_FUSE_SKIP", "norm,rms_norm")]);
        assert_eq!(c.fuse_skip, ["rms_norm"]);
        assert_eq!(c.problems.len(), 1);
        assert!(c.problems[0].contains("\"norm\""), "{:?}", c.problems);
    }
}
