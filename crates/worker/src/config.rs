//! The edge limiter's configuration: one document (TOML, or JSON for generated configs),
//! validated once when the worker starts. A bad config is never replaced by a default: the
//! error names the field (`routes[2].policies[1]`, `policies.per-ip.limit`) and every
//! request answers 500 with it.
//!
//! See `config/tollgate.toml` for the documented format.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use tollgate::fair_share::FairShare;
use tollgate::Policy;

/// The config the worker bundles (`config/tollgate.toml`), used when the `TOLLGATE_CONFIG`
/// var is not set.
pub const BUNDLED: &str = include_str!("../config/tollgate.toml");

/// The most objects one policy group may be sharded over.
pub const MAX_SHARDS: u32 = 1024;
/// The most a route's cost may be (the core's own bound on counts).
pub const MAX_COST: u64 = tollgate::MAX_COUNT;

/// An invalid config: the path of the field at fault and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Where: `settings.ipv6_prefix`, `policies.per-ip.limit`, `routes[0].path`, ...
    pub field: String,
    /// What rule the value broke.
    pub message: String,
}

impl ConfigError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config: {}: {}", self.field, self.message)
    }
}

impl std::error::Error for ConfigError {}

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

/// What a route does when its coordinator (the Durable Object) fails or times out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// Let the request through, say so in `Tollgate-Degraded` and the stats.
    Open,
    /// Answer 503 with `Retry-After`.
    Closed,
}

/// Whether a route enforces its decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Deny with 429.
    Enforce,
    /// Decide and report (`Tollgate-Shadow` header, stats), but always forward.
    Shadow,
}

// ---------------------------------------------------------------- raw (serde) form

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    settings: RawSettings,
    #[serde(default)]
    policies: BTreeMap<String, RawPolicy>,
    #[serde(default)]
    routes: Vec<RawRoute>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSettings {
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
    api_keys: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    limit: OneOrMany,
    key: Option<KeyKind>,
    tenant: Option<String>,
    shards: Option<u32>,
    object_per_key: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    name: Option<String>,
    methods: Option<Vec<String>>,
    path: String,
    #[serde(default)]
    policies: Vec<String>,
    cost: Option<u64>,
    #[serde(default)]
    exempt: bool,
    on_error: Option<OnError>,
    mode: Option<Mode>,
    retry_after_s: Option<u64>,
}

// ---------------------------------------------------------------- validated form

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
    /// How long to wait for the coordinator before degrading (default 1000 ms).
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
    /// is lost (default 60 s); see [`crate::lease`].
    pub lease_ms: u64,
    /// The longest a route may hold a request for a leaky queue's delay (default 10 s): a
    /// leaky-queue policy on a route whose queue could ask for more is refused.
    pub max_delay_ms: u64,
    /// SHA-256 (lower-case hex) of the valid API keys. When set, a request whose key is
    /// not listed counts as having no key (by IP). When empty, every route keyed by API
    /// key must also stack a policy keyed by `ip` or `global`.
    pub api_keys: std::collections::BTreeSet<String>,
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
    /// The coordinating group this policy belongs to (index into [`Config::groups`]).
    pub group: usize,
}

/// Policies that must be decided by the same objects, because some route stacks them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Object names are `<name>#<shard>`.
    pub name: String,
    /// How many objects the group's keys are spread over (1 when its policies count by
    /// different keys: then one object must see every key to stay all-or-nothing).
    pub shards: u32,
    /// One object per key instead of shards (the naive design, kept to measure against;
    /// only for groups whose policies share one key kind).
    pub object_per_key: bool,
}

pub use crate::route::PathMatch;

