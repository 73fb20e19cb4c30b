//! Per-policy counts, in the core's metric model ([`tollgate::metrics`]): a [`Tally`] per
//! policy and route, which each isolate keeps and adds to the stats object's totals. The
//! admin API serves them as Prometheus text (`GET /admin/v1/metrics`, rendered by
//! [`tollgate::metrics::render`]) and as the JSON counters of `GET /admin/v1/stats`
//! ([`crate::report::Counters`], derived from the tallies), each joined with the gauge of
//! slots in use that the coordinator objects report ([`crate::in_use`]) by
//! [`crate::report`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tollgate::metrics::{near_limit, Outcome, Source, Tally};
use tollgate::Decision;

use crate::series::SeriesId;

/// The tallies of every policy and route.
pub type Tallies = BTreeMap<SeriesId, Tally>;

/// One policy's tally on one route, as sent to and answered by the stats object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyTally {
    /// The policy's name.
    pub policy: String,
    /// The route's name (`None`: the check API).
    #[serde(default)]
    pub route: Option<String>,
    /// The counts.
    pub tally: Tally,
}

/// The tallies as a list (the protocol's form: JSON objects have no tuple keys).
pub fn to_list(tallies: &Tallies) -> Vec<PolicyTally> {
    tallies
        .iter()
        .map(|(id, tally)| PolicyTally {
            policy: id.policy.clone(),
            route: id.route.clone(),
            tally: *tally,
        })
        .collect()
}

/// Adds every tally of `from` into `into`.
pub fn merge(into: &mut Tallies, from: &[PolicyTally]) {
    for t in from {
        into.entry(SeriesId::new(&t.policy, t.route.as_deref()))
            .or_default()
            .merge(&t.tally);
    }
}

/// The decision a route's fallback made (fail-open admits, fail-closed denies): no limit
/// was consulted, so it has no limit and is never [near the limit](near_limit).
pub fn fallback_decision(admitted: bool) -> Decision {
    Decision {
        allowed: admitted,
        ..Decision::default()
    }
}

/// One Workers Analytics Engine data point for one decision of one policy: the index is
/// the policy (the sampling key), the blobs are policy, route (empty for the check API),
/// outcome and source (the model's attribute values), the doubles are the decisions
/// counted (1) and whether it was near the limit (0 or 1). Queried as
/// `SUM(_sample_interval * double1) ... GROUP BY blob1, blob3, blob4`.
#[derive(Clone, Debug, PartialEq)]
pub struct DataPoint<'a> {
    /// `[policy, route, outcome, source]`.
    pub blobs: [&'a str; 4],
    /// `[decisions, near_limit]`.
    pub doubles: [f64; 2],
}

impl<'a> DataPoint<'a> {
    /// The data point of `decision`, made by `policy` on `route` at `source`.
    pub fn of(
        policy: &'a str,
        route: Option<&'a str>,
        decision: &Decision,
        shadow: bool,
        source: Source,
    ) -> DataPoint<'a> {
        DataPoint {
            blobs: [
                policy,
                route.unwrap_or(""),
                Outcome::of(decision, shadow).as_str(),
                source.as_str(),
            ],
            doubles: [1.0, f64::from(u8::from(near_limit(decision)))],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_point_names_policy_route_outcome_source() {
        let near = Decision {
            allowed: true,
            limit: 10,
            remaining: 1,
            ..Decision::default()
        };
        let p = DataPoint::of("per-ip", Some("/api"), &near, false, Source::Store);
        assert_eq!(p.blobs, ["per-ip", "/api", "admitted", "store"]);
        assert_eq!(p.doubles, [1.0, 1.0]);
        let p = DataPoint::of("k", None, &fallback_decision(false), true, Source::Fallback);
        assert_eq!(p.blobs, ["k", "", "shadow_denied", "fallback"]);
        assert_eq!(p.doubles, [1.0, 0.0]);
    }
}
