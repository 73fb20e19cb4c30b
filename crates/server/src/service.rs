//! `ShouldRateLimit`: a request's descriptors matched to rules, decided together by a store,
//! answered in Envoy's `RateLimitResponse`.
//!
//! Per descriptor, as envoyproxy/ratelimit answers:
//! * no matching rule, or a rule another matched rule `replaces`: `OK`, no `current_limit`;
//! * `unlimited`: `OK` with `limit_remaining` = `u32::MAX`, never counted;
//! * a counted rule: `OK` or `OVER_LIMIT` (`OK` in shadow mode), `current_limit`,
//!   `limit_remaining` and `duration_until_reset`.
//!
//! A request over the core's bounds (too many descriptors, entries or key bytes, or too many
//! limits counted after matching) is refused with the field and the bound
//! ([`crate::bounds`]) before it is matched or decided.
//!
//! Unlike envoyproxy/ratelimit, the counted rules are one all-or-nothing stack by default: an
//! `OVER_LIMIT` descriptor charges no other (see [`crate::engine`]).

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tollgate::headers::{response_headers, Named};
use tollgate::stack::combine;
use tollgate::{metrics, Decision, Nanos, Policy, NANOS_PER_SEC};

use crate::bounds;
use crate::config::{Config, Limit, Unit};
use crate::engine::{Charging, Item};
use crate::matching::{override_rule, Matched};
use crate::metrics::{Metrics, RequestCode};
use crate::store::{Source, Store};

/// Settings that change how requests are decided.
#[derive(Clone, Copy, Debug, Default)]
pub struct Settings {
    /// How a request's limits are charged (all or nothing by default).
    pub charging: Charging,
    /// Global shadow mode: every limit counts and reports, none denies.
    pub global_shadow: bool,
}

/// Why a request was refused (a gRPC `INVALID_ARGUMENT` / HTTP 400, or an internal error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The request is malformed: the field and the reason.
    Invalid(String),
    /// The store could not decide.
    Store(String),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Invalid(m) => f.write_str(m),
            RequestError::Store(m) => write!(f, "store: {m}"),
        }
    }
}

/// The shared state of a running server: the configuration (swapped whole on reload), the
/// store, the settings and the counters.
pub struct Service<S> {
    config: RwLock<Arc<Config>>,
    store: S,
    settings: Settings,
    /// The counters shown on `/metrics`.
    pub metrics: Metrics,
}

/// What became of one descriptor before the store decided.
enum Plan {
    /// No rule applies.
    None,
    /// `unlimited`.
    Unlimited(Matched),
    /// Always over the limit (`requests_per_unit: 0`).
    Block(Matched, Unit),
    /// Counted: the index of its item, and of its tenant window's item for a fair share.
    Counted(Matched, usize, Option<usize>),
}

impl<S: Store> Service<S> {
    /// A service over `config` and `store`.
    pub fn new(config: Config, store: S, settings: Settings) -> Self {
        Service {
            config: RwLock::new(Arc::new(config)),
            store,
            settings,
            metrics: Metrics::default(),
        }
    }

    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the running configuration (requests in flight finish on the old one).
    pub fn set_config(&self, config: Config) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Answers one `ShouldRateLimit` request.
    pub async fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, RequestError> {
        let result = self.decide(request).await;
        self.metrics.request(match &result {
            Ok(r) if r.overall_code == Code::OverLimit as i32 => RequestCode::OverLimit,
            Ok(_) => RequestCode::Ok,
            Err(_) => RequestCode::Error,
        });
        result
    }