/// One route.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// The route's name (stats, logs); defaults to `routes[i]`.
    pub name: String,
    /// Upper-case methods; empty means any.
    pub methods: Vec<String>,
    /// How the path matches.
    pub path: PathMatch,
    /// Indices into [`Config::policies`], the route's stack.
    pub policies: Vec<usize>,
    /// Cost units per request.
    pub cost: u64,
    /// Never touches a bucket.
    pub exempt: bool,
    /// Fail open or closed.
    pub on_error: OnError,
    /// Enforce or shadow.
    pub mode: Mode,
    /// `Retry-After` of a fail-closed 503, in seconds.
    pub retry_after_s: u64,
    /// The coordinating group of the route's policies.
    pub group: Option<usize>,
}

/// A validated config.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Shared settings.
    pub settings: Settings,
    /// Named policies, sorted by name.
    pub policies: Vec<PolicyEntry>,
    /// Coordinating groups.
    pub groups: Vec<Group>,
    /// Routes, matched in order (the first match wins).
    pub routes: Vec<Route>,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn valid_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn parse_policy(field: &str, text: &str) -> Result<Policy, ConfigError> {
    text.parse::<Policy>()
        .map_err(|e| ConfigError::new(field, e.to_string()))
}

impl Config {
    /// Parses and validates a config: JSON when it starts with `{`, TOML otherwise.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = if text.trim_start().starts_with('{') {
            let de = &mut serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let field = path_name(e.path());
                let inner = e.into_inner();
                ConfigError::new(field.unwrap_or_else(|| "(json)".into()), inner.to_string())
            })?
        } else {
            let de = toml::Deserializer::new(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let field = path_name(e.path());
                let inner = e.into_inner();
                ConfigError::new(
                    field.unwrap_or_else(|| "(toml)".into()),
                    inner.message().to_string() + &span_note(text, inner.span()),
                )
            })?
        };
        Config::validate(raw)
    }

    fn validate(raw: RawConfig) -> Result<Config, ConfigError> {
        let s = raw.settings;
        let ipv6_prefix = s.ipv6_prefix.unwrap_or(64);
        if !(1..=128).contains(&ipv6_prefix) {
            return Err(ConfigError::new(
                "settings.ipv6_prefix",
                format!("{ipv6_prefix} must be between 1 and 128"),
            ));
        }
        let ipv4_prefix = s.ipv4_prefix.unwrap_or(32);
        if !(1..=32).contains(&ipv4_prefix) {
            return Err(ConfigError::new(
                "settings.ipv4_prefix",
                format!("{ipv4_prefix} must be between 1 and 32"),
            ));
        }
        let shards = s.shards.unwrap_or(8);
        check_shards("settings.shards", shards)?;
        let timeout_ms = s.timeout_ms.unwrap_or(1000);
        if !(1..=30_000).contains(&timeout_ms) {
            return Err(ConfigError::new(
                "settings.timeout_ms",
                format!("{timeout_ms} must be between 1 and 30000"),
            ));
        }
        let api_key_header = s.api_key_header.unwrap_or_else(|| "x-api-key".into());
        if !valid_header_name(&api_key_header) {
            return Err(ConfigError::new(
                "settings.api_key_header",
                format!("{api_key_header:?} is not a header name"),
            ));
        }
        let tenant_header = s.tenant_header.unwrap_or_else(|| "x-tenant".into());
        if !valid_header_name(&tenant_header) {
            return Err(ConfigError::new(
                "settings.tenant_header",
                format!("{tenant_header:?} is not a header name"),
            ));
        }
        let max_header_bytes = s.max_header_bytes.unwrap_or(256);
        if !(16..=8192).contains(&max_header_bytes) {
            return Err(ConfigError::new(
                "settings.max_header_bytes",
                format!("{max_header_bytes} must be between 16 and 8192"),
            ));
        }
        let stats_flush_ms = s.stats_flush_ms.unwrap_or(10_000);
        if !(100..=86_400_000).contains(&stats_flush_ms) {
            return Err(ConfigError::new(
                "settings.stats_flush_ms",
                format!("{stats_flush_ms} must be between 100 and 86400000"),
            ));
        }
        let lease_ms = s.lease_ms.unwrap_or(60_000);
        if !(1000..=3_600_000).contains(&lease_ms) {
            return Err(ConfigError::new(
                "settings.lease_ms",
                format!("{lease_ms} must be between 1000 and 3600000"),
            ));
        }
        let max_delay_ms = s.max_delay_ms.unwrap_or(10_000);
        if max_delay_ms > 60_000 {
            return Err(ConfigError::new(
                "settings.max_delay_ms",
                format!("{max_delay_ms} must be at most 60000"),
            ));
        }
        let mut api_keys = std::collections::BTreeSet::new();
        for (i, h) in s.api_keys.unwrap_or_default().into_iter().enumerate() {
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ConfigError::new(
                    format!("settings.api_keys[{i}]"),
                    "a key is listed by its SHA-256, 64 hex digits (`printf %s KEY | sha256sum`)",
                ));
            }
            api_keys.insert(h.to_ascii_lowercase());
        }
        let settings = Settings {
            trust_forwarded_for: s.trust_forwarded_for.unwrap_or(false),
            ipv6_prefix: ipv6_prefix as u8,
            ipv4_prefix: ipv4_prefix as u8,
            api_key_header: api_key_header.to_ascii_lowercase(),
            tenant_header: tenant_header.to_ascii_lowercase(),
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
        };

        // Policies.
        let mut policies = Vec::with_capacity(raw.policies.len());
        let mut shard_wish = Vec::with_capacity(raw.policies.len());
        let mut per_key_wish = Vec::with_capacity(raw.policies.len());
        for (name, p) in raw.policies {
            let at = format!("policies.{name}");
            if !valid_name(&name) {
                return Err(ConfigError::new(
                    at,
                    "a policy name is 1-64 of a-z, A-Z, 0-9, '-', '_', '.'",
                ));
            }
            let texts = match p.limit {
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
            let tenant = match p.tenant {
                None => None,
                Some(t) => {
                    let field = format!("{at}.tenant");
                    let tp = parse_policy(&field, &t)?;
                    if limits.len() != 1 {
                        return Err(ConfigError::new(
                            field,
                            "a fair share needs exactly one shared limit",
                        ));
                    }
                    FairShare::new(limits[0], tp)
                        .map_err(|e| ConfigError::new(&field, e.to_string()))?;
                    Some(tp)
                }
            };
            if let Some(n) = p.shards {
                check_shards(&format!("{at}.shards"), n)?;
            }
            shard_wish.push(p.shards);
            per_key_wish.push(p.object_per_key.unwrap_or(false));
            policies.push(PolicyEntry {
                name,
                limits,
                tenant,
                key: p.key.unwrap_or(KeyKind::Ip),
                group: usize::MAX,
            });
        }

        // Routes.
        let mut routes = Vec::with_capacity(raw.routes.len());
        for (i, r) in raw.routes.into_iter().enumerate() {
            let at = format!("routes[{i}]");
            let name = r.name.unwrap_or_else(|| at.clone());
            if !valid_name(&name) && name != at {
                return Err(ConfigError::new(
                    format!("{at}.name"),
                    "a route name is 1-64 of a-z, A-Z, 0-9, '-', '_', '.'",
                ));
            }
            let mut methods = Vec::new();
            for (j, m) in r.methods.unwrap_or_default().into_iter().enumerate() {
                if m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic()) {
                    return Err(ConfigError::new(
                        format!("{at}.methods[{j}]"),
                        format!("{m:?} is not an HTTP method"),
                    ));
                }
                methods.push(m.to_ascii_uppercase());
            }
            let path = parse_path(&format!("{at}.path"), &r.path)?;
            let mut ids = Vec::with_capacity(r.policies.len());
            for (j, p) in r.policies.iter().enumerate() {
                match policies.iter().position(|e| &e.name == p) {
                    Some(k) if !ids.contains(&k) => ids.push(k),
                    Some(_) => {
                        return Err(ConfigError::new(
                            format!("{at}.policies[{j}]"),
                            format!("{p:?} is listed twice"),
                        ))
                    }
                    None => {
                        return Err(ConfigError::new(
                            format!("{at}.policies[{j}]"),
                            format!("no policy named {p:?} in [policies]"),
                        ))
                    }
                }
            }
            if r.exempt && !ids.is_empty() {
                return Err(ConfigError::new(
                    format!("{at}.policies"),
                    "an exempt route never touches a bucket: give it no policies",
                ));
            }
            if !r.exempt && ids.is_empty() {
                return Err(ConfigError::new(
                    format!("{at}.policies"),
                    "a route needs at least one policy (or exempt = true)",
                ));
            }
            if settings.api_keys.is_empty() {
                check_key_bypass(&at, &ids, &policies)?;
            }
            let cost = r.cost.unwrap_or(1);
            if cost == 0 || cost > MAX_COST {
                return Err(ConfigError::new(
                    format!("{at}.cost"),
                    format!("{cost} must be between 1 and {MAX_COST}"),
                ));
            }
            for &k in &ids {
                check_delay(&policies[k], settings.max_delay_ms)?;
                let cap = capacity(&policies[k]);
                if cost > cap {
                    return Err(ConfigError::new(
                        format!("{at}.cost"),
                        format!(
                            "{cost} exceeds the capacity {cap} of policy {:?}: no request could pass",
                            policies[k].name
                        ),
                    ));
                }
            }
            let retry_after_s = r.retry_after_s.unwrap_or(1);
            if !(1..=86_400).contains(&retry_after_s) {
                return Err(ConfigError::new(
                    format!("{at}.retry_after_s"),
                    format!("{retry_after_s} must be between 1 and 86400"),
                ));
            }
            routes.push(Route {
                name,
                methods,
                path,
                policies: ids,
                cost,
                exempt: r.exempt,
                on_error: r.on_error.unwrap_or(OnError::Closed),
                mode: r.mode.unwrap_or(Mode::Enforce),
                retry_after_s,
                group: None,
            });
        }

        // Groups: policies stacked on one route are decided by the same object (union-find).
        let mut parent: Vec<usize> = (0..policies.len()).collect();
        fn find(p: &mut [usize], i: usize) -> usize {
            let mut r = i;
            while p[r] != r {
                r = p[r];
            }
            p[i] = r;
            r
        }
        for r in &routes {
            for w in r.policies.windows(2) {
                let (a, b) = (find(&mut parent, w[0]), find(&mut parent, w[1]));
                if a != b {
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
        let mut groups: Vec<Group> = Vec::new();
        let mut root_group: BTreeMap<usize, usize> = BTreeMap::new();
        for (i, policy) in policies.iter_mut().enumerate() {
            let root = find(&mut parent, i);
            let g = *root_group.entry(root).or_insert_with(|| {
                groups.push(Group {
                    name: String::new(),
                    shards: 0,
                    object_per_key: false,
                });
                groups.len() - 1
            });
            policy.group = g;
        }
        for (g, group) in groups.iter_mut().enumerate() {
            let members: Vec<&PolicyEntry> = policies.iter().filter(|p| p.group == g).collect();
            group.name = members
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join("+");
            let same_key = members.iter().all(|p| p.key == members[0].key);
            group.shards = if !same_key || members[0].key == KeyKind::Global {
                1
            } else {
                (0..policies.len())
                    .filter(|&i| policies[i].group == g)
                    .filter_map(|i| shard_wish[i])
                    .max()
                    .unwrap_or(shards)
            };
            let per_key = (0..policies.len()).any(|i| policies[i].group == g && per_key_wish[i]);
            if per_key && !same_key {
                return Err(ConfigError::new(
                    format!("policies.{}.object_per_key", members[0].name),
                    "one object per key needs every policy stacked with it to count by the same key",
                ));
            }
            group.object_per_key = per_key;
        }
        for r in &mut routes {
            r.group = r.policies.first().map(|&k| policies[k].group);
        }
        Ok(Config {
            settings,
            policies,
            groups,
            routes,
        })
    }

    /// The policy named `name`.
    pub fn policy(&self, name: &str) -> Option<(usize, &PolicyEntry)> {
        self.policies
            .iter()
            .enumerate()
            .find(|(_, p)| p.name == name)
    }
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

/// A route counted only by API keys the edge cannot check lets a client invent a key per
/// request, each with a fresh bucket: unless `settings.api_keys` lists the valid keys, such
/// a route must also stack a policy counted by `ip` (or `global`).
fn check_key_bypass(at: &str, ids: &[usize], policies: &[PolicyEntry]) -> Result<(), ConfigError> {
    let by_key = ids
        .iter()
        .map(|&k| &policies[k])
        .find(|p| matches!(p.key, KeyKind::ApiKey | KeyKind::IpApiKey));
    let bounded = ids
        .iter()
        .any(|&k| matches!(policies[k].key, KeyKind::Ip | KeyKind::Global));
    match by_key {
        Some(p) if !bounded => Err(ConfigError::new(
            format!("{at}.policies"),
            format!(
                "policy {:?} counts by {}, and invented keys would each get a fresh bucket: \
                 stack a policy with key = \"ip\" on this route, or list the valid keys' \
                 SHA-256 in settings.api_keys",
                p.name,
                p.key.name()
            ),
        )),
        _ => Ok(()),
    }
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
fn check_delay(entry: &PolicyEntry, max_ms: u64) -> Result<(), ConfigError> {
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

fn check_shards(field: &str, n: u32) -> Result<(), ConfigError> {
    if (1..=MAX_SHARDS).contains(&n) {
        Ok(())
    } else {
        Err(ConfigError::new(
            field,
            format!("{n} must be between 1 and {MAX_SHARDS}"),
        ))
    }
}

fn parse_path(field: &str, p: &str) -> Result<PathMatch, ConfigError> {
    PathMatch::parse(p).map_err(|e| ConfigError::new(field, e))
}

impl crate::route::Routed for Route {
    fn methods(&self) -> &[String] {
        &self.methods
    }
    fn path(&self) -> &PathMatch {
        &self.path
    }
}

/// `policies.a.key`, `routes[0].cost`: the path serde was at when it failed (None at the
/// top level, e.g. a syntax error).
fn path_name(path: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

fn span_note(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(r) => {
            let line = text[..r.start.min(text.len())].matches('\n').count() + 1;
            format!(" (line {line})")
        }
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_config_is_valid() {
        let c = Config::parse(BUNDLED).unwrap();
        assert!(!c.routes.is_empty());
    }

    #[test]
    fn errors_name_the_field() {
        let e = Config::parse("[policies.a]\nlimit = \"10/fortnight\"\n").unwrap_err();
        assert_eq!(e.field, "policies.a.limit");
        assert!(e.message.contains("unknown unit"), "{e}");
        let e = Config::parse(
            "[policies.a]\nlimit = \"10/s\"\n[[routes]]\npath = \"/\"\npolicies = [\"b\"]\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "routes[0].policies[0]");
        let e = Config::parse("[settings]\nipv6_prefix = 200\n").unwrap_err();
        assert_eq!(e.field, "settings.ipv6_prefix");
        let e = Config::parse("[settings]\nnope = 1\n").unwrap_err();
        assert!(e.field.starts_with("settings"), "{e}");
        assert!(e.message.contains("nope"), "{e}");
        let e = Config::parse("[policies.a]\nlimit = \"1/s\"\nkey = \"cookie\"\n").unwrap_err();
        assert_eq!(e.field, "policies.a.key", "{e}");
        let e = Config::parse(r#"{"routes": [{"path": "/", "cost": "two"}]}"#).unwrap_err();
        assert_eq!(e.field, "routes[0].cost", "{e}");
        let e = Config::parse("[settings\n").unwrap_err();
        assert_eq!(e.field, "(toml)", "{e}");
        let e = Config::parse(r#"{"routes": [{"path": "api"}]}"#).unwrap_err();
        assert_eq!(e.field, "routes[0].path");
        let e = Config::parse("[policies.a]\nlimit = \"10/s\"\ntenant = \"20/s\"\n").unwrap_err();
        assert_eq!(e.field, "policies.a.tenant");
        let e = Config::parse(
            "[policies.a]\nlimit = \"10/s\"\n[[routes]]\npath = \"/\"\npolicies = [\"a\"]\ncost = 11\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "routes[0].cost");
        let e = Config::parse(
            "[policies.a]\nlimit = \"10/s\"\n[[routes]]\npath = \"/x\"\nexempt = true\npolicies = [\"a\"]\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "routes[0].policies");
    }

    #[test]
    fn api_key_routes_need_an_ip_policy_or_listed_keys() {
        let base = "[policies.key]\nlimit = \"10/s\"\nkey = \"api-key\"\n\
                    [policies.ip]\nlimit = \"100/s\"\n";
        let e = Config::parse(&format!(
            "{base}[[routes]]\npath = \"/k\"\npolicies = [\"key\"]\n"
        ))
        .unwrap_err();
        assert_eq!(e.field, "routes[0].policies");
        assert!(e.message.contains("invented keys"), "{e}");
        assert!(Config::parse(&format!(
            "{base}[[routes]]\npath = \"/k\"\npolicies = [\"key\", \"ip\"]\n"
        ))
        .is_ok());
        let listed = format!("[settings]\napi_keys = [\"{}\"]\n", "ab".repeat(32));
        assert!(Config::parse(&format!(
            "{listed}{base}[[routes]]\npath = \"/k\"\npolicies = [\"key\"]\n"
        ))
        .is_ok());
        let e = Config::parse("[settings]\napi_keys = [\"nope\"]\n").unwrap_err();
        assert_eq!(e.field, "settings.api_keys[0]");
    }

    #[test]
    fn leaky_queues_must_fit_the_delay_bound() {
        let q = |limit: &str, max: u64| {
            Config::parse(&format!(
                "[settings]\nmax_delay_ms = {max}\n[policies.q]\nlimit = \"{limit}\"\n\
                 [[routes]]\npath = \"/q\"\npolicies = [\"q\"]\n"
            ))
        };
        // 4 slots at 2/s: the fourth leaves after 2 s.
        assert!(q("leaky-queue 2/1s burst 4", 2000).is_ok());
        let e = q("leaky-queue 2/1s burst 4", 1999).unwrap_err();
        assert_eq!(e.field, "policies.q.limit");
        assert!(e.message.contains("2000 ms"), "{e}");
        assert!(
            q("token-bucket 2/1s burst 400", 0).is_ok(),
            "only queues delay"
        );
    }

    #[test]
    fn groups_follow_stacks() {
        let c = Config::parse(
            r#"
            [policies.ip]
            limit = "10/s"
            shards = 4
            [policies.ip-hour]
            limit = "fixed-window 100/h"
            [policies.key]
            limit = "100/s"
            key = "api-key"
            [policies.global]
            limit = "1000/s"
            key = "global"
            [policies.lone]
            limit = "1/s"
            [[routes]]
            path = "/a"
            policies = ["ip", "ip-hour"]
            [[routes]]
            path = "/b"
            policies = ["key", "global"]
            "#,
        )
        .unwrap();
        let g = |n: &str| &c.groups[c.policy(n).unwrap().1.group];
        assert_eq!(g("ip"), g("ip-hour"));
        assert_eq!(g("ip").shards, 4);
        assert_eq!(g("key"), g("global"));
        assert_eq!(g("key").shards, 1, "mixed keys: one object");
        assert_eq!(g("lone").shards, 8);
        assert_ne!(g("lone").name, g("ip").name);
    }
}
