//! All-or-nothing stacks: a request that needs several limits at once (per key, per tenant,
//! global) is charged by every limit or by none.
//!
//! Each limit decides on a copy of its state; only when all admit are the new states stored.
//! A denied stack leaves every state as it was, so a limit that had room is not charged
//! for a request another limit refused.
//!
//! # Each limit's answer
//!
//! [`StackDecision::each`] holds one decision per limit, in stack order:
//!
//! * **Allowed stack:** every limit was charged; each entry is its decision at `cost`.
//! * **Denied stack, a limit that denied:** its decision at `cost` (nothing charged; its
//!   `retry_after` is its own wait).
//! * **Denied stack, a limit that had room:** it was *not* charged, so it reports what it
//!   really has: `allowed: true` (alone it would have admitted the request), and `limit`,
//!   `remaining` and `reset_after` of its state as it stands, uncharged (a cost-0 decision
//!   at `now`); `retry_after` and `delay` are 0 (no wait, and the request is not queued).
//!
//! The combined [`StackDecision::decision`] is built from these entries ([`combine`]), and
//! [`StackDecision::binding`] names the limits that bind it. Every runtime (the keyed store,
//! the npm package, the component, the edge worker) decides stacks through the one rule
//! behind [`decide_all`], so they all report the same.
//!
//! ```
//! use tollgate::stack::decide_all;
//! use tollgate::Policy;
//! let per_key: Policy = "5/s".parse().unwrap();
//! let global: Policy = "fixed-window 3/min".parse().unwrap();
//! let (mut a, mut b) = (None, None);
//! for _ in 0..3 {
//!     let d = decide_all(&mut [(&per_key, &mut a), (&global, &mut b)], 0, 1).unwrap();
//!     assert!(d.decision.allowed);
//! }
//! let d = decide_all(&mut [(&per_key, &mut a), (&global, &mut b)], 0, 1).unwrap();
//! assert!(!d.decision.allowed);          // the global window is spent...
//! assert_eq!(d.binding(), [1]);          // ...it binds the decision...
//! assert_eq!(d.decision.retry_after, 60_000_000_000);
//! // ...and the per-key bucket had room: it was not charged, and says what it really has
//! // (2 left of 5, not the 1 it would have had after this request).
//! assert!(d.each[0].allowed);
//! assert_eq!(d.each[0].remaining, 2);
//! assert_eq!(d.each[0].retry_after, 0);
//! assert_eq!(tollgate::decide(&per_key, a, 0, 0).unwrap().0.remaining, 2);
//! ```

use alloc::vec::Vec;

use crate::decide::decide_at;
use crate::{decide, DecideError, Decision, Nanos, Policy, State};

/// The decision over a stack, and each limit's own decision (in stack order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackDecision {
    /// The combined decision (see [`combine`]): allowed only when every limit admits.
    pub decision: Decision,
    /// Each limit's decision, in the order given (see the module docs for what a limit that
    /// had room in a denied stack reports).
    pub each: Vec<Decision>,
}

impl StackDecision {
    /// Indices of the limits that denied the request (empty when allowed).
    pub fn denied_by(&self) -> impl Iterator<Item = usize> + '_ {
        self.each
            .iter()
            .enumerate()
            .filter(|(_, d)| !d.allowed)
            .map(|(i, _)| i)
    }

    /// Indices of the limits that bind the decision ([`binding`]).
    pub fn binding(&self) -> Vec<usize> {
        binding(&self.each)
    }
}

/// Indices (in stack order) of the limits that bind a stack's decision, from each limit's
/// decision: when any limit denied, every limit that denied; otherwise every limit with the
/// least `remaining` (the one(s) that will deny first). The `RateLimit` header field
/// describes these (the `headers` module, with the `headers` feature). Empty only for an
/// empty stack.
///
/// ```
/// use tollgate::stack::binding;
/// use tollgate::Decision;
/// let d = |allowed, remaining| Decision { allowed, remaining, limit: 10, ..Decision::default() };
/// assert_eq!(binding(&[d(true, 4), d(true, 2), d(true, 2)]), [1, 2]);
/// assert_eq!(binding(&[d(true, 0), d(false, 0), d(false, 3)]), [1, 2]);
/// ```
pub fn binding(each: &[Decision]) -> Vec<usize> {
    let indices = 0..each.len();
    if each.iter().any(|d| !d.allowed) {
        return indices.filter(|&i| !each[i].allowed).collect();
    }
    let least = each.iter().map(|d| d.remaining).min();
    indices
        .filter(|&i| Some(each[i].remaining) == least)
        .collect()
}

/// Decides one request over several limits, all or nothing. States are updated in place only
/// when every limit admits; when any limit denies, each limit that had room reports its
/// uncharged standing ([`uncharged`]). Errors (a cost above any limit's capacity, a
/// mismatched state) leave every state untouched.
pub fn decide_all(
    limits: &mut [(&Policy, &mut Option<State>)],
    now: Nanos,
    cost: u64,
) -> Result<StackDecision, DecideError> {
    decide_all_by(limits, now, |_| cost)
}

