//! The module path: when the server has tollgate's module loaded, every queued request is
//! one command, decided inside Redis by the same core (one round trip per round).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use redis::aio::ConnectionLike;
use tollgate::stack::StackDecision;
use tollgate::store::fleet::{self, Call};
use tollgate::wait::Ask;
use tollgate::NANOS_PER_MS;

use super::runner::answer_all;
use super::{Answer, Group, Inner, Op, Pending};
use crate::link::{classify, unexpected_reply, Failure};
use crate::{Error, Outcome, Source, Why};

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Whether to decide with the server's module (asked once with `COMMAND INFO`).
    pub(super) async fn has_module(&self) -> bool {
        if !self.options.use_module || self.test_clock() {
            return false;
        }
        // Not known yet: the round that follows reports the failure.
        self.link.has_module().await.unwrap_or(false)
    }

    /// The limiter's arguments of a module command: the policy, a stack, or a fair share's
    /// shared policy and the tenant window.
    pub(super) fn module_limits(&self, tenant: Option<&str>) -> Vec<String> {
        let layers = self.limits.layers();
        let mut args = match layers {
            [one] => vec![one.to_string()],
            many => {
                let mut a = vec!["STACK".to_string(), many.len().to_string()];
                a.extend(many.iter().map(ToString::to_string));
                a
            }
        };
        if let (Some(tp), Some(t)) = (self.limits.tenant(), tenant) {
            args.extend(["TENANT".to_string(), t.to_string(), tp.to_string()]);
        }
        args
    }

    /// One round in the module: every queued request one command, all in one pipeline
    /// (one round trip), each decided atomically inside Redis.
    pub(super) async fn decide_in_module(&self, group: &Group, round: Vec<Pending>) {
        let base = self.layout.base(&group.key);
        let limits = self.module_limits(group.tenant.as_deref());
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for p in &round {
            let (name, cost) = match p.op {
                Op::Check(c)
                | Op::Reserve(c)
                | Op::Acquire {
                    cost: c,
                    ask: Ask::Charge { .. },
                } => ("TOLLGATE.CHECK", Some(c)),
                // A look: the decision a request of `c` would get, nothing kept.
                Op::Acquire {
                    cost: c,
                    ask: Ask::Look,
                } => ("TOLLGATE.PEEK", Some(c)),
                Op::Peek => ("TOLLGATE.PEEK", None),
                Op::Release(c) => ("TOLLGATE.RELEASE", Some(c)),
            };
            let cmd = pipe.cmd(name).arg(&base).arg(&limits);
            if let Some(c) = cost {
                cmd.arg("COST").arg(c);
            }
            if let Op::Acquire {
                ask: Ask::Charge { left },
                ..
            } = p.op
            {
                // Whole ms, rounded down: the module keeps a delay up to it, and the rule on
                // the reply's delay (rounded up) then agrees that it fits.
                cmd.arg("MAXDELAY").arg(left / NANOS_PER_MS);
            }
            if let Op::Reserve(_) = p.op {
                // The instant decided at, which the reservation carries.
                cmd.arg("WITHTIME");
            }
        }
        let sent = Instant::now();
        let mut conn = self.link.conn.clone();
        let replies: Vec<redis::RedisResult<redis::Value>> =
            match self.link.send(pipe.query_async(&mut conn)).await {
                Ok(r) => r,
                Err(Failure::Unavailable(_)) => {
                    // The commands may have run: never sent again.
                    self.link.counters.indeterminate.fetch_add(1, Relaxed);
                    self.link.mark_down(Why::Indeterminate);
                    return self.fall_back(group, round, Why::Indeterminate);
                }
                Err(Failure::Fatal(e)) => return answer_all(round, Err(Error::Redis(e))),
            };
        for (p, reply) in round.into_iter().zip(replies) {
            let answer = match (reply, &p.op) {
                (Err(e), _) => match classify(Call::Write, e) {
                    // Refused by a server that cannot serve now: the fallback decides it.
                    Failure::Unavailable(why) => {
                        self.link.counters.indeterminate.fetch_add(1, Relaxed);
                        self.link.mark_down(why);
                        self.fall_back(group, vec![p], why);
                        continue;
                    }
                    Failure::Fatal(e) => Err(Error::Redis(e)),
                },
                (Ok(_), Op::Release(_)) => Ok(Answer::Released),
                (Ok(v), op) => match module_decision(&v) {
                    Some(d) => {
                        if let Op::Check(cost) | Op::Acquire { cost, .. } | Op::Reserve(cost) = op {
                            self.link.counters.redis.fetch_add(1, Relaxed);
                            // Whole ms rounded up: remember the lower bound.
                            let floor = fleet::lower_bound(d.decision.retry_after);
                            self.remember(group, *cost, sent, &d, floor);
                        }
                        let outcome = Outcome {
                            decision: d.decision,
                            each: d.each,
                            source: Source::Redis,
                        };
                        match (op, decided_at(&v)) {
                            (Op::Reserve(_), Some(at)) => Ok(Answer::Reserved(outcome, at)),
                            (Op::Reserve(_), None) => Err(Error::Redis(unexpected_reply())),
                            _ => Ok(Answer::Decided(outcome)),
                        }
                    }
                    None => Err(Error::Redis(unexpected_reply())),
                },
            };
            let _ = p.reply.send(answer);
        }
    }
}

/// The instant a `WITHTIME` decision reply was decided at (ns): its last field, after each
/// limit's decisions.
fn decided_at(v: &redis::Value) -> Option<tollgate::Nanos> {
    let redis::Value::Array(f) = v else {
        return None;
    };
    match f.get(fleet::DECISION_FIELDS + 1)? {
        redis::Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// Reads a decision reply of tollgate's Redis module (`TOLLGATE.CHECK`, `TOLLGATE.PEEK`,
/// `TOLLGATE.REQUEST`): the combined decision's fields ([`fleet::decision_fields`]), then an
/// array of each limit's. `None` for any other reply.
pub fn module_decision(v: &redis::Value) -> Option<StackDecision> {
    fn fields(v: &redis::Value) -> Option<[u64; fleet::DECISION_FIELDS]> {
        let redis::Value::Array(f) = v else {
            return None;
        };
        let mut out = [0; fleet::DECISION_FIELDS];
        for (i, x) in out.iter_mut().enumerate() {
            let redis::Value::Int(n) = f.get(i)? else {
                return None;
            };
            *x = u64::try_from(*n).ok()?;
        }
        Some(out)
    }
    let decision = |v: &redis::Value| fleet::decision_from_fields(fields(v)?);
    let redis::Value::Array(f) = v else {
        return None;
    };
    let redis::Value::Array(each) = f.get(fleet::DECISION_FIELDS)? else {
        return None;
    };
    Some(StackDecision {
        decision: decision(v)?,
        each: each.iter().map(decision).collect::<Option<Vec<_>>>()?,
    })
}
