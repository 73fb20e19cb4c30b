//! The memory store, [`Memory`]: one process. Each key's state sits in one of 16 shards; a
//! request locks the shards of all its keys (in shard order, so two requests never
//! deadlock), decides, writes and unlocks: all or nothing across descriptors, and never a
//! lost or double-counted hit. Memory holds only keys that are not fresh: a state is stored
//! with the time after which it is equivalent to none ([`tollgate::store::Write::Put`]'s
//! `fresh_after`), and expired entries are dropped as writes come.
//!
//! Memory is bounded in bytes ([`Memory::with_bound`], `--memory-max-bytes`; each shard a
//! sixteenth): each key costs its bytes plus [`ENTRY_OVERHEAD`](super::ENTRY_OVERHEAD). A
//! write that would pass the bound evicts first what is expired, then the states closest to
//! fresh (the earliest fresh time, by the core's [`tollgate::store::fresh_after`]), then
//! among those fresh at the same time the least spent (a denying key last), then the oldest
//! write. An evicted key restarts fresh: it may be admitted again up to its limit before its
//! window or bucket would have let it. Keys that are kept stay exact.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use tollgate::clock::{Clock, SystemClock};
use tollgate::settle::{settle, Charge, Overage};
use tollgate::store::request::{self, Counted};
use tollgate::store::{fresh_after, Write};
use tollgate::{DecideError, Nanos, ReservationError, State};

use super::shard::Shard;
use super::{Charging, Outcome, Source, Store, StoreError};

const SHARDS: usize = 16;

/// The memory store's default bound in bytes (64 MiB): about 200,000 keys of 40 bytes (see
/// the README's sizing section), in a container's memory next to the server's own (a few
/// MiB) with room to spare.
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

/// Why a size in bytes (`--memory-max-bytes`) was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Not a whole number followed by nothing, `KiB`, `MiB` or `GiB`.
    NotASize(String),
    /// Zero: the store could hold nothing.
    Zero,
    /// More than this machine can address.
    TooLarge(String),
}

impl std::fmt::Display for SizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeError::NotASize(t) => {
                write!(
                    f,
                    "'{t}' is not a size (bytes, or a number with KiB, MiB or GiB)"
                )
            }
            SizeError::Zero => write!(f, "0 bytes: the store must hold at least one key"),
            SizeError::TooLarge(t) => write!(f, "'{t}' is more bytes than this machine addresses"),
        }
    }
}

impl std::error::Error for SizeError {}

/// Reads a size in bytes: a whole number, optionally followed by `KiB`, `MiB` or `GiB`
/// (`67108864`, `64MiB`).
pub fn parse_size(text: &str) -> Result<usize, SizeError> {
    let t = text.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => t.split_at(at),
        None => (t, ""),
    };
    let shift = match unit.trim() {
        "" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return Err(SizeError::NotASize(text.to_string())),
    };
    let n: usize = match digits.parse() {
        Ok(n) => n,
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
            return Err(SizeError::TooLarge(text.to_string()))
        }
        Err(_) => return Err(SizeError::NotASize(text.to_string())),
    };
    match n.checked_mul(1 << shift) {
        Some(0) => Err(SizeError::Zero),
        Some(bytes) => Ok(bytes),
        None => Err(SizeError::TooLarge(text.to_string())),
    }
}

/// What the memory store holds, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Keys held.
    pub keys: usize,
    /// Their accounted bytes (keys plus [`ENTRY_OVERHEAD`](super::ENTRY_OVERHEAD) each).
    pub bytes: usize,
    /// The bound on `bytes`.
    pub max_bytes: usize,
    /// Keys evicted before they were fresh, to stay within the bound, since the start.
    pub evictions: u64,
}

/// The in-memory store (one process), bounded in bytes. Its clock counts from the Unix
/// epoch ([`SystemClock`]), so that fixed windows of a unit start where
/// envoyproxy/ratelimit's do.
pub struct Memory<C = SystemClock> {
    shards: Vec<Mutex<Shard>>,
    clock: C,
    max_bytes: usize,
    evictions: AtomicU64,
}

impl Memory<SystemClock> {
    /// A store on the system clock, bounded by [`DEFAULT_MAX_BYTES`].
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
    /// A store on `clock`, bounded by [`DEFAULT_MAX_BYTES`].
    pub fn with_clock(clock: C) -> Self {
        Memory::with_bound(clock, DEFAULT_MAX_BYTES)
    }

