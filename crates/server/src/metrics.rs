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
//! With the Redis store, its state ([`StoreState`]; the model has no instrument for it):
//!
//! * [`STORE_UP`] (gauge): 1 while Redis decides, 0 while tollgate-redis's link has it
//!   marked down (a call failed; the declared `--redis-failure` behaviour answers until a
//!   probe does).
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
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;
use tollgate::metrics::{render_moving, Moving, Series, Source, Tally};
use tollgate::store::fallback::Behaviour;
use tollgate_redis::Transition;

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
/// Whether the shared store (Redis) decides (1) or is marked down (0).
pub const STORE_UP: &str = "tollgate_server_store_up";

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
    /// The shared store's state, when there is one.
    store: Option<Arc<StoreState>>,
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
            store: None,
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

    /// With the shared store's state: [`STORE_UP`] on `/metrics`, and health as
    /// [`StoreState::serving`] says.
    pub fn with_store(mut self, state: Arc<StoreState>) -> Self {
        self.store = Some(state);
        self
    }

    /// The shared store's state, when there is one.
    pub fn store(&self) -> Option<&Arc<StoreState>> {
        self.store.as_ref()
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
        if let Some(store) = &self.store {
            let _ = writeln!(
                out,
                "# HELP {STORE_UP} Whether the shared store decides (1) or is marked down and the declared failure behaviour answers (0).\n# TYPE {STORE_UP} gauge\n{STORE_UP} {}",
                u8::from(store.is_up())
            );
        }
        out
    }
}

/// The shared store's state as tollgate-redis's link reports its transitions
/// ([`Transition`], through [`StoreState::observe`]): one log line each way, the
/// [`STORE_UP`] gauge, and what health reports while Redis is down.
#[derive(Debug)]
pub struct StoreState {
    up: watch::Sender<bool>,
    /// When it was marked down (for the "up" line's duration).
    since: Mutex<Option<Instant>>,
    behaviour: Behaviour,
    unhealthy_when_down: bool,
}

impl StoreState {
    /// Up (the store answered at start), failing as `behaviour` declares; with
    /// `unhealthy_when_down`, health reports not serving while it is down (as
    /// envoyproxy/ratelimit does), else serving (every request is still answered, with
    /// `behaviour`).
    pub fn new(behaviour: Behaviour, unhealthy_when_down: bool) -> Arc<StoreState> {
        Arc::new(StoreState {
            up: watch::Sender::new(true),
            since: Mutex::new(None),
            behaviour,
            unhealthy_when_down,
        })
    }

    /// Whether the store decides now.
    pub fn is_up(&self) -> bool {
        *self.up.borrow()
    }

    /// Whether health reports serving as far as the store goes.
    pub fn serving(&self) -> bool {
        !self.unhealthy_when_down || self.is_up()
    }

    /// Whether health follows the store (`--unhealthy-when-store-down`).
    pub fn unhealthy_when_down(&self) -> bool {
        self.unhealthy_when_down
    }

    /// Told of each change of [`StoreState::is_up`].
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.up.subscribe()
    }

    /// Records a transition and logs it (one line; the link reports each once).
    pub fn observe(&self, t: Transition) {
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        match t {
            Transition::Down(why) => {
                *since = Some(Instant::now());
                self.up.send_replace(false);
                let answer = match self.behaviour {
                    Behaviour::Open => "every limit admits without counting",
                    Behaviour::Closed => "every limit denies",
                    Behaviour::Local => "this process's memory decides",
                };
                let health = if self.unhealthy_when_down {
                    "not serving until it is back"
                } else {
                    "still serving"
                };
                crate::log(
                    "warn",
                    &format!(
                        "redis store down ({}): --redis-failure {} answers until Redis answers a probe ({answer}); health: {health}",
                        why.as_str(),
                        self.behaviour.as_str()
                    ),
                );
            }
            Transition::Up => {
                let down = since.take().map(|t| t.elapsed().as_millis()).unwrap_or(0);
                self.up.send_replace(true);
                crate::log(
                    "info",
                    &format!("redis store up: Redis decides again (down for {down} ms)"),
                );
            }
        }
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
