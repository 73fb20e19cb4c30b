//! One request's limits on separate keys, decided together over the states a store has
//! loaded and locked: which states to write back and each limit's decision. Every store of
//! such requests (tollgate-server's memory and Redis stores, and tollgate's Redis module,
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
/// `requests_per_unit: 0`), so in all-or-nothing mode nothing may be charged. Errors only
/// for a state made by another algorithm than its limit's policy.
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
        let standing = uncharged(&items[i].policy, &loaded[i], now)?;
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
                each[i] = uncharged(&items[i].policy, &loaded[i], now)?;
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
