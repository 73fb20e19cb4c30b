//! The compare-and-set path: read the slots and the node's clock with one script, decide
//! with the core, commit with another script if no slot changed since (retrying on
//! conflicts), all or nothing.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use tollgate::stack::StackDecision;
use tollgate::store::fleet::{self, Commit, Ttl};
use tollgate::store::Batch;

use super::runner::answer_all;
use super::{Answer, Group, Inner, Op, Pending};
use crate::link::{conflict_pause, decode, Committed, Failure};
use crate::{Error, Outcome, Source, Why};

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// One round on the compare-and-set path: read the slots, decide every queued request
    /// in order, commit the result (retrying on conflicts), answer.
    pub(super) async fn decide_by_cas(&self, group: &Group, round: Vec<Pending>) {
        let tenant = group.tenant.as_deref();
        let slots = self.limits.slots(tenant);
        let keys: Vec<String> = slots
            .iter()
            .map(|s| self.layout.slot_key(&group.key, tenant, *s))
            .collect();
        let started = Instant::now();
        let mut view = match self.link.read(&keys).await {
            Ok(v) => v,
            Err(Failure::Unavailable(why)) => {
                self.link.mark_down(why);
                return self.fall_back(group, round, why);
            }
            Err(Failure::Fatal(e)) => return answer_all(round, Err(Error::Redis(e))),
        };
        let mut sent = started;
        let mut retries = 0u32;
        loop {
            let (versions, states) = match decode(&keys, &view.values) {
                Ok(x) => x,
                Err(e) => return answer_all(round, Err(e)),
            };
            let now = self.clock(view.now);
            let mut batch = Batch::new(&self.limits, &slots, states, now);
            let answers: Vec<Result<Option<StackDecision>, Error>> = round
                .iter()
                .map(|p| batch.apply(p.op.in_batch()).map_err(Error::from))
                .collect();
            if batch.changed() {
                match self.write(&keys, &versions, &batch).await {
                    Ok(Committed::Written) => {}
                    Ok(Committed::Conflict(current)) => {
                        self.link.counters.conflicts.fetch_add(1, Relaxed);
                        if started.elapsed() >= self.options.retry_for {
                            let waited = started.elapsed();
                            return answer_all(round, Err(Error::Contended { waited }));
                        }
                        retries += 1;
                        conflict_pause(retries).await;
                        view = current;
                        sent = Instant::now();
                        continue;
                    }
                    Err(Failure::Unavailable(_)) => {
                        // The commit may have been applied: never sent again.
                        self.link.counters.indeterminate.fetch_add(1, Relaxed);
                        self.link.mark_down(Why::Indeterminate);
                        return self.fall_back(group, round, Why::Indeterminate);
                    }
                    Err(Failure::Fatal(e)) => return answer_all(round, Err(Error::Redis(e))),
                }
            }
            for (p, a) in round.into_iter().zip(answers) {
                let reply = match a {
                    Ok(Some(d)) => {
                        if let Op::Check(cost) | Op::Acquire { cost, .. } | Op::Reserve(cost) = p.op
                        {
                            self.link.counters.redis.fetch_add(1, Relaxed);
                            self.remember(group, cost, sent, &d, d.decision.retry_after);
                        }
                        let outcome = Outcome {
                            decision: d.decision,
                            each: d.each,
                            source: Source::Redis,
                        };
                        match p.op {
                            Op::Reserve(_) => Ok(Answer::Reserved(outcome, now)),
                            _ => Ok(Answer::Decided(outcome)),
                        }
                    }
                    Ok(None) => Ok(Answer::Released),
                    Err(e) => Err(e),
                };
                let _ = p.reply.send(reply);
            }
            return;
        }
    }

    async fn write(
        &self,
        keys: &[String],
        versions: &[Vec<u8>],
        batch: &Batch<'_>,
    ) -> Result<Committed, Failure> {
        #[cfg(feature = "testing")]
        let mode = if self.options.blind_commit {
            Commit::Blind
        } else {
            Commit::Cas
        };
        #[cfg(not(feature = "testing"))]
        let mode = Commit::Cas;
        let writes = fleet::key_writes(batch, self.ttl(), || fastrand::u64(..));
        let args = fleet::commit_args(mode, versions, writes);
        self.link.commit(keys, &args).await
    }

    /// The keys' times to live (the core's rule, [`Ttl`]); `None` under a test clock,
    /// whose time is not Redis's.
    pub(super) fn ttl(&self) -> Option<Ttl> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        (!self.test_clock()).then(|| Ttl {
            grace_ms: ms(self.options.grace),
            lease_ms: ms(self.options.lease),
        })
    }
}
