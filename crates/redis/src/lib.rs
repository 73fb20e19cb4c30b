#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod connection;
pub mod keys;
mod limiter;
mod link;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod namespaces;
mod plans;
mod requests;

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tollgate::plans::PlanError;
use tollgate::store::bounds::OverBound;
use tollgate::store::fleet::plan::PlanValueError;
use tollgate::store::StateBytesError;
use tollgate::{DecideError, Decision, PolicyError, ReservationError};

pub use connection::{cluster_nodes, Connection};
pub use keys::KeyLayout;
pub use limiter::{module_decision, NotSettled, RedisLimiter, Stats};
pub use link::handling;
pub use plans::{PlanOutcome, RedisPlans};
pub use requests::{Answer, RedisRequests};

/// The most denials a deny cache remembers by default; past it the memory is cleared (it
/// is only a shortcut).
pub const DENY_CACHE_ENTRIES: usize = 100_000;

/// The script that reads a request's slots and the node's clock.
pub const READ_SCRIPT: &str = include_str!("../lua/read.lua");
/// The script that commits a decision if no slot changed since it was read.
pub const COMMIT_SCRIPT: &str = include_str!("../lua/commit.lua");
/// The script that commits a settle with its record, once per reservation id.
pub const SETTLE_SCRIPT: &str = include_str!("../lua/settle.lua");

/// What a limiter does when Redis cannot be reached in time. There is no default: the
/// choice is the operator's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// Decide in this process's memory with the same limits (each process then enforces
    /// its own budget, as before the fleet store; counts are not copied back).
    Local {
        /// The most keys the local limiter keeps.
        max_keys: NonZeroUsize,
    },
    /// Admit every request (fail open).
    Open,
    /// Deny every request (fail closed), with `retry_after` at the next probe of Redis.
    Closed,
}

/// How a limiter talks to Redis.
#[derive(Clone, Debug)]
pub struct Options {
    pub(crate) namespace: String,
    pub(crate) prefix: String,
    pub(crate) fallback: Fallback,
    pub(crate) timeout: Duration,
    pub(crate) retry_for: Duration,
    pub(crate) probe_every: Duration,
    pub(crate) grace: Duration,
    pub(crate) lease: Duration,
    pub(crate) deny_cache: bool,
    pub(crate) deny_entries: usize,
    pub(crate) jitter: Duration,
    pub(crate) use_module: bool,
    pub(crate) metrics_policy: Option<String>,
    pub(crate) on_transition: Option<Observer>,
    #[cfg(feature = "testing")]
    pub(crate) test_clock: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    #[cfg(feature = "testing")]
    pub(crate) test_late: u64,
    #[cfg(feature = "testing")]
    pub(crate) blind_commit: bool,
}

impl Options {
    /// Options for the limiter of `namespace` (e.g. `whois`, `whois:com`), with the declared
    /// `fallback`. Defaults: prefix `tollgate`, timeout 250 ms per round trip, conflicts
    /// retried for up to the timeout, Redis probed again 1 s after a failure, a 1 s grace on
    /// every TTL, concurrency leases of 60 s, the deny cache on.
    pub fn new(namespace: impl Into<String>, fallback: Fallback) -> Options {
        Options {
            namespace: namespace.into(),
            prefix: "tollgate".into(),
            fallback,
            timeout: Duration::from_millis(250),
            retry_for: Duration::from_millis(250),
            probe_every: Duration::from_secs(1),
            grace: Duration::from_secs(1),
            lease: Duration::from_secs(60),
            deny_cache: true,
            deny_entries: DENY_CACHE_ENTRIES,
            jitter: Duration::ZERO,
            use_module: true,
            metrics_policy: None,
            on_transition: None,
            #[cfg(feature = "testing")]
            test_clock: None,
            #[cfg(feature = "testing")]
            test_late: 0,
            #[cfg(feature = "testing")]
            blind_commit: false,
        }
    }

