//! Reserve an estimate, settle the real cost, at Redis's clock ([`tollgate::settle`]'s rule,
//! run by the core's [`Batch::settle`]).
//!
//! A reserve is a check of the estimate, merged with the key's other requests; admitted on
//! Redis's states, it returns a [`Reservation`] whose `at` is Redis's clock at the decision.
//! A settle is a read (the slots, the node's clock, and the reservation's settle record),
//! the core's settle, and one script that writes the slots (compare-and-set, retried on a
//! conflict) together with the settle record, under the key's hash tag; two round trips. The
//! record keeps the settlement for [`fleet::settled_ttl_ms`]: a second settle of the same
//! reservation (a client's retry, a process that restarted and settles again) answers the
//! first's outcome and charges nothing, however many processes send it.
//!
//! With tollgate's module loaded, a settle is one command, `TOLLGATE.SETTLE`, one round trip
//! (the same rule and record, inside Redis), and a reserve is a `TOLLGATE.CHECK ... WITHTIME`
//! merged with the key's other requests (its reply carries the instant decided at).

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use tollgate::settle::{
    check_reservable, fingerprint, stable_hash, Overage, Reservation, Settlement,
};
use tollgate::store::fleet::settle_command::{self, SettleArgs};
use tollgate::store::fleet::{self, Commit};
use tollgate::store::Batch;
use tollgate::{Identity, ReservationError, MAX_COUNT};

use super::{Answer, Group, Inner, Op, RedisLimiter};
use crate::link::{conflict_pause, decode, Committed, Failure, SettleCommitted};
use crate::{Error, Outcome, Source, Why};

/// A settle that did not settle: why, and the reservation back, to be settled again (after
/// [`Error::SettleUnknown`], a retry is safe: it charges once) or dropped (it then stays
/// charged at its estimate).
#[derive(Debug)]
pub struct NotSettled {
    /// Why.
    pub error: Error,
    /// The reservation, to retry with.
    pub reservation: Reservation,
}

impl std::fmt::Display for NotSettled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "reservation {:x} not settled: {}",
            self.reservation.id, self.error
        )
    }
}

impl std::error::Error for NotSettled {}

