//! The fleet protocol without I/O: what the Redis fleet store (`tollgate-redis`), tollgate's
//! Redis module and the npm entry `tollgate/redis` (through wasm) agree on, written once.
//! Each of them only moves bytes: reads values, sends commands, sleeps, counts.
//!
//! * **Stored values** ([`encode_value`], [`decode_value`]): an 8-byte write id (the
//!   value's version, compared by the commit script) and the state's bytes
//!   ([`State::to_bytes`]).
//! * **Key TTLs** ([`Ttl`]): until the state is fresh, plus a grace; a concurrency count
//!   for a lease.
//! * **Module replies** ([`decision_fields`], [`decision_from_fields`]): six integers per
//!   decision, durations in whole ms rounded up.
//! * **Settle records** ([`settled_record`], [`read_settled_record`], [`settled_ttl_ms`]):
//!   what a fleet store keeps, beside the states and written atomically with them, for each
//!   reservation it settled, so that a second settle of it answers the first's outcome and
//!   charges nothing (a client retry, a process restart).
//! * **The fallback's decisions** ([`fail_open`], [`fail_closed`]) and **which failures
//!   fall back** ([`handle`], with the one table of Redis error replies, [`reply_class`]).
//!
//! Key names are in [`super::KeyLayout`], decisions over a round in [`super::Batch::apply`],
//! the deny cache in [`super::DenyCache`].

use alloc::string::ToString;
use alloc::vec::Vec;
use core::fmt;

use super::{Batch, Limits, StateBytesError, Write};

mod failure;
pub mod plan;
pub mod plan_command;
pub mod settle_command;

use crate::settle::{Settled, Settlement};
use crate::stack::StackDecision;
use crate::{ceil_millis, Decision, Nanos, State, NANOS_PER_MS};
pub use failure::{
    handle, reply_class, Call, CallError, Handling, ReplyClass, UNAVAILABLE_REPLIES,
};

/// How many bytes of a stored value are its version (a random write id).
pub const VERSION_BYTES: usize = 8;

/// A value read from the store: its version and its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The first [`VERSION_BYTES`] bytes, as stored.
    pub version: [u8; VERSION_BYTES],
    /// The state.
    pub state: State,
}

/// Why a stored value cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueError {
    /// Shorter than its version (the bytes' length).
    Short(usize),
    /// The state's bytes are not a state.
    State(StateBytesError),
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueError::Short(_) => f.write_str("corrupt value, shorter than its 8-byte version"),
            ValueError::State(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ValueError {}

/// The value to store for `state`, written with the fresh id `write_id`.
///
/// ```
/// use tollgate::algorithms::gcra::GcraState;
/// use tollgate::store::fleet::{decode_value, encode_value};
/// use tollgate::State;
/// let state = State::Gcra(GcraState { tat: 5 });
/// let value = encode_value(0x0102, &state);
/// assert_eq!(&value[..8], &[2, 1, 0, 0, 0, 0, 0, 0]);
/// assert_eq!(&value[8..], &state.to_bytes()[..]);
/// let stored = decode_value(&value).unwrap().unwrap();
/// assert_eq!((stored.version, stored.state), ([2, 1, 0, 0, 0, 0, 0, 0], state));
/// ```
pub fn encode_value(write_id: u64, state: &State) -> Vec<u8> {
    let mut value = Vec::with_capacity(VERSION_BYTES + 34);
    value.extend_from_slice(&write_id.to_le_bytes());
    state.write_bytes(&mut value);
    value
}

/// Reads a stored value; empty bytes are an absent key (what the read script answers for
/// one), `None`. Anything shorter than the version, or state bytes that are not a state,
/// is an error, never a guess.
pub fn decode_value(value: &[u8]) -> Result<Option<Stored>, ValueError> {
    if value.is_empty() {
        return Ok(None);
    }
    let Some((version, bytes)) = value.split_first_chunk::<VERSION_BYTES>() else {
        return Err(ValueError::Short(value.len()));
    };
    let state = State::from_bytes(bytes).map_err(ValueError::State)?;
    Ok(Some(Stored {
        version: *version,
        state,
    }))
}

/// How long a written key lives: until its state is fresh, plus a grace, so that an
/// expired key is exactly a fresh one; a concurrency count (which no clock frees) for a
/// lease after its last change, so that slots held by a crashed client come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ttl {
    /// Added to the time a state needs to be fresh (ms).
    pub grace_ms: u64,
    /// A concurrency count's lifetime after its last change (ms).
    pub lease_ms: u64,
}