/// [`decide_all`] where each limit has its own cost (`cost_of(i)` for limit `i`): one
/// request that weighs differently on each of its limits (Envoy's per-descriptor
/// `hits_addend`), still all or nothing. A cost of 0 checks a limit without charging it.
/// (A function of the index rather than a slice of costs: no length to get wrong.)
///
/// ```
/// use tollgate::stack::decide_all_weighted;
/// use tollgate::Policy;
/// let small: Policy = "fixed-window 3/min".parse().unwrap();
/// let large: Policy = "fixed-window 100/min".parse().unwrap();
/// let (mut a, mut b) = (None, None);
/// let costs = [1, 10];
/// let d = decide_all_weighted(&mut [(&small, &mut a), (&large, &mut b)], 0, |i| costs[i]).unwrap();
/// assert_eq!((d.each[0].remaining, d.each[1].remaining), (2, 90));
/// // 3 more on the small window is too many: neither limit is charged.
/// let costs = [3, 10];
/// let d = decide_all_weighted(&mut [(&small, &mut a), (&large, &mut b)], 0, |i| costs[i]).unwrap();
/// assert!(!d.decision.allowed);
/// assert_eq!(d.each[1].remaining, 90);
/// ```
pub fn decide_all_weighted(
    limits: &mut [(&Policy, &mut Option<State>)],
    now: Nanos,
    cost_of: impl Fn(usize) -> u64,
) -> Result<StackDecision, DecideError> {
    decide_all_by(limits, now, cost_of)
}

/// [`decide_all`] and [`decide_all_weighted`]: the rule, each limit's decision kept in the
/// returned [`StackDecision`].
fn decide_all_by(
    mut limits: &mut [(&Policy, &mut Option<State>)],
    now: Nanos,
    cost: impl Fn(usize) -> u64,
) -> Result<StackDecision, DecideError> {
    let mut each = alloc::vec![Decision::default(); limits.len()];
    let decision = decide_each(&mut limits, now, &cost, &mut each)?;
    Ok(StackDecision { decision, each })
}

/// The limits of one stack as [`decide_each`] reads them: limit `i`'s policy and its
/// state, wherever their owner keeps them (a slice of pairs for [`decide_all`]; the keyed
/// store's locked entries and a store's [`crate::store::Batch`] lend theirs in place, with
/// no `Vec` of pairs gathered for each decision).
pub(crate) trait Stack {
    /// How many limits.
    fn len(&self) -> usize;
    /// Limit `i`'s policy and state (`i < len()`).
    fn limit(&mut self, i: usize) -> (&Policy, &mut Option<State>);
}

impl Stack for &mut [(&Policy, &mut Option<State>)] {
    fn len(&self) -> usize {
        <[_]>::len(self)
    }
    fn limit(&mut self, i: usize) -> (&Policy, &mut Option<State>) {
        let (policy, state) = &mut self[i];
        (policy, state)
    }
}

/// How many limits' scratch space [`per_limit`] keeps on the stack: every stack of the
/// tests, examples and configs (a per-second and a per-minute limit, a fair share's two)
/// fits. Deeper stacks take the heap, so that no input size decides how deep the call
/// stack goes.
const INLINE: usize = 4;

/// Runs `f` on scratch space for one `T` per limit of a stack of `n` (each
/// `T::default()`): on the stack for up to [`INLINE`] limits, on the heap beyond. For the
/// copies of states a stack decides on ([`decide_each`]) and the keyed store's decisions
/// that report only the combined decision (`check`, `admit`, `peek`, the waiting rule's):
/// they live for the decision only.
///
/// (A heap allocation and its free are ~130 instructions of a keyed stack's `check`, whose
/// count `scripts/counts.sh keyed-stack-1` holds; PERF.md, "Measured reasons in the code".)
pub(crate) fn per_limit<T: Default, R>(n: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    let mut inline: [T; INLINE] = Default::default();
    let mut heap = Vec::new();
    let scratch = if n <= INLINE {
        &mut inline[..n]
    } else {
        heap.resize_with(n, T::default);
        &mut heap[..]
    };
    f(scratch)
}

