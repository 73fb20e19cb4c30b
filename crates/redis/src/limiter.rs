//! The limiter: merge a key's concurrent requests, read, decide with the core, commit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, Script};
use tokio::sync::oneshot;
use tollgate::keyed::KeyedLimiter;
use tollgate::stack::StackDecision;
use tollgate::store::fleet::{self, Call, CallError, Handling, KeyWrite, Ttl, ValueError};
use tollgate::store::{Batch, DenyCache, Limits};
use tollgate::wait::{wait_in_line, Ask, Lines, Turn};
use tollgate::{DecideError, Decision, Nanos, State, NANOS_PER_MS};

use crate::{
    Error, Fallback, KeyLayout, Options, Outcome, Source, Why, COMMIT_SCRIPT, READ_SCRIPT,
};

/// The clock of the deny cache: nanoseconds from `epoch` to `t`.
fn since(epoch: Instant, t: Instant) -> Nanos {
    u64::try_from(t.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

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
    /// Script calls sent to Redis.
    pub round_trips: u64,
}

#[derive(Default)]
struct Counters {
    redis: AtomicU64,
    deny_cache: AtomicU64,
    fallback: AtomicU64,
    indeterminate: AtomicU64,
    conflicts: AtomicU64,
    round_trips: AtomicU64,
}

/// The requests for one key (and tenant) share their slots: they are merged.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Group {
    key: String,
    tenant: Option<String>,
}

enum Op {
    Check(u64),
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
            Op::Check(cost) => Batched::Check(cost),
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
    Released,
}

/// What one read (or a conflicting commit) returned: the node's clock and each slot's value.
struct View {
    now: Nanos,
    values: Vec<Vec<u8>>,
}

struct Inner<C> {
    conn: C,
    limits: Limits,
    layout: KeyLayout,
    options: Options,
    read: Script,
    commit: Script,
    local: Option<KeyedLimiter>,
    epoch: Instant,
    groups: Mutex<HashMap<Group, Vec<Pending>>>,
    /// The lines of `acquire`'s waiters, per group (the core's).
    lines: Lines<Group>,
    /// Denials remembered, on the clock of nanoseconds since `epoch`.
    denials: Mutex<DenyCache<Group>>,
    down_until: Mutex<Option<Instant>>,
    /// Whether the server has the module: [`UNKNOWN`], [`WITH_MODULE`] or [`WITHOUT_MODULE`].
    module: AtomicU8,
    counters: Counters,
}

const UNKNOWN: u8 = 0;
const WITH_MODULE: u8 = 1;
const WITHOUT_MODULE: u8 = 2;

/// The most denials remembered; past it the memory is cleared (it is only a shortcut).
const MAX_DENIALS: usize = 100_000;

