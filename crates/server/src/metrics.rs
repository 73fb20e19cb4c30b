//! Counters, written as Prometheus text on `/metrics`.
//!
//! Minimal for now (a later issue defines the full metric model):
//!
//! * `tollgate_decisions_total{policy,outcome,source}`: one per matched descriptor of a
//!   request; `policy` is the rule's metric key (`domain.key_value.key`: bounded by the
//!   configuration, unless `detailed_metric` or `value_to_metric` asks for the request's
//!   values), `outcome` one of `ok`, `over_limit`, `shadow_over_limit`, `unlimited`;
//!   `source` where it was decided (`memory`, `local` for limits needing no state).
//! * `tollgate_requests_total{code}`: `ShouldRateLimit` answers by overall code (`ok`,
//!   `over_limit`) or `error`.
//! * `tollgate_config_loads_total{result}`: `success` or `error` (a reload that failed and
//!   kept the running configuration).
//!
//! Never a descriptor value as a label by default (cardinality).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// A counter's name and its labels, in order.
type Series = (&'static str, Vec<(&'static str, String)>);

/// A set of counters.
#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<Series, u64>>,
}

const HELP: &[(&str, &str)] = &[
    (
        "tollgate_config_loads_total",
        "Configuration loads by result (an error keeps the running configuration).",
    ),
    (
        "tollgate_decisions_total",
        "Decisions per matched descriptor, by rule, outcome and where it was decided.",
    ),
    (
        "tollgate_requests_total",
        "ShouldRateLimit requests by overall code.",
    ),
];

impl Metrics {
    /// Adds `by` to the counter `name` with `labels`.
    pub fn add(&self, name: &'static str, labels: Vec<(&'static str, String)>, by: u64) {
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        *c.entry((name, labels)).or_insert(0) += by;
    }

    /// A counter's value (0 when never counted).
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        c.iter()
            .find(|((n, l), _)| {
                *n == name
                    && l.len() == labels.len()
                    && l.iter().zip(labels).all(|(a, b)| a.0 == b.0 && a.1 == b.1)
            })
            .map_or(0, |(_, v)| *v)
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self) -> String {
        let c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        for (name, help) in HELP {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for ((n, labels), v) in c.iter().filter(|((n, _), _)| n == name) {
                out.push_str(n);
                if !labels.is_empty() {
                    out.push('{');
                    for (i, (k, val)) in labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{k}=\"{}\"", escape(val));
                    }
                    out.push('}');
                }
                let _ = writeln!(out, " {v}");
            }
        }
        out
    }
}

/// A label value escaped for the text format (backslash, quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
