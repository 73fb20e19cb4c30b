//! `[policies]`: named limits (one, a stack, or a fair share) and what they count by.

use std::collections::BTreeMap;

use serde::Deserialize;
use tollgate::fair_share::FairShare;
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
    limit: OneOrMany,
    key: Option<KeyKind>,
    tenant: Option<String>,
    shards: Option<u32>,
}

/// One named policy entry: one limit or an all-or-nothing stack of limits on the same key,
/// optionally with a per-tenant fair share on top.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyEntry {
    /// The name used in headers, stats, the API and storage.
    pub name: String,
    /// The limits, all charged or none.
    pub limits: Vec<Policy>,
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
        let limits = limits(&at, p.limit)?;
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
            tenant,
            key: p.key.unwrap_or(KeyKind::Ip),
            group: usize::MAX,
        });
    }
    Ok((policies, shard_wish))
}

/// `policies.<name>.limit`: one policy string or a stack of 1-8.
fn limits(at: &str, limit: OneOrMany) -> Result<Vec<Policy>, ConfigError> {
    let texts = match limit {
        OneOrMany::One(t) => vec![t],
        OneOrMany::Many(v) => v,
    };
    if texts.is_empty() {
        return Err(ConfigError::new(
            format!("{at}.limit"),
            "a stack needs at least one policy",
        ));
    }
    if texts.len() > 8 {
        return Err(ConfigError::new(
            format!("{at}.limit"),
            "at most 8 limits per policy",
        ));
    }
    let mut limits = Vec::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        let field = if texts.len() == 1 {
            format!("{at}.limit")
        } else {
            format!("{at}.limit[{i}]")
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

/// The largest cost a request can have under `entry` (the smallest capacity of its limits).
pub fn capacity(entry: &PolicyEntry) -> u64 {
    entry
        .limits
        .iter()
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
    for (i, p) in entry.limits.iter().chain(entry.tenant.iter()).enumerate() {
        if let Some(d) = max_delay_ms(p).filter(|&d| d > max_ms) {
            let field = if entry.limits.len() == 1 && i == 0 {
                format!("policies.{}.limit", entry.name)
            } else if i < entry.limits.len() {
                format!("policies.{}.limit[{i}]", entry.name)
            } else {
                format!("policies.{}.tenant", entry.name)
            };
            return Err(ConfigError::new(
                field,
                format!(
                    "a leaky queue on a route holds a request up to {d} ms, above settings.max_delay_ms ({max_ms}): \
                     lower its burst or raise max_delay_ms"
                ),
            ));
        }
    }
    Ok(())
}
