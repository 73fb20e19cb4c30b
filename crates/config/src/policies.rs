//! `[policies]`: named limits (one, a stack, or a fair share) and what they count by.

use std::collections::BTreeMap;

use serde::Deserialize;
use tollgate::fair_share::FairShare;
use tollgate::plans::Plans;
use tollgate::Policy;

use super::{check_shards, valid_name, ConfigError};

/// What a policy counts by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyKind {
    /// The connecting IP (IPv6 grouped by prefix).
    Ip,
    /// The API key header, hashed with SHA-256 (requests without one count by IP).
    ApiKey,
    /// The pair (IP, API key).
    #[serde(rename = "ip+api-key")]
    IpApiKey,
    /// One counter for every request.
    Global,
}

impl KeyKind {
    /// The name used in the config.
    pub fn name(self) -> &'static str {
        match self {
            KeyKind::Ip => "ip",
            KeyKind::ApiKey => "api-key",
            KeyKind::IpApiKey => "ip+api-key",
            KeyKind::Global => "global",
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    limit: Option<OneOrMany>,
    plans: Option<Vec<RawPlan>>,
    default: Option<String>,
    key: Option<KeyKind>,
    tenant: Option<String>,
    shards: Option<u32>,
}

/// One plan of a policy of plans, as written: `{ name = "pro", limit = ["1000/min", "50/s"] }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlan {
    name: String,
    limit: OneOrMany,
}

/// The plans of a policy whose limits depend on the caller: a request's plan is its API
/// key's in `settings.api_keys` (the key table), or `default`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyPlans {
    /// The plans, in the order written (names checked by the core's [`Plans`]).
    pub plans: Plans,
    /// The plan of callers whose key names none: a listed key without a plan, an unknown
    /// key or none (by IP).
    pub default: String,
}

/// One named policy entry: one limit or an all-or-nothing stack of limits on the same key,
/// optionally with a per-tenant fair share on top.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyEntry {
    /// The name used in headers, stats, the API and storage.
    pub name: String,
    /// The limits, all charged or none (for a policy of plans, the default plan's).
    pub limits: Vec<Policy>,
    /// The plans, when the limits depend on the caller (`None`: one set of limits).
    pub plans: Option<PolicyPlans>,
    /// The per-tenant window of a fair share (`limits` then has exactly one entry, the
    /// shared bucket).
    pub tenant: Option<Policy>,
    /// What the policy counts by.
    pub key: KeyKind,
    /// The coordinating group this policy belongs to (index into
    /// [`super::Config::groups`]).
    pub group: usize,
}

fn parse_policy(field: &str, text: &str) -> Result<Policy, ConfigError> {
    text.parse::<Policy>()
        .map_err(|e| ConfigError::new(field, e.to_string()))
}

/// Checks every policy; answers the entries (sorted by name, not yet grouped) and the
/// `shards` each asked for.
pub(super) fn validate(
    raw: BTreeMap<String, RawPolicy>,
) -> Result<(Vec<PolicyEntry>, Vec<Option<u32>>), ConfigError> {
    let mut policies = Vec::with_capacity(raw.len());
    let mut shard_wish = Vec::with_capacity(raw.len());
    for (name, p) in raw {
        let at = format!("policies.{name}");
        if !valid_name(&name) {
            return Err(ConfigError::new(
                at,
                "a policy name is 1-64 of a-z, A-Z, 0-9, '-', '_', '.'",
            ));
        }
        let (limits, plans) = match (p.limit, p.plans) {
            (Some(limit), None) => {
                if p.default.is_some() {
                    return Err(ConfigError::new(
                        format!("{at}.default"),
                        "a default plan needs plans",
                    ));
                }
                (limits(&format!("{at}.limit"), limit)?, None)
            }
            (None, Some(raw)) => {
                let plans = plans(&at, raw, p.default, p.key, p.tenant.is_some())?;
                let default = plans
                    .plans
                    .get(&plans.default)
                    .map_err(|e| ConfigError::new(format!("{at}.default"), e.to_string()))?;
                (default.layers().to_vec(), Some(plans))
            }
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    format!("{at}.plans"),
                    "give limit or plans, not both",
                ))
            }
            (None, None) => {
                return Err(ConfigError::new(
                    format!("{at}.limit"),
                    "missing: give limit (or plans)",
                ))
            }
        };
        let tenant = match p.tenant {
            None => None,
            Some(t) => Some(tenant(&at, &limits, &t)?),
        };
        if let Some(n) = p.shards {
            check_shards(&format!("{at}.shards"), n)?;
        }
        shard_wish.push(p.shards);
        policies.push(PolicyEntry {
            name,
            limits,
            plans,
            tenant,
            key: p.key.unwrap_or(KeyKind::Ip),
            group: usize::MAX,
        });
    }
    Ok((policies, shard_wish))
}