/// The one all-or-nothing rule, with limit `i` charged `cost(i)`: each limit's decision
/// into `each` (one entry per limit), the combined decision returned ([`combine`]). States
/// are updated only when every limit admits; errors leave every state untouched (and
/// `each` unspecified).
///
/// Two passes over the limits, in a loop (never a call per limit: a stack's depth comes
/// from its caller, e.g. an Envoy request's descriptors, and must not decide how deep the
/// call stack goes):
/// 1. every limit decides on a copy of its state ([`per_limit`] scratch), its decision into
///    `each`; an error returns before any state is touched;
/// 2. if every limit admitted, each copy is stored; otherwise each limit that had room
///    reports its uncharged standing ([`uncharged`]) and no state changes.
///
/// (Through `dyn`: one copy of the rule for its three callers, the slices of
/// [`decide_all`], the keyed store and [`crate::store::Batch`].)
pub(crate) fn decide_each(
    limits: &mut dyn Stack,
    now: Nanos,
    cost: &dyn Fn(usize) -> u64,
    each: &mut [Decision],
) -> Result<Decision, DecideError> {
    debug_assert_eq!(each.len(), limits.len(), "one decision per limit");
    per_limit(limits.len(), |next: &mut [Option<State>]| {
        let mut all = true;
        for (i, (copy, d)) in next.iter_mut().zip(each.iter_mut()).enumerate() {
            let (policy, state) = limits.limit(i);
            *copy = state.clone();
            *d = decide_at(policy, copy, now, cost(i))?;
            all &= d.allowed;
        }
        for (i, (copy, d)) in next.iter_mut().zip(each.iter_mut()).enumerate() {
            let (policy, state) = limits.limit(i);
            if all {
                core::mem::swap(state, copy);
            } else if d.allowed {
                *d = uncharged(policy, state, now)?;
            }
        }
        Ok(combine(each))
    })
}

/// What a limit that would have admitted a request reports when another limit of its stack
/// denied it: allowed, with `limit`, `remaining` and `reset_after` of `state` as it stands at
/// `now`, uncharged (a cost-0 decision); `retry_after` and `delay` 0. `state` is not changed.
/// Errors as [`decide()`] (a state made by another algorithm).
pub fn uncharged(
    policy: &Policy,
    state: &Option<State>,
    now: Nanos,
) -> Result<Decision, DecideError> {
    let (standing, _) = decide(policy, state.clone(), now, 0)?;
    Ok(Decision {
        allowed: true,
        retry_after: 0,
        delay: 0,
        ..standing
    })
}

/// Combines each limit's decision into the stack's decision: allowed only when every limit
/// admits; `limit` and `remaining` from the first binding limit ([`binding`]) or, when
/// denied, the denying limit with the longest wait (the first on ties); `reset_after` the
/// longest of all; `retry_after` the longest among the denying limits (0 when allowed);
/// `delay` the longest of all (0 when denied: no entry of a denied stack has one).
pub fn combine(each: &[Decision]) -> Decision {
    let allowed = each.iter().all(|d| d.allowed);
    let binding = if allowed {
        each.iter().min_by_key(|d| d.remaining)
    } else {
        // max_by_key returns the last maximum; prefer the first denying limit on ties.
        each.iter()
            .filter(|d| !d.allowed)
            .fold(None::<&Decision>, |best, d| match best {
                Some(b) if b.retry_after >= d.retry_after => Some(b),
                _ => Some(d),
            })
    };
    let Some(binding) = binding else {
        return Decision {
            allowed: true,
            ..Decision::default()
        };
    };
    Decision {
        allowed,
        limit: binding.limit,
        remaining: binding.remaining,
        reset_after: each.iter().map(|d| d.reset_after).max().unwrap_or(0),
        retry_after: if allowed { 0 } else { binding.retry_after },
        delay: each.iter().map(|d| d.delay).max().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// A stack of `n` limits: `n - 1` roomy windows, then one of 2 (so that the last limit
    /// binds), decided at cost `cost` at time 0.
    fn decide_n(states: &mut [Option<State>], cost: u64) -> Result<StackDecision, DecideError> {
        let roomy: Policy = "fixed-window 100/min".parse().unwrap();
        let tight: Policy = "fixed-window 2/min".parse().unwrap();
        let last = states.len() - 1;
        let mut limits: Vec<(&Policy, &mut Option<State>)> = states
            .iter_mut()
            .enumerate()
            .map(|(i, s)| (if i == last { &tight } else { &roomy }, s))
            .collect();
        decide_all(&mut limits, 0, cost)
    }

    #[test]
    fn every_limit_of_a_deep_stack_is_charged_or_none_is() {
        // Deeper than any stack of the tests elsewhere: the rule has no limit on depth.
        let mut states = vec![None; 40];
        for _ in 0..2 {
            let d = decide_n(&mut states, 1).unwrap();
            assert!(d.decision.allowed && d.each.iter().all(|e| e.allowed));
        }
        assert_eq!(d_remaining(&mut states), 98);
        // The last limit is spent: a denial, nobody charged, the others report their room.
        let before = states.clone();
        let d = decide_n(&mut states, 1).unwrap();
        assert!(!d.decision.allowed);
        assert_eq!(d.binding(), [39]);
        assert_eq!(states, before);
        assert!(d.each[..39]
            .iter()
            .all(|e| e.allowed && e.remaining == 98 && e.retry_after == 0));
        // An error at the last limit (cost above its capacity) leaves every state as it was.
        assert!(matches!(
            decide_n(&mut states, 3),
            Err(DecideError::CostExceedsCapacity { .. })
        ));
        assert_eq!(states, before);
    }

    /// The first limit's `remaining`, at cost 0 (its standing).
    fn d_remaining(states: &mut [Option<State>]) -> u64 {
        decide_n(states, 0).unwrap().each[0].remaining
    }
}
