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

/// Every instrument of every series as Prometheus text: `# HELP` and `# TYPE` once per
/// instrument, then one line per combination of attribute values, zeros included (so a
/// rate over a series that has not moved yet is 0, not absent).
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
    let mut out = String::new();
    for instrument in INSTRUMENTS {
        if instrument == CONCURRENCY_IN_USE && series.iter().all(|s| s.concurrency_in_use.is_none())
        {
            continue;
        }
        header(&mut out, &instrument);
        for s in series {
            write_series(&mut out, &instrument, s);
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

fn write_series(out: &mut String, instrument: &Instrument, s: &Series<'_>) {
    let t = s.tally;
    match *instrument {
        DECISIONS => {
            for outcome in Outcome::ALL {
                for source in Source::ALL {
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
            for behaviour in Behaviour::ALL {
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
    fn seconds_are_exact() {
        assert_eq!(seconds(5_000_000), "0.005");
        assert_eq!(seconds(2_500_000_000), "2.5");
        assert_eq!(seconds(60_000_000_000), "60");
        assert_eq!(seconds(1), "0.000000001");
    }
}
