//! The waiting line of [`RedisLimiter::acquire`]: the core's
//! ([`tollgate::wait::wait_in_line`]), each decision a round that keeps its charge only as
//! the core's waiting rule says.

#[cfg(feature = "testing")] // the test clock and timers only
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use redis::aio::ConnectionLike;
use tollgate::wait::{wait_in_line, Ask, Turn};
use tollgate::{Decision, Nanos};

use super::{Answer, Group, Inner, Op, RedisLimiter};
use crate::{Error, Outcome};

impl<C> RedisLimiter<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Waits for a turn: decides, and while denied with a retry time that fits before
    /// `max_wait` is up, sleeps until then (plus the jitter of [`Options::jitter`](crate::Options::jitter)) and
    /// decides again, waiting through the core (`tollgate::wait::wait_in_line`). Gives up
    /// at once with [`Error::Timeout`] when the retry time is beyond the deadline, or
    /// unknown (a full concurrency limit). Each decision is sent with the time left and kept
    /// only if it admits within it: a leaky-bucket queue's admission resolves after its
    /// `delay` (which counts against the deadline; one that does not fit is not charged), a
    /// wake after the deadline charges nothing, and a charged decision never times out.
    ///
    /// Waiters for one key in this process are served in arrival order, one decision at a
    /// time: only the first waits for the key's retry time, the others wait for it (so none
    /// wakes to a denial it could have known about); one whose deadline the key's retry
    /// time is already beyond gives up at once, with that retry time. Dropping the future charges nothing
    /// unless its last decision was already sent.
    pub async fn acquire(
        &self,
        key: &str,
        tenant: Option<&str>,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Outcome, Error> {
        let group = self.group(key, tenant)?;
        self.inner.check_cost(&group, cost)?;
        let max = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        let jitter = u64::try_from(self.inner.options.jitter.as_nanos()).unwrap_or(u64::MAX);
        // The source of the last decision (what a waiter that gave up is counted under).
        #[cfg(feature = "metrics")]
        let last = std::sync::Mutex::new(crate::Source::DenyCache);
        #[cfg(feature = "metrics")]
        let start = self.inner.wait_clock();
        let decide = |ask| {
            let decided = self.decide_waiting(&group, cost, ask);
            #[cfg(feature = "metrics")]
            let last = &last;
            async move {
                let decided = decided.await;
                #[cfg(feature = "metrics")]
                if let Ok((_, o)) = &decided {
                    *last.lock().unwrap() = o.source;
                }
                decided
            }
        };
        let turn = wait_in_line(
            &self.inner.lines,
            group.clone(),
            max,
            || self.inner.wait_clock(),
            |d| self.inner.wait_sleep(d),
            || self.inner.draw_jitter(jitter),
            decide,
        )
        .await?;
        #[cfg(feature = "metrics")]
        {
            use tollgate::metrics::WaitResult;
            let m = &self.inner.metrics;
            match &turn {
                Turn::Admitted(o) => {
                    m.decision(&o.decision, o.source, cost);
                    let waited = self.inner.wait_clock().saturating_sub(start);
                    m.wait(WaitResult::Admitted, waited);
                }
                Turn::TimedOut { waited, .. } => {
                    let denied = Decision {
                        allowed: false,
                        ..Decision::default()
                    };
                    m.decision(&denied, *last.lock().unwrap(), cost);
                    m.wait(WaitResult::GaveUp, *waited);
                }
            }
        }
        match turn {
            Turn::Admitted(outcome) => Ok(outcome),
            Turn::TimedOut {
                waited,
                retry_after,
            } => Err(Error::Timeout {
                waited: Duration::from_nanos(waited),
                retry_after: Duration::from_nanos(retry_after),
            }),
        }
    }

    /// One decision for a waiter (`tollgate::wait::wait_in_line`'s `decide`): a remembered
    /// denial, or a round that keeps the charge only as `ask` says.
    async fn decide_waiting(
        &self,
        group: &Group,
        cost: u64,
        ask: Ask,
    ) -> Result<(Decision, Outcome), Error> {
        let outcome = match self.inner.remembered(group, cost) {
            Some(o) => o,
            None => match self
                .submit(group.clone(), Op::Acquire { cost, ask })
                .await?
            {
                Answer::Decided(o) => o,
                Answer::Released => unreachable!("an acquire is answered with a decision"),
                Answer::Reserved(..) => unreachable!("only a reserve is answered with its instant"),
            },
        };
        Ok((outcome.decision, outcome))
    }
}

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The clock of a waiter's wait (`acquire`): the time since the limiter was built, or a
    /// test's clock (the one its decisions use).
    fn wait_clock(&self) -> Nanos {
        #[cfg(feature = "testing")]
        if let Some(c) = &self.options.test_clock {
            return c.load(Relaxed);
        }
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The jitter a waiter adds to a sleep: drawn from `0..=jitter` (the whole of it under
    /// a test clock, to replay a wait exactly).
    fn draw_jitter(&self, jitter: Nanos) -> Nanos {
        if jitter == 0 || self.test_clock() {
            return jitter;
        }
        fastrand::u64(0..=jitter)
    }

    /// A waiter's sleep of `d` nanoseconds: tokio's timer, or under a test clock, a move of
    /// that clock by `d` (plus the test's timer lateness), so a test replays a wait without
    /// sleeping.
    async fn wait_sleep(&self, d: Nanos) {
        #[cfg(feature = "testing")]
        if let Some(c) = &self.options.test_clock {
            c.fetch_add(d.saturating_add(self.options.test_late), Relaxed);
            return tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_nanos(d)).await
    }
}