/// A key's time to live when a test clock decides (its time is not the server's): a day.
pub const TEST_CLOCK_TTL_MS: u64 = 86_400_000;

impl Ttl {
    /// The time to live (ms, at least 1) of a key written with
    /// [`Write::Put`]'s `fresh_after`.
    ///
    /// ```
    /// use tollgate::store::fleet::Ttl;
    /// let ttl = Ttl { grace_ms: 1000, lease_ms: 60_000 };
    /// assert_eq!(ttl.ms(Some(1)), 1001); // 1 ns of state: 1 ms rounded up, plus the grace
    /// assert_eq!(ttl.ms(None), 60_000);
    /// ```
    pub fn ms(&self, fresh_after: Option<Nanos>) -> u64 {
        match fresh_after {
            Some(ns) => ceil_millis(ns).saturating_add(self.grace_ms).max(1),
            None => self.lease_ms.max(1),
        }
    }
}

/// What a store does with one slot's key after a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyWrite {
    /// Store `value` ([`encode_value`]) for `ttl_ms`.
    Put {
        /// The write id and the state.
        value: Vec<u8>,
        /// Time to live.
        ttl_ms: u64,
    },
    /// Delete the key.
    Delete,
}

/// The key writes of `batch`, all or nothing: `(slot index, write)` for each changed slot,
/// each put with a fresh id from `write_id` and its time to live (`ttl`, or
/// [`TEST_CLOCK_TTL_MS`] when `None`: a test clock decided).
pub fn key_writes(
    batch: &Batch<'_>,
    ttl: Option<Ttl>,
    mut write_id: impl FnMut() -> u64,
) -> Vec<(usize, KeyWrite)> {
    batch
        .writes()
        .map(|(i, w)| (i, key_write(w, ttl, &mut write_id)))
        .collect()
}

/// What a store does with one key for `write`: a put gets a fresh id from `write_id` and
/// its time to live (`ttl`, or [`TEST_CLOCK_TTL_MS`] when `None`). For stores whose writes
/// do not come from one [`Batch`] (a request over several stacks decided together).
pub fn key_write(write: Write, ttl: Option<Ttl>, mut write_id: impl FnMut() -> u64) -> KeyWrite {
    match write {
        Write::Delete => KeyWrite::Delete,
        Write::Put { state, fresh_after } => KeyWrite::Put {
            value: encode_value(write_id(), &state),
            ttl_ms: ttl.map_or(TEST_CLOCK_TTL_MS, |t| t.ms(fresh_after)),
        },
    }
}

/// How the commit script applies its writes: `cas` compares every key's version first
/// (all or nothing); `blind` writes without comparing (tests only: it shows what the
/// comparison prevents).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// Compare-and-set.
    Cas,
    /// No comparison.
    Blind,
}

/// The commit script's arguments: the mode, then for each key (in key order) the version
/// it was read with and its action: `k` keep, `d` delete, `p` put (value, time to live in
/// ms). `versions` has one entry per key (empty for a key that was absent); `writes` are
/// by key index, at most one per key, as [`key_writes`] gives them.
///
/// ```
/// use tollgate::store::fleet::{commit_args, Commit, KeyWrite};
/// let versions = vec![vec![1u8; 8], Vec::new()];
/// let args = commit_args(Commit::Cas, &versions, vec![(1, KeyWrite::Put { value: vec![9], ttl_ms: 1500 })]);
/// let text: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
/// assert_eq!(text, [&b"cas"[..], &[1; 8], b"k", b"", b"", b"", b"p", &[9], b"1500"]);
/// ```
///
/// # Panics
/// If a write's index is not a key of `versions`, or two writes have one index.
pub fn commit_args(
    mode: Commit,
    versions: &[Vec<u8>],
    mut writes: Vec<(usize, KeyWrite)>,
) -> Vec<Vec<u8>> {
    // The writes in key order, each taken as its key comes (rather than a `Vec` of every
    // key's write built to be walked once: one allocation of a fleet round's ~20,
    // `scripts/counts.sh fleet-round-1`).
    writes.sort_unstable_by_key(|(i, _)| *i);
    let mut writes = writes.into_iter().peekable();
    let mode: &[u8] = match mode {
        Commit::Cas => b"cas",
        Commit::Blind => b"blind",
    };
    let mut args = Vec::with_capacity(1 + 4 * versions.len());
    args.push(mode.to_vec());
    for (i, version) in versions.iter().enumerate() {
        args.push(version.clone());
        let (action, value, ttl): (&[u8], Vec<u8>, Vec<u8>) = match writes
            .next_if(|(k, _)| *k == i)
            .map(|(_, w)| w)
        {
            None => (b"k", Vec::new(), Vec::new()),
            Some(KeyWrite::Delete) => (b"d", Vec::new(), Vec::new()),
            Some(KeyWrite::Put { value, ttl_ms }) => (b"p", value, ttl_ms.to_string().into_bytes()),
        };
        args.extend([action.to_vec(), value, ttl]);
    }
    assert!(
        writes.next().is_none(),
        "a write for a key beyond `versions`, or a second write for one key"
    );
    args
}

