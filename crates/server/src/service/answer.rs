//! The last step of a request: each descriptor's status from its plan and the store's
//! decisions, the metrics, and the response headers (`RateLimit`, `RateLimit-Policy`,
//! `Retry-After`).

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tollgate::algorithms::fixed_window;
use tollgate::headers::{response_headers, Named};
use tollgate::stack::combine;
use tollgate::{metrics, Decision, Nanos, Policy, NANOS_PER_SEC};

use super::plan::{CountedPlan, Plan, Planned};
use crate::config::Unit;
use crate::matching::Matched;
use crate::metrics::Metrics;
use crate::store::Source;

/// A response being written: what it answers (the plan, the store's decisions, where and
/// when they were made), the statuses so far and the limits named in the headers (name and
/// item index).
struct Answer<'a> {
    planned: &'a Planned,
    each: &'a [Decision],
    source: Source,
    now: Nanos,
    metrics: &'a Metrics,
    response: RateLimitResponse,
    named: Vec<(String, usize)>,
}

/// The response to `planned`, whose items the store decided as `each` (by `source`) at
/// `now`; every descriptor's decision is counted in `metrics`.
pub(super) fn answer(
    planned: &Planned,
    each: &[Decision],
    source: Source,
    now: Nanos,
    metrics: &Metrics,
) -> RateLimitResponse {
    if let Source::Fallback(behaviour, why) = source {
        for plan in &planned.plans {
            if let Plan::Counted(c) = plan {
                metrics.record(&c.matched.metric_key, |t| t.failure(behaviour, why));
            }
        }
    }
    let mut answer = Answer {
        planned,
        each,
        source,
        now,
        metrics,
        response: RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        },
        named: Vec::new(),
    };
    for plan in &planned.plans {
        let status = match plan {
            Plan::None => DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            },
            Plan::Unlimited(matched) => answer.unlimited(matched),
            Plan::Block {
                matched,
                unit,
                shadow,
            } => answer.block(matched, *unit, *shadow),
            Plan::Counted(c) => answer.counted(c),
        };
        answer.response.statuses.push(status);
    }
    answer.headers()
}

impl Answer<'_> {
    /// `unlimited`: OK, with every request remaining.
    fn unlimited(&self, matched: &Matched) -> DescriptorStatus {
        let all = u64::from(u32::MAX);
        let admitted = Decision {
            allowed: true,
            limit: all,
            remaining: all,
            ..Decision::default()
        };
        self.metrics.record(&matched.metric_key, |t| {
            t.decision(&admitted, false, metrics::Source::Store)
        });
        DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: u32::MAX,
            ..Default::default()
        }
    }

    /// `requests_per_unit: 0`: over the limit until the unit's window ends.
    fn block(&mut self, matched: &Matched, unit: Unit, shadow: bool) -> DescriptorStatus {
        let wait = until_end(unit, self.now);
        if !shadow {
            self.response.overall_code = Code::OverLimit as i32;
        }
        let denied = Decision::default(); // allowed: false, a limit of 0
        self.metrics.record(&matched.metric_key, |t| {
            t.decision(&denied, shadow, metrics::Source::Store)
        });
        DescriptorStatus {
            code: if shadow { Code::Ok } else { Code::OverLimit } as i32,
            current_limit: Some(pb_limit(matched, None, 0, Some(unit))),
            limit_remaining: 0,
            duration_until_reset: Some(duration(wait)),
            ..Default::default()
        }
    }

    /// A counted limit: the store's decision (a fair share's two windows combined).
    fn counted(&mut self, c: &CountedPlan) -> DescriptorStatus {
        // A fair share: both windows' decision, as the core combines a stack's.
        let d = match c.tenant_at {
            Some(t) => combine(&[self.each[c.at], self.each[t]]),
            None => self.each[c.at],
        };
        let shadow = self.planned.items[c.at].1.shadow;
        let over = !d.allowed && !shadow;
        if over {
            self.response.overall_code = Code::OverLimit as i32;
        }
        let source = self.source.model();
        self.metrics
            .record(&c.matched.metric_key, |t| t.decision(&d, shadow, source));
        if !shadow && !self.named.iter().any(|(_, i)| *i == c.at) {
            let rule = &c.matched.rule;
            let name = rule.name.clone().unwrap_or_else(|| rule.full_key.clone());
            if let Some(t) = c.tenant_at {
                self.named.push((format!("{name}.tenant"), t));
            }
            self.named.push((name, c.at));
        }
        let reset = match c.unit {
            Some(u) => until_end(u, self.now),
            None => d.reset_after,
        };
        // A fair share's count is its binding window's (shared or tenant).
        let limit = if c.tenant_at.is_some() {
            d.limit
        } else {
            c.policy.limit()
        };
        DescriptorStatus {
            code: if over { Code::OverLimit } else { Code::Ok } as i32,
            current_limit: Some(pb_limit(&c.matched, Some(&c.policy), limit, c.unit)),
            limit_remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
            duration_until_reset: Some(duration(reset)),
            ..Default::default()
        }
    }

    /// The response with the named limits' `RateLimit` and `RateLimit-Policy` headers, and
    /// no `Retry-After` when an enforced block is in the request.
    fn headers(self) -> RateLimitResponse {
        let mut response = self.response;
        let items_named: Vec<Named<'_>> = self
            .named
            .iter()
            .map(|(name, at)| Named {
                name,
                policy: &self.planned.items[*at].1.policy,
                decision: &self.each[*at],
            })
            .collect();
        let mut headers = response_headers(&items_named, false);
        if self.planned.blocked {
            // An enforced `requests_per_unit: 0` denies this request at every retry (all
            // or nothing, or not: its own descriptor is over the limit whatever the
            // others do), so no time makes it pass and `Retry-After` (RFC 9110 10.2.3:
            // how long to wait before a follow-up request) would be a false promise. A
            // 429 may go without one (RFC 6585 4), as envoyproxy/ratelimit's do.
            headers.retain(|(k, _)| *k != "Retry-After");
        }
        response.response_headers_to_add = headers
            .into_iter()
            .map(|(k, v)| HeaderValue {
                key: k.to_string(),
                value: v,
                ..Default::default()
            })
            .collect();
        response
    }
}

/// Time from `now` to the end of the current `unit`, a fixed window aligned to the Unix
/// epoch as the core's fixed window counts it: envoyproxy/ratelimit's
/// `duration_until_reset`.
fn until_end(unit: Unit, now: Nanos) -> Nanos {
    fixed_window::until_end(unit.seconds() * NANOS_PER_SEC, now)
}

fn duration(ns: Nanos) -> PbDuration {
    PbDuration {
        seconds: (ns / NANOS_PER_SEC) as i64,
        nanos: (ns % NANOS_PER_SEC) as i32,
    }
}

/// The `current_limit` of a rule: its name, its count and its unit. A `policy:` rule whose
/// window is exactly a unit says that unit; other windows say `UNKNOWN` (the proto has no
/// other way to write them; `RateLimit-Policy` carries the exact window).
fn pb_limit(
    m: &Matched,
    policy: Option<&Policy>,
    requests: u64,
    unit: Option<Unit>,
) -> PbRateLimit {
    let unit = unit.or_else(|| policy?.quota().and_then(|q| Unit::of_window(q.window())));
    PbRateLimit {
        name: m.rule.name.clone().unwrap_or_default(),
        requests_per_unit: u32::try_from(requests).unwrap_or(u32::MAX),
        unit: unit.map_or(PbUnit::Unknown, pb_unit) as i32,
    }
}

fn pb_unit(u: Unit) -> PbUnit {
    match u {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }
}