impl<C> RedisLimiter<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A limiter over `limits` on the connection `conn` (a `ConnectionManager`, a cluster
    /// connection, or any async connection that can be cloned).
    pub fn new(conn: C, limits: Limits, options: Options) -> Result<Self, Error> {
        let layout = KeyLayout::new(&options.prefix, &options.namespace)?;
        for (field, d) in [
            ("timeout", options.timeout),
            ("probe_every", options.probe_every),
            ("lease", options.lease),
        ] {
            if d.is_zero() {
                return Err(Error::Config {
                    field,
                    reason: "must be more than zero".into(),
                });
            }
        }
        let local = match options.fallback {
            Fallback::Local { max_keys } => Some(limits.keyed(max_keys)),
            Fallback::Open | Fallback::Closed => None,
        };
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                conn,
                limits,
                layout,
                options,
                read: Script::new(READ_SCRIPT),
                commit: Script::new(COMMIT_SCRIPT),
                local,
                epoch: Instant::now(),
                groups: Mutex::new(HashMap::new()),
                lines: Lines::default(),
                denials: Mutex::new(DenyCache::new(MAX_DENIALS)),
                down_until: Mutex::new(None),
                module: AtomicU8::new(UNKNOWN),
                counters: Counters::default(),
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
        let group = self.group(key, tenant);
        self.inner.check_cost(&group, cost)?;
        if let Some(outcome) = self.inner.remembered(&group, cost) {
            return Ok(outcome);
        }
        match self.submit(group, Op::Check(cost)).await? {
            Answer::Decided(o) => Ok(o),
            Answer::Released => unreachable!("a check is answered with a decision"),
        }
    }

    /// Waits for a turn: decides, and while denied with a retry time that fits before
    /// `max_wait` is up, sleeps until then (plus the jitter of [`Options::jitter`]) and
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
        let group = self.group(key, tenant);
        self.inner.check_cost(&group, cost)?;
        let max = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        let jitter = u64::try_from(self.inner.options.jitter.as_nanos()).unwrap_or(u64::MAX);
        let decide = |ask| self.decide_waiting(&group, cost, ask);
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
            },
        };
        Ok((outcome.decision, outcome))
    }

    /// Reports the key's standing without charging it (a decision for a cost of 0).
    pub async fn peek(&self, key: &str, tenant: Option<&str>) -> Result<Outcome, Error> {
        match self.submit(self.group(key, tenant), Op::Peek).await? {
            Answer::Decided(o) => Ok(o),
            Answer::Released => unreachable!("a peek is answered with a decision"),
        }
    }

    /// Releases `cost` slots of every concurrency limit for `key` (a request that acquired
    /// them finished).
    pub async fn release(&self, key: &str, cost: u64) -> Result<(), Error> {
        self.submit(self.group(key, None), Op::Release(cost))
            .await
            .map(|_| ())
    }

    /// Forgets `key` in every limit of the stack (tenant windows expire by themselves);
    /// returns whether anything was stored.
    pub async fn reset(&self, key: &str) -> Result<bool, Error> {
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
        let mut conn = inner.conn.clone();
        inner.counters.round_trips.fetch_add(1, Relaxed);
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
        let c = &self.inner.counters;
        Stats {
            redis: c.redis.load(Relaxed),
            deny_cache: c.deny_cache.load(Relaxed),
            fallback: c.fallback.load(Relaxed),
            indeterminate: c.indeterminate.load(Relaxed),
            conflicts: c.conflicts.load(Relaxed),
            round_trips: c.round_trips.load(Relaxed),
        }
    }

    fn group(&self, key: &str, tenant: Option<&str>) -> Group {
        // Only a fair share has per-tenant slots; other limits share one group per key.
        let tenant = match self.inner.limits.tenant() {
            Some(_) => tenant.filter(|t| !tollgate::fair_share::skips_tenant_window(Some(t))),
            None => None,
        };
        Group {
            key: key.into(),
            tenant: tenant.map(Into::into),
        }
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

/// How a Redis error is handled.
enum Failure {
    /// Redis is unavailable: the fallback decides.
    Unavailable(Why),
    /// Any other error: reported to the caller.
    Fatal(RedisError),
}

/// The fleet protocol's rule for a failed call ([`fleet::handle`]), for redis-rs' errors.
fn handling(call: Call, e: &RedisError) -> Handling {
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

fn classify(call: Call, e: RedisError) -> Failure {
    match handling(call, &e) {
        Handling::FallBack(why) => Failure::Unavailable(why),
        Handling::SendBody | Handling::Fatal => Failure::Fatal(e),
    }
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
    /// Serves a group until its queue is empty, one round (every request queued so far)
    /// at a time.
    async fn run(self: Arc<Self>, group: Group, first: Pending) {
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

    /// Refuses, before any round trip, a cost above the smallest capacity among the slots
    /// the request touches (a request that skips a fair share's tenant window is not held
    /// to the tenant's capacity).
    fn check_cost(&self, group: &Group, cost: u64) -> Result<(), Error> {
        let slots = self.limits.slots(group.tenant.as_deref());
        let capacity = tollgate::store::Slot::capacity(&self.limits, &slots);
        if cost > capacity {
            return Err(DecideError::CostExceedsCapacity { cost, capacity }.into());
        }
        Ok(())
    }

    /// A denial remembered for `group` that still holds for `cost`.
    fn remembered(&self, group: &Group, cost: u64) -> Option<Outcome> {
        if !self.options.deny_cache || self.test_clock() {
            return None;
        }
        let now = since(self.epoch, Instant::now());
        let d = self.denials.lock().unwrap().get(group, cost, now)?;
        self.counters.deny_cache.fetch_add(1, Relaxed);
        Some(Outcome {
            decision: d.decision,
            each: d.each,
            source: Source::DenyCache,
        })
    }

    /// Remembers a denial decided on a read sent at `sent` (so the memory never outlasts
    /// the true retry time); `retry` is its retry time, or a lower bound of it.
    fn remember(
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

    fn is_down(&self) -> bool {
        let mut down = self.down_until.lock().unwrap();
        match *down {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                // Time to probe: this round tries Redis again.
                *down = None;
                false
            }
            None => false,
        }
    }

    fn mark_down(&self) {
        *self.down_until.lock().unwrap() = Some(Instant::now() + self.options.probe_every);
    }

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

    /// The clock a decision uses: Redis's, or a test's.
    fn clock(&self, redis_now: Nanos) -> Nanos {
        #[cfg(feature = "testing")]
        if let Some(c) = &self.options.test_clock {
            return c.load(Relaxed);
        }
        redis_now
    }

    fn test_clock(&self) -> bool {
        #[cfg(feature = "testing")]
        if self.options.test_clock.is_some() {
            return true;
        }
        false
    }

    /// One round: read the slots, decide every queued request in order, commit the
    /// result (retrying on conflicts), answer.
    async fn decide_round(&self, group: &Group, round: Vec<Pending>) {
        let tenant = group.tenant.as_deref();
        let slots = self.limits.slots(tenant);
        let keys: Vec<String> = slots
            .iter()
            .map(|s| self.layout.slot_key(&group.key, tenant, *s))
            .collect();
        if self.is_down() {
            return self.fall_back(group, round, Why::Unreachable);
        }
        if self.has_module().await {
            return self.decide_in_module(group, round).await;
        }
        let started = Instant::now();
        let mut view = match self.read(&keys).await {
            Ok(v) => v,
            Err(Failure::Unavailable(why)) => {
                self.mark_down();
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
                        self.mark_down();
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

    /// Whether to decide with the server's module (asked once with `COMMAND INFO`).
    async fn has_module(&self) -> bool {
        if !self.options.use_module || self.test_clock() {
            return false;
        }
        match self.module.load(Relaxed) {
            WITH_MODULE => return true,
            WITHOUT_MODULE => return false,
            _ => {}
        }
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("INFO").arg("tollgate.check");
        let reply = tokio::time::timeout(
            self.options.timeout,
            cmd.query_async::<redis::Value>(&mut conn),
        )
        .await;
        match reply {
            Ok(Ok(redis::Value::Array(v))) => {
                let found = matches!(v.first(), Some(redis::Value::Array(_)));
                self.module
                    .store(if found { WITH_MODULE } else { WITHOUT_MODULE }, Relaxed);
                found
            }
            // Not known yet (the read that follows reports the failure).
            _ => false,
        }
    }

    /// The limiter's arguments of a module command: the policy, a stack, or a fair share's
    /// shared policy and the tenant window.
    fn module_limits(&self, tenant: Option<&str>) -> Vec<String> {
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
    async fn decide_in_module(&self, group: &Group, round: Vec<Pending>) {
        let base = self.layout.base(&group.key);
        let limits = self.module_limits(group.tenant.as_deref());
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for p in &round {
            let (name, cost) = match p.op {
                Op::Check(c)
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
        }
        let sent = Instant::now();
        let mut conn = self.conn.clone();
        self.counters.round_trips.fetch_add(1, Relaxed);
        let replies: Vec<redis::RedisResult<redis::Value>> =
            match tokio::time::timeout(self.options.timeout, pipe.query_async(&mut conn)).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => match classify(Call::Write, e) {
                    Failure::Unavailable(_) => {
                        // The commands may have run: never sent again.
                        self.counters.indeterminate.fetch_add(1, Relaxed);
                        self.mark_down();
                        return self.fall_back(group, round, Why::Indeterminate);
                    }
                    Failure::Fatal(e) => return answer_all(round, Err(Error::Redis(e))),
                },
                Err(_) => {
                    self.counters.indeterminate.fetch_add(1, Relaxed);
                    self.mark_down();
                    return self.fall_back(group, round, Why::Indeterminate);
                }
            };
        for (p, reply) in round.into_iter().zip(replies) {
            let answer = match (reply, &p.op) {
                (Err(e), _) => match classify(Call::Write, e) {
                    // Refused by a server that cannot serve now: the fallback decides it.
                    Failure::Unavailable(why) => {
                        self.counters.indeterminate.fetch_add(1, Relaxed);
                        self.mark_down();
                        self.fall_back(group, vec![p], why);
                        continue;
                    }
                    Failure::Fatal(e) => Err(Error::Redis(e)),
                },
                (Ok(_), Op::Release(_)) => Ok(Answer::Released),
                (Ok(v), op) => match module_decision(&v) {
                    Some(d) => {
                        if let Op::Check(cost) | Op::Acquire { cost, .. } = op {
                            self.counters.redis.fetch_add(1, Relaxed);
                            // Whole ms rounded up: remember the lower bound.
                            let floor = fleet::lower_bound(d.decision.retry_after);
                            self.remember(group, *cost, sent, &d, floor);
                        }
                        Ok(Answer::Decided(Outcome {
                            decision: d.decision,
                            each: d.each,
                            source: Source::Redis,
                        }))
                    }
                    None => Err(Error::Redis(unexpected_reply())),
                },
            };
            let _ = p.reply.send(answer);
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
            "blind"
        } else {
            "cas"
        };
        #[cfg(not(feature = "testing"))]
        let mode = "cas";
        let mut args: Vec<Vec<u8>> = vec![mode.into()];
        let mut writes: Vec<Option<KeyWrite>> = vec![None; keys.len()];
        for (i, w) in fleet::key_writes(batch, self.ttl(), || fastrand::u64(..)) {
            writes[i] = Some(w);
        }
        for (version, write) in versions.iter().zip(writes) {
            args.push(version.clone());
            let (action, value, ttl) = match write {
                None => ("k", Vec::new(), String::new()),
                Some(KeyWrite::Delete) => ("d", Vec::new(), String::new()),
                Some(KeyWrite::Put { value, ttl_ms }) => ("p", value, ttl_ms.to_string()),
            };
            args.extend([action.into(), value, ttl.into_bytes()]);
        }
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

    /// Decides a round with the declared fallback.
    fn fall_back(&self, group: &Group, round: Vec<Pending>, why: Why) {
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

fn answer_all(round: Vec<Pending>, result: Result<Answer, Error>) {
    for p in round {
        let r = match &result {
            Ok(_) => unreachable!("only errors are answered to a whole round"),
            Err(e) => Err(e.clone()),
        };
        let _ = p.reply.send(r);
    }
}

/// A module reply: the combined decision's fields ([`fleet::decision_fields`]), then an
/// array of each limit's.
fn module_decision(v: &redis::Value) -> Option<StackDecision> {
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

fn unexpected_reply() -> RedisError {
    RedisError::from((ErrorKind::UnexpectedReturnType, "unexpected script reply"))
}

/// Parses `{seconds, microseconds, value...}` starting at `at`.
fn view(reply: &[Vec<u8>], at: usize, n: usize) -> Option<View> {
    let fields = reply.get(at..)?;
    if fields.len() != n + 2 {
        return None;
    }
    let number = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
    let secs = number(&fields[0])?;
    let micros = number(&fields[1])?;
    Some(View {
        now: secs
            .saturating_mul(1_000 * NANOS_PER_MS)
            .saturating_add(micros * 1_000),
        values: fields[2..].to_vec(),
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