/// `policies.<name>.plans` and `.default`: 1-32 plans, each named (as a policy is) once,
/// with its limits; the default one of them; counted by API key (the key table chooses the
/// plan), and no fair share.
fn plans(
    at: &str,
    raw: Vec<RawPlan>,
    default: Option<String>,
    key: Option<KeyKind>,
    fair_share: bool,
) -> Result<PolicyPlans, ConfigError> {
    if key != Some(KeyKind::ApiKey) {
        return Err(ConfigError::new(
            format!("{at}.key"),
            "a policy of plans counts by \"api-key\" (its key table chooses the plan)",
        ));
    }
    if fair_share {
        return Err(ConfigError::new(
            format!("{at}.tenant"),
            "a policy of plans has no fair share",
        ));
    }
    if raw.is_empty() || raw.len() > MAX_PLANS {
        return Err(ConfigError::new(
            format!("{at}.plans"),
            format!("1 to {MAX_PLANS} plans"),
        ));
    }
    let mut named = Vec::with_capacity(raw.len());
    for (i, plan) in raw.into_iter().enumerate() {
        let field = format!("{at}.plans[{i}]");
        if !valid_name(&plan.name) {
            return Err(ConfigError::new(
                format!("{field}.name"),
                "a plan name is 1-64 of a-z, A-Z, 0-9, '-', '_', '.'",
            ));
        }
        if named.iter().any(|(n, _)| *n == plan.name) {
            return Err(ConfigError::new(
                format!("{field}.name"),
                format!("{:?}: a plan of that name is already defined", plan.name),
            ));
        }
        let limits = limits(&format!("{field}.limit"), plan.limit)?;
        named.push((plan.name, limits));
    }
    let Some(default) = default else {
        return Err(ConfigError::new(
            format!("{at}.default"),
            "missing: name the plan of callers without a known key",
        ));
    };
    if !named.iter().any(|(n, _)| *n == default) {
        return Err(ConfigError::new(
            format!("{at}.default"),
            format!("no plan named {default:?} in {at}.plans"),
        ));
    }
    let plans =
        Plans::new(named).map_err(|e| ConfigError::new(format!("{at}.plans"), e.to_string()))?;
    Ok(PolicyPlans { plans, default })
}

/// The most plans one policy may have.
pub const MAX_PLANS: usize = 32;

/// `<field>` (`policies.<name>.limit`, or a plan's): one policy string or a stack of 1-8.
fn limits(field: &str, limit: OneOrMany) -> Result<Vec<Policy>, ConfigError> {
    let texts = match limit {
        OneOrMany::One(t) => vec![t],
        OneOrMany::Many(v) => v,
    };
    if texts.is_empty() {
        return Err(ConfigError::new(field, "a stack needs at least one policy"));
    }
    if texts.len() > 8 {
        return Err(ConfigError::new(field, "at most 8 limits per policy"));
    }
    let mut limits = Vec::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        let field = if texts.len() == 1 {
            field.to_string()
        } else {
            format!("{field}[{i}]")
        };
        limits.push(parse_policy(&field, t)?);
    }
    Ok(limits)
}

