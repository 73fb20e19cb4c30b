//! One request's limits on separate keys, decided together over the states a store has
//! loaded and locked: which states to write back and each limit's decision. Every store of
//! such requests (tollgate-rls's memory and Redis stores, and tollgate's Redis module,
//! which runs it inside Redis) decides with this one function between its load and its
//! commit; each decision itself is the core's ([`Batch`], [`crate::stack`]).
//!
//! Unlike a [`Limits`] stack (one key's slots), each limit here has its own key, cost and
//! shadow flag, as the descriptors of an Envoy rate limit request do.
//!
//! * **All or nothing** ([`Charging::AllOrNothing`]): the request is one stack. When a limit
//!   that enforces denies, nothing is charged anywhere. A limit in shadow mode that denies
//!   does not stop the others: it is left out and the rest are decided again (they all have
//!   room: each admitted alone at the same time and cost), and charged.
//! * **Charge each** ([`Charging::Each`], envoyproxy/ratelimit's behaviour): every limit is
//!   decided alone; each one with room is charged, whatever the others said.
//!
//! A cost above a limit's capacity can never be admitted (the core says so with an error);
//! here it is that limit's denial, with `retry_after` its reset time, as envoyproxy/ratelimit
//! answers it.

use alloc::vec;
use alloc::vec::Vec;

use super::{Batch, Limits, Write};

pub mod command;
use crate::stack::uncharged;
use crate::{DecideError, Decision, Nanos, Policy, State};

/// One limit of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// The policy that decides it.
    pub policy: Policy,
    /// What the request costs it (0 checks without charging).
    pub cost: u64,
    /// Whether its denial is only reported (shadow mode), not enforced.
    pub shadow: bool,
}

/// How a request's limits are charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Charging {
    /// One stack: all are charged or none (a denying limit charges nothing anywhere).
    #[default]
    AllOrNothing,
    /// envoyproxy/ratelimit's: each limit with room is charged even when another denies.
    Each,
}

/// The outcome over loaded states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Each limit's decision, in the request's order.
    pub each: Vec<Decision>,
    /// What to write, by limit index: all of them together or none.
    pub writes: Vec<(usize, Write)>,
}

/// Decides `items` (with their `loaded` states, in the same order) at `now`. `blocked`: the
/// request also carries an enforced limit that always denies (envoyproxy/ratelimit's
/// `requests_per_unit: 0`), so in all-or-nothing mode nothing may be charged.
///
/// A loaded state made by another algorithm than its limit's policy (the configuration
/// changed, or two rules count one key with different policies: a request's own limit
/// override and a configured rule) is read as fresh, as [`Batch::new`] reads it, and
/// overwritten by the first write: no policy can read another's state. Errors never come
/// from the states; the core's own errors are passed on.
pub fn decide(
    items: &[Counted],
    loaded: &[Option<State>],
    now: Nanos,
    charging: Charging,
    blocked: bool,
) -> Result<Outcome, DecideError> {
    let mut each = vec![Decision::default(); items.len()];
    let (impossible, possible): (Vec<usize>, Vec<usize>) =
        (0..items.len()).partition(|&i| items[i].cost > items[i].policy.limit());
    for &i in &impossible {
        let standing = uncharged(&items[i].policy, stored(&items[i], &loaded[i]), now)?;
        each[i] = Decision {
            allowed: false,
            retry_after: standing.reset_after,
            ..standing
        };
    }
    let blocked = blocked || impossible.iter().any(|&i| !items[i].shadow);
    let mut writes = Vec::new();
    if charging == Charging::Each {
        for &i in &possible {
            writes.extend(pass(items, loaded, &[i], now, &mut each)?);
        }
        return Ok(Outcome { each, writes });
    }
    let first = pass(items, loaded, &possible, now, &mut each)?;
    let (denied, rest): (Vec<usize>, Vec<usize>) =
        possible.iter().partition(|&&i| !each[i].allowed);
    if blocked || denied.iter().any(|&i| !items[i].shadow) {
        // Nothing is charged: the limits with room say what they really have (a denied
        // stack's pass already did).
        if denied.is_empty() {
            for &i in &possible {
                each[i] = uncharged(&items[i].policy, stored(&items[i], &loaded[i]), now)?;
            }
        }
        return Ok(Outcome { each, writes });
    }
    if denied.is_empty() {
        return Ok(Outcome {
            each,
            writes: first,
        });
    }
    // Only shadow limits denied: the request passes; charge the others.
    writes = pass(items, loaded, &rest, now, &mut each)?;
    Ok(Outcome { each, writes })
}

/// `state` as `item`'s policy reads it: fresh when another algorithm made it.
fn stored<'a>(item: &Counted, state: &'a Option<State>) -> &'a Option<State> {
    const FRESH: &Option<State> = &None;
    match state {
        Some(s) if s.algorithm() != item.policy.algorithm() => FRESH,
        _ => state,
    }
}

