//! Plans kept per backend, keyed by graph fingerprint, with least-recently-used
//! eviction; plans naming a freed buffer are dropped.
//!
//! The fingerprint of a 7B decode graph takes ~65 us of host time, paid while
//! the device waits for the token's first launch. ggml's scheduler gives a
//! split graph a new uid whenever it splits it again, and ggml-cuda reuses its
//! CUDA graph while the uid stays (llama.cpp reuses a decode graph token
//! after token), so a graph seen before under its uid is the same graph: its
//! fingerprint is remembered by uid (0: no uid, always fingerprinted), and
//! forgotten when a buffer is freed.

use super::Plan;
use crate::runtime::DeviceBuffer;
use std::collections::HashMap;
use std::sync::Arc;

pub struct PlanCache {
    plans: HashMap<u64, (Arc<Plan>, u64)>,
    /// Graph uid -> fingerprint.
    uid_keys: HashMap<u64, u64>,
    uid_epoch: u64,
    capacity: usize,
    tick: u64,
    checked_epoch: u64,
    pub hits: u64,
    pub misses: u64,
}

impl PlanCache {
    pub fn new(capacity: usize) -> Self {
        PlanCache {
            plans: HashMap::new(),
            uid_keys: HashMap::new(),
            uid_epoch: DeviceBuffer::free_epoch(),
            capacity: capacity.max(1),
            tick: 0,
            checked_epoch: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// The fingerprint of the graph with ggml uid `uid`, computed by
    /// `fingerprint` unless this uid was seen since the last buffer free.
    pub fn key(&mut self, uid: u64, fingerprint: impl FnOnce() -> u64) -> u64 {
        if uid == 0 {
            return fingerprint();
        }
        let epoch = DeviceBuffer::free_epoch();
        if epoch != self.uid_epoch || self.uid_keys.len() >= 4 * self.capacity {
            self.uid_keys.clear();
            self.uid_epoch = epoch;
        }
        *self.uid_keys.entry(uid).or_insert_with(fingerprint)
    }

    pub fn get(&mut self, key: u64) -> Option<&Arc<Plan>> {
        let epoch = DeviceBuffer::free_epoch();
        if epoch != self.checked_epoch {
            self.plans.retain(|_, (p, _)| p.buffers_alive());
            self.checked_epoch = epoch;
        }
        self.tick += 1;
        let tick = self.tick;
        match self.plans.get_mut(&key) {
            Some((p, used)) => {
                *used = tick;
                self.hits += 1;
                Some(p)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    pub fn insert(&mut self, key: u64, plan: Plan) -> &Arc<Plan> {
        if self.plans.len() >= self.capacity {
            if let Some(oldest) = self
                .plans
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k)
            {
                self.plans.remove(&oldest);
            }
        }
        self.tick += 1;
        &self
            .plans
            .entry(key)
            .insert_entry((Arc::new(plan), self.tick))
            .into_mut()
            .0
    }

    pub fn len(&self) -> usize {
        self.plans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_graph_uid_seen_before_skips_the_fingerprint() {
        let mut c = PlanCache::new(4);
        let calls = Cell::new(0);
        let fp = |v: u64| {
            calls.set(calls.get() + 1);
            v
        };
        // No uid: fingerprinted every time.
        assert_eq!(c.key(0, || fp(7)), 7);
        assert_eq!(c.key(0, || fp(8)), 8);
        assert_eq!(calls.get(), 2);
        // A uid: once, then remembered; another uid is its own graph.
        assert_eq!(c.key(42, || fp(9)), 9);
        assert_eq!(c.key(42, || fp(10)), 9);
        assert_eq!(c.key(43, || fp(11)), 11);
        assert_eq!(calls.get(), 4);
        // Bounded: past 4x the plan capacity the map starts over.
        for uid in 100..120 {
            c.key(uid, || fp(uid));
        }
        assert!(c.uid_keys.len() <= 16);
    }
}