/// The time and the values of `n` keys in a script's answer: `{seconds, microseconds,
/// value...}` (the read script's reply, and the commit script's after `conflict`), from
/// Redis's `TIME`. `None` when the answer has another shape.
///
/// ```
/// use tollgate::store::fleet::read_view;
/// let reply = vec![b"12".to_vec(), b"500".to_vec(), Vec::new()];
/// let (now, values) = read_view(&reply, 1).unwrap();
/// assert_eq!(now, 12_000_500_000);
/// assert_eq!(values, [Vec::<u8>::new()]);
/// assert!(read_view(&reply, 2).is_none());
/// ```
pub fn read_view(fields: &[Vec<u8>], n: usize) -> Option<(Nanos, &[Vec<u8>])> {
    if fields.len() != n + 2 {
        return None;
    }
    let number = |b: &[u8]| core::str::from_utf8(b).ok()?.parse::<u64>().ok();
    let secs = number(&fields[0])?;
    let micros = number(&fields[1])?;
    let now = secs
        .saturating_mul(1_000 * NANOS_PER_MS)
        .saturating_add(micros.saturating_mul(1_000));
    Some((now, &fields[2..]))
}

/// How many integers a decision takes in a module reply.
pub const DECISION_FIELDS: usize = 6;

/// A decision as the module replies it: `allowed` (1 or 0), `limit`, `remaining`, then
/// `reset-after`, `retry-after` and `delay` in whole ms rounded up. (The reply of
/// `TOLLGATE.CHECK` and `PEEK` is the combined decision's fields, then an array of each
/// limit's.)
pub fn decision_fields(d: &Decision) -> [u64; DECISION_FIELDS] {
    [
        d.allowed as u64,
        d.limit,
        d.remaining,
        d.reset_after_ms(),
        d.retry_after_ms(),
        d.delay_ms(),
    ]
}

/// Reads [`decision_fields`] back; `None` when `allowed` is not 0 or 1. The durations come
/// back as whole ms (an upper bound of the decision's: see [`lower_bound`]).
///
/// ```
/// use tollgate::store::fleet::{decision_fields, decision_from_fields};
/// use tollgate::{Decision, NANOS_PER_MS};
/// let d = Decision { allowed: false, limit: 3, remaining: 0, retry_after: 1, reset_after: 2_500_000, delay: 0 };
/// let back = decision_from_fields(decision_fields(&d)).unwrap();
/// assert_eq!((back.retry_after, back.reset_after), (NANOS_PER_MS, 3 * NANOS_PER_MS));
/// assert_eq!(decision_from_fields([2, 0, 0, 0, 0, 0]), None);
/// ```
pub fn decision_from_fields(f: [u64; DECISION_FIELDS]) -> Option<Decision> {
    let ns = |ms: u64| ms.saturating_mul(NANOS_PER_MS);
    Some(Decision {
        allowed: match f[0] {
            0 => false,
            1 => true,
            _ => return None,
        },
        limit: f[1],
        remaining: f[2],
        reset_after: ns(f[3]),
        retry_after: ns(f[4]),
        delay: ns(f[5]),
    })
}

/// The lower bound of a duration read as whole ms rounded up (a module reply's): what a
/// deny cache may remember without outlasting the true retry time.
pub fn lower_bound(whole_ms: Nanos) -> Nanos {
    whole_ms.saturating_sub(NANOS_PER_MS - 1)
}

