//! The model written as Prometheus text (exposition format 0.0.4), for the runtimes that
//! serve a snapshot themselves (the edge's admin path, the Envoy service's `/metrics`).

use alloc::string::String;
use core::fmt::Write as _;

use super::{
    Instrument, Kind, Outcome, Source, Tally, WaitResult, BEHAVIOUR, CONCURRENCY_IN_USE, DECISIONS,
    INSTRUMENTS, NEAR_LIMIT, OUTCOME, POLICY, REASON, ROUTE, SOURCE, STORE_FAILURES, WAIT_BUCKETS,
    WAIT_DURATION, WAIT_RESULT,
};
use crate::store::fallback::{Behaviour, Why};
use crate::NANOS_PER_SEC;

/// One policy's counts (on one route, where a front end has routes).
#[derive(Clone, Copy, Debug)]
pub struct Series<'a> {
    /// The policy's name.
    pub policy: &'a str,
    /// The route, if the front end has routes.
    pub route: Option<&'a str>,
    /// The counts.
    pub tally: &'a Tally,
    /// Slots of a concurrency limit held now (`None`: the policy has no concurrency limit).
    pub concurrency_in_use: Option<u64>,
}

/// Which series of the model can move in the process that renders them, for [`render_moving`]:
/// a series that cannot move is a zero an operator has to learn to ignore (and a cost per
/// policy for the scraper), so a runtime that knows its shape leaves it out. Outcomes and
/// [`NEAR_LIMIT`] are always written: which of them a policy reaches depends on its
/// configuration, which a runtime may reload.
///
/// [`Moving::ALL`] is every series ([`render`]'s output): for a runtime that cannot tell
/// (a library's caller chooses the store and whether to wait).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moving<'a> {
    /// Where decisions can be made: the [`DECISIONS`] series of these sources are written,
    /// in [`Source::ALL`]'s order whatever the order here.
    pub sources: &'a [Source],
    /// The declared behaviours that can decide after a store failure: the
    /// [`STORE_FAILURES`] series of these (every [`Why`] each). Empty (a store in this
    /// process's memory cannot fail): no [`STORE_FAILURES`] family at all.
    pub behaviours: &'a [Behaviour],
    /// Whether callers can wait for a turn (`acquire`, `throttle`): without, no
    /// [`WAIT_DURATION`] family.
    pub waits: bool,
}

impl Moving<'static> {
    /// Every series of the model.
    pub const ALL: Moving<'static> = Moving {
        sources: &Source::ALL,
        behaviours: &Behaviour::ALL,
        waits: true,
    };
}

