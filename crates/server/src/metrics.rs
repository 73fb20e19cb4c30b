//! `/metrics`: the core's metric model ([`tollgate::metrics`]), one [`Tally`] per rule,
//! written by the core's Prometheus text ([`tollgate::metrics::render`]); this module only
//! keeps the tallies and says what the service counts in them:
//!
//! * `tollgate_decisions_total{tollgate_policy,tollgate_outcome,tollgate_source}`: one per
//!   matched descriptor of a request, as its status says (`admitted`, `denied`, or
//!   `shadow_denied` for a shadow-mode limit that would have denied), where it was decided
//!   (`store`: this process's memory or Redis; `deny_cache`; `fallback`: the declared
//!   behaviour, Redis having failed). `unlimited` rules count as admitted and
//!   `requests_per_unit: 0` rules as denied, both at the `store` (they need no state).
//! * `tollgate_near_limit_total{tollgate_policy}`: admissions that left less than 20% of the
//!   limit (envoyproxy/ratelimit's `near_limit`).
//! * `tollgate_store_failures_total{tollgate_policy,tollgate_failure_behaviour,tollgate_failure_reason}`:
//!   Redis calls that failed, per counted descriptor of the request, by the declared
//!   behaviour (`open`, `closed`, `local`) and the reason (`unreachable`, `timeout`,
//!   `indeterminate`).
//!
//! Only the series that can move in this process are written ([`Metrics::memory`],
//! [`Metrics::shared_store`], through the core's [`tollgate::metrics::render_moving`]): on
//! the memory store no `deny_cache` or `fallback` source and no store failures; on Redis
//! the declared behaviour's failures only; never the model's wait histogram (Envoy's
//! protocol never makes a caller wait).
//!
//! `tollgate_policy` is the rule's metric key (`domain.key_value.key`: bounded by the
//! configuration, unless `detailed_metric` or `value_to_metric` asks for the request's
//! values). Never a descriptor value by default (cardinality).
//!
//! Two counters are the service's own, about the service rather than decisions (no other
//! runtime has them, and the model does not name them):
//!
//! * [`REQUESTS`] `{code}`: `ShouldRateLimit` answers by overall code (`ok`, `over_limit`)
//!   or `error`.
//! * [`CONFIG_LOADS`] `{result}`: configuration loads, `success` (the load the process
//!   started with, counted by the binary, and each reload) or `error` (a reload that
//!   failed and kept the running configuration).
//!
//! With the memory store, its bound ([`render_memory`]; the model has no instrument for a
//! store's size yet):
//!
//! * [`STORE_EVICTIONS`]: keys evicted before they were fresh (each then restarts fresh:
//!   see [`crate::store`]); expired keys dropped are not counted.
//! * [`STORE_KEYS`], [`STORE_BYTES`] and [`STORE_MAX_BYTES`] (gauges): what it holds
//!   against its bound.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tollgate::metrics::{render_moving, Moving, Series, Source, Tally};
use tollgate::store::fallback::Behaviour;

use crate::store::MemoryStats;

/// Keys the memory store evicted before they were fresh, to stay within its bound.
pub const STORE_EVICTIONS: &str = "tollgate_store_evictions_total";
/// Keys the memory store holds.
pub const STORE_KEYS: &str = "tollgate_store_keys";
/// The memory store's accounted bytes (keys plus a fixed overhead each).
pub const STORE_BYTES: &str = "tollgate_store_bytes";
/// The memory store's bound on its accounted bytes.
pub const STORE_MAX_BYTES: &str = "tollgate_store_max_bytes";

/// `ShouldRateLimit` answers by overall code.
pub const REQUESTS: &str = "tollgate_server_requests_total";
/// Configuration loads by result.
pub const CONFIG_LOADS: &str = "tollgate_server_config_loads_total";

/// How a `ShouldRateLimit` call was answered (the `code` of [`REQUESTS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestCode {
    /// `OK`.
    Ok,
    /// `OVER_LIMIT`.
    OverLimit,
    /// Refused (a bad request) or failed (the store's error).
    Error,
}

impl RequestCode {
    const ALL: [RequestCode; 3] = [RequestCode::Ok, RequestCode::OverLimit, RequestCode::Error];

    /// The label value: `ok`, `over_limit`, `error`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RequestCode::Ok => "ok",
            RequestCode::OverLimit => "over_limit",
            RequestCode::Error => "error",
        }
    }
}

/// The service's counts.
#[derive(Debug)]
pub struct Metrics {
    tallies: Mutex<BTreeMap<String, Tally>>,
    /// Where decisions can come from in this process (see [`Metrics::memory`]).
    sources: Vec<Source>,
    /// The behaviour that decides when the store fails (none: it cannot fail).
    behaviours: Vec<Behaviour>,
    /// Whether the configuration is reloaded (else no load can fail after the start).
    reloads: bool,
    requests: [AtomicU64; 3],
    /// Successful loads, then failed ones.
    config_loads: [AtomicU64; 2],
}

/// Every source and failure behaviour: for a service whose store is not known to be one
/// of the shapes below (a library caller's own store), no series that could move is left
/// out.
impl Default for Metrics {
    fn default() -> Self {
        Metrics::shaped(Source::ALL.to_vec(), Behaviour::ALL.to_vec())
    }
}

