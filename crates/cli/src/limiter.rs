//! Per-key limiting for `simulate` and `compare`: a map of states over the core's
//! [`tollgate::decide`], exact (no key is ever evicted) and holding only limited keys.
//! `replay`, which must bound its memory, uses the core's bounded
//! [`tollgate::keyed::KeyedLimiter`] instead.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use tollgate::settle::{settle, Charge, Overage, Settled};
use tollgate::{decide, millis, release, DecideError, Decision, Policy, ReservationError, State};

/// One policy applied to every key separately.
pub struct PerKey {
    policy: Policy,
    states: HashMap<String, State>,
}

impl PerKey {
    /// A limiter where every key starts fresh.
    pub fn new(policy: Policy) -> PerKey {
        PerKey {
            policy,
            states: HashMap::new(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Decides a request of `cost` for `key` at `time_ms`. A state the core returns as fresh
    /// is dropped. An error (a cost above the policy's capacity) ends the command, so the
    /// key's state is not kept after one.
    pub fn check(&mut self, key: &str, time_ms: u64, cost: u64) -> Result<Decision, DecideError> {
        let state = self.states.remove(key);
        let (decision, next) = decide(&self.policy, state, millis(time_ms), cost)?;
        if let Some(next) = next {
            self.states.insert(key.to_owned(), next);
        }
        Ok(decision)
    }

    /// Releases `cost` concurrency slots of `key`.
    pub fn release(&mut self, key: &str, cost: u64) -> Result<(), DecideError> {
        let state = self.states.remove(key);
        if let Some(next) = release(&self.policy, state, cost)? {
            self.states.insert(key.to_owned(), next);
        }
        Ok(())
    }

    /// Settles a charge of `key` made at `charge.at`: `actual` was spent, known at
    /// `time_ms`. An overage is charged in full (a debt), as the front ends do by default.
    pub fn settle(
        &mut self,
        key: &str,
        charge: Charge,
        actual: u64,
        time_ms: u64,
    ) -> Result<Settled, ReservationError> {
        let mut state = self.states.remove(key);
        let settled = settle(
            &self.policy,
            &mut state,
            charge,
            actual,
            millis(time_ms),
            Overage::Debt,
        );
        if let Some(next) = state {
            self.states.insert(key.to_owned(), next);
        }
        settled
    }

    /// The number of keys currently limited (not fresh).
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether every key is fresh.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }
}

/// Pending releases of concurrency slots, earliest first.
#[derive(Default)]
pub struct Releases {
    heap: BinaryHeap<Reverse<(u64, u64, String, u64)>>,
    seq: u64,
}

impl Releases {
    /// Schedules the release of `cost` slots of `key` at `at_ms`.
    pub fn schedule(&mut self, at_ms: u64, key: &str, cost: u64) {
        self.seq += 1;
        self.heap
            .push(Reverse((at_ms, self.seq, key.to_owned(), cost)));
    }

    /// Takes the next release due at or before `now_ms` (a request that finished at `now_ms`
    /// frees its slot before a request arriving at `now_ms` is decided).
    pub fn pop_due(&mut self, now_ms: u64) -> Option<(String, u64)> {
        match self.heap.peek() {
            Some(Reverse((at, ..))) if *at <= now_ms => self
                .heap
                .pop()
                .map(|Reverse((_, _, key, cost))| (key, cost)),
            _ => None,
        }
    }
}