    async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, RequestError> {
        if request.domain.is_empty() {
            return Err(RequestError::Invalid(
                "domain: rate limit domain must not be empty".into(),
            ));
        }
        if request.descriptors.is_empty() {
            return Err(RequestError::Invalid(
                "descriptors: rate limit descriptor list must not be empty".into(),
            ));
        }
        bounds::request(request).map_err(RequestError::Invalid)?;
        let config = self.config();
        let mut matched = Vec::with_capacity(request.descriptors.len());
        for (i, d) in request.descriptors.iter().enumerate() {
            let entries: Vec<(&str, &str)> = d
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            if d.is_negative_hits {
                return Err(RequestError::Invalid(format!(
                    "descriptors[{i}].is_negative_hits: giving hits back is not supported"
                )));
            }
            let m = match &d.limit {
                Some(o) => {
                    let unit = PbUnit::try_from(o.unit)
                        .ok()
                        .and_then(|u| Unit::parse(u.as_str_name()))
                        .ok_or_else(|| {
                            RequestError::Invalid(format!(
                                "descriptors[{i}].limit.unit: unknown unit {}",
                                o.unit
                            ))
                        })?;
                    Some(override_rule(
                        &request.domain,
                        &entries,
                        o.requests_per_unit,
                        unit,
                    ))
                }
                None => config.find(&request.domain, &entries),
            };
            matched.push(m);
        }
        // `replaces`: a matched rule's name that another matched rule replaces is dropped.
        let replaced: HashSet<&str> = matched
            .iter()
            .flatten()
            .flat_map(|m| m.rule.replaces.iter().map(String::as_str))
            .collect();
        let mut items: Vec<Item> = Vec::new();
        let mut blocked = false;
        let mut plans = Vec::with_capacity(matched.len());
        for (i, m) in matched.iter().enumerate() {
            let Some(m) = m else {
                plans.push(Plan::None);
                continue;
            };
            if m.rule.name.as_deref().is_some_and(|n| replaced.contains(n)) {
                plans.push(Plan::None);
                continue;
            }
            let shadow = self.settings.global_shadow || m.rule.shadow_mode;
            plans.push(match &m.rule.limit {
                Limit::Unlimited => Plan::Unlimited(m.clone()),
                Limit::Block(unit) => {
                    blocked |= !shadow;
                    Plan::Block(m.clone(), *unit)
                }
                Limit::Counted { policy, .. } => {
                    let d = &request.descriptors[i];
                    let cost = match &d.hits_addend {
                        Some(h) => h.value,
                        None => u64::from(request.hits_addend.max(1)),
                    };
                    let at = add_item(&mut items, &m.key, *policy, cost, shadow);
                    let tenant = m.tenant.as_ref().zip(m.rule.fair_share.as_ref());
                    let tenant_at = tenant.map(|(key, share)| {
                        add_item(&mut items, key, *share.policies.tenant(), cost, shadow)
                    });
                    Plan::Counted(m.clone(), at, tenant_at)
                }
            });
        }
        bounds::counted(items.len()).map_err(RequestError::Invalid)?;
        let now = self.store.now();
        let (outcome, source) = if items.is_empty() {
            (Default::default(), Source::Store)
        } else {
            let (o, s) = self
                .store
                .decide(
                    &request.domain,
                    items.clone(),
                    self.settings.charging,
                    blocked,
                )
                .await
                .map_err(|e| RequestError::Store(e.to_string()))?;
            (o.each, s)
        };
        if let Source::Fallback(behaviour, why) = source {
            for plan in &plans {
                if let Plan::Counted(m, ..) = plan {
                    self.metrics
                        .record(&m.metric_key, |t| t.failure(behaviour, why));
                }
            }
        }
        let mut response = RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        };
        let mut named: Vec<(String, usize)> = Vec::new();
        for plan in &plans {
            let status = match plan {
                Plan::None => DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                },
                Plan::Unlimited(m) => {
                    let all = u64::from(u32::MAX);
                    let admitted = Decision {
                        allowed: true,
                        limit: all,
                        remaining: all,
                        ..Decision::default()
                    };
                    self.metrics.record(&m.metric_key, |t| {
                        t.decision(&admitted, false, metrics::Source::Store)
                    });
                    DescriptorStatus {
                        code: Code::Ok as i32,
                        limit_remaining: u32::MAX,
                        ..Default::default()
                    }
                }
                Plan::Block(m, unit) => {
                    let shadow = self.settings.global_shadow || m.rule.shadow_mode;
                    let wait = until_boundary(*unit, now);
                    if !shadow {
                        response.overall_code = Code::OverLimit as i32;
                    }
                    let denied = Decision::default(); // allowed: false, a limit of 0
                    self.metrics.record(&m.metric_key, |t| {
                        t.decision(&denied, shadow, metrics::Source::Store)
                    });
                    DescriptorStatus {
                        code: if shadow { Code::Ok } else { Code::OverLimit } as i32,
                        current_limit: Some(pb_limit(m, 0, Some(*unit))),
                        limit_remaining: 0,
                        duration_until_reset: Some(duration(wait)),
                        ..Default::default()
                    }
                }
                Plan::Counted(m, at, tenant_at) => {
                    // A fair share: both windows' decision, as the core combines a stack's.
                    let combined;
                    let d: &Decision = match tenant_at {
                        Some(t) => {
                            combined = combine(&[outcome[*at], outcome[*t]]);
                            &combined
                        }
                        None => &outcome[*at],
                    };
                    let shadow = items[*at].shadow;
                    let over = !d.allowed;
                    if over && !shadow {
                        response.overall_code = Code::OverLimit as i32;
                    }
                    self.metrics
                        .record(&m.metric_key, |t| t.decision(d, shadow, source.model()));
                    let Limit::Counted { policy, unit } = &m.rule.limit else {
                        unreachable!("a counted plan has a counted rule")
                    };
                    if !shadow && !named.iter().any(|(_, i)| i == at) {
                        let name = m
                            .rule
                            .name
                            .clone()
                            .unwrap_or_else(|| m.rule.full_key.clone());
                        if let Some(t) = tenant_at {
                            named.push((format!("{name}.tenant"), *t));
                        }
                        named.push((name, *at));
                    }
                    let reset = match unit {
                        Some(u) => until_boundary(*u, now),
                        None => d.reset_after,
                    };
                    DescriptorStatus {
                        code: if over && !shadow {
                            Code::OverLimit
                        } else {
                            Code::Ok
                        } as i32,
                        // A fair share's count is its binding window's (shared or tenant).
                        current_limit: Some(pb_limit(
                            m,
                            if tenant_at.is_some() {
                                d.limit
                            } else {
                                policy.limit()
                            },
                            *unit,
                        )),
                        limit_remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
                        duration_until_reset: Some(duration(reset)),
                        ..Default::default()
                    }
                }
            };
            response.statuses.push(status);
        }
        let items_named: Vec<Named<'_>> = named
            .iter()
            .map(|(name, at)| Named {
                name,
                policy: &items[*at].policy,
                decision: &outcome[*at],
            })
            .collect();
        let mut headers = response_headers(&items_named, false);
        if blocked {
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
        Ok(response)
    }
}

/// Adds a counted limit to a request's `items` and returns its index: the same counter
/// twice in one request (two descriptors, or a fair share's shared window reached by two
/// tenants) is one item with both costs.
fn add_item(items: &mut Vec<Item>, key: &str, policy: Policy, cost: u64, shadow: bool) -> usize {
    match items.iter().position(|it| it.key == key) {
        Some(at) => {
            items[at].cost = items[at].cost.saturating_add(cost);
            items[at].shadow &= shadow;
            at
        }
        None => {
            items.push(Item {
                key: key.to_string(),
                policy,
                cost,
                shadow,
            });
            items.len() - 1
        }
    }
}

/// Time from `now` to the end of the current `unit` (a fixed window aligned to the Unix
/// epoch): envoyproxy/ratelimit's `duration_until_reset`.
fn until_boundary(unit: Unit, now: Nanos) -> Nanos {
    let w = unit.seconds() * NANOS_PER_SEC;
    w - now % w
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
fn pb_limit(m: &Matched, requests: u64, unit: Option<Unit>) -> PbRateLimit {
    let unit = unit.or_else(|| match &m.rule.limit {
        Limit::Counted { policy, .. } => policy.quota().and_then(|q| Unit::of_window(q.window())),
        _ => None,
    });
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