impl Metrics {
    fn shaped(sources: Vec<Source>, behaviours: Vec<Behaviour>) -> Self {
        Metrics {
            tallies: Mutex::default(),
            sources,
            behaviours,
            reloads: true,
            requests: Default::default(),
            config_loads: Default::default(),
        }
    }

    /// For a service on the memory store: every decision is made at the `store`, which
    /// cannot fail, so `/metrics` has no `deny_cache` or `fallback` series and no
    /// `tollgate_store_failures_total`.
    pub fn memory() -> Self {
        Metrics::shaped(vec![Source::Store], Vec::new())
    }

    /// For a service on a shared store (Redis) that fails as `behaviour` declares, with or
    /// without a deny cache: the `fallback` source and `behaviour`'s failure series (every
    /// reason), and `deny_cache` when there is one.
    pub fn shared_store(behaviour: Behaviour, deny_cache: bool) -> Self {
        let mut sources = vec![Source::Store];
        if deny_cache {
            sources.push(Source::DenyCache);
        }
        sources.push(Source::Fallback);
        Metrics::shaped(sources, vec![behaviour])
    }

    /// For a service that never reloads its configuration: no
    /// `tollgate_server_config_loads_total{result="error"}` (a start that fails to load
    /// never serves).
    pub fn without_reloads(mut self) -> Self {
        self.reloads = false;
        self
    }

    /// Counts into the tally of `policy` (created at the first count).
    pub fn record(&self, policy: &str, count: impl FnOnce(&mut Tally)) {
        let mut tallies = self.tallies.lock().unwrap_or_else(|p| p.into_inner());
        match tallies.get_mut(policy) {
            Some(t) => count(t),
            None => count(tallies.entry(policy.to_string()).or_default()),
        }
    }

    /// The tally of `policy` (all zeros when never counted).
    pub fn tally(&self, policy: &str) -> Tally {
        let tallies = self.tallies.lock().unwrap_or_else(|p| p.into_inner());
        tallies.get(policy).copied().unwrap_or_default()
    }

    /// Counts one `ShouldRateLimit` answer.
    pub fn request(&self, code: RequestCode) {
        self.requests[code as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// `ShouldRateLimit` answers counted with `code`.
    pub fn requests(&self, code: RequestCode) -> u64 {
        self.requests[code as usize].load(Ordering::Relaxed)
    }

    /// Counts one configuration load.
    pub fn config_load(&self, success: bool) {
        self.config_loads[usize::from(!success)].fetch_add(1, Ordering::Relaxed);
    }

    /// Configuration loads counted with this result.
    pub fn config_loads(&self, success: bool) -> u64 {
        self.config_loads[usize::from(!success)].load(Ordering::Relaxed)
    }

    /// The Prometheus text exposition: the model's instruments for every rule counted so
    /// far (in name order), only the series that can move here (never the wait histogram:
    /// Envoy's protocol never waits), then the service's own counters.
    pub fn render(&self) -> String {
        let tallies = self
            .tallies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let series: Vec<Series<'_>> = tallies
            .iter()
            .map(|(policy, tally)| Series {
                policy,
                route: None,
                tally,
                concurrency_in_use: None,
            })
            .collect();
        let moving = Moving {
            sources: &self.sources,
            behaviours: &self.behaviours,
            waits: false,
        };
        let mut out = render_moving(&series, &moving);
        let _ = writeln!(
            out,
            "# HELP {REQUESTS} ShouldRateLimit answers by overall code.\n# TYPE {REQUESTS} counter"
        );
        for code in RequestCode::ALL {
            let _ = writeln!(
                out,
                "{REQUESTS}{{code=\"{}\"}} {}",
                code.as_str(),
                self.requests(code)
            );
        }
        let _ = writeln!(
            out,
            "# HELP {CONFIG_LOADS} Configuration loads by result (an error keeps the running configuration).\n# TYPE {CONFIG_LOADS} counter"
        );
        let results: &[(&str, bool)] = if self.reloads {
            &[("success", true), ("error", false)]
        } else {
            &[("success", true)]
        };
        for &(result, success) in results {
            let _ = writeln!(
                out,
                "{CONFIG_LOADS}{{result=\"{result}\"}} {}",
                self.config_loads(success)
            );
        }
        out
    }
}

/// Appends the memory store's series to a Prometheus text exposition.
pub fn render_memory(stats: &MemoryStats, out: &mut String) {
    let _ = writeln!(
        out,
        "# HELP {STORE_EVICTIONS} Keys evicted from the memory store before they were fresh (each restarts fresh).\n# TYPE {STORE_EVICTIONS} counter\n{STORE_EVICTIONS} {}",
        stats.evictions
    );
    for (name, help, value) in [
        (STORE_KEYS, "Keys held by the memory store.", stats.keys),
        (
            STORE_BYTES,
            "The memory store's accounted bytes (keys plus a fixed overhead each).",
            stats.bytes,
        ),
        (
            STORE_MAX_BYTES,
            "The memory store's bound on its accounted bytes.",
            stats.max_bytes,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
}
