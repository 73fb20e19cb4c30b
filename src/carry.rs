//! Carrying a key's state to another policy: the counter belongs to the caller, not to the
//! plan. A customer moved from one plan to another (or given its own limit) keeps what it
//! has spent; changing the policy is never a way to a fresh bucket.
//!
//! # The rule
//!
//! [`carry`] takes a state made by the old policy and returns the state the new policy
//! starts from, at `now`:
//!
//! 1. **The same policy**, or **the same window algorithm with the same window length**
//!    (fixed window, sliding window, sliding log; the limit may differ): the state is kept
//!    as it is. The count stays; above a smaller limit it is a debt, which the windows to
//!    come pay off one limit each (as any count above the limit is: see
//!    [`crate::algorithms::fixed_window`]).
//! 2. **Concurrency to concurrency**: the slots in flight stay in flight (above a smaller
//!    maximum, new requests wait for releases).
//! 3. **Everything else** (buckets of another capacity or rate, another algorithm, another
//!    window length): the old state's **spend** at `now` ([`spent`], each algorithm's
//!    `spent`, rounded up) becomes a state of the new policy that has spent as much
//!    ([`with_spent`]): what was spent stays spent. A spend above the new capacity is a
//!    **debt**, kept and repaid at the new policy's rate, never forgiven: a bucket holds it
//!    as a level or a TAT beyond its capacity (a token bucket as a refill that starts
//!    later), a window as a count above its limit that the windows to come pay off. The
//!    decisions' waits count the debt (the same states a settled overage leaves: see
//!    [`crate::settle`]).
//! 4. **Concurrency to a rate, or back**: nothing carries (the key starts fresh). Slots held
//!    and cost spent over time measure different things; neither says anything about the
//!    other. (A plan that moves a key between a concurrency-only stack and a rate limit
//!    therefore restarts the rate's count: give every plan the same kinds of limit.)
//!
//! # Why the amount spent, and why debt is kept
//!
//! The two candidate rules are "carry the fraction of the capacity used" and "carry the
//! amount spent". Moving from free (100/min) to pro (1,000/min) with 100 spent, the fraction
//! leaves pro empty (100 % used) while the amount leaves it 900: what pro allows to a caller
//! who has spent 100. Moving back with 1,000 spent, the fraction leaves free empty, and the
//! amount leaves free 900 *in debt*. The amount never gives more than the new plan allows
//! given what was really spent; the fraction gives less on every upgrade.
//!
//! Clamping the amount to the new capacity (forgetting the debt) would be a free reset by
//! cycling: spend 1,000 on pro, drop to free (clamped: 100 spent), go back to pro (100 spent:
//! 900 more at once), and again. Keeping the debt closes it: let `S` be the key's spend.
//! Under a policy `p` (capacity `C_p`, rate `r_p`), `S` falls by at most `r_p` per unit of
//! time, an admission of cost `c` needs `S + c <= C_p`, and a carry never lowers `S` (it is
//! rounded up). So the cost admitted in any interval of length `T` is the rise of `S` plus
//! what drained: at most `max C_p + sum over the plans used of r_p * (time under p)`, which is
//! at most `max C + max r * T`. For plans over the same window (free 100/min, pro 1,000/min:
//! `C = L` and `r = L/W`), that is the largest plan's own bound, `C + r * T`:
//! switching never admits more than the plans allow (`tests/properties.rs` checks it on
//! random switches).
//!
//! The window algorithms with the same window length keep their count (rule 1): within one
//! window the count only grows and every admission needs `count + cost <= L_p`, so a window
//! never admits more than the largest limit among the plans used in it, and a count above
//! a smaller limit is paid off by the windows after it.
//!
//! # Stacks
//!
//! [`carry_stack`] maps an old stack onto a new one: each new limit takes the state of the
//! old limit of the same kind (rate or concurrency) with the **nearest window** (the least
//! ratio between the two lengths; the first on ties), carried by [`carry`]. A new limit with
//! no old limit of its kind starts fresh. A per-second limit's spend thus goes to the new
//! per-second limit, a per-day limit's to the per-day one: a day's spend never becomes a
//! second's debt.
//!
//! ```
//! use tollgate::carry::carry;
//! use tollgate::{decide, Policy};
//! let free: Policy = "100/min".parse().unwrap();
//! let pro: Policy = "1000/min".parse().unwrap();
//! let mut state = None;
//! for _ in 0..100 {
//!     state = decide(&free, state, 0, 1).unwrap().1;
//! }
//! // Upgraded: the 100 spent stay spent, 900 of pro's 1,000 are left.
//! let state = carry(&free, state, &pro, 0).unwrap();
//! let (d, state) = decide(&pro, state, 0, 900).unwrap();
//! assert!(d.allowed);
//! // Downgraded with 1,000 spent: 900 owed under free, repaid at 100 per minute.
//! let state = carry(&pro, state, &free, 0).unwrap();
//! let (d, _) = decide(&free, state, 0, 1).unwrap();
//! assert!(!d.allowed);
//! ```