    /// The first part of every key (default `tollgate`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Options {
        self.prefix = prefix.into();
        self
    }

    /// The longest one round trip may take before the fallback decides; also how long
    /// conflicting writes are retried (see [`Options::retry_for`]).
    pub fn timeout(mut self, timeout: Duration) -> Options {
        self.timeout = timeout;
        self.retry_for = timeout;
        self
    }

    /// How long a decision keeps retrying when other clients keep writing the same key
    /// first (each retry is one round trip, after a random pause of up to a millisecond
    /// per retry so far). Past it the request fails with [`Error::Contended`], uncharged.
    pub fn retry_for(mut self, retry_for: Duration) -> Options {
        self.retry_for = retry_for;
        self
    }

    /// After Redis failed, how long the fallback decides before Redis is probed again (a
    /// `PING` on a task of its own: the fallback decides until it answers).
    pub fn probe_every(mut self, probe_every: Duration) -> Options {
        self.probe_every = probe_every;
        self
    }

    /// Added to every key's TTL (the time its state needs to be fresh again), so that a
    /// key never expires before it is fresh.
    pub fn grace(mut self, grace: Duration) -> Options {
        self.grace = grace;
        self
    }

    /// How long a concurrency count lives after its last acquire or release: a client that
    /// crashed while holding slots frees them when the key expires.
    pub fn lease(mut self, lease: Duration) -> Options {
        self.lease = lease;
        self
    }

    /// Whether denials are remembered in the process until their retry time (default on).
    pub fn deny_cache(mut self, on: bool) -> Options {
        self.deny_cache = on;
        self
    }

    /// The most denials the deny cache remembers (default [`DENY_CACHE_ENTRIES`]; 0 turns
    /// it off).
    pub fn deny_cache_entries(mut self, entries: usize) -> Options {
        self.deny_cache = entries > 0;
        self.deny_entries = entries;
        self
    }

    /// Refuses a zero timeout, probe interval or lease.
    pub(crate) fn check(&self) -> Result<(), Error> {
        for (field, d) in [
            ("timeout", self.timeout),
            ("probe_every", self.probe_every),
            ("lease", self.lease),
        ] {
            if d.is_zero() {
                return Err(Error::Config {
                    field,
                    reason: "must be more than zero".into(),
                });
            }
        }
        Ok(())
    }

    /// The most random time [`RedisLimiter::acquire`] adds to each wait (default none), so
    /// that waiters of different processes denied together do not come back together. It
    /// spends at most half the slack before the deadline (`tollgate::wait::step`), so a
    /// timer that fires late still fits.
    pub fn jitter(mut self, jitter: Duration) -> Options {
        self.jitter = jitter;
        self
    }

    /// Whether to use tollgate's Redis module (`crates/redis-module`) when the server has it
    /// loaded (default on; detected with `COMMAND INFO` once): then a decision is one
    /// round trip, made inside Redis by the same core on the same keys and bytes. Off, or
    /// without the module, the portable scripts are used.
    pub fn use_module(mut self, on: bool) -> Options {
        self.use_module = on;
        self
    }

    /// The policy label of this limiter's metrics (feature `metrics`; default: the
    /// namespace). Behind `tollgate-tower`, name it after the layer's policy so that the
    /// store's failures and the layer's decisions share the label.
    pub fn metrics_policy(mut self, policy: impl Into<String>) -> Options {
        self.metrics_policy = Some(policy.into());
        self
    }

    /// Called on each change of the link's state ([`Transition`]): once when a failed call
    /// marks Redis down (with why), once when a call answers again, never per request, so
    /// an outage is one line of a log each way and a state gauge follows it. Called while
    /// the link's state is locked, so the calls alternate down, up, down as the state
    /// did: keep it short (a log line, an atomic store), and never call the limiter from
    /// it.
    pub fn on_transition(mut self, f: impl Fn(Transition) + Send + Sync + 'static) -> Options {
        self.on_transition = Some(Observer(Arc::new(f)));
        self
    }

    /// Tests only: decide at this clock (nanoseconds) instead of Redis `TIME`.
    #[cfg(feature = "testing")]
    pub fn test_clock(mut self, clock: std::sync::Arc<std::sync::atomic::AtomicU64>) -> Options {
        self.test_clock = Some(clock);
        self
    }

    /// Tests only, with [`Options::test_clock`]: `acquire`'s sleeps move the test clock
    /// instead of sleeping, each `late` longer than asked (a timer that fires late), and its
    /// jitter is always the whole of [`Options::jitter`], so a test replays a wait exactly.
    #[cfg(feature = "testing")]
    pub fn test_timers(mut self, late: Duration) -> Options {
        self.test_late = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// Tests only: commit without comparing versions (the control run of the exactness
    /// test, which must then over-admit).
    #[cfg(feature = "testing")]
    pub fn blind_commit(mut self) -> Options {
        self.blind_commit = true;
        self
    }
}

/// Why a decision was made by the fallback (the core's fleet protocol:
/// [`tollgate::store::fleet::handle`]).
pub use tollgate::store::fallback::Why;

/// A change of the link to Redis, reported to [`Options::on_transition`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// A call failed for this reason: Redis is marked down, and the declared [`Fallback`]
    /// decides until a probe answers.
    Down(Why),
    /// A call answered while Redis was marked down: Redis decides again.
    Up,
}

/// The function [`Options::on_transition`] set.
#[derive(Clone)]
pub(crate) struct Observer(pub(crate) Arc<dyn Fn(Transition) + Send + Sync>);

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Observer")
    }
}

