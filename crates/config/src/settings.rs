//! `[settings]`: what every route shares.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::{check_shards, in_range, ConfigError};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettings {
    trust_forwarded_for: Option<bool>,
    ipv6_prefix: Option<u32>,
    ipv4_prefix: Option<u32>,
    api_key_header: Option<String>,
    tenant_header: Option<String>,
    shards: Option<u32>,
    timeout_ms: Option<u64>,
    legacy_headers: Option<bool>,
    test_clock: Option<bool>,
    deny_cache: Option<bool>,
    max_header_bytes: Option<usize>,
    stats_flush_ms: Option<u64>,
    lease_ms: Option<u64>,
    max_delay_ms: Option<u64>,
    api_keys: Option<Vec<RawApiKey>>,
    jwt: Option<super::jwt::RawJwt>,
}

/// One entry of `settings.api_keys`: a key's SHA-256 alone (the default plan of every policy
/// of plans), or with the plan it is given.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawApiKey {
    /// `"<sha-256>"`.
    Hash(String),
    /// `{ sha256 = "<sha-256>", plan = "pro" }`.
    WithPlan(KeyWithPlan),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyWithPlan {
    sha256: String,
    plan: Option<String>,
}

/// Settings shared by every route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Take the client IP from the first `X-Forwarded-For` entry when `CF-Connecting-IP` is
    /// absent. Off by default: the header is client-controlled.
    pub trust_forwarded_for: bool,
    /// IPv6 addresses are grouped by this prefix (default 64).
    pub ipv6_prefix: u8,
    /// IPv4 addresses are grouped by this prefix (default 32: one address).
    pub ipv4_prefix: u8,
    /// The header carrying the API key (default `x-api-key`; `Authorization: Bearer` is
    /// used when this header is absent).
    pub api_key_header: String,
    /// The header naming the tenant for fair-share policies (default `x-tenant`).
    pub tenant_header: String,
    /// Default number of objects each policy group is sharded over (default 8).
    pub shards: u32,
    /// How long to wait for the coordinator before degrading (default 3000 ms); the object
    /// must start deciding within the first half (the worker's `lease::deadline`).
    pub timeout_ms: u64,
    /// Also send `X-RateLimit-Limit/Remaining/Reset`.
    pub legacy_headers: bool,
    /// Accept `"now"` (ms) in `/v1/check`: for conformance tests only. Off by default.
    pub test_clock: bool,
    /// Reject keys known to be denied in the isolate, without a coordinator round trip.
    pub deny_cache: bool,
    /// The longest API key, tenant or IP header accepted (default 256 bytes); longer ones
    /// are answered 400.
    pub max_header_bytes: usize,
    /// How often an isolate reports its counters to the stats object (default 10 s).
    pub stats_flush_ms: u64,
    /// How long a request admitted by a concurrency limit holds its slots when its release
    /// is lost (default 60 s); see the worker's `lease` module.
    pub lease_ms: u64,
    /// The longest a route may hold a request for a leaky queue's delay (default 10 s): a
    /// leaky-queue policy on a route whose queue could ask for more is refused.
    pub max_delay_ms: u64,
    /// SHA-256 (lower-case hex) of the valid API keys. When set, a request whose key is
    /// not listed counts as having no key (by IP). When empty, every route keyed by API
    /// key must also stack a policy keyed by `ip` or `global`.
    pub api_keys: BTreeSet<String>,
    /// The key table of the policies of plans: the plan of each listed key that names one,
    /// by its SHA-256 (a listed key without a plan, or a request without a listed key, is
    /// under each policy's default plan). Every plan named here is defined by every policy
    /// of plans (checked with the policies).
    pub key_plans: BTreeMap<String, String>,
    /// Callers named by a verified JWT (`[settings.jwt]`): a bearer token's subject is its
    /// key and a claim its plan. When set, `Authorization: Bearer` carries a token, never
    /// an API key (the API key header still does).
    pub jwt: Option<super::jwt::JwtSettings>,
}

fn valid_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A header name setting (lower-cased), or `default`.
fn header_name(field: &str, value: Option<String>, default: &str) -> Result<String, ConfigError> {
    let name = value.unwrap_or_else(|| default.into());
    if !valid_header_name(&name) {
        return Err(ConfigError::new(
            field,
            format!("{name:?} is not a header name"),
        ));
    }
    Ok(name.to_ascii_lowercase())
}

