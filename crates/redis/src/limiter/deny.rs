//! The deny cache: denials remembered in this process until their retry time (the core's
//! [`tollgate::store::DenyCache`]), so a denied key costs no round trip.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use redis::aio::ConnectionLike;
use tollgate::stack::StackDecision;
use tollgate::Nanos;

use super::{Group, Inner};
use crate::{Outcome, Source};

/// The clock of the deny cache: nanoseconds from `epoch` to `t`.
pub(super) fn since(epoch: Instant, t: Instant) -> Nanos {
    u64::try_from(t.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A denial remembered for `group` that still holds for `cost`.
    pub(super) fn remembered(&self, group: &Group, cost: u64) -> Option<Outcome> {
        if !self.options.deny_cache || self.test_clock() {
            return None;
        }
        let now = since(self.epoch, Instant::now());
        let d = self.denials.lock().unwrap().get(group, cost, now)?;
        self.link.counters.deny_cache.fetch_add(1, Relaxed);
        Some(Outcome {
            decision: d.decision,
            each: d.each,
            source: Source::DenyCache,
        })
    }

    /// Remembers a denial decided on a read sent at `sent` (so the memory never outlasts
    /// the true retry time); `retry` is its retry time, or a lower bound of it.
    pub(super) fn remember(
        &self,
        group: &Group,
        cost: u64,
        sent: Instant,
        decided: &StackDecision,
        retry: Nanos,
    ) {
        if !self.options.deny_cache || self.test_clock() {
            return;
        }
        let at = since(self.epoch, sent);
        let mut denials = self.denials.lock().unwrap();
        denials.remember(group.clone(), cost, at, decided, retry);
    }
}
