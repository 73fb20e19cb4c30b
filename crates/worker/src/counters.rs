//! Per-policy counters (`GET /admin/v1/stats`): what each isolate counts locally and adds
//! to the stats object's totals.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Counters of one policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Counters {
    /// Requests the coordinator admitted.
    pub admitted: u64,
    /// Requests the coordinator denied because of this policy.
    pub denied: u64,
    /// Requests decided without the coordinator (fail-open or fail-closed).
    pub degraded: u64,
    /// Requests denied from the isolate's deny cache.
    pub deny_cache: u64,
    /// Shadow-mode requests that would have been denied (and were forwarded).
    pub shadow_denied: u64,
}

impl Counters {
    /// Adds `other` to these counters.
    pub fn add(&mut self, other: &Counters) {
        self.admitted += other.admitted;
        self.denied += other.denied;
        self.degraded += other.degraded;
        self.deny_cache += other.deny_cache;
        self.shadow_denied += other.shadow_denied;
    }
}

/// Adds every policy's counters of `from` into `into`.
pub fn merge(into: &mut BTreeMap<String, Counters>, from: &BTreeMap<String, Counters>) {
    for (k, c) in from {
        into.entry(k.clone()).or_default().add(c);
    }
}

/// Per-policy counts of this isolate not yet reported to the stats object.
#[derive(Default)]
pub struct Stats {
    /// Counters by policy name.
    pub by_policy: BTreeMap<String, Counters>,
    /// When this isolate last reported (ms; 0 before its first request).
    pub last_flush_ms: u64,
}

impl Stats {
    /// Counts into the counters of `policy`.
    pub fn count(&mut self, policy: &str, f: impl FnOnce(&mut Counters)) {
        match self.by_policy.get_mut(policy) {
            Some(c) => f(c),
            None => {
                let mut c = Counters::default();
                f(&mut c);
                self.by_policy.insert(policy.to_string(), c);
            }
        }
    }
}
