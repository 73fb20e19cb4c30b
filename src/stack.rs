//! All-or-nothing stacks: a request that needs several limits at once (per key, per tenant,
//! global) is charged by every limit or by none.
//!
//! Each limit decides on a copy of its state; only when all admit are the new states stored.
//! A denied stack leaves every state as it was, so a limit that had room is not charged
//! for a request another limit refused.
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
//! assert!(!d.decision.allowed);  // the global window is spent...
//! assert!(d.each[0].allowed);     // ...the per-key bucket had room, and was not charged:
//! assert_eq!(tollgate::decide(&per_key, a, 0, 0).unwrap().0.remaining, 2);
//! assert_eq!(d.decision.retry_after, 60_000_000_000);
//! ```

use alloc::vec::Vec;

use crate::{decide, DecideError, Decision, Nanos, Policy, State};

/// The decision over a stack, and each limit's own decision (in stack order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackDecision {
    /// The combined decision: allowed only when every limit admits. `limit` and `remaining`
    /// come from the binding limit (the one with the least remaining; when denied, the
    /// denying limit with the longest wait); `reset_after` is the longest of all;
    /// `retry_after` the longest among the denying limits.
    pub decision: Decision,
    /// Each limit's decision, in the order given. When the stack is denied, an allowed entry
    /// here says the limit had room; it was not charged.
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
}

/// Decides one request over several limits, all or nothing. States are updated in place only
/// when every limit admits. Errors (a cost above any limit's capacity, a mismatched state)
/// leave every state untouched.
pub fn decide_all(
    limits: &mut [(&Policy, &mut Option<State>)],
    now: Nanos,
    cost: u64,
) -> Result<StackDecision, DecideError> {
    let mut each = Vec::with_capacity(limits.len());
    let mut next = Vec::with_capacity(limits.len());
    for (policy, state) in limits.iter() {
        let (d, s) = decide(policy, (**state).clone(), now, cost)?;
        each.push(d);
        next.push(s);
    }
    let allowed = each.iter().all(|d| d.allowed);
    if allowed {
        for ((_, state), s) in limits.iter_mut().zip(next) {
            **state = s;
        }
    }
    Ok(StackDecision {
        decision: combine(&each, allowed),
        each,
    })
}

/// Combines per-limit decisions into the stack's decision.
pub(crate) fn combine(each: &[Decision], allowed: bool) -> Decision {
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
