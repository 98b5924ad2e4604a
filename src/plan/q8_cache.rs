//! The graph-scoped Q8_1 activation cache (DESIGN.md, from the SYCL seed).
//!
//! Sibling matmuls of one graph read the same activation (Q, K and V read the
//! attention norm; gate and up read the FFN norm), and each would quantize it
//! to Q8_1 again, and copy it again to every peer of a row-split weight. The
//! cache keys one quantized copy on (source value, its data pointer, device,
//! row length, row count, padded row size) for the decode shape (contiguous
//! activation, one column). Planning gives each key its own scratch region;
//! running a plan opens a `Session` with every entry empty, and closes it at
//! the end of the graph compute, so nothing is reused across tokens. A hit
//! skips the quantize kernel on the main device, or the activation copy to a
//! peer. The bytes a hit reuses are the bytes the skipped work would have
//! written, so outputs are bit-identical with the cache on and off.

use crate::ir::{MemRef, Value};
use crate::log;
use crate::runtime::counters;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};

/// What one quantized activation is keyed on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The activation (one ggml tensor).
    pub source: Value,
    /// Its data pointer: a reused tensor object never aliases new storage.
    pub data: MemRef,
    /// The device the quantized copy lives on (the plan's device; peers hold
    /// their copies under the same slot, per device, in the session).
    pub device: usize,
    pub ne10: i64,
    pub nrows: i64,
    /// Bytes of one quantized row.
    pub padded_row: u64,
}

/// 255: follow `POLYCL_Q8_CACHE`.
static OVERRIDE: AtomicU8 = AtomicU8::new(u8::MAX);

/// 0 off, 1 on, 2 on with counters logged.
pub fn mode() -> u8 {
    match OVERRIDE.load(Ordering::Relaxed) {
        u8::MAX => crate::config::get().q8_cache,
        m => m,
    }
}

/// Overrides `POLYCL_Q8_CACHE` for this process (tests compare on and off in
/// one run); None returns to the variable.
pub fn set_mode(m: Option<u8>) {
    OVERRIDE.store(m.unwrap_or(u8::MAX), Ordering::Relaxed);
}

/// The cache entries of one plan: slot -> key and scratch region, and which
/// launches quantize into which slot.
#[derive(Default)]
pub struct Table {
    keys: Vec<Key>,
    regions: Vec<(u64, u64)>,
    index: HashMap<Key, usize>,
    /// Main-device launch index -> slot of the quantize kernel it runs.
    by_launch: HashMap<usize, usize>,
    /// Slots the activation's producer fills itself (a fused kernel writes
    /// the Q8_1 copy next to its F32 output), so no quantize launch exists.
    prefilled: Vec<bool>,
    /// Slots whose copy lacks its norm's 1/rms (plan/matmul_norm.rs): the
    /// matmuls that read them apply it.
    norm_shares: Vec<Option<NormShares>>,
}

/// Where a MulMatAddNorm left its shares of the sum of squares of a row
/// whose Q8_1 copy it wrote with its factor c instead of 1/rms
/// (mul_mv_norm.cl): a scratch offset, how many floats (c follows them),
/// the row length and the norm's eps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormShares {
    pub offset: u64,
    pub parts: i32,
    pub n: i64,
    pub eps: f32,
}

impl Table {
    /// The slot of `key`, made with a region of `bytes` at `*next` (advanced)
    /// if new.
    pub fn slot(&mut self, key: Key, bytes: u64, next: &mut u64) -> usize {
        if let Some(&s) = self.index.get(&key) {
            return s;
        }
        let s = self.keys.len();
        self.regions.push((*next, bytes));
        *next += bytes.div_ceil(128) * 128;
        self.index.insert(key.clone(), s);
        self.keys.push(key);
        self.prefilled.push(false);
        self.norm_shares.push(None);
        s
    }

    /// Every slot's key, by slot.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// Marks slot `s` as written by its activation's producer.
    pub fn prefill(&mut self, s: usize) {
        self.prefilled[s] = true;
    }

    pub fn is_prefilled(&self, s: usize) -> bool {
        self.prefilled[s]
    }

    /// Marks slot `s`'s copy as lacking its norm's 1/rms, made from `shares`.
    pub fn set_norm_shares(&mut self, s: usize, shares: NormShares) {
        self.norm_shares[s] = Some(shares);
    }

    pub fn norm_shares(&self, s: usize) -> Option<NormShares> {
        self.norm_shares[s]
    }

