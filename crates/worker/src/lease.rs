//! Concurrency leases and call deadlines: the bookkeeping rules the coordinator object
//! applies around the core's decisions (plain functions, tested on the host). The core
//! decides acquire and release ([`tollgate::decide`], [`tollgate::release`]); these rules
//! only say *when* a release is due and whether a call may be decided at all.
//!
//! # Leases
//! A request admitted on a route with a concurrency limit holds its slots under a lease:
//! an id chosen by the isolate, the cost it holds, and an expiry on the object's clock. The
//! isolate releases by lease id when the origin has answered or failed, or the client went
//! away. A release is applied once: the first release of an id removes the lease and frees
//! its cost; a repeated or late one (after the lease expired) finds nothing and frees
//! nothing. A lease whose release never comes (the isolate died, the release call failed)
//! expires: the object frees it before it next decides on that slot, so a lost release
//! holds a slot at most `settings.lease_ms` after its last decision on that slot, and the
//! object's alarm frees the expired leases of slots no call decides on (so the gauge of
//! slots in use, [`crate::in_use`], comes back down without traffic).
//!
//! # Deadlines
//! The isolate waits `timeout_ms` for an answer, then degrades (503 when the route fails
//! closed). So that a call it gave up on is not charged, it sends a deadline
//! ([`deadline`]): the object refuses, without charging, a call that reaches it after the
//! deadline ([`late`]). The deadline leaves a [`margin`] of the timeout for the answer's
//! way back (the commit and the return trip).

use serde::{Deserialize, Serialize};
use tollgate::Policy;

/// One held lease of a concurrency slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The isolate's id for the request holding it.
    pub id: String,
    /// Slots held.
    pub cost: u64,
    /// When it expires (ms, the object's clock).
    pub expires_ms: u64,
    /// The route that took it (the gauge's `tollgate_route`); `None` in leases stored
    /// before routes were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The slot's policy, so that the alarm can free an expired lease without a call
    /// naming the slot; `None` in leases stored before (freed by the next call instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
}

/// What a lease is granted for: its id, cost, duration, and the route and policy it is
/// recorded with.
#[derive(Clone, Copy, Debug)]
pub struct Grant<'a> {
    /// The isolate's id for the request.
    pub id: &'a str,
    /// Slots held.
    pub cost: u64,
    /// How long it lasts (ms).
    pub lease_ms: u64,
    /// The route that takes it.
    pub route: Option<&'a str>,
    /// The slot's policy.
    pub policy: Policy,
}

/// Records a lease as `g` says, expiring `g.lease_ms` after `now_ms`. An id already held (a
/// retried call) is not recorded twice: it keeps one lease.
pub fn grant(leases: &mut Vec<Lease>, g: Grant<'_>, now_ms: u64) -> bool {
    if leases.iter().any(|l| l.id == g.id) {
        return false;
    }
    leases.push(Lease {
        id: g.id.to_string(),
        cost: g.cost,
        expires_ms: now_ms.saturating_add(g.lease_ms),
        route: g.route.map(str::to_string),
        policy: Some(g.policy),
    });
    true
}

/// When the first of `leases` expires (ms), if any.
pub fn next_expiry(leases: &[Lease]) -> Option<u64> {
    leases.iter().map(|l| l.expires_ms).min()
}

/// Takes the lease `id`: the cost to release, once. `None` when there is no such lease
/// (already released, or expired and freed).
pub fn take(leases: &mut Vec<Lease>, id: &str) -> Option<u64> {
    let i = leases.iter().position(|l| l.id == id)?;
    Some(leases.swap_remove(i).cost)
}

/// Removes the leases expired at `now_ms` and returns the cost they held (to release).
pub fn expire(leases: &mut Vec<Lease>, now_ms: u64) -> u64 {
    let mut freed = 0u64;
    leases.retain(|l| {
        let live = l.expires_ms > now_ms;
        if !live {
            freed = freed.saturating_add(l.cost);
        }
        live
    });
    freed
}

/// The part of a timeout kept for the answer's way back: half of it. Under load the way
/// back (the commit, the output gate, the caller's busy event loop) is the slow part: with a
/// quarter kept, calls decided in time still came back after the timeout (PERF.md, "The
/// coordinator call's default timeout").
pub fn margin(timeout_ms: u64) -> u64 {
    timeout_ms / 2
}

/// The deadline sent with a call made at `sent_ms` (the isolate's clock) that the isolate
/// will wait `timeout_ms` for.
pub fn deadline(sent_ms: u64, timeout_ms: u64) -> u64 {
    sent_ms.saturating_add(timeout_ms - margin(timeout_ms))
}

/// Whether a call with `deadline_ms` reaching the object at `now_ms` is too late to decide.
pub fn late(now_ms: u64, deadline_ms: Option<u64>) -> bool {
    deadline_ms.is_some_and(|d| now_ms > d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(id: &str, cost: u64) -> Grant<'_> {
        Grant {
            id,
            cost,
            lease_ms: 1000,
            route: Some("/r"),
            policy: "concurrency 3".parse().unwrap(),
        }
    }

    #[test]
    fn a_release_applies_once() {
        let mut ls = Vec::new();
        assert!(grant(&mut ls, g("a", 2), 0));
        assert!(grant(&mut ls, g("b", 1), 0));
        assert!(!grant(&mut ls, g("a", 2), 0), "one lease per id");
        assert_eq!(ls[0].route.as_deref(), Some("/r"));
        assert_eq!(take(&mut ls, "a"), Some(2));
        assert_eq!(take(&mut ls, "a"), None);
        assert_eq!(ls.len(), 1);
    }

    #[test]
    fn a_lost_release_expires() {
        let mut ls = Vec::new();
        grant(&mut ls, g("a", 1), 0);
        grant(&mut ls, g("b", 3), 500);
        assert_eq!(next_expiry(&ls), Some(1000));
        assert_eq!(expire(&mut ls, 999), 0);
        assert_eq!(expire(&mut ls, 1000), 1);
        assert_eq!(
            take(&mut ls, "a"),
            None,
            "expired: a late release frees nothing"
        );
        assert_eq!(next_expiry(&ls), Some(1500));
        assert_eq!(expire(&mut ls, 2000), 3);
        assert!(ls.is_empty());
        assert_eq!(next_expiry(&ls), None);
    }

    #[test]
    fn deadlines_keep_a_margin() {
        assert_eq!(deadline(10_000, 1000), 10_500);
        assert_eq!(deadline(10_000, 3000), 11_500);
        assert_eq!(deadline(10_000, 1), 10_001);
        assert!(!late(10_500, Some(10_500)));
        assert!(late(10_501, Some(10_500)));
        assert!(!late(u64::MAX, None));
    }
}
