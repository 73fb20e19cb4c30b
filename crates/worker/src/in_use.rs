//! The gauge `tollgate.concurrency.in_use` (`tollgate_concurrency_in_use`, the core's
//! [`tollgate::metrics::CONCURRENCY_IN_USE`]) at the edge: slots of concurrency limits held
//! now, by policy and route. Plain Rust, tested on the host.
//!
//! # Who counts
//! Only a coordinator object sees every change of its slots: a check taking slots, a
//! release giving them back, and a lease expiring ([`crate::lease`]) without any isolate
//! being told. So each object keeps its own totals ([`InUse`]): around every request that
//! touches a concurrency slot it adds the difference between the slot's holdings after and
//! before ([`InUse::apply`]); the totals are written in the same commit as the slot's state
//! and leases, so they can never disagree with what the object holds.
//!
//! # By route
//! A slot is shared by every route with the same policy and key, so its count alone has no
//! route: a slot's holdings ([`holdings`]) are its leases' costs by the route that took each
//! lease, and whatever its count holds beyond its leases under no route (the check API,
//! which acquires and releases by cost, without leases; its series have no route).
//!
//! # Reported whole, never lost or counted twice
//! An object reports its whole totals with a version that grows with every change
//! ([`Report`]); the stats object keeps each object's latest report and serves their sum
//! ([`sum`]). A report is not a delta to add: one that fails (or whose answer is lost, so
//! the object cannot tell whether it arrived) is simply superseded by the next, which
//! carries the same changes; one delivered twice or late (an older version) changes
//! nothing. So every change reaches the gauge exactly once, however reports fail.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tollgate::State;

use crate::lease::Lease;
use crate::series::SeriesId;

/// Slots held by route, for one slot (`None`: no route, the check API).
pub type Holdings = BTreeMap<Option<String>, u64>;

/// Slots a state holds: a concurrency count's `in_flight` (other states hold none).
pub fn in_flight(state: Option<&State>) -> u64 {
    match state {
        Some(State::Concurrency(c)) => c.in_flight,
        _ => 0,
    }
}

/// What one concurrency slot holds, by route: each lease's cost under the route that took
/// it, and the rest of the count (slots acquired without a lease) under no route. Sums to
/// the count whenever the leases hold no more than it (they never do: a lease is granted
/// with the slots it holds, and freed with them).
pub fn holdings(state: Option<&State>, leases: &[Lease]) -> Holdings {
    let count = in_flight(state);
    let mut out = Holdings::new();
    let mut leased = 0u64;
    for l in leases {
        let held = l.cost.min(count - leased);
        leased += held;
        *out.entry(l.route.clone()).or_default() += held;
    }
    if count > leased {
        *out.entry(None).or_default() += count - leased;
    }
    out
}

/// One series of the gauge, as reported and served.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesInUse {
    /// The policy's name.
    pub policy: String,
    /// The route's name (`None`: the check API).
    #[serde(default)]
    pub route: Option<String>,
    /// Slots held.
    pub slots: u64,
}

/// One object's totals: slots held by series, and a version that grows with every change
/// (its reports are ordered by it). A series once held stays, at 0 when freed, so that the
/// gauge reads 0 rather than disappearing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InUse {
    /// Changes so far.
    pub version: u64,
    /// Slots held, by policy and route.
    pub slots: Vec<SeriesInUse>,
}

impl InUse {
    /// Adds the change of one slot of `policy`, from holding `before` to holding `after`;
    /// answers whether anything changed (the version then grew by one).
    pub fn apply(&mut self, policy: &str, before: &Holdings, after: &Holdings) -> bool {
        let mut changed = false;
        let routes = before.keys().chain(after.keys());
        let mut seen: Vec<&Option<String>> = Vec::new();
        for route in routes {
            if seen.contains(&route) {
                continue;
            }
            seen.push(route);
            let (b, a) = (
                before.get(route).copied().unwrap_or(0),
                after.get(route).copied().unwrap_or(0),
            );
            if a == b {
                continue;
            }
            changed = true;
            let s = match self
                .slots
                .iter_mut()
                .position(|s| s.policy == policy && &s.route == route)
            {
                Some(i) => &mut self.slots[i],
                None => {
                    self.slots.push(SeriesInUse {
                        policy: policy.to_string(),
                        route: route.clone(),
                        slots: 0,
                    });
                    self.slots.last_mut().expect("pushed")
                }
            };
            // Never below 0: the totals are sums of holdings, which are never negative.
            s.slots = (s.slots + a).saturating_sub(b);
        }
        if changed {
            self.version += 1;
        }
        changed
    }
}