impl<C> RedisLimiter<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Reserves `estimate` for `key`: a decision that charges it, as [`Self::check`] does,
    /// and, when admitted on Redis's states, the [`Reservation`] to settle with the real
    /// cost ([`Self::settle`]). A denial is the outcome and no reservation; so is an
    /// admission by the fallback while Redis is unavailable (nothing was charged on Redis:
    /// there is nothing to settle).
    ///
    /// Errors: as [`Self::check`]'s (an estimate above a capacity), and
    /// [`Error::Reservation`] with [`ReservationError::NotSettleable`] for a leaky queue.
    pub async fn reserve(
        &self,
        key: &str,
        estimate: u64,
    ) -> Result<(Outcome, Option<Reservation>), Error> {
        for p in self.inner.limits.policies() {
            check_reservable(&p)?;
        }
        let group = self.group(key, None)?;
        self.inner.check_cost(&group, estimate)?;
        if let Some(outcome) = self.inner.remembered(&group, estimate) {
            return Ok((outcome, None));
        }
        let (outcome, at) = match self.submit(group, Op::Reserve(estimate)).await? {
            Answer::Reserved(o, at) => (o, Some(at)),
            Answer::Decided(o) => (o, None),
            Answer::Released => unreachable!("a reserve is answered with a decision"),
        };
        #[cfg(feature = "metrics")]
        self.inner
            .metrics
            .decision(&outcome.decision, outcome.source, estimate);
        let reservation = match at {
            Some(at) if outcome.decision.allowed && outcome.source == Source::Redis => {
                Some(Reservation {
                    id: fastrand::u64(1..),
                    limiter: self.inner.issuer(),
                    policies: fingerprint(&self.inner.limits.policies()),
                    key: stable_hash(key.as_bytes()),
                    estimate,
                    at,
                })
            }
            _ => None,
        };
        Ok((outcome, reservation))
    }

    /// Settles `reservation` (made by [`Self::reserve`] for `key`, by this process or
    /// another of the same namespace and limits) with the `actual` cost, at Redis's clock:
    /// each limit gives back `estimate - actual` or charges `actual - estimate`
    /// ([`tollgate::settle`]'s rule), all or nothing, recorded in Redis with the state
    /// change so that the reservation settles once in the fleet.
    ///
    /// Errors, with the reservation given back ([`NotSettled`]):
    /// [`Error::Reservation`] with [`ReservationError::Foreign`] (another key, limits or
    /// namespace), [`ReservationError::ActualTooLarge`], or
    /// [`ReservationError::NotSettleable`] (a concurrency limit: release it instead);
    /// nothing settled. [`Error::SettleUnknown`] when Redis is unavailable or its answer was
    /// lost: never settled by the fallback (nothing is guessed); retry with the same
    /// reservation, which charges once. [`Error::Contended`] after
    /// [`crate::Options::retry_for`] of conflicting writes: nothing settled.
    pub async fn settle(
        &self,
        key: &str,
        reservation: Reservation,
        actual: u64,
        overage: Overage,
    ) -> Result<Settlement, NotSettled> {
        match self.settle_once(key, &reservation, actual, overage).await {
            Ok(s) => Ok(s),
            Err(error) => Err(NotSettled { error, reservation }),
        }
    }

    async fn settle_once(
        &self,
        key: &str,
        r: &Reservation,
        actual: u64,
        overage: Overage,
    ) -> Result<Settlement, Error> {
        let inner = &self.inner;
        let foreign = |differs| Err(ReservationError::Foreign { differs }.into());
        if r.policies != fingerprint(&inner.limits.policies()) {
            return foreign(Identity::Policy);
        }
        if r.limiter != inner.issuer() {
            return foreign(Identity::Limiter);
        }
        if r.key != stable_hash(key.as_bytes()) {
            return foreign(Identity::Key);
        }
        if actual > MAX_COUNT {
            return Err(ReservationError::ActualTooLarge {
                actual,
                max: MAX_COUNT,
            }
            .into());
        }
        let group = self.group(key, None)?;
        let settlement = inner.settle_by_cas(&group, r, actual, overage).await?;
        if settlement.refunded > 0 {
            // A refund frees room: a denial remembered for the key may no longer hold.
            inner.denials.lock().unwrap().retain(|g| g.key != key);
        }
        Ok(settlement)
    }
}

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The number a reservation of this limiter carries: the same in every process of the
    /// namespace (its key layout), so that any of them may settle it.
    fn issuer(&self) -> u64 {
        stable_hash(self.layout.base("").as_bytes())
    }

    /// Reads the slots and the settle record, settles with the core, commits both
    /// (retrying on conflicts).
    async fn settle_by_cas(
        &self,
        group: &Group,
        r: &Reservation,
        actual: u64,
        overage: Overage,
    ) -> Result<Settlement, Error> {
        let slots = self.limits.slots(None);
        let mut keys: Vec<String> = slots
            .iter()
            .map(|s| self.layout.slot_key(&group.key, None, *s))
            .collect();
        keys.push(self.layout.settled_key(&group.key, r.id));
        let n = slots.len();
        let unknown = |why: Why| Error::SettleUnknown { why };
        let started = Instant::now();
        if self.link.is_down() {
            return Err(unknown(Why::Unreachable));
        }
        if self.has_module().await {
            return self.settle_in_module(group, r, actual, overage).await;
        }
        let mut view = match self.link.read(&keys).await {
            Ok(v) => v,
            Err(Failure::Unavailable(why)) => {
                self.link.mark_down(why);
                return Err(unknown(why));
            }
            Err(Failure::Fatal(e)) => return Err(Error::Redis(e)),
        };
        let mut retries = 0u32;
        loop {
            if !view.values[n].is_empty() {
                return record(&view.values[n]);
            }
            let (versions, states) = decode(&keys[..n], &view.values[..n])?;
            let now = self.clock(view.now);
            let mut batch = Batch::new(&self.limits, &slots, states, now);
            let settlement = batch.settle(r.charge(), actual, overage)?;
            let writes = fleet::key_writes(&batch, self.ttl(), || fastrand::u64(..));
            let mut args = fleet::commit_args(Commit::Cas, &versions, writes);
            let kept = if self.test_clock() {
                fleet::TEST_CLOCK_TTL_MS
            } else {
                let grace = u64::try_from(self.options.grace.as_millis()).unwrap_or(u64::MAX);
                fleet::settled_ttl_ms(&self.limits, grace)
            };
            args.push(fleet::settled_record(&settlement));
            args.push(kept.to_string().into_bytes());
            match self.link.commit_settle(&keys, &args).await {
                Ok(SettleCommitted::Committed(Committed::Written)) => {
                    self.link.counters.redis.fetch_add(1, Relaxed);
                    return Ok(settlement);
                }
                Ok(SettleCommitted::Before(rec)) => return record(&rec),
                Ok(SettleCommitted::Committed(Committed::Conflict(current))) => {
                    self.link.counters.conflicts.fetch_add(1, Relaxed);
                    if started.elapsed() >= self.options.retry_for {
                        let waited: Duration = started.elapsed();
                        return Err(Error::Contended { waited });
                    }
                    retries += 1;
                    conflict_pause(retries).await;
                    view = current;
                }
                Err(Failure::Unavailable(why)) => {
                    // The settle may have been applied: the caller retries, and the record
                    // answers if it was.
                    self.link.counters.indeterminate.fetch_add(1, Relaxed);
                    self.link.mark_down(Why::Indeterminate);
                    return Err(unknown(why));
                }
                Err(Failure::Fatal(e)) => return Err(Error::Redis(e)),
            }
        }
    }
}

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The settle in the module: one command, one round trip (`TOLLGATE.SETTLE`, whose
    /// arguments are the core's [`settle_command`]).
    async fn settle_in_module(
        &self,
        group: &Group,
        r: &Reservation,
        actual: u64,
        overage: Overage,
    ) -> Result<Settlement, Error> {
        let args = settle_command::encode(&SettleArgs {
            id: r.id,
            at: r.at,
            estimate: r.estimate,
            actual,
            overage,
        });
        let mut cmd = redis::cmd(settle_command::COMMAND);
        cmd.arg(self.layout.base(&group.key))
            .arg(args)
            .arg(self.module_limits(None));
        let mut conn = self.link.conn.clone();
        match self
            .link
            .send(cmd.query_async::<redis::Value>(&mut conn))
            .await
        {
            Ok(redis::Value::Array(reply)) => match reply.first() {
                Some(redis::Value::BulkString(bytes)) => {
                    self.link.counters.redis.fetch_add(1, Relaxed);
                    record(bytes)
                }
                _ => Err(Error::Redis(crate::link::unexpected_reply())),
            },
            Ok(_) => Err(Error::Redis(crate::link::unexpected_reply())),
            Err(Failure::Unavailable(why)) => {
                // It may have run: the caller retries, and the record answers if it did.
                self.link.counters.indeterminate.fetch_add(1, Relaxed);
                self.link.mark_down(Why::Indeterminate);
                Err(Error::SettleUnknown { why })
            }
            Err(Failure::Fatal(e)) => Err(Error::Redis(e)),
        }
    }
}

/// A settle record read back (a second settle of one reservation).
fn record(bytes: &[u8]) -> Result<Settlement, Error> {
    fleet::read_settled_record(bytes).ok_or_else(|| Error::Redis(crate::link::unexpected_reply()))
}
