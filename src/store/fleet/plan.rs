//! Plans on a fleet store ([`crate::plans`] over Redis): the values that remember the
//! policy they were written under, a key's stored override, and the one rule that carries a
//! key's states to the limits asking before they decide ([`PlanRound`]). tollgate-redis's
//! scripts and tollgate's Redis module both run it, so the two agree.
//!
//! # The counter belongs to the caller
//!
//! A plan check of caller `key` uses the slots of the key alone, `<base>:<i>` for the
//! stack's limit `i` ([`crate::store::KeyLayout::slot_key`]), whatever plan the call names:
//! the plan is never part of a key's name (a key naming its limit would start every plan
//! change from a fresh counter). Each value names the policy it was written under, so a
//! check under other limits carries the states first ([`crate::carry::carry_stack`]: each
//! new limit takes the spend of the old limit with the [`crate::carry::nearest`] window). A
//! caller's slots run to the longest plan's stack: the states a longer stack left beyond
//! the limits asking are carried too, then deleted.
//!
//! # Values
//!
//! ```text
//! <write id: 8 bytes> 0xF1 <n: 1 byte> <policy: n bytes of its canonical text> <state bytes>
//! ```
//!
//! The byte after the write id tells the layouts apart: a value of the plain layout
//! ([`super::encode_value`]) has its state bytes there, whose first byte is their version
//! ([`crate::store::STATE_BYTES_VERSION`], never 0xF1). A plain value is read as written
//! under the policy asking (as it was before values named their policy).
//!
//! # Overrides
//!
//! A key's override lives at `<base>:o` ([`crate::store::override_name`]), in the key's
//! hash tag, so that one script or command reads it with the states:
//!
//! ```text
//! <write id: 8 bytes> <k: 1 byte> (<n: 1 byte> <policy text: n bytes>)*k <plan name>
//! ```
//!
//! The limits are stored resolved (a plan's policies as they were when the override was
//! set), so a store decides without the plans table; the plan's name (empty for limits of
//! the key's own) is what [`StoredOverride::given`] answers. An override has no expiry.
//!
//! ```
//! use tollgate::plans::{Override, Plans};
//! use tollgate::store::fleet::plan::{decode_override, encode_override, PlanRound, encode_value_under, decode_value_under};
//! use tollgate::store::Limits;
//! let plans = Plans::parse(&[("free", &["fixed-window 10/min"]), ("pro", &["fixed-window 100/min"])]).unwrap();
//! // pro wrote 50 at t = 0.
//! let pro = plans.get("pro").unwrap();
//! let mut round = PlanRound::new(pro, &[None], 0).unwrap();
//! assert!(round.batch().decide(50).unwrap().decision.allowed);
//! let writes = round.key_writes(None, || 7);
//! let tollgate::store::fleet::KeyWrite::Put { value, .. } = &writes[0].1 else { panic!() };
//! let stored = decode_value_under(value).unwrap();
//! assert_eq!(stored.as_ref().unwrap().under, Some(pro.layers()[0]));
//! // free asks: the 50 stay spent (40 above free's 10: denied).
//! let free = plans.get("free").unwrap();
//! let mut round = PlanRound::new(free, &[stored], 0).unwrap();
//! assert!(!round.batch().decide(1).unwrap().decision.allowed);
//! assert!(round.carried());
//! // An override of the key, stored resolved.
//! let value = encode_override(9, &Override::Plan("pro".into()), &plans).unwrap();
//! let back = decode_override(&value).unwrap().unwrap();
//! assert_eq!((back.given, &back.limits), (Override::Plan("pro".into()), pro));
//! ```

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use super::{KeyWrite, Ttl, ValueError, TEST_CLOCK_TTL_MS, VERSION_BYTES};
use crate::carry::carry_stack;
use crate::plans::{Override, PlanError, Plans};
use crate::store::{fresh_after, Batch, Limits, Slot};
use crate::{DecideError, Nanos, Policy, State};

/// The byte after the write id of a value that names its policy (see the module docs).
pub const UNDER_LAYOUT: u8 = 0xF1;

/// The most limits a plan's stack, or an override's, may have on a fleet store (each is a
/// key of the caller's, read by every check).
pub const MAX_LAYERS: usize = 16;

