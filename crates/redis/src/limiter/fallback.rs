//! The fallback's decisions: the local limiter, or the core's fail-open and fail-closed
//! answers (which failed calls it decides: [`crate::link`], the core's rule).

use std::sync::atomic::Ordering::Relaxed;

use redis::aio::ConnectionLike;
use tollgate::stack::StackDecision;
use tollgate::store::fleet;
use tollgate::wait::Ask;

use super::{Answer, Group, Inner, Op, Pending};
use crate::{Error, Fallback, Outcome, Source, Why};

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
                    self.link.counters.fallback.fetch_add(1, Relaxed);
                    self.fallback_waiting(group, cost, ask).map(|d| {
                        Answer::Decided(Outcome {
                            decision: d.decision,
                            each: d.each,
                            source,
                        })
                    })
                }
                // A reserve the fallback admits charged nothing on Redis: no reservation.
                Op::Check(cost) | Op::Reserve(cost) => {
                    self.link.counters.fallback.fetch_add(1, Relaxed);
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
            (Fallback::Closed, _) => Ok(fleet::fail_closed(&self.limits, self.link.probe_nanos())),
            _ => Ok(fleet::fail_open(&self.limits)),
        }
    }
}
