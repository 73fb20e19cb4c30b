//! The fallback: which failed calls it decides (the core's rule, [`fleet::handle`]) and
//! its decisions (the local limiter, or the core's fail-open and fail-closed answers).

use std::sync::atomic::Ordering::Relaxed;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError};
use tollgate::stack::StackDecision;
use tollgate::store::fleet::{self, Call, CallError, Handling};
use tollgate::wait::Ask;

use super::{Answer, Group, Inner, Op, Pending};
use crate::{Error, Fallback, Outcome, Source, Why};

/// How a Redis error is handled.
pub(super) enum Failure {
    /// Redis is unavailable: the fallback decides.
    Unavailable(Why),
    /// Any other error: reported to the caller.
    Fatal(RedisError),
}

/// The fleet protocol's rule for a failed call ([`fleet::handle`]), for redis-rs' errors:
/// whether the fallback decides, the script's body is to be sent, or the caller gets the
/// error. Public for other stores on the same protocol (tollgate-rls's).
pub fn handling(call: Call, e: &RedisError) -> Handling {
    let error = if e.is_timeout() {
        CallError::Timeout
    } else if let Some(code) = e.code() {
        CallError::Reply(code)
    } else if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.kind() == ErrorKind::ClusterConnectionNotFound
    {
        CallError::Connection
    } else {
        return Handling::Fatal;
    };
    fleet::handle(call, error)
}

pub(super) fn classify(call: Call, e: RedisError) -> Failure {
    match handling(call, &e) {
        Handling::FallBack(why) => Failure::Unavailable(why),
        Handling::SendBody | Handling::Fatal => Failure::Fatal(e),
    }
}

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Decides a round with the declared fallback.
    pub(super) fn fall_back(&self, group: &Group, round: Vec<Pending>, why: Why) {
        let source = Source::Fallback(why);
        for p in round {
            let reply = match p.op {
                Op::Acquire { cost, ask } => {
                    self.counters.fallback.fetch_add(1, Relaxed);
                    self.fallback_waiting(group, cost, ask).map(|d| {
                        Answer::Decided(Outcome {
                            decision: d.decision,
                            each: d.each,
                            source,
                        })
                    })
                }
                Op::Check(cost) => {
                    self.counters.fallback.fetch_add(1, Relaxed);
                    self.fallback_decide(group, cost).map(|d| {
                        Answer::Decided(Outcome {
                            decision: d.decision,
                            each: d.each,
                            source,
                        })
                    })
                }
                Op::Peek => self.fallback_decide(group, 0).map(|d| {
                    Answer::Decided(Outcome {
                        decision: d.decision,
                        each: d.each,
                        source,
                    })
                }),
                Op::Release(cost) => match &self.local {
                    Some(local) => local
                        .release(group.key.as_str(), cost)
                        .map(|_| Answer::Released)
                        .map_err(Error::from),
                    None => Ok(Answer::Released),
                },
            };
            let _ = p.reply.send(reply);
        }
    }

    /// The fallback's decision for a waiter: the local limiter keeps the charge only as
    /// `ask` says (the others charge nothing anyway).
    fn fallback_waiting(&self, group: &Group, cost: u64, ask: Ask) -> Result<StackDecision, Error> {
        match (&self.options.fallback, &self.local) {
            (Fallback::Local { .. }, Some(local)) => {
                let now = self.epoch.elapsed().as_nanos() as u64;
                let tenant = group.tenant.as_deref();
                Ok(local.check_if(group.key.as_str(), tenant, now, cost, |d| ask.keeps(d))?)
            }
            _ => self.fallback_decide(group, cost),
        }
    }

    fn fallback_decide(&self, group: &Group, cost: u64) -> Result<StackDecision, Error> {
        match (&self.options.fallback, &self.local) {
            (Fallback::Local { .. }, Some(local)) => {
                let now = self.epoch.elapsed().as_nanos() as u64;
                Ok(local.check_detailed(group.key.as_str(), group.tenant.as_deref(), now, cost)?)
            }
            (Fallback::Closed, _) => {
                let retry = self.options.probe_every.as_nanos() as u64;
                Ok(fleet::fail_closed(&self.limits, retry))
            }
            _ => Ok(fleet::fail_open(&self.limits)),
        }
    }
}