/// A plan value read back: its version, its state, and the policy it was written under
/// (`None`: a plain value, read as written under the policy asking).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The first [`VERSION_BYTES`] bytes, as stored.
    pub version: [u8; VERSION_BYTES],
    /// The state.
    pub state: State,
    /// The policy it was written under, when the value says.
    pub under: Option<Policy>,
}

/// Why a stored plan value or override cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanValueError {
    /// What the fleet's codec says of the value ([`super::decode_value`]).
    Value(ValueError),
    /// The policy a state names is cut short, or its text is not a policy.
    Policy,
    /// An override's bytes are cut short, or hold a policy that is not one or no policy.
    Override,
}

impl fmt::Display for PlanValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanValueError::Value(e) => write!(f, "{e}"),
            PlanValueError::Policy => {
                f.write_str("corrupt value, the policy it names is cut short or not a policy")
            }
            PlanValueError::Override => {
                f.write_str("corrupt override, cut short or with limits that are not policies")
            }
        }
    }
}

impl core::error::Error for PlanValueError {}

/// The value to store for `state`, written under `policy` with the fresh id `write_id`
/// (the layout of the module docs).
pub fn encode_value_under(write_id: u64, policy: &Policy, state: &State) -> Vec<u8> {
    let mut value = Vec::with_capacity(VERSION_BYTES + 2 + 32 + 34);
    value.extend_from_slice(&write_id.to_le_bytes());
    value.push(UNDER_LAYOUT);
    push_policy(&mut value, policy);
    state.write_bytes(&mut value);
    value
}

/// Reads a stored value of either layout; empty bytes are an absent key, `None`. Anything
/// that is neither layout is an error, never a guess.
pub fn decode_value_under(value: &[u8]) -> Result<Option<Written>, PlanValueError> {
    let tagged = value.get(VERSION_BYTES) == Some(&UNDER_LAYOUT);
    if !tagged {
        let stored = super::decode_value(value).map_err(PlanValueError::Value)?;
        return Ok(stored.map(|s| Written {
            version: s.version,
            state: s.state,
            under: None,
        }));
    }
    let (version, rest) = value
        .split_first_chunk::<VERSION_BYTES>()
        .ok_or(PlanValueError::Value(ValueError::Short(value.len())))?;
    let (policy, state) = policy_field(&rest[1..]).ok_or(PlanValueError::Policy)?;
    let state =
        State::from_bytes(state).map_err(|e| PlanValueError::Value(ValueError::State(e)))?;
    Ok(Some(Written {
        version: *version,
        state,
        under: Some(policy),
    }))
}

/// Appends `policy`'s canonical text with its length in one byte. The text is a few dozen
/// bytes (an algorithm's name, two numbers and a unit, perhaps a burst): the longest the
/// grammar writes is well under 255 (`a_policy_text_fits_its_length_byte`).
fn push_policy(out: &mut Vec<u8>, policy: &Policy) {
    let text = policy.to_string();
    let n = text.len().min(usize::from(u8::MAX));
    out.push(n as u8);
    out.extend_from_slice(&text.as_bytes()[..n]);
}

/// One length-prefixed policy text at the start of `bytes`, and the bytes after it.
fn policy_field(bytes: &[u8]) -> Option<(Policy, &[u8])> {
    let (&n, rest) = bytes.split_first()?;
    let (text, rest) = rest.split_at_checked(usize::from(n))?;
    let policy = core::str::from_utf8(text).ok()?.parse().ok()?;
    Some((policy, rest))
}

/// A key's override as stored: its version, what was set, and the limits it gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredOverride {
    /// The first [`VERSION_BYTES`] bytes (compared by the commit script with the states').
    pub version: [u8; VERSION_BYTES],
    /// What was set: the plan's name, or the key's own limits.
    pub given: Override,
    /// The limits it gives (a plan's as they were when it was set).
    pub limits: Limits,
}

