//! What the admin API reports (`GET /admin/v1/metrics` and `/admin/v1/stats`): the
//! decisions' tallies ([`crate::counters`]) joined with the gauge of slots in use
//! ([`crate::in_use`]) by series ([`SeriesId`]). The join lives here, not in either side, so
//! that the tallies and the gauge know nothing of each other.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tollgate::metrics::{Outcome, Series, Source, Tally};

use crate::counters::PolicyTally;
use crate::in_use::SeriesInUse;
#[cfg(doc)]
use crate::series::SeriesId;

/// The Prometheus text of `tallies` and the slots in use `in_use`
/// ([`tollgate::metrics::render`]): a series of the gauge for every series reported in use
/// (at 0 once freed), with zero counts where no decision was counted yet.
pub fn prometheus(tallies: &[PolicyTally], in_use: &[SeriesInUse]) -> String {
    let slots = |policy: &str, route: Option<&str>| {
        in_use
            .iter()
            .find(|s| s.policy == policy && s.route.as_deref() == route)
            .map(|s| s.slots)
    };
    let none = Tally::default();
    let mut series: Vec<Series<'_>> = tallies
        .iter()
        .map(|t| Series {
            policy: &t.policy,
            route: t.route.as_deref(),
            tally: &t.tally,
            concurrency_in_use: slots(&t.policy, t.route.as_deref()),
        })
        .collect();
    for s in in_use {
        let counted = tallies
            .iter()
            .any(|t| t.policy == s.policy && t.route == s.route);
        if !counted {
            series.push(Series {
                policy: &s.policy,
                route: s.route.as_deref(),
                tally: &none,
                concurrency_in_use: Some(s.slots),
            });
        }
    }
    tollgate::metrics::render(&series)
}

/// The JSON counters of one policy (`GET /admin/v1/stats`), derived from its tallies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Counters {
    /// Requests the coordinator admitted (outcome `admitted`, source `store`).
    pub admitted: u64,
    /// Requests the coordinator denied because of this policy (`denied`, `store`).
    pub denied: u64,
    /// Requests decided without the coordinator, fail-open or fail-closed (source
    /// `fallback`, any outcome).
    pub degraded: u64,
    /// Requests denied from the isolate's deny cache (`denied`, `deny_cache`).
    pub deny_cache: u64,
    /// Shadow-mode requests that would have been denied, and were forwarded
    /// (`shadow_denied`, `store`).
    pub shadow_denied: u64,
    /// Slots of the policy's concurrency limit held now, on every route
    /// (`tollgate.concurrency.in_use`); absent for a policy no object reported slots of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency_in_use: Option<u64>,
}

impl Counters {
    /// The counters a tally sums to.
    pub fn of(t: &Tally) -> Counters {
        Counters {
            admitted: t.decisions(Outcome::Admitted, Source::Store),
            denied: t.decisions(Outcome::Denied, Source::Store),
            degraded: Outcome::ALL
                .iter()
                .map(|&o| t.decisions(o, Source::Fallback))
                .sum(),
            deny_cache: t.decisions(Outcome::Denied, Source::DenyCache),
            shadow_denied: t.decisions(Outcome::ShadowDenied, Source::Store),
            concurrency_in_use: None,
        }
    }

    /// Adds `other` to these counters.
    pub fn add(&mut self, other: &Counters) {
        self.admitted += other.admitted;
        self.denied += other.denied;
        self.degraded += other.degraded;
        self.deny_cache += other.deny_cache;
        self.shadow_denied += other.shadow_denied;
        if let Some(n) = other.concurrency_in_use {
            *self.concurrency_in_use.get_or_insert(0) += n;
        }
    }
}