    /// The slot of an already planned key.
    pub fn find(&self, key: &Key) -> Option<usize> {
        self.index.get(key).copied()
    }

    /// Scratch offset and size of slot `s`.
    pub fn region(&self, s: usize) -> (u64, u64) {
        self.regions[s]
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Records that main-device launch `launch` quantizes into slot `s`.
    pub fn bind_launch(&mut self, launch: usize, s: usize) {
        self.by_launch.insert(launch, s);
    }

    pub fn launch_slot(&self, launch: usize) -> Option<usize> {
        self.by_launch.get(&launch).copied()
    }

    /// A fresh, empty cache for one graph compute.
    pub fn session(&self) -> Session {
        Session {
            mode: mode(),
            ready: vec![false; self.keys.len()],
            peer_ready: vec![0; self.keys.len()],
            stats: Stats::default(),
        }
    }
}

/// What one graph compute did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub hits: u64,
    pub misses: u64,
    pub peer_hits: u64,
    pub peer_misses: u64,
    /// Quantize kernels enqueued, cache or not.
    pub quantize: u64,
    /// Activation copies to peers enqueued, cache or not.
    pub peer_copies: u64,
}

/// The cache during one graph compute: empty when made, dropped at the end.
pub struct Session {
    mode: u8,
    ready: Vec<bool>,
    /// Per slot, a bit per device index (peers hold their own copies).
    peer_ready: Vec<u64>,
    pub stats: Stats,
}

impl Session {
    /// Whether the quantize kernel of slot `s` must run (false: a hit).
    pub fn quantize(&mut self, s: usize) -> bool {
        if self.mode == 0 {
            return true;
        }
        if self.ready[s] {
            self.stats.hits += 1;
            return false;
        }
        self.ready[s] = true;
        self.stats.misses += 1;
        true
    }

    /// Whether slot `s` must be copied to device `device` (false: a hit).
    pub fn peer_copy(&mut self, s: usize, device: usize) -> bool {
        if self.mode == 0 || device >= 64 {
            return true;
        }
        let bit = 1u64 << device;
        if self.peer_ready[s] & bit != 0 {
            self.stats.peer_hits += 1;
            return false;
        }
        self.peer_ready[s] |= bit;
        self.stats.peer_misses += 1;
        true
    }

    /// Ends the graph compute: the entries are gone, the counters are added
    /// to the process totals and, with `POLYCL_Q8_CACHE=2`, logged.
    pub fn close(self, device_name: &str) -> Stats {
        let s = self.stats;
        counters::q8(s.hits, s.misses, s.peer_hits, s.peer_misses);
        if self.mode == 2 {
            log::info(&format!(
                "{device_name}: q8_1 cache: {} hits, {} misses; peers: {} hits, {} misses; \
                 {} quantize kernels, {} peer copies",
                s.hits, s.misses, s.peer_hits, s.peer_misses, s.quantize, s.peer_copies
            ));
        } else if crate::config::get().verbose {
            // The same work counts without the cache, for comparisons (POLYCL_LOG=1).
            log::debug(&format!(
                "{device_name}: graph compute: {} quantize kernels, {} peer copies",
                s.quantize, s.peer_copies
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(node: usize) -> Key {
        Key {
            source: Value::new(node, 0),
            data: MemRef {
                buffer: 0x1000,
                offset: 64 * node as u64,
            },
            device: 0,
            ne10: 256,
            nrows: 1,
            padded_row: 288,
        }
    }

    #[test]
    fn siblings_share_a_slot_and_hit_once_per_compute() {
        let mut t = Table::default();
        let mut next = 0;
        let a = t.slot(key(1), 288, &mut next);
        let b = t.slot(key(1), 288, &mut next);
        let c = t.slot(key(2), 288, &mut next);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(t.region(c).0, 384);
        let mut s = t.session();
        s.mode = 1;
        assert!(s.quantize(a));
        assert!(!s.quantize(a));
        assert!(s.quantize(c));
        assert!(s.peer_copy(a, 1));
        assert!(!s.peer_copy(a, 1));
        assert!(s.peer_copy(a, 2));
        assert_eq!(
            (
                s.stats.hits,
                s.stats.misses,
                s.stats.peer_hits,
                s.stats.peer_misses
            ),
            (1, 2, 1, 2)
        );
        // A new graph compute starts empty.
        let mut s = t.session();
        s.mode = 1;
        assert!(s.quantize(a));
        s.mode = 0;
        assert!(s.quantize(a) && s.quantize(a));
    }
}