/// The value of a key's override `given`, resolved against `plans` (see the module docs),
/// with the fresh id `write_id`. Errors: a plan that does not exist
/// ([`PlanError::UnknownPlan`]), no limits ([`PlanError::Policy`]), or more limits than the
/// longest plan's stack, which is how many slots a caller has
/// ([`PlanError::TooManyLayers`]).
pub fn encode_override(
    write_id: u64,
    given: &Override,
    plans: &Plans,
) -> Result<Vec<u8>, PlanError> {
    let limits = given.resolve(plans)?;
    // The count is one byte: never above MAX_LAYERS, whatever the plans.
    let max = longest(plans).min(MAX_LAYERS);
    if limits.layers().len() > max {
        return Err(PlanError::TooManyLayers { max });
    }
    let name = match given {
        Override::Plan(name) => name.as_str(),
        Override::Limits(_) => "",
    };
    let mut value = Vec::with_capacity(VERSION_BYTES + 1 + 24 * max + name.len());
    value.extend_from_slice(&write_id.to_le_bytes());
    value.push(limits.layers().len() as u8);
    for p in limits.layers() {
        push_policy(&mut value, p);
    }
    value.extend_from_slice(name.as_bytes());
    Ok(value)
}

/// Reads an override's value; empty bytes (or an absent key) are no override, `None`.
pub fn decode_override(value: &[u8]) -> Result<Option<StoredOverride>, PlanValueError> {
    if value.is_empty() {
        return Ok(None);
    }
    let bad = PlanValueError::Override;
    let (version, rest) = value.split_first_chunk::<VERSION_BYTES>().ok_or(bad)?;
    let (&k, mut rest) = rest.split_first().ok_or(bad)?;
    if k == 0 || usize::from(k) > MAX_LAYERS {
        return Err(bad);
    }
    let mut policies = Vec::with_capacity(usize::from(k));
    for _ in 0..k {
        let (p, after) = policy_field(rest).ok_or(bad)?;
        policies.push(p);
        rest = after;
    }
    let limits = Limits::stack(&policies).map_err(|_| bad)?;
    let name = core::str::from_utf8(rest).map_err(|_| bad)?;
    let given = match name {
        "" => Override::Limits(policies),
        name => Override::Plan(String::from(name)),
    };
    Ok(Some(StoredOverride {
        version: *version,
        given,
        limits,
    }))
}

/// How many slots a caller of `plans` has: the longest plan's stack (at most
/// [`MAX_LAYERS`]: see [`check_plans`]).
pub fn longest(plans: &Plans) -> usize {
    plans
        .iter()
        .map(|p| p.limits().layers().len())
        .max()
        .unwrap_or(1)
}

/// Refuses plans a fleet store cannot hold: a stack longer than [`MAX_LAYERS`]
/// ([`PlanError::TooManyLayers`]), or a fair share (plans are stacks, so never).
pub fn check_plans(plans: &Plans) -> Result<(), PlanError> {
    if longest(plans) > MAX_LAYERS {
        return Err(PlanError::TooManyLayers { max: MAX_LAYERS });
    }
    Ok(())
}

/// One read-decide-write of a caller's slots under the limits asking: the stored values
/// carried to those limits first (the rule of the module docs), then a [`Batch`] to decide
/// on, then the writes: every limit whose state or policy changed (the carry too, even when
/// every request was denied, so a key's debt is repaid at its new limits' rate), and the
/// deletion of the spare slots a longer stack left.
#[derive(Clone, Debug)]
pub struct PlanRound<'a> {
    limits: &'a Limits,
    batch: Batch<'a>,
    /// What each limit's slot holds now: its state and the policy it names.
    stored: Vec<(Option<State>, Option<Policy>)>,
    /// Slots beyond the limits that hold a value (deleted by the writes).
    stale: Vec<usize>,
    carried: bool,
}

