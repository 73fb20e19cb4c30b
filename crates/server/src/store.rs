//! Where the counters live. A store follows the core's store contract
//! ([`tollgate::store`]): load the states of a request's keys and read the store's clock,
//! decide ([`crate::engine::decide`], which decides with [`tollgate::store::Batch`]), write
//! back all or nothing, delete what came back fresh and let the rest expire when it will be.
//!
//! [`Memory`]: one process. Each key's state sits in one of 16 shards; a request locks the
//! shards of all its keys (in shard order, so two requests never deadlock), decides, writes
//! and unlocks: all or nothing across descriptors, and never a lost or double-counted hit.
//! Memory holds only keys that are not fresh: a state is stored with the time after which
//! it is equivalent to none ([`tollgate::store::Write::Put`]'s `fresh_after`), and expired
//! entries are swept when a shard has doubled since its last sweep.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use tollgate::metrics;
use tollgate::store::fallback::Behaviour;
use tollgate::store::fallback::Why;
use tollgate::store::Write;
use tollgate::{DecideError, Nanos, State};

use crate::engine::{self, Charging, Item, Outcome};

/// A clock for a store: nanoseconds since the Unix epoch, so that fixed windows of a unit
/// start where envoyproxy/ratelimit's do (whole seconds, minutes, hours, days since 1970).
pub trait Clock: Send + Sync + 'static {
    /// The time now.
    fn now(&self) -> Nanos;
}

/// The system's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
            .unwrap_or(0)
    }
}

/// A clock set by hand (tests): shared, so a test moves it while the server runs.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock at `now`.
    pub fn new(now: Nanos) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(now)))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Nanos) {
        self.0.fetch_add(by, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.0.load(Ordering::Relaxed)
    }
}

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
    /// [`engine::decide`] checks first).
    Decide(DecideError),
    /// Redis answered something that is not the protocol's reply.
    Redis(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Decide(e) => write!(f, "cannot decide: {e}"),
            StoreError::Redis(m) => write!(f, "redis: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// A store of counters for the service.
pub trait Store: Send + Sync + 'static {
    /// Decides one request's counted limits together (see [`engine::decide`]); `domain`
    /// is the request's (every item's key starts with it).
    fn decide(
        &self,
        domain: &str,
        items: Vec<Item>,
        charging: Charging,
        blocked: bool,
    ) -> impl Future<Output = Result<(Outcome, Source), StoreError>> + Send;

    /// The store's clock now (for the limits that need no state: a blocking limit's reset).
    fn now(&self) -> Nanos;
}

struct Entry {
    state: State,
    /// When the state becomes equivalent to none (`None`: never by itself).
    expires: Option<Nanos>,
}

#[derive(Default)]
struct Shard {
    map: HashMap<String, Entry>,
    sweep_at: usize,
}

const SHARDS: usize = 16;

/// The in-memory store (one process).
pub struct Memory<C = SystemClock> {
    shards: Vec<Mutex<Shard>>,
    clock: C,
}

impl Memory<SystemClock> {
    /// A store on the system clock.
    pub fn new() -> Self {
        Memory::with_clock(SystemClock)
    }
}

impl Default for Memory<SystemClock> {
    fn default() -> Self {
        Memory::new()
    }
}

fn shard_of(key: &str) -> usize {
    use std::hash::{BuildHasher, Hasher};
    // A fixed hasher: the shard of a key never changes within the process.
    let mut h =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .build_hasher();
    h.write(key.as_bytes());
    (h.finish() as usize) % SHARDS
}

impl<C: Clock> Memory<C> {
    /// A store on `clock`.
    pub fn with_clock(clock: C) -> Self {
        Memory {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            clock,
        }
    }

    /// How many keys are stored (fresh ones are not).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides now, under the locks of every key's shard.
    pub fn decide_now(
        &self,
        items: &[Item],
        charging: Charging,
        blocked: bool,
    ) -> Result<Outcome, DecideError> {
        let mut wanted: Vec<usize> = items.iter().map(|i| shard_of(&i.key)).collect();
        let of_item = wanted.clone();
        wanted.sort_unstable();
        wanted.dedup();
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> =
            wanted.iter().map(|&s| (s, lock(&self.shards[s]))).collect();
        let guard_of = |shard: usize| wanted.binary_search(&shard).unwrap_or(0);
        let now = self.clock.now();
        let loaded: Vec<Option<State>> = items
            .iter()
            .zip(&of_item)
            .map(|(item, &s)| {
                let shard = &guards[guard_of(s)].1;
                shard
                    .map
                    .get(&item.key)
                    .filter(|e| e.expires.is_none_or(|t| t > now))
                    .map(|e| e.state.clone())
            })
            .collect();
        let outcome = engine::decide(items, &loaded, now, charging, blocked)?;
        for (i, write) in &outcome.writes {
            let shard = &mut guards[guard_of(of_item[*i])].1;
            match write {
                Write::Delete => {
                    shard.map.remove(&items[*i].key);
                }
                Write::Put { state, fresh_after } => {
                    let expires = fresh_after.map(|f| now.saturating_add(f));
                    shard.map.insert(
                        items[*i].key.clone(),
                        Entry {
                            state: state.clone(),
                            expires,
                        },
                    );
                    if shard.map.len() > shard.sweep_at {
                        shard.map.retain(|_, e| e.expires.is_none_or(|t| t > now));
                        shard.sweep_at = (shard.map.len() * 2).max(1024);
                    }
                }
            }
        }
        Ok(outcome)
    }
}

fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while a shard was held cannot leave a half-written state (each write is one
    // insert or remove), so a poisoned lock is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<C: Clock> Store for Memory<C> {
    fn decide(
        &self,
        _domain: &str,
        items: Vec<Item>,
        charging: Charging,
        blocked: bool,
    ) -> impl Future<Output = Result<(Outcome, Source), StoreError>> + Send {
        std::future::ready(
            self.decide_now(&items, charging, blocked)
                .map(|o| (o, Source::Store))
                .map_err(StoreError::Decide),
        )
    }

    fn now(&self) -> Nanos {
        self.clock.now()
    }
}