    /// A store on `clock` holding at most `max_bytes` accounted bytes (each of its 16 shards
    /// a sixteenth of them).
    pub fn with_bound(clock: C, max_bytes: usize) -> Self {
        Memory {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Shard::new(max_bytes / SHARDS)))
                .collect(),
            clock,
            max_bytes,
            evictions: AtomicU64::new(0),
        }
    }

    /// How many keys are stored (fresh ones are not).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// The keys and bytes held, the bound, and the evictions so far.
    pub fn stats(&self) -> MemoryStats {
        let (keys, bytes) = self.shards.iter().fold((0, 0), |(k, b), s| {
            let s = lock(s);
            (k + s.len(), b + s.bytes())
        });
        MemoryStats {
            keys,
            bytes,
            max_bytes: self.max_bytes,
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides now, under the locks of every key's shard.
    pub fn decide_now(
        &self,
        items: &[(String, Counted)],
        charging: Charging,
        blocked: bool,
    ) -> Result<Outcome, DecideError> {
        self.locked(items, |_, _, _| Ok(false), charging, blocked)
    }

    /// Gives back each item's cost now (Envoy's `is_negative_hits`), under the locks of
    /// every key's shard: each loaded state is settled by the core's rule as a charge of
    /// the cost at now whose actual was 0 (never fuller than fresh), then decided at a
    /// cost of 0, which reports what is left and writes the state (or deletes it, fresh).
    /// All or nothing: an error leaves every key as it was.
    ///
    /// Errors: [`ReservationError::NotSettleable`] for a concurrency limit or a leaky
    /// queue (the service refuses them first), the core's decide errors otherwise.
    pub fn refund_now(
        &self,
        items: &[(String, Counted)],
        charging: Charging,
    ) -> Result<Outcome, ReservationError> {
        let zero: Vec<(String, Counted)> = items
            .iter()
            .map(|(k, c)| (k.clone(), Counted { cost: 0, ..*c }))
            .collect();
        self.locked(
            &zero,
            |i, state, now| {
                let policy = &items[i].1.policy;
                // A state of another algorithm is read as fresh by the decide that
                // follows (as for a charge): there is nothing of this policy's to give
                // back.
                if state
                    .as_ref()
                    .is_some_and(|s| s.algorithm() != policy.algorithm())
                {
                    return Ok(false);
                }
                let charge = Charge {
                    cost: items[i].1.cost,
                    at: now,
                };
                let before = state.clone();
                settle(policy, state, charge, 0, now, Overage::Debt)?;
                Ok(*state != before)
            },
            charging,
            false,
        )
    }

    /// Loads the items' states under their shards' locks, passes each through `first`
    /// (nothing for a decision; a refund's settle, which says whether it changed the
    /// state), decides and writes what changed. An error from `first` or the decision
    /// writes nothing.
    fn locked<E: From<DecideError>>(
        &self,
        items: &[(String, Counted)],
        mut first: impl FnMut(usize, &mut Option<State>, Nanos) -> Result<bool, E>,
        charging: Charging,
        blocked: bool,
    ) -> Result<Outcome, E> {
        let mut wanted: Vec<usize> = items.iter().map(|(key, _)| shard_of(key)).collect();
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
            .map(|((key, _), &s)| guards[guard_of(s)].1.get(key, now).cloned())
            .collect();
        let mut loaded = loaded;
        // (Empty, so never allocated, for a decision.)
        let mut changed = Vec::new();
        for (i, state) in loaded.iter_mut().enumerate() {
            if first(i, state, now)? {
                changed.push(i);
            }
        }
        let counted: Vec<Counted> = items.iter().map(|(_, c)| *c).collect();
        let mut outcome = request::decide(&counted, &loaded, now, charging, blocked)?;
        // What `first` changed and the decision did not write again is written as it is.
        for i in changed {
            if outcome.writes.iter().all(|(w, _)| *w != i) {
                let write = match &loaded[i] {
                    None => Write::Delete,
                    Some(state) => Write::Put {
                        fresh_after: fresh_after(&counted[i].policy, state, now),
                        state: state.clone(),
                    },
                };
                outcome.writes.push((i, write));
            }
        }
        let mut evicted = 0;
        for (i, write) in &outcome.writes {
            let shard = &mut guards[guard_of(of_item[*i])].1;
            match write {
                Write::Delete => shard.delete(&items[*i].0),
                Write::Put { state, fresh_after } => {
                    let d = &outcome.each[*i];
                    evicted += shard.put(
                        &items[*i].0,
                        state.clone(),
                        fresh_after.map(|f| now.saturating_add(f)),
                        d.limit.saturating_sub(d.remaining),
                        now,
                    );
                }
            }
        }
        if evicted > 0 {
            self.evictions.fetch_add(evicted, Ordering::Relaxed);
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
        items: Vec<(String, Counted)>,
        charging: Charging,
        blocked: bool,
    ) -> impl Future<Output = Result<(Outcome, Source), StoreError>> + Send {
        std::future::ready(
            self.decide_now(&items, charging, blocked)
                .map(|o| (o, Source::Store))
                .map_err(StoreError::Decide),
        )
    }

    fn refund(
        &self,
        _domain: &str,
        items: Vec<(String, Counted)>,
        charging: Charging,
    ) -> impl Future<Output = Result<(Outcome, Source), StoreError>> + Send {
        std::future::ready(
            self.refund_now(&items, charging)
                .map(|o| (o, Source::Store))
                .map_err(|e| match e {
                    ReservationError::Decide(e) => StoreError::Decide(e),
                    other => StoreError::Refund(other),
                }),
        )
    }

    fn refunds(&self) -> bool {
        true
    }

    fn now(&self) -> Nanos {
        self.clock.now()
    }

    fn memory_stats(&self) -> Option<MemoryStats> {
        Some(self.stats())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_bytes_or_binary_units() {
        assert_eq!(parse_size("67108864"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size(" 2 GiB "), Ok(2 << 30));
    }

    #[test]
    fn a_size_that_is_not_one_is_refused_by_name() {
        assert_eq!(parse_size("0"), Err(SizeError::Zero));
        assert_eq!(parse_size("0MiB"), Err(SizeError::Zero));
        for bad in ["", "MiB", "64MB", "-1", "1.5MiB", "64 mebibytes"] {
            assert_eq!(
                parse_size(bad),
                Err(SizeError::NotASize(bad.to_string())),
                "{bad}"
            );
        }
        assert_eq!(
            parse_size("99999999999999999999999"),
            Err(SizeError::TooLarge("99999999999999999999999".into()))
        );
        assert!(parse_size("64MB")
            .unwrap_err()
            .to_string()
            .contains("KiB, MiB or GiB"));
    }
}