impl<'a> PlanRound<'a> {
    /// A round over `limits` (a plan's or an override's), whose caller's slots hold `stored`
    /// (slot `i` at index `i`; as many as the caller has, [`longest`]; `None` where empty),
    /// at the store's clock `now`. A state of a slot beyond `limits` that names no policy
    /// cannot be carried, and is only deleted. Errors: a state that is not of the algorithm
    /// of the policy it names ([`DecideError::StateMismatch`]).
    pub fn new(
        limits: &'a Limits,
        stored: &[Option<Written>],
        now: Nanos,
    ) -> Result<PlanRound<'a>, DecideError> {
        let to = limits.layers();
        let mut from: Vec<Policy> = Vec::new();
        let mut states: Vec<Option<State>> = Vec::new();
        let mut kept = alloc::vec![(None, None); to.len()];
        let mut stale = Vec::new();
        let mut changed = false;
        for (i, w) in stored.iter().enumerate() {
            let Some(w) = w else { continue };
            match to.get(i) {
                Some(asking) => {
                    let under = w.under.unwrap_or(*asking);
                    changed |= under != *asking;
                    from.push(under);
                    states.push(Some(w.state.clone()));
                    kept[i] = (Some(w.state.clone()), w.under);
                }
                None => {
                    stale.push(i);
                    if let Some(p) = w.under {
                        from.push(p);
                        states.push(Some(w.state.clone()));
                    }
                }
            }
        }
        let carried = changed || !stale.is_empty();
        let start = match carried {
            true => carry_stack(&from, &states, to, now)?,
            false => kept.iter().map(|(s, _)| s.clone()).collect(),
        };
        let slots: Vec<Slot> = limits.slots(None);
        Ok(PlanRound {
            limits,
            batch: Batch::new(limits, &slots, start, now),
            stored: kept,
            stale,
            carried,
        })
    }

    /// The batch to decide on (its states are the carried ones).
    pub fn batch(&mut self) -> &mut Batch<'a> {
        &mut self.batch
    }

    /// Whether a state was written under other limits (it was carried).
    pub fn carried(&self) -> bool {
        self.carried
    }

    /// The writes, all or nothing, by slot index: a put (a value naming its policy,
    /// [`encode_value_under`], with a fresh id from `write_id` and its time to live, `ttl`,
    /// or [`TEST_CLOCK_TTL_MS`] when `None`) for each limit whose state, or the policy its
    /// value names, changed; a delete for a limit now fresh and each spare slot.
    pub fn key_writes(
        &self,
        ttl: Option<Ttl>,
        mut write_id: impl FnMut() -> u64,
    ) -> Vec<(usize, KeyWrite)> {
        let now = self.batch.now();
        let mut writes = Vec::new();
        for (i, (state, (before, under))) in
            self.batch.states().iter().zip(&self.stored).enumerate()
        {
            let policy = &self.limits.layers()[i];
            let renamed = under.is_some_and(|u| u != *policy);
            if state == before && !(renamed && state.is_some()) {
                continue;
            }
            writes.push((
                i,
                match state {
                    None => KeyWrite::Delete,
                    Some(s) => KeyWrite::Put {
                        value: encode_value_under(write_id(), policy, s),
                        ttl_ms: ttl
                            .map_or(TEST_CLOCK_TTL_MS, |t| t.ms(fresh_after(policy, s, now))),
                    },
                },
            ));
        }
        writes.extend(self.stale.iter().map(|i| (*i, KeyWrite::Delete)));
        writes
    }
}