/// The record of a settled reservation, as a fleet store keeps it under the reservation's
/// id ([`super::KeyLayout::settled_key`]): the settlement's numbers in ASCII,
/// `refunded charged unpaid`, then the same three for each limit of a stack.
///
/// ```
/// use tollgate::settle::Settlement;
/// use tollgate::store::fleet::{read_settled_record, settled_record};
/// let s = Settlement { refunded: 15, ..Settlement::default() };
/// assert_eq!(settled_record(&s), b"15 0 0");
/// assert_eq!(read_settled_record(b"15 0 0"), Some(s));
/// assert_eq!(read_settled_record(b"15 0"), None);
/// ```
pub fn settled_record(s: &Settlement) -> Vec<u8> {
    let mut out = alloc::format!("{} {} {}", s.refunded, s.charged, s.unpaid);
    for e in &s.each {
        out.push_str(&alloc::format!(
            " {} {} {}",
            e.refunded,
            e.charged,
            e.unpaid
        ));
    }
    out.into_bytes()
}

/// Reads a [`settled_record`] back; `None` for any other bytes.
pub fn read_settled_record(record: &[u8]) -> Option<Settlement> {
    let text = core::str::from_utf8(record).ok()?;
    let numbers: Vec<u64> = text
        .split(' ')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if numbers.len() % 3 != 0 || numbers.is_empty() {
        return None;
    }
    let mut triples = numbers.chunks_exact(3).map(|t| Settled {
        refunded: t[0],
        charged: t[1],
        unpaid: t[2],
    });
    let combined = triples.next()?;
    Some(Settlement {
        refunded: combined.refunded,
        charged: combined.charged,
        unpaid: combined.unpaid,
        each: triples.collect(),
    })
}

/// How long a fleet store keeps a settle record, in ms: as long as a reservation can
/// matter, the longest window among `limits` (a bucket's: the time it takes to refill from
/// empty), plus `grace_ms`. A second settle of one reservation later than that finds no
/// record and settles again: by then a window's refund is nothing.
///
/// ```
/// use tollgate::store::fleet::settled_ttl_ms;
/// use tollgate::store::Limits;
/// let limits = Limits::stack(&["10/s".parse().unwrap(), "fixed-window 100/min".parse().unwrap()]).unwrap();
/// assert_eq!(settled_ttl_ms(&limits, 5_000), 65_000);
/// ```
pub fn settled_ttl_ms(limits: &Limits, grace_ms: u64) -> u64 {
    let longest = limits
        .policies()
        .iter()
        .filter_map(|p| p.quota())
        .map(|q| q.window())
        .max()
        .unwrap_or(0);
    ceil_millis(longest).saturating_add(grace_ms).max(1)
}

/// The decision of a store that fails open (Redis unavailable): every limit admits with
/// its whole limit left; the combined decision is the tightest limit's.
pub fn fail_open(limits: &Limits) -> StackDecision {
    let each: Vec<Decision> = limits
        .policies()
        .iter()
        .map(|p| Decision {
            allowed: true,
            limit: p.limit(),
            remaining: p.limit(),
            ..Decision::default()
        })
        .collect();
    let decision = *each.iter().min_by_key(|d| d.limit).unwrap_or(&each[0]);
    StackDecision { decision, each }
}

