//! The operator's page (`docs/production.md`) and the Grafana dashboard
//! (`docs/grafana/tollgate.json`) use only the core's metric names and labels
//! (`tollgate::metrics`) and the server's own counters (`crates/server/src/metrics.rs`), and
//! the page names every instrument: they cannot drift from what the runtimes export.

use tollgate::metrics::{
    Kind, BEHAVIOUR, INSTRUMENTS, KEY, OUTCOME, POLICY, REASON, ROUTE, SOURCE, WAIT_RESULT,
};

const PAGE: &str = include_str!("../../../docs/production.md");
const DASHBOARD: &str = include_str!("../../../docs/grafana/tollgate.json");
/// The server's metrics module: its own counters (about the service, not decisions) are
/// named there, outside the model. Read as text: this crate does not depend on the server.
const SERVER_METRICS: &str = include_str!("../../server/src/metrics.rs");

/// Whether `name` is one of the server's own counters: a `&str` constant of its metrics
/// module (`pub const REQUESTS: &str = "tollgate_server_requests_total";`).
fn server_own(name: &str) -> bool {
    name.starts_with("tollgate_server_") && SERVER_METRICS.contains(&format!("&str = \"{name}\";"))
}

/// Every `tollgate_...` word in `text`.
fn names(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("tollgate_") {
        let word = &rest[at..];
        let end = word
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(word.len());
        // Not a part of a longer word (`xtollgate_`), nor a crate path (`tollgate_tower::`),
        // nor the bare prefix (`grep ^tollgate_`).
        let before = rest[..at].chars().next_back();
        let is_word = !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let prefix = end == "tollgate_".len();
        if is_word && !prefix && !word[end..].starts_with("::") {
            out.push(&word[..end]);
        }
        rest = &word[end..];
    }
    out
}

/// Whether `name` is one of the model's metric names (a histogram's series included) or
/// label names.
fn in_model(name: &str) -> bool {
    let labels = [
        POLICY,
        ROUTE,
        OUTCOME,
        SOURCE,
        BEHAVIOUR,
        REASON,
        WAIT_RESULT,
        KEY,
    ];
    if labels.iter().any(|a| a.label == name) {
        return true;
    }
    INSTRUMENTS.iter().any(|i| {
        name == i.prometheus
            || (i.kind == Kind::Histogram
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name.strip_suffix(s) == Some(i.prometheus)))
    })
}

fn check(what: &str, text: &str) {
    let found = names(text);
    assert!(!found.is_empty(), "{what} names no metric");
    for name in found {
        assert!(
            in_model(name) || server_own(name),
            "{what}: {name} is neither in tollgate::metrics nor one of the server's own counters"
        );
    }
}

#[test]
fn the_page_uses_the_model_and_names_every_instrument() {
    check("docs/production.md", PAGE);
    for i in INSTRUMENTS {
        assert!(
            PAGE.contains(&format!("`{}`", i.prometheus))
                && PAGE.contains(&format!("`{}`", i.name)),
            "docs/production.md does not describe {}",
            i.name
        );
    }
}

#[test]
fn the_dashboard_uses_the_model() {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("valid JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    assert!(!exprs.is_empty());
    for expr in &exprs {
        check("docs/grafana/tollgate.json", expr);
    }
    check("docs/grafana/tollgate.json", DASHBOARD);
}

#[test]
fn a_name_outside_the_model_is_caught() {
    assert!(!in_model("tollgate_decision_total"));
    assert!(!in_model("tollgate_decisions_total_bucket"));
    assert!(in_model("tollgate_wait_duration_seconds_bucket"));
    assert!(server_own("tollgate_server_config_loads_total"));
    assert!(!server_own("tollgate_server_config_reloads_total"));
    assert!(!server_own("tollgate_decisions_total"));
    assert_eq!(
        names("rate(tollgate_decisions_total{tollgate_policy=\"x\"}) tollgate_tower::metrics"),
        ["tollgate_decisions_total", "tollgate_policy"]
    );
}