/// The valid keys, their plans, and each plan named with its field.
type KeyTable = (
    BTreeSet<String>,
    BTreeMap<String, String>,
    Vec<(String, String)>,
);

/// `settings.api_keys`: SHA-256 digests, 64 hex digits each (stored lower-case), each
/// listed once, alone or with a plan. Answers the valid keys, the plans of those that name
/// one, and where each plan was named (for [`super::Config`] to check it against the
/// policies of plans).
fn api_keys(listed: Option<Vec<RawApiKey>>) -> Result<KeyTable, ConfigError> {
    let mut keys = BTreeSet::new();
    let mut plans = BTreeMap::new();
    let mut named = Vec::new();
    for (i, entry) in listed.unwrap_or_default().into_iter().enumerate() {
        let (h, plan, field) = match entry {
            RawApiKey::Hash(h) => (h, None, format!("settings.api_keys[{i}]")),
            RawApiKey::WithPlan(k) => (k.sha256, k.plan, format!("settings.api_keys[{i}].sha256")),
        };
        if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ConfigError::new(
                field,
                "a key is listed by its SHA-256, 64 hex digits (`printf %s KEY | sha256sum`)",
            ));
        }
        let h = h.to_ascii_lowercase();
        if !keys.insert(h.clone()) {
            return Err(ConfigError::new(
                field,
                "listed twice: a key has one entry (and one plan)",
            ));
        }
        if let Some(plan) = plan {
            named.push((format!("settings.api_keys[{i}].plan"), plan.clone()));
            plans.insert(h, plan);
        }
    }
    Ok((keys, plans, named))
}

/// Checks `[settings]` (in this order: the first broken field is the one named) and fills
/// in the defaults; answers them with each plan the key table names, by field.
pub(super) fn validate(s: RawSettings) -> Result<(Settings, Vec<(String, String)>), ConfigError> {
    let ipv6_prefix = in_range("settings.ipv6_prefix", s.ipv6_prefix.unwrap_or(64), 1..=128)?;
    let ipv4_prefix = in_range("settings.ipv4_prefix", s.ipv4_prefix.unwrap_or(32), 1..=32)?;
    let shards = s.shards.unwrap_or(8);
    check_shards("settings.shards", shards)?;
    let timeout_ms = in_range(
        "settings.timeout_ms",
        s.timeout_ms.unwrap_or(3000),
        1..=30_000,
    )?;
    let api_key_header = header_name("settings.api_key_header", s.api_key_header, "x-api-key")?;
    let tenant_header = header_name("settings.tenant_header", s.tenant_header, "x-tenant")?;
    let max_header_bytes = in_range(
        "settings.max_header_bytes",
        s.max_header_bytes.unwrap_or(256),
        16..=8192,
    )?;
    let stats_flush_ms = in_range(
        "settings.stats_flush_ms",
        s.stats_flush_ms.unwrap_or(10_000),
        100..=86_400_000,
    )?;
    let lease_ms = in_range(
        "settings.lease_ms",
        s.lease_ms.unwrap_or(60_000),
        1000..=3_600_000,
    )?;
    let max_delay_ms = s.max_delay_ms.unwrap_or(10_000);
    if max_delay_ms > 60_000 {
        return Err(ConfigError::new(
            "settings.max_delay_ms",
            format!("{max_delay_ms} must be at most 60000"),
        ));
    }
    let (api_keys, key_plans, named) = api_keys(s.api_keys)?;
    let jwt = s.jwt.map(super::jwt::validate).transpose()?;
    let settings = Settings {
        trust_forwarded_for: s.trust_forwarded_for.unwrap_or(false),
        ipv6_prefix: ipv6_prefix as u8,
        ipv4_prefix: ipv4_prefix as u8,
        api_key_header,
        tenant_header,
        shards,
        timeout_ms,
        legacy_headers: s.legacy_headers.unwrap_or(false),
        test_clock: s.test_clock.unwrap_or(false),
        deny_cache: s.deny_cache.unwrap_or(true),
        max_header_bytes,
        stats_flush_ms,
        lease_ms,
        max_delay_ms,
        api_keys,
        key_plans,
        jwt,
    };
    Ok((settings, named))
}
