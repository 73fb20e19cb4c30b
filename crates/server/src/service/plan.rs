//! The first step of a request: validated, each descriptor matched to its rule (or to the
//! request's own `limit`), the rules that others `replace` dropped, and every counted limit
//! gathered into the items the store decides together.

use std::collections::HashSet;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::store::request::Counted;
use tollgate::Policy;

use super::RequestError;
use crate::bounds;
use crate::config::{Config, Limit, Unit};
use crate::matching::{override_rule, Matched};

/// What became of one descriptor before the store decided.
pub(super) enum Plan {
    /// No rule applies (none matched, or another matched rule `replaces` it).
    None,
    /// `unlimited`: admitted, never counted.
    Unlimited(Matched),
    /// `requests_per_unit: 0`: always over the limit, denying unless `shadow`.
    Block {
        matched: Matched,
        unit: Unit,
        shadow: bool,
    },
    /// Counted by the store.
    Counted(CountedPlan),
}

/// A counted rule's plan.
pub(super) struct CountedPlan {
    pub matched: Matched,
    /// The rule's policy, and the unit it was written in (`None` for a `policy:` string).
    pub policy: Policy,
    pub unit: Option<Unit>,
    /// The index of its item, and of its fair share's tenant window's item.
    pub at: usize,
    pub tenant_at: Option<usize>,
}

/// A request planned: a plan per descriptor, in the request's order, and what the store
/// decides.
pub(super) struct Planned {
    pub plans: Vec<Plan>,
    /// The counted limits by store key: the same key twice in one request is one item.
    pub items: Vec<(String, Counted)>,
    /// An enforced `requests_per_unit: 0` limit is among them: nothing may be charged in
    /// all-or-nothing mode.
    pub blocked: bool,
    /// Every descriptor has `is_negative_hits` (Envoy 1.38): the items' costs are given
    /// back, not charged ([`crate::store::Store::refund`]).
    pub refund: bool,
}

/// Plans `request` on `config`; every limit is in shadow mode under `global_shadow`.
pub(super) fn plan(
    request: &RateLimitRequest,
    config: &Config,
    global_shadow: bool,
) -> Result<Planned, RequestError> {
    validate(request)?;
    let refund = negative_hits(request)?;
    let matched = request
        .descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| match_descriptor(request, i, d, config))
        .collect::<Result<Vec<_>, _>>()?;
    // `replaces`: a matched rule's name that another matched rule replaces is dropped.
    let replaced: HashSet<&str> = matched
        .iter()
        .flatten()
        .flat_map(|m| m.rule.replaces.iter().map(String::as_str))
        .collect();
    let mut planned = Planned {
        plans: Vec::with_capacity(matched.len()),
        items: Vec::new(),
        blocked: false,
        refund,
    };
    for (d, m) in request.descriptors.iter().zip(&matched) {
        let plan = match m {
            Some(m) if !m.rule.name.as_deref().is_some_and(|n| replaced.contains(n)) => {
                let cost = match &d.hits_addend {
                    Some(h) => h.value,
                    None => u64::from(request.hits_addend.max(1)),
                };
                planned.rule(m.clone(), cost, global_shadow)
            }
            _ => Plan::None,
        };
        planned.plans.push(plan);
    }
    bounds::counted(planned.items.len()).map_err(RequestError::Invalid)?;
    // A refund is never denied: a `requests_per_unit: 0` rule has nothing to give back.
    // (Every counted policy settles: the configuration refuses concurrency limits and
    // leaky queues.)
    planned.blocked &= !refund;
    Ok(planned)
}

/// Whether the request gives hits back (Envoy's `is_negative_hits`): all its descriptors
/// do, or none. A request that both takes and gives back is refused, naming the first
/// descriptor that differs: Envoy sends a refund as a request of its own (a response's
/// cost, `apply_on_stream_done`), and one answer cannot say both.
fn negative_hits(request: &RateLimitRequest) -> Result<bool, RequestError> {
    let first = request.descriptors[0].is_negative_hits;
    match request
        .descriptors
        .iter()
        .position(|d| d.is_negative_hits != first)
    {
        None => Ok(first),
        Some(i) => Err(RequestError::Invalid(format!(
            "descriptors[{i}].is_negative_hits: a request either takes hits or gives them back, not both"
        ))),
    }
}

impl Planned {
    /// The plan of a matched rule that applies, at `cost`.
    fn rule(&mut self, matched: Matched, cost: u64, global_shadow: bool) -> Plan {
        let shadow = global_shadow || matched.rule.shadow_mode;
        match matched.rule.limit.clone() {
            Limit::Unlimited => Plan::Unlimited(matched),
            Limit::Block(unit) => {
                self.blocked |= !shadow;
                Plan::Block {
                    matched,
                    unit,
                    shadow,
                }
            }
            Limit::Counted { policy, unit } => {
                let at = self.add(&matched.key, policy, cost, shadow);
                let tenant = matched
                    .tenant
                    .as_ref()
                    .zip(matched.rule.fair_share.as_ref());
                let tenant_at = tenant
                    .map(|(key, share)| self.add(key, *share.policies.tenant(), cost, shadow));
                Plan::Counted(CountedPlan {
                    matched,
                    policy,
                    unit,
                    at,
                    tenant_at,
                })
            }
        }
    }

    /// Adds a counted limit and returns its index: the same counter twice in one request
    /// (two descriptors, or a fair share's shared window reached by two tenants) is one
    /// item with both costs, in shadow mode only if both are.
    fn add(&mut self, key: &str, policy: Policy, cost: u64, shadow: bool) -> usize {
        match self.items.iter().position(|(k, _)| k == key) {
            Some(at) => {
                let c = &mut self.items[at].1;
                c.cost = c.cost.saturating_add(cost);
                c.shadow &= shadow;
                at
            }
            None => {
                let counted = Counted {
                    policy,
                    cost,
                    shadow,
                };
                self.items.push((key.to_string(), counted));
                self.items.len() - 1
            }
        }
    }
}

/// The request's own fields, and the core's bounds on its sizes ([`crate::bounds`]).
fn validate(request: &RateLimitRequest) -> Result<(), RequestError> {
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
    bounds::request(request).map_err(RequestError::Invalid)
}

/// The rule of descriptor `i`: its own `limit` if it carries one, else the configuration's.
fn match_descriptor(
    request: &RateLimitRequest,
    i: usize,
    d: &RateLimitDescriptor,
    config: &Config,
) -> Result<Option<Matched>, RequestError> {
    let entries: Vec<(&str, &str)> = d
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    let Some(o) = &d.limit else {
        return Ok(config.find(&request.domain, &entries));
    };
    let unit = PbUnit::try_from(o.unit)
        .ok()
        .and_then(|u| Unit::parse(u.as_str_name()))
        .ok_or_else(|| {
            RequestError::Invalid(format!(
                "descriptors[{i}].limit.unit: unknown unit {}",
                o.unit
            ))
        })?;
    Ok(Some(override_rule(
        &request.domain,
        &entries,
        o.requests_per_unit,
        unit,
    )))
}