/// The decision of a store that fails closed: every limit denies, with `retry_after` (the
/// next probe of Redis).
pub fn fail_closed(limits: &Limits, retry_after: Nanos) -> StackDecision {
    let each: Vec<Decision> = limits
        .policies()
        .iter()
        .map(|p| Decision {
            allowed: false,
            limit: p.limit(),
            remaining: 0,
            reset_after: retry_after,
            retry_after,
            delay: 0,
        })
        .collect();
    StackDecision {
        decision: each[0],
        each,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Slot;
    use crate::{Policy, NANOS_PER_SEC};
    use alloc::string::ToString;

    fn limits() -> Limits {
        Limits::stack(&[
            "2/s".parse::<Policy>().unwrap(),
            "concurrency 3".parse().unwrap(),
        ])
        .unwrap()
    }

    #[test]
    fn values_round_trip_and_bad_ones_are_errors() {
        let l = limits();
        let slots = l.slots(None);
        let mut batch = Batch::new(&l, &slots, alloc::vec![None, None], 5 * NANOS_PER_SEC);
        batch.decide(1).unwrap();
        let mut id = 41;
        let writes = key_writes(
            &batch,
            Some(Ttl {
                grace_ms: 1000,
                lease_ms: 60_000,
            }),
            || {
                id += 1;
                id
            },
        );
        assert_eq!(writes.len(), 2);
        for (i, (slot, w)) in writes.iter().enumerate() {
            let KeyWrite::Put { value, ttl_ms } = w else {
                panic!("{w:?}")
            };
            let stored = decode_value(value).unwrap().unwrap();
            assert_eq!(stored.version, (42 + i as u64).to_le_bytes());
            assert_eq!(Some(&stored.state), batch.states()[*slot].as_ref());
            // The bucket is full again after half a second; the count lives for the lease.
            assert_eq!(*ttl_ms, [1500, 60_000][i]);
        }
        assert_eq!(decode_value(b""), Ok(None));
        assert_eq!(decode_value(b"1234567"), Err(ValueError::Short(7)));
        assert!(matches!(
            decode_value(b"12345678\x09\x01"),
            Err(ValueError::State(StateBytesError::Version(9)))
        ));
        assert_eq!(
            ValueError::Short(3).to_string(),
            "corrupt value, shorter than its 8-byte version"
        );
        // Under a test clock, a day.
        let writes = key_writes(&batch, None, || 0);
        assert!(writes.iter().all(|(_, w)| matches!(
            w,
            KeyWrite::Put {
                ttl_ms: TEST_CLOCK_TTL_MS,
                ..
            }
        )));
    }

    #[test]
    fn commit_args_take_writes_in_any_order() {
        let versions = alloc::vec![alloc::vec![1u8; 8], Vec::new(), alloc::vec![3u8; 8]];
        let put = |v: u8| KeyWrite::Put {
            value: alloc::vec![v],
            ttl_ms: 20,
        };
        let args = commit_args(
            Commit::Blind,
            &versions,
            alloc::vec![(2, KeyWrite::Delete), (0, put(7))],
        );
        let text: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        assert_eq!(
            text,
            [
                &b"blind"[..],
                &[1; 8],
                b"p",
                &[7],
                b"20",
                b"",
                b"k",
                b"",
                b"",
                &[3; 8],
                b"d",
                b"",
                b""
            ]
        );
    }

    #[test]
    #[should_panic(expected = "a write for a key beyond")]
    fn commit_args_refuse_a_write_for_no_key() {
        commit_args(
            Commit::Cas,
            &[Vec::new()],
            alloc::vec![(1, KeyWrite::Delete)],
        );
    }

    #[test]
    fn ttl_is_fresh_after_rounded_up_plus_grace_never_zero() {
        let t = Ttl {
            grace_ms: 0,
            lease_ms: 0,
        };
        assert_eq!(t.ms(Some(0)), 1);
        assert_eq!(t.ms(Some(NANOS_PER_MS + 1)), 2);
        assert_eq!(t.ms(None), 1);
        let t = Ttl {
            grace_ms: u64::MAX,
            lease_ms: 7,
        };
        assert_eq!(t.ms(Some(u64::MAX)), u64::MAX);
        assert_eq!(t.ms(None), 7);
    }

    #[test]
    fn module_fields_round_trip_in_whole_ms() {
        let d = Decision {
            allowed: true,
            limit: 9,
            remaining: 4,
            reset_after: 1_500_001,
            retry_after: 0,
            delay: 2 * NANOS_PER_MS,
        };
        assert_eq!(decision_fields(&d), [1, 9, 4, 2, 0, 2]);
        let back = decision_from_fields(decision_fields(&d)).unwrap();
        assert_eq!(back.reset_after, 2 * NANOS_PER_MS);
        assert_eq!(back.delay, d.delay);
        assert_eq!(lower_bound(2 * NANOS_PER_MS), NANOS_PER_MS + 1);
        assert_eq!(lower_bound(0), 0);
    }

    #[test]
    fn fallback_decisions() {
        let l = limits();
        let open = fail_open(&l);
        assert!(open.decision.allowed && open.each.iter().all(|d| d.allowed));
        assert_eq!(open.decision.limit, 2, "the tightest limit binds");
        assert_eq!(open.each[1].remaining, 3);
        let closed = fail_closed(&l, NANOS_PER_SEC);
        assert!(!closed.decision.allowed);
        assert!(closed.each.iter().all(|d| d.retry_after == NANOS_PER_SEC));
        assert_eq!(l.slots(None), [Slot::Layer(0), Slot::Layer(1)]);
    }
}
