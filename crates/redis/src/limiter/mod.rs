//! The limiter: merge a key's concurrent requests, read, decide with the core, commit.
//!
//! By job: the public API here; `runner` serves each busy key's queue a round at a time;
//! `cas` is the compare-and-set path (two scripts), `module` the module path (one
//! command), `fallback` what decides when Redis cannot, `deny` the deny cache,
//! `waiting` the waiting line of [`RedisLimiter::acquire`], and `settle` reserve and settle.

mod cas;
mod deny;
mod fallback;
mod module;
mod runner;
mod settle;
mod waiting;

pub use module::module_decision;
pub use settle::NotSettled;

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError};
use tokio::sync::oneshot;
use tollgate::keyed::KeyedLimiter;
use tollgate::store::{DenyCache, Limits};
use tollgate::wait::{Ask, Lines};

use crate::link::Link;
use crate::{Error, Fallback, KeyLayout, Options, Outcome};

/// A fleet-wide limiter on Redis. Cheap to clone (the state is shared behind an `Arc`).
pub struct RedisLimiter<C> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for RedisLimiter<C> {
    fn clone(&self) -> Self {
        RedisLimiter {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// Counts of where decisions were made, since the limiter was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests decided on Redis's states (committed when admitted).
    pub redis: u64,
    /// Requests denied from the deny cache, without a round trip.
    pub deny_cache: u64,
    /// Requests decided by the fallback.
    pub fallback: u64,
    /// Commits whose answer was lost (never sent again).
    pub indeterminate: u64,
    /// Commits refused because another client wrote first (each retried).
    pub conflicts: u64,
    /// Calls sent to Redis (scripts, module commands and probes).
    pub round_trips: u64,
    /// Probes started while Redis was marked down (each a `PING`, twice when the first
    /// meets a failed reconnect), one at a time, on a task of their own.
    pub probes: u64,
}

/// The requests for one key (and tenant) share their slots: they are merged.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Group {
    key: String,
    tenant: Option<String>,
}

enum Op {
    Check(u64),
    /// A check of an estimate whose answer carries the decision's instant (Redis's clock),
    /// for the reservation ([`RedisLimiter::reserve`]).
    Reserve(u64),
    /// A waiting caller's check: kept only as the core's waiting rule says
    /// (`tollgate::wait::Ask::keeps`: an admission whose queue delay fits in what is left of
    /// the wait; nothing for a look).
    Acquire {
        cost: u64,
        ask: Ask,
    },
    Peek,
    Release(u64),
}

impl Op {
    /// The request as the core's store protocol runs it over a round ([`Batch::apply`]).
    fn in_batch(&self) -> tollgate::store::Op {
        use tollgate::store::Op as Batched;
        match *self {
            Op::Check(cost) | Op::Reserve(cost) => Batched::Check(cost),
            Op::Acquire { cost, ask } => Batched::Acquire {
                cost,
                left: match ask {
                    Ask::Charge { left } => Some(left),
                    Ask::Look => None,
                },
            },
            Op::Peek => Batched::Peek(0),
            Op::Release(cost) => Batched::Release(cost),
        }
    }
}

struct Pending {
    op: Op,
    reply: oneshot::Sender<Result<Answer, Error>>,
}

enum Answer {
    Decided(Outcome),
    /// A reserve decided on Redis's states, at this instant of Redis's clock.
    Reserved(Outcome, tollgate::Nanos),
    Released,
}

struct Inner<C> {
    /// The connection, the mark-down, the module probe and the counts.
    link: Link<C>,
    limits: Limits,
    layout: KeyLayout,
    options: Options,
    local: Option<KeyedLimiter>,
    epoch: Instant,
    groups: Mutex<HashMap<Group, Vec<Pending>>>,
    /// The lines of `acquire`'s waiters, per group (the core's).
    lines: Lines<Group>,
    /// Denials remembered, on the clock of nanoseconds since `epoch`.
    denials: Mutex<DenyCache<Group>>,
    /// The series of the `metrics` facade.
    #[cfg(feature = "metrics")]
    metrics: Arc<crate::metrics::Recorded>,
}

/// The core's bound on a key's bytes ([`tollgate::store::bounds`]), for the argument
/// `field`.
fn bounded(field: &'static str, key: &str) -> Result<(), Error> {
    tollgate::store::bounds::check_key(key.as_bytes())
        .map_err(|over| Error::OverBound { field, over })
}

impl<C> RedisLimiter<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A limiter over `limits` on the connection `conn` (a `ConnectionManager`, a cluster
    /// connection, or any async connection that can be cloned).
    pub fn new(conn: C, limits: Limits, options: Options) -> Result<Self, Error> {
        let layout = KeyLayout::new(&options.prefix, &options.namespace)?;
        options.check()?;
        let denials = Mutex::new(DenyCache::new(options.deny_entries.max(1)));
        #[cfg(feature = "metrics")]
        let metrics = Arc::new(crate::metrics::Recorded::new(
            options
                .metrics_policy
                .as_deref()
                .unwrap_or(&options.namespace),
            &options.fallback,
            limits.holds_slots(),
        ));
        // Every failed call is counted as the link sees it, a failed probe included.
        #[cfg(feature = "metrics")]
        let on_failure: Option<crate::link::OnFailure> = {
            let metrics = Arc::clone(&metrics);
            Some(Arc::new(move |why| metrics.failure(why)))
        };
        #[cfg(not(feature = "metrics"))]
        let on_failure = None;
        let link = Link::new(
            conn,
            options.timeout,
            options.probe_every,
            "tollgate.check",
            options.on_transition.clone(),
            on_failure,
        );
        let local = match options.fallback {
            Fallback::Local { max_keys } => Some(KeyedLimiter::from_limits(&limits, max_keys)),
            Fallback::Open | Fallback::Closed => None,
        };
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                #[cfg(feature = "metrics")]
                metrics,
                link,
                limits,
                layout,
                options,
                local,
                epoch: Instant::now(),
                groups: Mutex::new(HashMap::new()),
                lines: Lines::default(),
                denials,
            }),
        })
    }

    /// The limits this limiter decides.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The key layout (to inspect buckets with `redis-cli`).
    pub fn layout(&self) -> &KeyLayout {
        &self.inner.layout
    }

    /// Decides one request of `cost` for `key`.
    pub async fn check(&self, key: &str, cost: u64) -> Result<Outcome, Error> {
        self.check_tenant(key, None, cost).await
    }

    /// Decides one request of `cost` for `key` on behalf of `tenant` (a fair share's tenant
    /// window; other limits ignore the tenant).
    pub async fn check_tenant(
        &self,
        key: &str,
        tenant: Option<&str>,
        cost: u64,
    ) -> Result<Outcome, Error> {
        let outcome = self.check_tenant_uncounted(key, tenant, cost).await?;
        #[cfg(feature = "metrics")]
        self.inner
            .metrics
            .decision(&outcome.decision, outcome.source, cost);
        Ok(outcome)
    }

    /// [`RedisLimiter::check_tenant`] for a front end that counts the decision in its own
    /// metrics (`tollgate-tower`, with its routes): the decision is not counted here, so the
    /// fleet's decisions are counted once. Store failures and waits still are.
    #[doc(hidden)]
    pub async fn check_tenant_uncounted(
        &self,
        key: &str,
        tenant: Option<&str>,
        cost: u64,
    ) -> Result<Outcome, Error> {
        let group = self.group(key, tenant)?;
        self.inner.check_cost(&group, cost)?;
        if let Some(outcome) = self.inner.remembered(&group, cost) {
            return Ok(outcome);
        }
        match self.submit(group, Op::Check(cost)).await? {
            Answer::Decided(o) => Ok(o),
            Answer::Released => unreachable!("a check is answered with a decision"),
            Answer::Reserved(..) => unreachable!("only a reserve is answered with its instant"),
        }
    }

    /// Reports the key's standing without charging it (a decision for a cost of 0).
    pub async fn peek(&self, key: &str, tenant: Option<&str>) -> Result<Outcome, Error> {
        match self.submit(self.group(key, tenant)?, Op::Peek).await? {
            Answer::Decided(o) => Ok(o),
            Answer::Released => unreachable!("a peek is answered with a decision"),
            Answer::Reserved(..) => unreachable!("only a reserve is answered with its instant"),
        }
    }

    /// Releases `cost` slots of every concurrency limit for `key` (a request that acquired
    /// them finished).
    pub async fn release(&self, key: &str, cost: u64) -> Result<(), Error> {
        self.release_uncounted(key, cost).await?;
        #[cfg(feature = "metrics")]
        self.inner.metrics.released(cost);
        Ok(())
    }

    /// [`RedisLimiter::release`] for a front end that counts the slots in its own metrics
    /// (`tollgate-tower`, which takes them with
    /// [`check_tenant_uncounted`](Self::check_tenant_uncounted)).
    #[doc(hidden)]
    pub async fn release_uncounted(&self, key: &str, cost: u64) -> Result<(), Error> {
        self.submit(self.group(key, None)?, Op::Release(cost))
            .await
            .map(|_| ())
    }

    /// Forgets `key` in every limit of the stack (tenant windows expire by themselves);
    /// returns whether anything was stored.
    pub async fn reset(&self, key: &str) -> Result<bool, Error> {
        bounded("key", key)?;
        let inner = &self.inner;
        inner.denials.lock().unwrap().retain(|g| g.key != key);
        if let Some(local) = &inner.local {
            local.reset(key);
        }
        let keys: Vec<String> = inner
            .limits
            .slots(None)
            .into_iter()
            .map(|s| inner.layout.slot_key(key, None, s))
            .collect();
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&keys);
        let mut conn = inner.link.conn.clone();
        inner.link.counters.round_trips.fetch_add(1, Relaxed);
        match tokio::time::timeout(inner.options.timeout, cmd.query_async::<u64>(&mut conn)).await {
            Ok(Ok(n)) => Ok(n > 0),
            Ok(Err(e)) => Err(Error::Redis(e)),
            Err(_) => Err(Error::Redis(RedisError::from((
                ErrorKind::Io,
                "reset timed out",
            )))),
        }
    }

    /// Where decisions were made so far.
    pub fn stats(&self) -> Stats {
        self.inner.link.stats()
    }

    /// The group of `key` and `tenant`, each held to the core's bound on a key's bytes
    /// (every key of the stack and tenant window is stored under them).
    fn group(&self, key: &str, tenant: Option<&str>) -> Result<Group, Error> {
        bounded("key", key)?;
        if let Some(t) = tenant {
            bounded("tenant", t)?;
        }
        // Only a fair share has per-tenant slots; other limits share one group per key.
        let tenant = match self.inner.limits.tenant() {
            Some(_) => tenant.filter(|t| !tollgate::fair_share::skips_tenant_window(Some(t))),
            None => None,
        };
        Ok(Group {
            key: key.into(),
            tenant: tenant.map(Into::into),
        })
    }

    /// Queues `op` for its group; the first request of an idle group starts the group's
    /// runner, which takes every queued request at once, round after round.
    async fn submit(&self, group: Group, op: Op) -> Result<Answer, Error> {
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut groups = self.inner.groups.lock().unwrap();
            match groups.get_mut(&group) {
                Some(queue) => {
                    queue.push(Pending { op, reply });
                    None
                }
                None => {
                    groups.insert(group.clone(), Vec::new());
                    Some(Pending { op, reply })
                }
            }
        };
        if let Some(first) = start {
            // The runner is its own task: a caller that stops waiting does not strand the
            // requests merged behind it.
            let inner = Arc::clone(&self.inner);
            tokio::spawn(async move { inner.run(group, first).await });
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::Redis(RedisError::from((
                ErrorKind::Client,
                "the limiter's runner stopped",
            ))))
        })
    }
}