/// `policies.<name>.tenant`: a fair share's per-tenant window over one shared limit.
fn tenant(at: &str, limits: &[Policy], text: &str) -> Result<Policy, ConfigError> {
    let field = format!("{at}.tenant");
    let tp = parse_policy(&field, text)?;
    if limits.len() != 1 {
        return Err(ConfigError::new(
            field,
            "a fair share needs exactly one shared limit",
        ));
    }
    FairShare::new(limits[0], tp).map_err(|e| ConfigError::new(&field, e.to_string()))?;
    Ok(tp)
}

impl PolicyEntry {
    /// Every limit the entry can decide by: its limits, and every plan's.
    pub fn every_limit(&self) -> impl Iterator<Item = &Policy> {
        let plans = self.plans.iter().flat_map(|p| p.plans.iter());
        self.limits
            .iter()
            .chain(plans.flat_map(|p| p.limits().layers().iter()))
    }

    /// The limits a caller under `plan` is decided by: that plan's, or (no such plan, or
    /// not a policy of plans) the entry's own.
    pub fn limits_of(&self, plan: Option<&str>) -> &[Policy] {
        match (&self.plans, plan) {
            (Some(p), Some(name)) => p.plans.get(name).map_or(&self.limits[..], |l| l.layers()),
            _ => &self.limits,
        }
    }
}

/// The largest cost a request can have under `entry` (the smallest capacity of its limits).
/// (For a policy of plans: of every plan's limits.)
pub fn capacity(entry: &PolicyEntry) -> u64 {
    entry
        .every_limit()
        .chain(entry.tenant.iter())
        .map(|p| p.limit())
        .min()
        .unwrap_or(0)
}

/// The longest delay (ms) a leaky queue can give a request: a full queue drains in
/// `capacity * window / limit`.
pub fn max_delay_ms(policy: &Policy) -> Option<u64> {
    match policy {
        Policy::LeakyQueue(b) => {
            let q = b.rate();
            let ns = u128::from(b.capacity()) * u128::from(q.window()) / u128::from(q.limit());
            Some(u64::try_from(ns.div_ceil(1_000_000)).unwrap_or(u64::MAX))
        }
        _ => None,
    }
}

/// A route forwards a leaky queue's request after its delay: the delay must fit
/// `settings.max_delay_ms`.
pub(super) fn check_delay(entry: &PolicyEntry, max_ms: u64) -> Result<(), ConfigError> {
    let too_long = |field: String, d: u64| {
        ConfigError::new(
            field,
            format!(
                "a leaky queue on a route holds a request up to {d} ms, above settings.max_delay_ms ({max_ms}): \
                 lower its burst or raise max_delay_ms"
            ),
        )
    };
    for (j, plan) in entry.plans.iter().flat_map(|p| p.plans.iter()).enumerate() {
        let layers = plan.limits().layers();
        for (i, p) in layers.iter().enumerate() {
            if let Some(d) = max_delay_ms(p).filter(|&d| d > max_ms) {
                let at = format!("policies.{}.plans[{j}].limit", entry.name);
                let field = if layers.len() == 1 {
                    at
                } else {
                    format!("{at}[{i}]")
                };
                return Err(too_long(field, d));
            }
        }
    }
    for (i, p) in entry.limits.iter().chain(entry.tenant.iter()).enumerate() {
        if let Some(d) = max_delay_ms(p).filter(|&d| d > max_ms) {
            let field = if entry.limits.len() == 1 && i == 0 {
                format!("policies.{}.limit", entry.name)
            } else if i < entry.limits.len() {
                format!("policies.{}.limit[{i}]", entry.name)
            } else {
                format!("policies.{}.tenant", entry.name)
            };
            return Err(too_long(field, d));
        }
    }
    Ok(())
}
