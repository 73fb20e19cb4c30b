//! The isolate's per-policy counters and their reports to the stats object (`tollgate#stats`),
//! which keeps every isolate's totals.

use std::cell::RefCell;
use std::collections::BTreeMap;

use tollgate::Decision;
use worker::{console_error, Context, Env};

use crate::config::{Config, Route};
use crate::counters::{self, Counters, Stats};
use crate::env::now_ms;
use crate::plan::LimitName;
use crate::protocol::{ObjectRequest, ObjectResponse};
use crate::rpc::{send_batch, Failure};

/// The object that keeps the per-policy stats of every isolate.
const STATS_OBJECT: &str = "tollgate#stats";

thread_local! {
    static STATS: RefCell<Stats> = RefCell::new(Stats::default());
}

/// Counts into the counters of `policy`.
pub fn count(policy: &str, f: impl FnOnce(&mut Counters)) {
    STATS.with(|s| s.borrow_mut().count(policy, f));
}

/// Counts into the counters of every policy of `route`.
pub fn count_route(route: &Route, cfg: &Config, f: impl Fn(&mut Counters)) {
    STATS.with(|s| {
        let mut s = s.borrow_mut();
        for &k in &route.policies {
            s.count(&cfg.policies[k].name, &f);
        }
    });
}

/// Counts into the counters of every policy with a limit that denied (once per policy).
pub fn count_violated(
    names: &[LimitName],
    each: &[Decision],
    cfg: &Config,
    f: impl Fn(&mut Counters),
) {
    STATS.with(|s| {
        let mut s = s.borrow_mut();
        let mut seen = Vec::new();
        for (n, d) in names.iter().zip(each) {
            if !d.allowed && !seen.contains(&n.policy) {
                seen.push(n.policy);
                s.count(&cfg.policies[n.policy].name, &f);
            }
        }
    });
}

/// This isolate's counts not yet reported.
pub fn unreported() -> serde_json::Value {
    STATS.with(|s| serde_json::to_value(&s.borrow().by_policy).unwrap_or_default())
}

/// Sends this isolate's counters to the stats object (adding them there) and returns the
/// totals; on failure the counters are kept for the next report.
pub async fn report(env: &Env, timeout_ms: u64) -> Result<BTreeMap<String, Counters>, Failure> {
    let counters = STATS.with(|s| std::mem::take(&mut s.borrow_mut().by_policy));
    let req = ObjectRequest::Report {
        counters: counters.clone(),
    };
    let result = send_batch(env, timeout_ms, STATS_OBJECT, std::slice::from_ref(&req)).await;
    match result.map(|mut a| a.pop()) {
        Ok(Some(ObjectResponse::Stats { by_policy })) => Ok(by_policy),
        other => {
            STATS.with(|s| counters::merge(&mut s.borrow_mut().by_policy, &counters));
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
        let due = !s.by_policy.is_empty()
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