/// The JSON counters by policy: each policy's tallies and slots in use on every route,
/// added up.
pub fn by_policy(tallies: &[PolicyTally], in_use: &[SeriesInUse]) -> BTreeMap<String, Counters> {
    let mut out: BTreeMap<String, Counters> = BTreeMap::new();
    for t in tallies {
        out.entry(t.policy.clone())
            .or_default()
            .add(&Counters::of(&t.tally));
    }
    for s in in_use {
        let held = Counters {
            concurrency_in_use: Some(s.slots),
            ..Counters::default()
        };
        out.entry(s.policy.clone()).or_default().add(&held);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{fallback_decision, merge, to_list, Tallies};
    use tollgate::Decision;

    fn tally(admitted: u64, denied: u64, fallback: u64) -> Tally {
        let mut t = Tally::default();
        let ok = Decision {
            allowed: true,
            limit: 100,
            remaining: 50,
            ..Decision::default()
        };
        for _ in 0..admitted {
            t.decision(&ok, false, Source::Store);
        }
        for _ in 0..denied {
            t.decision(&fallback_decision(false), false, Source::Store);
        }
        for _ in 0..fallback {
            t.decision(&fallback_decision(true), false, Source::Fallback);
        }
        t
    }

    #[test]
    fn json_counters_add_up_every_route_of_a_policy() {
        let list = vec![
            PolicyTally {
                policy: "p".into(),
                route: Some("/a".into()),
                tally: tally(2, 1, 0),
            },
            PolicyTally {
                policy: "p".into(),
                route: None,
                tally: tally(3, 0, 4),
            },
        ];
        let c = by_policy(&list, &[])["p"];
        assert_eq!(
            c,
            Counters {
                admitted: 5,
                denied: 1,
                degraded: 4,
                deny_cache: 0,
                shadow_denied: 0,
                concurrency_in_use: None,
            }
        );
    }

    #[test]
    fn tallies_merge_and_travel_as_json() {
        let mut all = Tallies::new();
        let one = vec![PolicyTally {
            policy: "p".into(),
            route: Some("/a".into()),
            tally: tally(1, 1, 1),
        }];
        let json = serde_json::to_string(&one).unwrap();
        let back: Vec<PolicyTally> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, one);
        merge(&mut all, &back);
        merge(&mut all, &back);
        let c = by_policy(&to_list(&all), &[])["p"];
        assert_eq!((c.admitted, c.denied, c.degraded), (2, 2, 2));
    }

    #[test]
    fn prometheus_text_is_the_cores_rendering() {
        let text = prometheus(
            &[PolicyTally {
                policy: "p".into(),
                route: Some("/a".into()),
                tally: tally(3, 0, 0),
            }],
            &[],
        );
        assert!(text.contains(
            "tollgate_decisions_total{tollgate_policy=\"p\",tollgate_route=\"/a\",tollgate_outcome=\"admitted\",tollgate_source=\"store\"} 3\n"
        ), "{text}");
        assert!(!text.contains("tollgate_concurrency_in_use"), "{text}");
    }

    #[test]
    fn slots_in_use_join_their_series_in_both_forms() {
        let tallies = [PolicyTally {
            policy: "c".into(),
            route: Some("/a".into()),
            tally: tally(2, 0, 0),
        }];
        let in_use = [
            SeriesInUse {
                policy: "c".into(),
                route: Some("/a".into()),
                slots: 2,
            },
            // Reported by an object before this route's counts reached the stats object.
            SeriesInUse {
                policy: "c".into(),
                route: Some("/b".into()),
                slots: 1,
            },
        ];
        let text = prometheus(&tallies, &in_use);
        let has = |l: &str| assert!(text.lines().any(|x| x == l), "missing {l}\n{text}");
        has("# TYPE tollgate_concurrency_in_use gauge");
        has(r#"tollgate_concurrency_in_use{tollgate_policy="c",tollgate_route="/a"} 2"#);
        has(r#"tollgate_concurrency_in_use{tollgate_policy="c",tollgate_route="/b"} 1"#);
        has(
            r#"tollgate_decisions_total{tollgate_policy="c",tollgate_route="/b",tollgate_outcome="admitted",tollgate_source="store"} 0"#,
        );
        let c = by_policy(&tallies, &in_use)["c"];
        assert_eq!((c.admitted, c.concurrency_in_use), (2, Some(3)));
        let json = serde_json::to_value(c).unwrap();
        assert_eq!(json["concurrencyInUse"], 3);
        let plain = serde_json::to_value(by_policy(&tallies, &[])["c"]).unwrap();
        assert!(plain.get("concurrencyInUse").is_none(), "{plain}");
    }
}