use alloc::vec::Vec;

use crate::algorithms::{
    concurrency, fixed_window, gcra, leaky_bucket, leaky_queue, sliding_log, sliding_window,
    token_bucket,
};
use crate::{DecideError, Nanos, Policy, State};

/// The cost `state` (made by `policy`) has spent at `now`, rounded up: a bucket's used
/// capacity, a window's count or estimate, a concurrency limit's slots in flight; above the
/// capacity when a carry left a debt. Zero for no state. Errors: a state made by another
/// algorithm ([`DecideError::StateMismatch`]).
///
/// ```
/// use tollgate::carry::spent;
/// use tollgate::{decide, Policy};
/// let p: Policy = "sliding-window 100/min".parse().unwrap();
/// let (_, s) = decide(&p, None, 0, 30).unwrap();
/// assert_eq!(spent(&p, &s, 0).unwrap(), 30);
/// assert_eq!(spent(&p, &s, 90_000_000_000).unwrap(), 15); // half of the window before
/// ```
pub fn spent(policy: &Policy, state: &Option<State>, now: Nanos) -> Result<u64, DecideError> {
    let Some(s) = state else { return Ok(0) };
    Ok(match (policy, s) {
        (Policy::TokenBucket(b), State::TokenBucket(s)) => token_bucket::spent(b, Some(*s), now),
        (Policy::Gcra(b), State::Gcra(s)) => gcra::spent(b, Some(*s), now),
        (Policy::LeakyBucket(b), State::LeakyBucket(s)) => leaky_bucket::spent(b, Some(*s), now),
        (Policy::LeakyQueue(b), State::LeakyQueue(s)) => leaky_queue::spent(b, Some(*s), now),
        (Policy::FixedWindow(q), State::FixedWindow(s)) => fixed_window::spent(q, Some(*s), now),
        (Policy::SlidingWindow(q), State::SlidingWindow(s)) => {
            sliding_window::spent(q, Some(*s), now)
        }
        (Policy::SlidingLog(q), State::SlidingLog(s)) => {
            sliding_log::spent(q, &Some(s.clone()), now)
        }
        (Policy::Concurrency(_), State::Concurrency(s)) => concurrency::spent(Some(*s)),
        (p, s) => {
            return Err(DecideError::StateMismatch {
                policy: p.algorithm(),
                state: s.algorithm(),
            })
        }
    })
}

