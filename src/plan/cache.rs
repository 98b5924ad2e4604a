//! Plans kept per backend, keyed by graph fingerprint, with least-recently-used
//! eviction; plans naming a freed buffer are dropped.

use super::Plan;
use crate::runtime::DeviceBuffer;
use std::collections::HashMap;

pub struct PlanCache {
    plans: HashMap<u64, (Plan, u64)>,
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
            capacity: capacity.max(1),
            tick: 0,
            checked_epoch: 0,
            hits: 0,
            misses: 0,
        }
    }

    pub fn get(&mut self, key: u64) -> Option<&Plan> {
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

    pub fn insert(&mut self, key: u64, plan: Plan) -> &Plan {
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
            .insert_entry((plan, self.tick))
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
