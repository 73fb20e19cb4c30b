//! The compare-and-set path: read the slots and the node's clock with one script, decide
//! with the core, commit with another script if no slot changed since (retrying on
//! conflicts), all or nothing.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, Script};
use tollgate::stack::StackDecision;
use tollgate::store::fleet::{self, Call, Commit, Handling, Ttl, ValueError};
use tollgate::store::Batch;
use tollgate::{Nanos, State};

use super::fallback::{classify, handling, Failure};
use super::runner::answer_all;
use super::{Answer, Group, Inner, Op, Pending};
use crate::{Error, Outcome, Source, Why, COMMIT_SCRIPT, READ_SCRIPT};

/// What one read (or a conflicting commit) returned: the node's clock and each slot's value.
struct View {
    now: Nanos,
    values: Vec<Vec<u8>>,
}

/// What a commit answered.
enum Committed {
    Written,
    Conflict(View),
}

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
        let mut view = match self.read(&keys).await {
            Ok(v) => v,
            Err(Failure::Unavailable(why)) => {
                self.mark_down(why);
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
                        self.counters.conflicts.fetch_add(1, Relaxed);
                        if started.elapsed() >= self.options.retry_for {
                            let waited = started.elapsed();
                            return answer_all(round, Err(Error::Contended { waited }));
                        }
                        retries += 1;
                        // Jitter: clients that collided do not collide again in step.
                        let pause = fastrand::u64(0..=u64::from(retries.min(10)) * 1_000);
                        tokio::time::sleep(Duration::from_micros(pause)).await;
                        view = current;
                        sent = Instant::now();
                        continue;
                    }
                    Err(Failure::Unavailable(_)) => {
                        // The commit may have been applied: never sent again.
                        self.counters.indeterminate.fetch_add(1, Relaxed);
                        self.mark_down(Why::Indeterminate);
                        return self.fall_back(group, round, Why::Indeterminate);
                    }
                    Err(Failure::Fatal(e)) => return answer_all(round, Err(Error::Redis(e))),
                }
            }
            for (p, a) in round.into_iter().zip(answers) {
                let reply = match a {
                    Ok(Some(d)) => {
                        if let Op::Check(cost) | Op::Acquire { cost, .. } = p.op {
                            self.counters.redis.fetch_add(1, Relaxed);
                            self.remember(group, cost, sent, &d, d.decision.retry_after);
                        }
                        Ok(Answer::Decided(Outcome {
                            decision: d.decision,
                            each: d.each,
                            source: Source::Redis,
                        }))
                    }
                    Ok(None) => Ok(Answer::Released),
                    Err(e) => Err(e),
                };
                let _ = p.reply.send(reply);
            }
            return;
        }
    }

    /// Runs `script` (whose body is `source`) over `keys` and `args`: `EVALSHA` (the
    /// server's script cache), and on `NOSCRIPT`, which means it did not run, `EVAL` with
    /// its body, which needs no cache (and fills it again): a `SCRIPT FLUSH` or a restart
    /// between a reload and the call cannot fail a request.
    async fn eval(
        &self,
        script: &Script,
        source: &str,
        keys: &[String],
        args: &[Vec<u8>],
    ) -> redis::RedisResult<Vec<Vec<u8>>> {
        let mut conn = self.conn.clone();
        self.counters.round_trips.fetch_add(1, Relaxed);
        let mut by_hash = redis::cmd("EVALSHA");
        by_hash
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        match by_hash.query_async(&mut conn).await {
            Err(e) if handling(Call::Read, &e) == Handling::SendBody => {
                self.counters.round_trips.fetch_add(1, Relaxed);
                let mut by_body = redis::cmd("EVAL");
                by_body.arg(source).arg(keys.len()).arg(keys).arg(args);
                by_body.query_async(&mut conn).await
            }
            other => other,
        }
    }

    async fn read(&self, keys: &[String]) -> Result<View, Failure> {
        let call = self.eval(&self.read, READ_SCRIPT, keys, &[]);
        let reply = match tokio::time::timeout(self.options.timeout, call).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(classify(Call::Read, e)),
            Err(_) => return Err(Failure::Unavailable(Why::Timeout)),
        };
        view(&reply, 0, keys.len()).ok_or_else(|| Failure::Fatal(unexpected_reply()))
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
        let call = self.eval(&self.commit, COMMIT_SCRIPT, keys, &args);
        let reply = match tokio::time::timeout(self.options.timeout, call).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(classify(Call::Write, e)),
            Err(_) => return Err(Failure::Unavailable(Why::Indeterminate)),
        };
        match reply.first().map(Vec::as_slice) {
            Some(b"ok") => Ok(Committed::Written),
            Some(b"conflict") => view(&reply, 1, keys.len())
                .map(Committed::Conflict)
                .ok_or_else(|| Failure::Fatal(unexpected_reply())),
            _ => Err(Failure::Fatal(unexpected_reply())),
        }
    }

    /// The keys' times to live (the core's rule, [`Ttl`]); `None` under a test clock,
    /// whose time is not Redis's.
    fn ttl(&self) -> Option<Ttl> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        (!self.test_clock()).then(|| Ttl {
            grace_ms: ms(self.options.grace),
            lease_ms: ms(self.options.lease),
        })
    }
}

pub(super) fn unexpected_reply() -> RedisError {
    RedisError::from((ErrorKind::UnexpectedReturnType, "unexpected script reply"))
}

/// The time and values of a script's answer from `at` on (the core's [`fleet::read_view`]).
fn view(reply: &[Vec<u8>], at: usize, n: usize) -> Option<View> {
    let (now, values) = fleet::read_view(reply.get(at..)?, n)?;
    Some(View {
        now,
        values: values.to_vec(),
    })
}

/// Splits each value into its version and its state.
type Decoded = (Vec<Vec<u8>>, Vec<Option<State>>);

fn decode(keys: &[String], values: &[Vec<u8>]) -> Result<Decoded, Error> {
    let mut versions = Vec::with_capacity(values.len());
    let mut states = Vec::with_capacity(values.len());
    for (key, v) in keys.iter().zip(values) {
        let stored = fleet::decode_value(v).map_err(|e| match e {
            ValueError::Short(_) => Error::CorruptVersion { key: key.clone() },
            ValueError::State(reason) => Error::Corrupt {
                key: key.clone(),
                reason,
            },
        })?;
        match stored {
            Some(s) => {
                versions.push(s.version.to_vec());
                states.push(Some(s.state));
            }
            None => {
                versions.push(Vec::new());
                states.push(None);
            }
        }
    }
    Ok((versions, states))
}
