//! Process-wide counters of the work the executor issues, so tests and logs
//! can say how many quantize kernels, peer copies and cache hits a graph
//! compute cost. Relaxed atomics: they are statistics, never synchronization.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static QUANTIZE: AtomicU64 = AtomicU64::new(0);
static MUL_MAT: AtomicU64 = AtomicU64::new(0);
static PEER_COPIES: AtomicU64 = AtomicU64::new(0);
static GATHERS: AtomicU64 = AtomicU64::new(0);
static PEER_LAUNCHES: AtomicU64 = AtomicU64::new(0);
static Q8_HITS: AtomicU64 = AtomicU64::new(0);
static Q8_MISSES: AtomicU64 = AtomicU64::new(0);
static PEER_HITS: AtomicU64 = AtomicU64::new(0);
static PEER_MISSES: AtomicU64 = AtomicU64::new(0);
static ALLREDUCES: AtomicU64 = AtomicU64::new(0);
static ASYNC_COPIES: AtomicU64 = AtomicU64::new(0);

/// A copy of every counter at one moment; subtract two to get the work between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Activation conversion kernels (Q8_1/Q8_K quantization, F16 conversion).
    pub quantize: u64,
    /// Matmul kernels, on every device.
    pub mul_mat: u64,
    /// Activations copied from the main device to a peer for a split matmul.
    pub peer_copies: u64,
    /// Partial results copied from a peer back to the main device.
    pub gathers: u64,
    /// Kernels a plan launched on a device other than its own.
    pub peer_launches: u64,
    /// Q8_1 activation cache on the main device: quantize kernels skipped / run.
    pub q8_hits: u64,
    pub q8_misses: u64,
    /// Q8_1 activation cache on peers: activation copies skipped / made.
    pub peer_hits: u64,
    pub peer_misses: u64,
    /// `ggml_backend_comm_allreduce_tensor` calls served on the devices.
    pub allreduces: u64,
    /// Device-to-device `cpy_tensor_async` copies served with OpenCL events.
    pub async_copies: u64,
}

impl std::ops::Sub for Snapshot {
    type Output = Snapshot;
    fn sub(self, o: Snapshot) -> Snapshot {
        Snapshot {
            quantize: self.quantize - o.quantize,
            mul_mat: self.mul_mat - o.mul_mat,
            peer_copies: self.peer_copies - o.peer_copies,
            gathers: self.gathers - o.gathers,
            peer_launches: self.peer_launches - o.peer_launches,
            q8_hits: self.q8_hits - o.q8_hits,
            q8_misses: self.q8_misses - o.q8_misses,
            peer_hits: self.peer_hits - o.peer_hits,
            peer_misses: self.peer_misses - o.peer_misses,
            allreduces: self.allreduces - o.allreduces,
            async_copies: self.async_copies - o.async_copies,
        }
    }
}

pub fn snapshot() -> Snapshot {
    Snapshot {
        quantize: QUANTIZE.load(Relaxed),
        mul_mat: MUL_MAT.load(Relaxed),
        peer_copies: PEER_COPIES.load(Relaxed),
        gathers: GATHERS.load(Relaxed),
        peer_launches: PEER_LAUNCHES.load(Relaxed),
        q8_hits: Q8_HITS.load(Relaxed),
        q8_misses: Q8_MISSES.load(Relaxed),
        peer_hits: PEER_HITS.load(Relaxed),
        peer_misses: PEER_MISSES.load(Relaxed),
        allreduces: ALLREDUCES.load(Relaxed),
        async_copies: ASYNC_COPIES.load(Relaxed),
    }
}

/// Called by the executor for every enqueued launch.
pub fn launched(kind: &str) {
    match kind {
        "quantize" => QUANTIZE.fetch_add(1, Relaxed),
        "mul_mat" => MUL_MAT.fetch_add(1, Relaxed),
        _ => 0,
    };
}

pub fn peer_launch() {
    PEER_LAUNCHES.fetch_add(1, Relaxed);
}
pub fn peer_copy() {
    PEER_COPIES.fetch_add(1, Relaxed);
}
pub fn gather() {
    GATHERS.fetch_add(1, Relaxed);
}
pub fn allreduce() {
    ALLREDUCES.fetch_add(1, Relaxed);
}
pub fn async_copy() {
    ASYNC_COPIES.fetch_add(1, Relaxed);
}

/// Adds one graph compute's cache statistics.
pub fn q8(hits: u64, misses: u64, peer_hits: u64, peer_misses: u64) {
    Q8_HITS.fetch_add(hits, Relaxed);
    Q8_MISSES.fetch_add(misses, Relaxed);
    PEER_HITS.fetch_add(peer_hits, Relaxed);
    PEER_MISSES.fetch_add(peer_misses, Relaxed);
}