/// One all-or-nothing decision over the items `which`: their decisions go to `each` (by
/// item index); returns the writes, by item index.
fn pass(
    items: &[Counted],
    loaded: &[Option<State>],
    which: &[usize],
    now: Nanos,
    each: &mut [Decision],
) -> Result<Vec<(usize, Write)>, DecideError> {
    let policies: Vec<Policy> = which.iter().map(|&i| items[i].policy).collect();
    let costs: Vec<u64> = which.iter().map(|&i| items[i].cost).collect();
    let Ok(limits) = Limits::stack(&policies) else {
        return Ok(Vec::new()); // nothing to decide
    };
    let slots = limits.slots(None);
    let states = which.iter().map(|&i| loaded[i].clone()).collect();
    let mut batch = Batch::new(&limits, &slots, states, now);
    let d = batch.decide_weighted(|k| costs[k])?;
    for (k, &i) in which.iter().enumerate() {
        each[i] = d.each[k];
    }
    Ok(batch.writes().map(|(k, w)| (which[k], w)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(policy: &str, cost: u64, shadow: bool) -> Counted {
        Counted {
            policy: policy.parse().unwrap(),
            cost,
            shadow,
        }
    }

    /// `items` decided `n` times in a row from nothing, each time on the states written;
    /// the last outcome.
    fn run(items: &[Counted], charging: Charging, blocked: bool, n: usize) -> Outcome {
        let mut states: Vec<Option<State>> = alloc::vec![None; items.len()];
        let mut last = None;
        for _ in 0..n {
            let o = decide(items, &states, 0, charging, blocked).unwrap();
            for (i, w) in &o.writes {
                states[*i] = match w {
                    Write::Put { state, .. } => Some(state.clone()),
                    Write::Delete => None,
                };
            }
            last = Some(o);
        }
        last.unwrap()
    }

    #[test]
    fn a_state_of_another_algorithm_reads_as_fresh_in_every_path() {
        // A fixed window's state under a GCRA limit: two rules counting one key with
        // different policies (found by the server's fuzz target). Every path reads it as
        // fresh: the one that decides, the impossible cost's standing, and the standing of
        // a limit with room beside a denying one.
        let window: Policy = "fixed-window 3/min".parse().unwrap();
        let (_, other) = crate::decide(&window, None, 0, 1).unwrap();
        let loaded = [other.clone(), None];
        let gcra = [limit("gcra 5/min", 1, false), limit("1/350d", 1, false)];
        let o = decide(&gcra, &loaded, 0, Charging::AllOrNothing, false).unwrap();
        assert_eq!((o.each[0].remaining, o.writes.len()), (4, 2));
        let too_big = [limit("gcra 5/min", 9, false)];
        let o = decide(&too_big, &loaded[..1], 0, Charging::AllOrNothing, false).unwrap();
        assert_eq!((o.each[0].allowed, o.each[0].remaining), (false, 5));
        let spent = crate::decide(&"1/350d".parse().unwrap(), None, 0, 1)
            .unwrap()
            .1;
        let beside = decide(&gcra, &[other, spent], 0, Charging::AllOrNothing, false).unwrap();
        assert!(!beside.each[1].allowed && beside.writes.is_empty());
        assert_eq!(beside.each[0].remaining, 5, "uncharged, and read as fresh");
    }

    #[test]
    fn an_enforced_denial_charges_nothing_and_a_shadow_one_stops_nothing() {
        let both = [limit("2/350d", 1, false), limit("5/350d", 1, false)];
        let third = run(&both, Charging::AllOrNothing, false, 3);
        assert!(!third.each[0].allowed && third.writes.is_empty());
        assert_eq!(third.each[1].remaining, 3, "the second limit uncharged");
        let shadowed = [limit("2/350d", 1, true), limit("5/350d", 1, false)];
        let third = run(&shadowed, Charging::AllOrNothing, false, 3);
        assert!(!third.each[0].allowed);
        assert_eq!((third.each[1].remaining, third.writes.len()), (2, 1));
    }

    #[test]
    fn each_charges_the_limits_with_room_and_blocked_charges_none() {
        let both = [limit("2/350d", 1, false), limit("5/350d", 1, false)];
        let third = run(&both, Charging::Each, false, 3);
        assert!(!third.each[0].allowed);
        assert_eq!((third.each[1].remaining, third.writes.len()), (2, 1));
        let blocked = run(&both, Charging::AllOrNothing, true, 1);
        assert!(blocked.writes.is_empty());
        assert_eq!(blocked.each[1].remaining, 5);
    }

    #[test]
    fn a_cost_above_the_capacity_is_that_limits_denial() {
        let items = [limit("2/350d", 3, false), limit("5/350d", 1, false)];
        let o = run(&items, Charging::AllOrNothing, false, 1);
        assert!(!o.each[0].allowed && o.each[0].retry_after == o.each[0].reset_after);
        assert!(o.writes.is_empty());
    }
}
