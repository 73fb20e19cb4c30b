//! Where the counters live. A store follows the core's store contract
//! ([`tollgate::store`]): load the states of a request's keys and read the store's clock,
//! decide with the core's rule for a request of limits on separate keys
//! ([`tollgate::store::request::decide`]), write back all or nothing, delete what came back
//! fresh and let the rest expire when it will be. Every store (memory, Redis's scripts, and
//! Redis's module, inside Redis) decides so:
//!
//! * **All or nothing** (the default): the request is one stack. When a limit that
//!   enforces denies, nothing is charged anywhere. A limit in shadow mode that denies does
//!   not stop the others: it is left out and the rest are decided again, and charged.
//! * **Charge each** (`--charge-every-descriptor`, envoyproxy/ratelimit's behaviour): every
//!   limit is decided alone; each one with room is charged, whatever the others said.
//!
//! Two stores: [`Memory`] (one process; `store/memory.rs`) and the fleet's
//! [`RedisStore`](crate::redis_store::RedisStore).

use std::future::Future;

pub use tollgate::clock::{Clock, ManualClock, SystemClock};
use tollgate::metrics;
use tollgate::store::fallback::Behaviour;
use tollgate::store::fallback::Why;
use tollgate::store::request::Counted;
use tollgate::{DecideError, Nanos, ReservationError};

pub use tollgate::store::request::{Charging, Outcome};

mod memory;
mod shard;

pub use self::memory::{parse_size, Memory, MemoryStats, SizeError, DEFAULT_MAX_BYTES};
pub use self::shard::ENTRY_OVERHEAD;

/// Where a decision was made: the model's [`tollgate::metrics::Source`], with the failure
/// that made the declared behaviour decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// By the core on the store's states (this process's memory, or Redis).
    Store,
    /// From a denial the deny cache remembers (no round trip to Redis).
    DenyCache,
    /// By the declared behaviour, because a call to Redis failed for this reason.
    Fallback(Behaviour, Why),
}

impl Source {
    /// The model's source (the `tollgate_source` label).
    pub const fn model(self) -> metrics::Source {
        match self {
            Source::Store => metrics::Source::Store,
            Source::DenyCache => metrics::Source::DenyCache,
            Source::Fallback(..) => metrics::Source::Fallback,
        }
    }
}

/// Why a store could not decide.
#[derive(Debug)]
pub enum StoreError {
    /// The core refused the request (a state of another algorithm; never for costs, which
    /// [`request::decide`](tollgate::store::request::decide) checks first).
    Decide(DecideError),
    /// Redis answered something that is not the protocol's reply.
    Redis(String),
    /// The store cannot give hits back (the Redis store: tollgate-redis has no settle yet).
    CannotRefund,
    /// The core refused to give hits back to a limit (a concurrency limit or a leaky
    /// queue).
    Refund(ReservationError),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Decide(e) => write!(f, "cannot decide: {e}"),
            StoreError::Redis(m) => write!(f, "redis: {m}"),
            StoreError::CannotRefund => f.write_str("this store cannot give hits back"),
            StoreError::Refund(e) => write!(f, "giving hits back: {e}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// A store of counters for the service.
pub trait Store: Send + Sync + 'static {
    /// Decides one request's counted limits, each with its store key, together (see
    /// [`request::decide`](tollgate::store::request::decide); `blocked`: the request also
    /// carries an enforced limit that always denies, so in all-or-nothing mode nothing may
    /// be charged); `domain` is the request's (every key starts with it).
    fn decide(
        &self,
        domain: &str,
        items: Vec<(String, Counted)>,
        charging: Charging,
        blocked: bool,
    ) -> impl Future<Output = Result<(Outcome, Source), StoreError>> + Send;

    /// Gives back each item's cost (Envoy's `is_negative_hits`): the core's settle rule
    /// for a charge of that cost at now whose actual was 0 ([`tollgate::settle`]), so a
    /// state is never made fuller than fresh and a window that no longer counts gets
    /// nothing; then each limit's decision for a cost of 0 (what it has left). `None` (the
    /// default): the store cannot give back ([`Store::refunds`] is false).
    fn refund(
        &self,
        domain: &str,
        items: Vec<(String, Counted)>,
        charging: Charging,
    ) -> impl Future<Output = Result<(Outcome, Source), StoreError>> + Send {
        let _ = (domain, items, charging);
        std::future::ready(Err(StoreError::CannotRefund))
    }

    /// Whether [`Store::refund`] gives back: the service refuses a request with negative
    /// hits on a store that cannot, naming the field.
    fn refunds(&self) -> bool {
        false
    }

    /// The store's clock now (for the limits that need no state: a blocking limit's reset).
    fn now(&self) -> Nanos;

    /// What this process's memory store holds (`None` for a store kept elsewhere).
    fn memory_stats(&self) -> Option<MemoryStats> {
        None
    }
}
