//! The runner: one task per busy key (and tenant) serving its queued requests a round at a
//! time, each round decided by the fallback, the module or the compare-and-set path.

use std::collections::HashMap;
#[cfg(feature = "testing")] // the test clock and timers only
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use redis::aio::ConnectionLike;
use tollgate::{DecideError, Nanos};

use super::{Answer, Group, Inner, Pending};
use crate::{Error, Why};

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Serves a group until its queue is empty, one round (every request queued so far)
    /// at a time.
    pub(super) async fn run(self: Arc<Self>, group: Group, first: Pending) {
        // Should a round ever panic, the group is unregistered while unwinding, so that its
        // queued requests are answered (their senders dropped: an error) and the key's next
        // request starts a new runner instead of waiting behind a dead one. Only then: on a
        // normal exit the group was already removed under the same lock that found its queue
        // empty (removing it later could drop a request queued in between, or another
        // runner's group).
        struct UnregisterOnPanic<'a>(&'a Mutex<HashMap<Group, Vec<Pending>>>, &'a Group);
        impl Drop for UnregisterOnPanic<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    if let Ok(mut groups) = self.0.lock() {
                        groups.remove(self.1);
                    }
                }
            }
        }
        let _unregister = UnregisterOnPanic(&self.groups, &group);
        let mut round = vec![first];
        loop {
            self.decide_round(&group, round).await;
            let mut groups = self.groups.lock().unwrap();
            let Some(queue) = groups.get_mut(&group) else {
                return;
            };
            if queue.is_empty() {
                groups.remove(&group);
                return;
            }
            round = std::mem::take(queue);
        }
    }

    /// One round: by the fallback while Redis is down, else in the module when the server
    /// has it, else on the compare-and-set path.
    async fn decide_round(&self, group: &Group, round: Vec<Pending>) {
        if self.link.is_down() {
            return self.fall_back(group, round, Why::Unreachable);
        }
        if self.has_module().await {
            return self.decide_in_module(group, round).await;
        }
        self.decide_by_cas(group, round).await
    }

    /// Refuses, before any round trip, a cost above the smallest capacity among the slots
    /// the request touches (a request that skips a fair share's tenant window is not held
    /// to the tenant's capacity).
    pub(super) fn check_cost(&self, group: &Group, cost: u64) -> Result<(), Error> {
        let slots = self.limits.slots(group.tenant.as_deref());
        let capacity = tollgate::store::Slot::capacity(&self.limits, &slots);
        if cost > capacity {
            return Err(DecideError::CostExceedsCapacity { cost, capacity }.into());
        }
        Ok(())
    }

    /// The clock a decision uses: Redis's, or a test's.
    pub(super) fn clock(&self, redis_now: Nanos) -> Nanos {
        #[cfg(feature = "testing")]
        if let Some(c) = &self.options.test_clock {
            return c.load(Relaxed);
        }
        redis_now
    }

    pub(super) fn test_clock(&self) -> bool {
        #[cfg(feature = "testing")]
        if self.options.test_clock.is_some() {
            return true;
        }
        false
    }
}

pub(super) fn answer_all(round: Vec<Pending>, result: Result<Answer, Error>) {
    for p in round {
        let r = match &result {
            Ok(_) => unreachable!("only errors are answered to a whole round"),
            Err(e) => Err(e.clone()),
        };
        let _ = p.reply.send(r);
    }
}