/// The state of `policy` that has spent `spent` at `now` (a concurrency limit: that many
/// slots in flight); above the capacity, a debt repaid at the policy's rate (see the module
/// docs). `None` for nothing spent.
///
/// ```
/// use tollgate::carry::{spent, with_spent};
/// use tollgate::Policy;
/// for text in ["100/min", "gcra 100/min", "fixed-window 100/min", "sliding-log 100/min"] {
///     let p: Policy = text.parse().unwrap();
///     let s = with_spent(&p, 250, 0);
///     assert_eq!(spent(&p, &s, 0).unwrap(), 250, "{text}");
/// }
/// ```
pub fn with_spent(policy: &Policy, spent: u64, now: Nanos) -> Option<State> {
    match policy {
        Policy::TokenBucket(b) => token_bucket::with_spent(b, spent, now).map(State::TokenBucket),
        Policy::Gcra(b) => gcra::with_spent(b, spent, now).map(State::Gcra),
        Policy::LeakyBucket(b) => leaky_bucket::with_spent(b, spent, now).map(State::LeakyBucket),
        Policy::LeakyQueue(b) => leaky_queue::with_spent(b, spent, now).map(State::LeakyQueue),
        Policy::FixedWindow(q) => fixed_window::with_spent(q, spent, now).map(State::FixedWindow),
        Policy::SlidingWindow(q) => {
            sliding_window::with_spent(q, spent, now).map(State::SlidingWindow)
        }
        Policy::SlidingLog(q) => sliding_log::with_spent(q, spent, now).map(State::SlidingLog),
        Policy::Concurrency(_) => concurrency::with_in_flight(spent).map(State::Concurrency),
    }
}

/// Whether a state of `from` is kept as it is under `to` (rules 1 and 2 of the module docs).
fn kept_as_is(from: &Policy, to: &Policy) -> bool {
    from == to
        || match (from, to) {
            (Policy::FixedWindow(a), Policy::FixedWindow(b))
            | (Policy::SlidingWindow(a), Policy::SlidingWindow(b))
            | (Policy::SlidingLog(a), Policy::SlidingLog(b)) => a.window() == b.window(),
            (Policy::Concurrency(_), Policy::Concurrency(_)) => true,
            _ => false,
        }
}

/// The state `to` starts from, for a key whose state under `from` is `state`, at `now` (the
/// rule of the module docs). Errors: a state made by another algorithm than `from`'s
/// ([`DecideError::StateMismatch`]).
pub fn carry(
    from: &Policy,
    state: Option<State>,
    to: &Policy,
    now: Nanos,
) -> Result<Option<State>, DecideError> {
    if let Some(s) = &state {
        if s.algorithm() != from.algorithm() {
            return Err(DecideError::StateMismatch {
                policy: from.algorithm(),
                state: s.algorithm(),
            });
        }
    }
    if kept_as_is(from, to) {
        return Ok(state);
    }
    if from.holds_slots() != to.holds_slots() {
        return Ok(None);
    }
    Ok(with_spent(to, spent(from, &state, now)?, now))
}

/// The limit of `from` whose state `to` takes in [`carry_stack`]: one of the same kind (rate
/// or concurrency) with the nearest window (the least ratio between the two lengths), the
/// first on ties; `None` when `from` has no limit of `to`'s kind.
///
/// ```
/// use tollgate::carry::nearest;
/// use tollgate::Policy;
/// let old: Vec<Policy> = ["10/s", "100/min", "5000/day"].iter().map(|p| p.parse().unwrap()).collect();
/// assert_eq!(nearest(&old, &"1000/10min".parse().unwrap()), Some(1));
/// assert_eq!(nearest(&old, &"50/2s".parse().unwrap()), Some(0));
/// assert_eq!(nearest(&old, &"concurrency 4".parse().unwrap()), None);
/// ```
pub fn nearest(from: &[Policy], to: &Policy) -> Option<usize> {
    let ratio = |p: &Policy| -> Option<(u128, u128)> {
        match (p.quota(), to.quota()) {
            (Some(a), Some(b)) => {
                let (a, b) = (a.window() as u128, b.window() as u128);
                Some((a.max(b), a.min(b)))
            }
            (None, None) => Some((1, 1)),
            _ => None,
        }
    };
    let mut best: Option<(usize, (u128, u128))> = None;
    for (i, p) in from.iter().enumerate() {
        let Some(r) = ratio(p) else { continue };
        // r < best, as fractions: r.0 / r.1 < b.0 / b.1.
        if best.is_none_or(|(_, b)| r.0 * b.1 < b.0 * r.1) {
            best = Some((i, r));
        }
    }
    best.map(|(i, _)| i)
}