/// Where a decision was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// By the core on the states read from Redis, at Redis's clock (and committed there
    /// when admitted).
    Redis,
    /// From this process's memory of a denial that still holds (no round trip).
    DenyCache,
    /// By the declared [`Fallback`].
    Fallback(Why),
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The combined decision over every limit.
    pub decision: Decision,
    /// Each limit's decision, in slot order (the tenant window last).
    pub each: Vec<Decision>,
    /// Where it was decided.
    pub source: Source,
}

/// Why a request could not be decided. Nothing was charged.
#[derive(Clone, Debug)]
pub enum Error {
    /// The request itself is impossible (a cost above a limit's capacity) or does not fit
    /// the limits (a release without a concurrency limit).
    Decide(DecideError),
    /// A policy or option is invalid.
    Policy(PolicyError),
    /// An option is invalid.
    Config {
        /// The option.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// A stored value is not a state this build can read.
    Corrupt {
        /// The Redis key.
        key: String,
        /// What is wrong with it.
        reason: StateBytesError,
    },
    /// A stored value shorter than its version prefix.
    CorruptVersion {
        /// The Redis key.
        key: String,
    },
    /// Other clients kept writing this key first for longer than [`Options::retry_for`].
    Contended {
        /// How long this request tried.
        waited: Duration,
    },
    /// [`RedisLimiter::acquire`] could not get a turn by its deadline. Nothing was charged.
    Timeout {
        /// How long it waited (less than the deadline when the retry time was beyond it: it
        /// does not sleep to a deadline it cannot meet).
        waited: Duration,
        /// The soonest the key itself would admit it, from now (zero when no clock can say:
        /// a full concurrency limit, or still behind other waiters).
        retry_after: Duration,
    },
    /// Redis answered with an error that is not about its availability (wrong type at a
    /// key, a permission, a script error).
    Redis(redis::RedisError),
    /// A key or tenant is longer than the core's bound on a key's bytes
    /// ([`tollgate::store::bounds::MAX_KEY_BYTES`]): refused before Redis is asked, nothing
    /// charged. Hash a long identifier before passing it.
    OverBound {
        /// The argument at fault: `key` or `tenant`.
        field: &'static str,
        /// The bound and the size the argument had.
        over: OverBound,
    },
    /// A reserve or settle the core refuses: a reservation of another key, limits or
    /// namespace, an actual cost above the bound, a limit that cannot be settled.
    Reservation(ReservationError),
    /// A settle whose outcome is unknown: Redis could not be reached, or its answer was
    /// lost (`why`). It may have been applied or not; retrying it with the same
    /// reservation is safe (Redis keeps the reservation's id with the settle: a retry of
    /// an applied settle answers its outcome and charges nothing).
    SettleUnknown {
        /// Why Redis did not answer.
        why: Why,
    },
    /// A plan that does not exist, or an override the plans refuse ([`RedisPlans`]); boxed,
    /// as its names are kept in place (the other errors stay small).
    Plan(Box<PlanError>),
    /// A caller's stored plan value or override is not one this build can read
    /// ([`RedisPlans`]).
    CorruptPlan {
        /// The Redis key.
        key: String,
        /// What is wrong with it.
        reason: PlanValueError,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Decide(e) => write!(f, "{e}"),
            Error::Policy(e) => write!(f, "{e}"),
            Error::Config { field, reason } => write!(f, "invalid option {field}: {reason}"),
            Error::Corrupt { key, reason } => write!(f, "key {key}: {reason}"),
            Error::CorruptVersion { key } => {
                write!(
                    f,
                    "key {key}: corrupt value, shorter than its 8-byte version"
                )
            }
            Error::Contended { waited } => write!(
                f,
                "gave up after {} ms of conflicting writes by other clients",
                waited.as_millis()
            ),
            Error::Timeout {
                waited,
                retry_after,
            } => write!(
                f,
                "rate limit wait timed out after {} ms (retry after {} ms)",
                waited.as_millis(),
                retry_after.as_millis()
            ),
            Error::Redis(e) => write!(f, "redis: {e}"),
            Error::OverBound { field, over } => write!(f, "{field}: {over}"),
            Error::Reservation(e) => write!(f, "{e}"),
            Error::SettleUnknown { why } => write!(
                f,
                "settle not confirmed ({why:?}): retry it with the same reservation"
            ),
            Error::Plan(e) => write!(f, "{e}"),
            Error::CorruptPlan { key, reason } => write!(f, "key {key}: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<DecideError> for Error {
    fn from(e: DecideError) -> Error {
        Error::Decide(e)
    }
}

impl From<ReservationError> for Error {
    fn from(e: ReservationError) -> Error {
        Error::Reservation(e)
    }
}

impl From<PolicyError> for Error {
    fn from(e: PolicyError) -> Error {
        Error::Policy(e)
    }
}
