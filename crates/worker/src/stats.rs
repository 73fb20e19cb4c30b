//! The isolate's per-policy tallies ([`tollgate::metrics::Tally`]) and their reports to the
//! stats object (`tollgate#stats`), which keeps every isolate's totals; and, when the
//! optional Workers Analytics Engine binding `ANALYTICS` is configured, one data point per
//! decision ([`DataPoint`]).

use std::cell::RefCell;

use tollgate::metrics::Source;
use tollgate::stack::combine;
use tollgate::store::fallback::Behaviour;
use tollgate::store::fallback::Why;
use tollgate::Decision;
use worker::{console_error, AnalyticsEngineDataPointBuilder, Context, Env};

use crate::config::{Config, Route};
use crate::counters::{self, fallback_decision, DataPoint, PolicyTally, Tallies};
use crate::env::now_ms;
use crate::in_use::SeriesInUse;
use crate::plan::LimitName;
use crate::protocol::{ObjectRequest, ObjectResponse};
use crate::rpc::{send_batch, Failure};
use crate::series::SeriesId;

/// The object that keeps the per-policy stats of every isolate.
pub const STATS_OBJECT: &str = "tollgate#stats";

/// The Workers Analytics Engine binding that receives a data point per decision, if bound.
pub const ANALYTICS_BINDING: &str = "ANALYTICS";

/// Per-policy counts of this isolate not yet reported to the stats object.
#[derive(Default)]
struct Stats {
    /// Tallies by policy and route.
    tallies: Tallies,
    /// When this isolate last reported (ms; 0 before its first request).
    last_flush_ms: u64,
}

thread_local! {
    static STATS: RefCell<Stats> = RefCell::new(Stats::default());
}

/// Counts one decision of `policy` (on `route`; `None`: the check API) made at `source`,
/// and writes its data point when the Analytics Engine is bound.
pub fn decided(
    env: &Env,
    policy: &str,
    route: Option<&str>,
    decision: &Decision,
    shadow: bool,
    source: Source,
) {
    STATS.with(|s| {
        let mut s = s.borrow_mut();
        let key = SeriesId::new(policy, route);
        s.tallies
            .entry(key)
            .or_default()
            .decision(decision, shadow, source);
    });
    if let Ok(dataset) = env.analytics_engine(ANALYTICS_BINDING) {
        let point = DataPoint::of(policy, route, decision, shadow, source);
        let built = AnalyticsEngineDataPointBuilder::new()
            .indexes([policy])
            .blobs(point.blobs)
            .doubles(point.doubles)
            .build();
        if let Err(e) = dataset.write_data_point(&built) {
            console_error!("tollgate: analytics data point: {e}");
        }
    }
}

/// Counts one failed coordinator call of `policy` (on `route`), after which `behaviour`
/// decided.
pub fn failed(policy: &str, route: Option<&str>, behaviour: Behaviour, why: Why) {
    STATS.with(|s| {
        let key = SeriesId::new(policy, route);
        s.borrow_mut()
            .tallies
            .entry(key)
            .or_default()
            .failure(behaviour, why);
    });
}

/// The decision of policy `k` of a stack: its limits' decisions combined (`None` when the
/// plan has no limit of it).
fn policy_decision(names: &[LimitName], each: &[Decision], k: usize) -> Option<Decision> {
    let mine: Vec<Decision> = names
        .iter()
        .zip(each)
        .filter(|(n, _)| n.policy == k)
        .map(|(_, d)| *d)
        .collect();
    (!mine.is_empty()).then(|| combine(&mine))
}

/// Counts an admission on `route` for every policy of the route.
pub fn route_admitted(
    env: &Env,
    cfg: &Config,
    route: &Route,
    names: &[LimitName],
    each: &[Decision],
) {
    for &k in &route.policies {
        let d = policy_decision(names, each, k).unwrap_or_else(|| fallback_decision(true));
        decided(
            env,
            &cfg.policies[k].name,
            Some(&route.name),
            &d,
            false,
            Source::Store,
        );
    }
}

/// Counts a denial on `route` (`None`: the check API) for every policy with a limit that
/// denied (once per policy); `shadow` when the route only reports.
pub fn violated(
    env: &Env,
    cfg: &Config,
    route: Option<&Route>,
    (names, each): (&[LimitName], &[Decision]),
    shadow: bool,
    source: Source,
) {
    let mut seen = Vec::new();
    for (n, d) in names.iter().zip(each) {
        if !d.allowed && !seen.contains(&n.policy) {
            seen.push(n.policy);
            let d = policy_decision(names, each, n.policy).unwrap_or(*d);
            let route = route.map(|r| r.name.as_str());
            decided(env, &cfg.policies[n.policy].name, route, &d, shadow, source);
        }
    }
}

/// Counts a decision of the route's fallback for every policy of `route`: the coordinator
/// failed (`why`), and the route's declared `behaviour` (fail-open or fail-closed) decided.
pub fn route_degraded(env: &Env, cfg: &Config, route: &Route, behaviour: Behaviour, why: Why) {
    let d = fallback_decision(behaviour == Behaviour::Open);
    for &k in &route.policies {
        let policy = &cfg.policies[k].name;
        failed(policy, Some(&route.name), behaviour, why);
        decided(env, policy, Some(&route.name), &d, false, Source::Fallback);
    }
}

/// This isolate's counts not yet reported.
pub fn unreported() -> Vec<PolicyTally> {
    STATS.with(|s| counters::to_list(&s.borrow().tallies))
}

/// Sends this isolate's tallies to the stats object (adding them there) and returns the
/// totals, with the slots in use the coordinators reported ([`crate::in_use`]); on failure
/// the tallies are kept for the next report.
pub async fn report(
    env: &Env,
    timeout_ms: u64,
) -> Result<(Vec<PolicyTally>, Vec<SeriesInUse>), Failure> {
    let tallies = STATS.with(|s| std::mem::take(&mut s.borrow_mut().tallies));
    let req = ObjectRequest::Report {
        tallies: counters::to_list(&tallies),
        in_use: None,
    };
    let result = send_batch(env, timeout_ms, STATS_OBJECT, std::slice::from_ref(&req)).await;
    match result.map(|mut a| a.pop()) {
        Ok(Some(ObjectResponse::Stats { tallies, in_use })) => Ok((tallies, in_use)),
        other => {
            if let ObjectRequest::Report { tallies, .. } = &req {
                STATS.with(|s| counters::merge(&mut s.borrow_mut().tallies, tallies));
            }
            match other {
                Err(f) => Err(f),
                Ok(a) => Err(Failure::Unavailable(format!("stats object answered {a:?}"))),
            }
        }
    }
}

/// Reports in the background (after the response) every `stats_flush_ms`.
pub fn maybe_report(env: &Env, ctx: &Context, cfg: &Config) {
    let now = now_ms();
    let due = STATS.with(|s| {
        let mut s = s.borrow_mut();
        if s.last_flush_ms == 0 {
            s.last_flush_ms = now;
        }
        let due = !s.tallies.is_empty()
            && now.saturating_sub(s.last_flush_ms) >= cfg.settings.stats_flush_ms;
        if due {
            s.last_flush_ms = now;
        }
        due
    });
    if due {
        let env = env.clone();
        let timeout_ms = cfg.settings.timeout_ms;
        ctx.wait_until(async move {
            if let Err(f) = report(&env, timeout_ms).await {
                console_error!("tollgate: stats report: {f}");
            }
        });
    }
}