/// The limits a check of a caller decides under: its override's when it has one, else the
/// plan its call names.
pub fn limits_for<'a>(asking: &'a Limits, over: Option<&'a StoredOverride>) -> &'a Limits {
    over.map_or(asking, |o| &o.limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NANOS_PER_SEC;

    fn plans() -> Plans {
        Plans::parse(&[
            ("free", &["2/s", "100/min"]),
            ("pro", &["1000/min"]),
            ("day", &["fixed-window 5000/day"]),
        ])
        .unwrap()
    }

    #[test]
    fn plain_values_read_as_written_under_the_policy_asking() {
        let limits = plans().get("pro").unwrap().clone();
        let (_, state) = crate::decide(&limits.layers()[0], None, 0, 10).unwrap();
        let plain = super::super::encode_value(3, state.as_ref().unwrap());
        let w = decode_value_under(&plain).unwrap().unwrap();
        assert_eq!(w.under, None);
        let mut round = PlanRound::new(&limits, &[Some(w)], 0).unwrap();
        assert!(!round.carried());
        assert_eq!(round.batch().decide(0).unwrap().decision.remaining, 990);
        // Nothing changed: nothing is written (not even to name the policy).
        assert!(round.key_writes(None, || 0).is_empty());
    }

    #[test]
    fn a_shorter_stack_carries_the_spare_slots_then_deletes_them() {
        let p = plans();
        let free = p.get("free").unwrap();
        let mut round = PlanRound::new(free, &[None, None], 0).unwrap();
        round.batch().decide(2).unwrap();
        let written: Vec<Option<Written>> = round
            .key_writes(None, || 1)
            .into_iter()
            .map(|(_, w)| match w {
                KeyWrite::Put { value, .. } => decode_value_under(&value).unwrap(),
                KeyWrite::Delete => None,
            })
            .collect();
        let pro = p.get("pro").unwrap();
        let mut round = PlanRound::new(pro, &written, 0).unwrap();
        assert!(round.carried());
        // The per-minute limit's 2 spent go to pro's per-minute limit.
        assert_eq!(round.batch().decide(0).unwrap().decision.remaining, 998);
        let writes = round.key_writes(None, || 2);
        assert_eq!(writes.len(), 2, "{writes:?}");
        assert!(matches!(writes[0], (0, KeyWrite::Put { .. })));
        assert_eq!(writes[1], (1, KeyWrite::Delete));
    }

    #[test]
    fn a_denied_request_still_writes_the_carry() {
        let p = plans();
        let pro = p.get("pro").unwrap();
        let mut round = PlanRound::new(pro, &[None], 0).unwrap();
        round.batch().decide(500).unwrap();
        let KeyWrite::Put { value, .. } = &round.key_writes(None, || 1)[0].1 else {
            panic!()
        };
        let w = decode_value_under(value).unwrap();
        let free = p.get("free").unwrap();
        let mut round = PlanRound::new(free, &[w, None], NANOS_PER_SEC).unwrap();
        assert!(!round.batch().decide(1).unwrap().decision.allowed);
        let writes = round.key_writes(None, || 2);
        // Both of free's limits take the per-minute spend (the nearest window of its kind).
        assert_eq!(writes.len(), 2);
        for (_, w) in writes {
            let KeyWrite::Put { value, .. } = w else {
                panic!()
            };
            assert!(decode_value_under(&value).unwrap().unwrap().under.is_some());
        }
    }

    #[test]
    fn overrides_round_trip_and_bad_ones_are_named() {
        let p = plans();
        let own = Override::Limits(alloc::vec!["5/s".parse().unwrap()]);
        let value = encode_override(1, &own, &p).unwrap();
        let back = decode_override(&value).unwrap().unwrap();
        assert_eq!(back.given, own);
        assert_eq!(back.version, 1u64.to_le_bytes());
        assert_eq!(decode_override(b""), Ok(None));
        assert_eq!(
            decode_override(&value[..value.len() - 3]),
            Err(PlanValueError::Override)
        );
        let three = Override::Limits(alloc::vec![
            "5/s".parse().unwrap(),
            "50/min".parse().unwrap(),
            "500/h".parse().unwrap()
        ]);
        assert_eq!(
            encode_override(1, &three, &p),
            Err(PlanError::TooManyLayers { max: 2 })
        );
        assert_eq!(
            encode_override(1, &Override::Plan("gold".into()), &p)
                .unwrap_err()
                .code(),
            "unknown-plan"
        );
    }

    #[test]
    fn a_policy_text_fits_its_length_byte() {
        // The largest counts the grammar takes, with a long window and a burst.
        let max = crate::MAX_COUNT;
        for text in [
            alloc::format!("leaky-queue {max}/31622400000ms burst {max}"),
            alloc::format!("token-bucket {max}/31622400000ms burst {max}"),
            alloc::format!("sliding-window {max}/31622400000ms"),
            alloc::format!("concurrency {max}"),
        ] {
            let p: Policy = text.parse().unwrap();
            let mut out = Vec::new();
            push_policy(&mut out, &p);
            assert!(out[0] < u8::MAX, "{text}: {} bytes", out[0]);
            assert_eq!(policy_field(&out), Some((p, &[][..])), "{text}");
        }
    }

    #[test]
    fn a_cut_value_naming_its_policy_is_an_error() {
        let policy: Policy = "10/s".parse().unwrap();
        let (_, s) = crate::decide(&policy, None, 0, 1).unwrap();
        let v = encode_value_under(1, &policy, s.as_ref().unwrap());
        assert_eq!(decode_value_under(&v[..12]), Err(PlanValueError::Policy));
        assert!(matches!(
            decode_value_under(&v[..v.len() - 1]),
            Err(PlanValueError::Value(ValueError::State(_)))
        ));
    }
}