/// Every instrument of every series as Prometheus text: `# HELP` and `# TYPE` once per
/// instrument, then one line per combination of attribute values, zeros included (so a
/// rate over a series that has not moved yet is 0, not absent). [`render_moving`] with
/// [`Moving::ALL`].
///
/// ```
/// use tollgate::metrics::{render, Series, Source, Tally};
/// use tollgate::Decision;
///
/// let mut tally = Tally::default();
/// tally.decision(&Decision { allowed: false, limit: 5, ..Decision::default() }, false, Source::Store);
/// let text = render(&[Series { policy: "per-ip", route: None, tally: &tally, concurrency_in_use: None }]);
/// assert!(text.contains(
///     "tollgate_decisions_total{tollgate_policy=\"per-ip\",tollgate_outcome=\"denied\",tollgate_source=\"store\"} 1\n"
/// ));
/// ```
pub fn render(series: &[Series<'_>]) -> String {
    render_moving(series, &Moving::ALL)
}

/// [`render`], but only the series that can move in this process (`moving`): a family
/// with none of its series left is not declared either. A count the process cannot make
/// is not written even when the tally holds one (a tally merged from another process's).
///
/// ```
/// use tollgate::metrics::{render_moving, Moving, Series, Source, Tally};
///
/// // A server on a store in its own memory that never makes a caller wait.
/// let memory = Moving { sources: &[Source::Store], behaviours: &[], waits: false };
/// let tally = Tally::default();
/// let text = render_moving(&[Series { policy: "p", route: None, tally: &tally, concurrency_in_use: None }], &memory);
/// assert!(text.contains("tollgate_source=\"store\""));
/// assert!(!text.contains("fallback"));
/// assert!(!text.contains("tollgate_store_failures_total"));
/// assert!(!text.contains("tollgate_wait_duration_seconds"));
/// ```
pub fn render_moving(series: &[Series<'_>], moving: &Moving<'_>) -> String {
    let mut out = String::new();
    for instrument in INSTRUMENTS {
        let written = match instrument {
            CONCURRENCY_IN_USE => series.iter().any(|s| s.concurrency_in_use.is_some()),
            DECISIONS => !moving.sources.is_empty(),
            STORE_FAILURES => !moving.behaviours.is_empty(),
            WAIT_DURATION => moving.waits,
            _ => true,
        };
        if !written {
            continue;
        }
        header(&mut out, &instrument);
        for s in series {
            write_series(&mut out, &instrument, s, moving);
        }
    }
    out
}

fn header(out: &mut String, instrument: &Instrument) {
    let kind = match instrument.kind {
        Kind::Counter => "counter",
        Kind::Histogram => "histogram",
        Kind::Gauge => "gauge",
    };
    let name = instrument.prometheus;
    let _ = writeln!(out, "# HELP {name} {}", instrument.description);
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn write_series(out: &mut String, instrument: &Instrument, s: &Series<'_>, moving: &Moving<'_>) {
    let t = s.tally;
    match *instrument {
        DECISIONS => {
            for outcome in Outcome::ALL {
                for source in Source::ALL
                    .into_iter()
                    .filter(|x| moving.sources.contains(x))
                {
                    let extra = [
                        (OUTCOME.label, outcome.as_str()),
                        (SOURCE.label, source.as_str()),
                    ];
                    line(
                        out,
                        DECISIONS.prometheus,
                        s,
                        &extra,
                        t.decisions(outcome, source),
                    );
                }
            }
        }
        NEAR_LIMIT => line(out, NEAR_LIMIT.prometheus, s, &[], t.near_limit()),
        STORE_FAILURES => {
            for behaviour in Behaviour::ALL
                .into_iter()
                .filter(|b| moving.behaviours.contains(b))
            {
                for why in Why::ALL {
                    let extra = [
                        (BEHAVIOUR.label, behaviour.as_str()),
                        (REASON.label, why.as_str()),
                    ];
                    line(
                        out,
                        STORE_FAILURES.prometheus,
                        s,
                        &extra,
                        t.failures(behaviour, why),
                    );
                }
            }
        }
        WAIT_DURATION => {
            for result in WaitResult::ALL {
                let h = t.waits(result);
                let mut cumulative = 0;
                let bucket = alloc::format!("{}_bucket", WAIT_DURATION.prometheus);
                for (i, bound) in WAIT_BUCKETS.iter().enumerate() {
                    cumulative += h.buckets[i];
                    let le = seconds(*bound);
                    let extra = [(WAIT_RESULT.label, result.as_str()), ("le", le.as_str())];
                    line(out, &bucket, s, &extra, cumulative);
                }
                let extra = [(WAIT_RESULT.label, result.as_str()), ("le", "+Inf")];
                line(out, &bucket, s, &extra, h.count());
                let extra = [(WAIT_RESULT.label, result.as_str())];
                let sum = alloc::format!("{}_sum", WAIT_DURATION.prometheus);
                labels(out, &sum, s, &extra);
                let _ = writeln!(out, " {}", seconds(h.sum));
                let count = alloc::format!("{}_count", WAIT_DURATION.prometheus);
                line(out, &count, s, &extra, h.count());
            }
        }
        CONCURRENCY_IN_USE => {
            if let Some(in_use) = s.concurrency_in_use {
                line(out, CONCURRENCY_IN_USE.prometheus, s, &[], in_use);
            }
        }
        _ => {}
    }
}

/// `name{policy,route,extra...} value`.
fn line(out: &mut String, name: &str, s: &Series<'_>, extra: &[(&str, &str)], value: u64) {
    labels(out, name, s, extra);
    let _ = writeln!(out, " {value}");
}

fn labels(out: &mut String, name: &str, s: &Series<'_>, extra: &[(&str, &str)]) {
    out.push_str(name);
    out.push('{');
    label(out, POLICY.label, s.policy);
    if let Some(route) = s.route {
        out.push(',');
        label(out, ROUTE.label, route);
    }
    for (key, value) in extra {
        out.push(',');
        label(out, key, value);
    }
    out.push('}');
}

/// `key="value"`, the value escaped as the exposition format requires (`\\`, `\"`, `\n`).
fn label(out: &mut String, key: &str, value: &str) {
    out.push_str(key);
    out.push_str("=\"");
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Nanoseconds as decimal seconds, exactly (no float rounding): `0.005`, `2.5`, `60`.
fn seconds(nanos: u64) -> String {
    let whole = nanos / NANOS_PER_SEC;
    let frac = nanos % NANOS_PER_SEC;
    if frac == 0 {
        return alloc::format!("{whole}");
    }
    let digits = alloc::format!("{frac:09}");
    alloc::format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Decision;

    #[test]
    fn a_series_in_full() {
        let mut tally = Tally::default();
        let admitted = Decision {
            allowed: true,
            limit: 10,
            remaining: 1,
            ..Decision::default()
        };
        tally.decision(&admitted, false, Source::Store);
        tally.failure(Behaviour::Open, Why::Unreachable);
        tally.wait(WaitResult::Admitted, 30_000_000);
        let s = Series {
            policy: "a\"b",
            route: Some("/api"),
            tally: &tally,
            concurrency_in_use: Some(3),
        };
        let text = render(&[s]);
        let has = |l: &str| assert!(text.lines().any(|x| x == l), "missing {l}\n{text}");
        has("# TYPE tollgate_decisions_total counter");
        has(
            r#"tollgate_decisions_total{tollgate_policy="a\"b",tollgate_route="/api",tollgate_outcome="admitted",tollgate_source="store"} 1"#,
        );
        has(
            r#"tollgate_decisions_total{tollgate_policy="a\"b",tollgate_route="/api",tollgate_outcome="denied",tollgate_source="fallback"} 0"#,
        );
        has(r#"tollgate_near_limit_total{tollgate_policy="a\"b",tollgate_route="/api"} 1"#);
        has(
            r#"tollgate_store_failures_total{tollgate_policy="a\"b",tollgate_route="/api",tollgate_failure_behaviour="open",tollgate_failure_reason="unreachable"} 1"#,
        );
        has(
            r#"tollgate_wait_duration_seconds_bucket{tollgate_policy="a\"b",tollgate_route="/api",tollgate_wait_result="admitted",le="0.025"} 0"#,
        );
        has(
            r#"tollgate_wait_duration_seconds_bucket{tollgate_policy="a\"b",tollgate_route="/api",tollgate_wait_result="admitted",le="0.05"} 1"#,
        );
        has(
            r#"tollgate_wait_duration_seconds_bucket{tollgate_policy="a\"b",tollgate_route="/api",tollgate_wait_result="admitted",le="+Inf"} 1"#,
        );
        has(
            r#"tollgate_wait_duration_seconds_sum{tollgate_policy="a\"b",tollgate_route="/api",tollgate_wait_result="admitted"} 0.03"#,
        );
        has(
            r#"tollgate_wait_duration_seconds_count{tollgate_policy="a\"b",tollgate_route="/api",tollgate_wait_result="gave_up"} 0"#,
        );
        has(r#"tollgate_concurrency_in_use{tollgate_policy="a\"b",tollgate_route="/api"} 3"#);
    }

    #[test]
    fn no_concurrency_gauge_without_a_concurrency_limit() {
        let tally = Tally::default();
        let text = render(&[Series {
            policy: "p",
            route: None,
            tally: &tally,
            concurrency_in_use: None,
        }]);
        assert!(!text.contains("tollgate_concurrency_in_use"));
        assert!(text.contains("tollgate_decisions_total{tollgate_policy=\"p\",tollgate_outcome=\"admitted\",tollgate_source=\"store\"} 0\n"));
    }

    #[test]
    fn only_the_series_that_can_move_are_written() {
        let mut tally = Tally::default();
        let denied = Decision {
            allowed: false,
            limit: 1,
            ..Decision::default()
        };
        tally.decision(&denied, false, Source::Store);
        // Counts this shape cannot make (a tally merged from elsewhere) are not written.
        tally.decision(&denied, false, Source::Fallback);
        tally.failure(Behaviour::Open, Why::Timeout);
        tally.wait(WaitResult::GaveUp, 1);
        let s = [Series {
            policy: "p",
            route: None,
            tally: &tally,
            concurrency_in_use: None,
        }];
        let memory = Moving {
            sources: &[Source::Store],
            behaviours: &[],
            waits: false,
        };
        let text = render_moving(&s, &memory);
        let lines: alloc::vec::Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        // Three outcomes at the store, and near_limit: nothing else.
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines.contains(
            &r#"tollgate_decisions_total{tollgate_policy="p",tollgate_outcome="denied",tollgate_source="store"} 1"#
        ));
        for absent in [
            "fallback",
            "deny_cache",
            "tollgate_store_failures_total",
            "tollgate_wait_duration",
        ] {
            assert!(!text.contains(absent), "{absent} in\n{text}");
        }

        // A shared store that fails closed: its source and behaviour, every reason.
        let closed = Moving {
            sources: &[Source::Fallback, Source::Store],
            behaviours: &[Behaviour::Closed],
            waits: false,
        };
        let text = render_moving(&s, &closed);
        let failures: alloc::vec::Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("tollgate_store_failures_total{"))
            .collect();
        assert_eq!(failures.len(), Why::ALL.len(), "{text}");
        assert!(failures.iter().all(|l| l.contains("behaviour=\"closed\"")));
        assert_eq!(
            text.matches("# TYPE tollgate_store_failures_total counter")
                .count(),
            1
        );
        // Sources in the model's order, whatever the order given.
        let store = text.find(r#"tollgate_outcome="admitted",tollgate_source="store""#);
        let fallback = text.find(r#"tollgate_outcome="admitted",tollgate_source="fallback""#);
        assert!(store.unwrap() < fallback.unwrap());
    }

    #[test]
    fn render_is_every_series() {
        let mut tally = Tally::default();
        tally.wait(WaitResult::Admitted, 3);
        let s = [Series {
            policy: "p",
            route: Some("/r"),
            tally: &tally,
            concurrency_in_use: Some(1),
        }];
        let text = render(&s);
        assert_eq!(text, render_moving(&s, &Moving::ALL));
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        // 9 decisions, near_limit, 9 failures, 2 x (13 buckets, sum, count), the gauge.
        assert_eq!(samples, 9 + 1 + 9 + 2 * 15 + 1);
    }

    #[test]
    fn seconds_are_exact() {
        assert_eq!(seconds(5_000_000), "0.005");
        assert_eq!(seconds(2_500_000_000), "2.5");
        assert_eq!(seconds(60_000_000_000), "60");
        assert_eq!(seconds(1), "0.000000001");
    }
}