/// One object's report to the stats object: its whole [`InUse`] under its id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The reporting object's id.
    pub object: String,
    /// Its totals.
    pub in_use: InUse,
}

/// Whether a report of `version` replaces a kept one of `kept` (a newer one does; a repeated
/// or late one does not).
pub fn newer(version: u64, kept: Option<u64>) -> bool {
    kept.is_none_or(|k| version > k)
}

/// The gauge: every object's latest totals, added up by series.
pub fn sum<'a>(reports: impl IntoIterator<Item = &'a InUse>) -> Vec<SeriesInUse> {
    let mut out: BTreeMap<SeriesId, u64> = BTreeMap::new();
    for r in reports {
        for s in &r.slots {
            *out.entry(SeriesId::new(&s.policy, s.route.as_deref()))
                .or_default() += s.slots;
        }
    }
    out.into_iter()
        .map(|(id, slots)| SeriesInUse {
            policy: id.policy,
            route: id.route,
            slots,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::algorithms::concurrency::ConcurrencyState;

    fn count(n: u64) -> Option<State> {
        (n > 0).then_some(State::Concurrency(ConcurrencyState { in_flight: n }))
    }

    fn lease(id: &str, cost: u64, route: Option<&str>) -> Lease {
        Lease {
            id: id.into(),
            cost,
            expires_ms: 1000,
            route: route.map(str::to_string),
            policy: None,
        }
    }

    fn slots(u: &InUse, policy: &str, route: Option<&str>) -> Option<u64> {
        u.slots
            .iter()
            .find(|s| s.policy == policy && s.route.as_deref() == route)
            .map(|s| s.slots)
    }

    #[test]
    fn holdings_split_a_count_by_the_routes_of_its_leases() {
        let ls = [lease("a", 2, Some("/x")), lease("b", 1, Some("/y"))];
        let h = holdings(count(3).as_ref(), &ls);
        assert_eq!(h.get(&Some("/x".into())), Some(&2));
        assert_eq!(h.get(&Some("/y".into())), Some(&1));
        assert_eq!(h.get(&None), None);
        // Slots taken without a lease (the check API) have no route.
        let h = holdings(count(4).as_ref(), &[]);
        assert_eq!(h.get(&None), Some(&4));
        assert_eq!(holdings(None, &[]), Holdings::new());
    }

    #[test]
    fn a_slot_taken_then_freed_goes_back_to_zero_and_stays_listed() {
        let mut u = InUse::default();
        let empty = Holdings::new();
        let held = holdings(count(2).as_ref(), &[lease("a", 2, Some("/x"))]);
        assert!(u.apply("p", &empty, &held));
        assert_eq!((slots(&u, "p", Some("/x")), u.version), (Some(2), 1));
        assert!(!u.apply("p", &held, &held), "no change, no new version");
        assert_eq!(u.version, 1);
        assert!(u.apply("p", &held, &empty));
        assert_eq!((slots(&u, "p", Some("/x")), u.version), (Some(0), 2));
    }

    #[test]
    fn reports_replace_and_add_up_across_objects() {
        let mut a = InUse::default();
        let mut b = InUse::default();
        let one = holdings(count(1).as_ref(), &[lease("x", 1, Some("/r"))]);
        a.apply("p", &Holdings::new(), &one);
        b.apply("p", &Holdings::new(), &one);
        b.apply("q", &Holdings::new(), &holdings(count(3).as_ref(), &[]));
        let total = sum([&a, &b]);
        assert_eq!(
            total,
            vec![
                SeriesInUse {
                    policy: "p".into(),
                    route: Some("/r".into()),
                    slots: 2
                },
                SeriesInUse {
                    policy: "q".into(),
                    route: None,
                    slots: 3
                },
            ]
        );
        assert!(newer(1, None));
        assert!(newer(2, Some(1)));
        assert!(!newer(1, Some(1)), "a repeated report changes nothing");
        assert!(!newer(1, Some(2)), "a late report changes nothing");
    }
}