/// The states a stack `to` starts from, for a key whose states under the stack `from` are
/// `states` (one per limit, in order; a state missing at the end is fresh), at `now`: each
/// new limit carries the state of its [`nearest`] old limit (see the module docs). Errors: a
/// state made by another algorithm than its limit's ([`DecideError::StateMismatch`]).
///
/// ```
/// use tollgate::carry::{carry_stack, spent};
/// use tollgate::Policy;
/// use tollgate::stack::decide_all;
/// let free: Vec<Policy> = ["2/s", "100/min"].iter().map(|p| p.parse().unwrap()).collect();
/// let pro: Vec<Policy> = ["1000/min"].iter().map(|p| p.parse().unwrap()).collect();
/// let (mut a, mut b) = (None, None);
/// for _ in 0..2 {
///     decide_all(&mut [(&free[0], &mut a), (&free[1], &mut b)], 0, 1).unwrap();
/// }
/// // The per-minute limit's 2 spent go to pro's per-minute limit.
/// let states = carry_stack(&free, &[a, b], &pro, 0).unwrap();
/// assert_eq!(spent(&pro[0], &states[0], 0).unwrap(), 2);
/// ```
pub fn carry_stack(
    from: &[Policy],
    states: &[Option<State>],
    to: &[Policy],
    now: Nanos,
) -> Result<Vec<Option<State>>, DecideError> {
    to.iter()
        .map(|p| match nearest(from, p) {
            Some(i) => carry(&from[i], states.get(i).cloned().flatten(), p, now),
            None => Ok(None),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide;

    fn p(text: &str) -> Policy {
        text.parse().unwrap()
    }

    #[test]
    fn a_state_of_another_algorithm_is_refused_by_name() {
        let (_, s) = decide(&p("gcra 5/s"), None, 0, 1).unwrap();
        assert_eq!(
            carry(&p("5/s"), s, &p("10/s"), 0),
            Err(DecideError::StateMismatch {
                policy: crate::Algorithm::TokenBucket,
                state: crate::Algorithm::Gcra
            })
        );
    }

    #[test]
    fn a_window_of_the_same_length_keeps_its_count_above_a_smaller_limit() {
        let pro = p("fixed-window 1000/min");
        let free = p("fixed-window 100/min");
        let (_, s) = decide(&pro, None, 0, 500).unwrap();
        let s = carry(&pro, s.clone(), &free, 0).unwrap();
        assert_eq!(spent(&free, &s, 0).unwrap(), 500);
        // 400 above free's 100: a debt the next four windows pay (a count above the limit
        // carries into the next window, less its limit), so the key is admitted again in
        // the fifth window after, as from `with_spent(&free, 500, 0)`.
        let at = |t: u64| decide(&free, s.clone(), t, 1).unwrap().0.allowed;
        assert!(!at(60_000_000_000));
        assert!(!at(299_999_000_000));
        assert!(at(300_000_000_000));
    }

    #[test]
    fn concurrency_and_rates_carry_nothing_to_each_other() {
        let (_, s) = decide(&p("concurrency 3"), None, 0, 2).unwrap();
        assert_eq!(carry(&p("concurrency 3"), s, &p("5/s"), 0), Ok(None));
    }

    #[test]
    fn a_stack_limit_with_no_old_limit_of_its_kind_starts_fresh() {
        let (_, s) = decide(&p("5/s"), None, 0, 5).unwrap();
        let states = carry_stack(&[p("5/s")], &[s], &[p("concurrency 2"), p("10/s")], 0).unwrap();
        assert_eq!(states[0], None);
        assert_eq!(spent(&p("10/s"), &states[1], 0).unwrap(), 5);
    }
}
