//! `[[routes]]`: which requests are limited, by which policies, at what cost, and what
//! happens when the coordinator fails.

use serde::Deserialize;

use super::jwt::InvalidToken;
use super::policies::{capacity, check_delay, KeyKind, PolicyEntry};
use super::{in_range, valid_name, ConfigError, Settings, MAX_COST};
pub use tollgate_http::route::PathMatch;
pub use tollgate_http::settle::SettleRule;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
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
    settle: Option<RawSettle>,
    on_invalid_token: Option<InvalidToken>,
}

/// `[routes.settle]`: how the route settles a request's reservation from its response
/// ([`SettleRule`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettle {
    cost_header: Option<String>,
    #[serde(default)]
    count_statuses: Vec<u16>,
    #[serde(default)]
    refund_statuses: Vec<u16>,
}

/// One route.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// The route's name (stats, logs); defaults to `routes[i]`.
    pub name: String,
    /// Upper-case methods; empty means any.
    pub methods: Vec<String>,
    /// How the path matches.
    pub path: PathMatch,
    /// Indices into [`super::Config::policies`], the route's stack.
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
    /// Reserve `cost` as an estimate and settle it from the response by this rule
    /// (`None`: the cost is charged once, before the request).
    pub settle: Option<SettleRule>,
    /// What a refused bearer token gets on this route (`None`: `settings.jwt.on_invalid`).
    pub on_invalid_token: Option<InvalidToken>,
}

impl tollgate_http::route::Routed for Route {
    fn methods(&self) -> &[String] {
        &self.methods
    }
    fn path(&self) -> &PathMatch {
        &self.path
    }
}

/// Checks every route against the settings and the policies (not yet grouped).
pub(super) fn validate(
    raw: Vec<RawRoute>,
    settings: &Settings,
    policies: &[PolicyEntry],
) -> Result<Vec<Route>, ConfigError> {
    raw.into_iter()
        .enumerate()
        .map(|(i, r)| route(&format!("routes[{i}]"), r, settings, policies))
        .collect()
}

fn route(
    at: &str,
    r: RawRoute,
    settings: &Settings,
    policies: &[PolicyEntry],
) -> Result<Route, ConfigError> {
    let name = r.name.unwrap_or_else(|| at.to_string());
    if !valid_name(&name) && name != at {
        return Err(ConfigError::new(
            format!("{at}.name"),
            "a route name is 1-64 of a-z, A-Z, 0-9, '-', '_', '.'",
        ));
    }
    let methods = methods(at, r.methods.unwrap_or_default())?;
    let path = PathMatch::parse(&r.path).map_err(|e| ConfigError::new(format!("{at}.path"), e))?;
    let ids = stack(at, &r.policies, policies)?;
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
        check_key_bypass(at, &ids, policies)?;
    }
    // A key's override replaces the limits of one policy of plans (the object keeps one
    // per key and policy; the route's first such policy is the one it applies to).
    let mut with_plans = ids.iter().filter(|&&k| policies[k].plans.is_some());
    if let Some(&second) = with_plans.nth(1) {
        let j = ids.iter().position(|&k| k == second).unwrap_or(0);
        return Err(ConfigError::new(
            format!("{at}.policies[{j}]"),
            format!(
                "{:?}: a route stacks at most one policy of plans",
                policies[second].name
            ),
        ));
    }
    let cost = cost(at, r.cost.unwrap_or(1), &ids, settings, policies)?;
    let retry_after_s = in_range(
        &format!("{at}.retry_after_s"),
        r.retry_after_s.unwrap_or(1),
        1..=86_400,
    )?;
    let settle = match r.settle {
        Some(raw) => Some(settle(&format!("{at}.settle"), raw, &ids, policies)?),
        None => None,
    };
    if r.on_invalid_token.is_some() && settings.jwt.is_none() {
        return Err(ConfigError::new(
            format!("{at}.on_invalid_token"),
            "no [settings.jwt]: the route reads no tokens",
        ));
    }
    Ok(Route {
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
        settle,
        on_invalid_token: r.on_invalid_token,
    })
}

/// `routes[i].settle`: a header name, statuses 100-599, one status list at most, something
/// to settle by, and a stack whose every limit can be settled (not a concurrency limit, whose
/// slots a release gives back, nor a leaky queue, a shaper that has already delayed the
/// request by its cost).
fn settle(
    at: &str,
    raw: RawSettle,
    ids: &[usize],
    policies: &[PolicyEntry],
) -> Result<SettleRule, ConfigError> {
    if let Some(h) = &raw.cost_header {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if h.is_empty() || h.len() > 64 || !h.bytes().all(token) {
            return Err(ConfigError::new(
                format!("{at}.cost_header"),
                format!("{h:?} is not a header name (1-64 of a-z, 0-9 and !#$%&'*+-.^_`|~)"),
            ));
        }
    }
    for (field, list) in [
        ("count_statuses", &raw.count_statuses),
        ("refund_statuses", &raw.refund_statuses),
    ] {
        for (j, s) in list.iter().enumerate() {
            in_range(&format!("{at}.{field}[{j}]"), u64::from(*s), 100..=599)?;
        }
    }
    if !raw.count_statuses.is_empty() && !raw.refund_statuses.is_empty() {
        return Err(ConfigError::new(
            format!("{at}.refund_statuses"),
            "name count_statuses or refund_statuses, not both: a status counted by one and \
             not listed by the other would be ambiguous",
        ));
    }
    if raw.cost_header.is_none() && raw.count_statuses.is_empty() && raw.refund_statuses.is_empty()
    {
        return Err(ConfigError::new(
            at,
            "settles by nothing: name a cost_header, count_statuses or refund_statuses",
        ));
    }
    for &k in ids {
        let entry = &policies[k];
        let refuse = |why: String| ConfigError::new(at, format!("policy {:?}: {why}", entry.name));
        if entry.tenant.is_some() {
            return Err(refuse(
                "a fair share's tenant windows are not settled: give this route a plain policy"
                    .into(),
            ));
        }
        for p in entry.every_limit() {
            tollgate::settle::check_reservable(p).map_err(|e| refuse(e.to_string()))?;
            if p.holds_slots() {
                return Err(refuse(
                    "a concurrency limit's slots are given back when the response ends: \
                     there is nothing to settle"
                        .into(),
                ));
            }
        }
    }
    Ok(SettleRule {
        cost_header: raw.cost_header.map(|h| h.to_ascii_lowercase()),
        count_statuses: raw.count_statuses,
        refund_statuses: raw.refund_statuses,
    })
}

/// `routes[i].methods`: HTTP method names, upper-cased.
fn methods(at: &str, raw: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let mut methods = Vec::with_capacity(raw.len());
    for (j, m) in raw.into_iter().enumerate() {
        if m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(ConfigError::new(
                format!("{at}.methods[{j}]"),
                format!("{m:?} is not an HTTP method"),
            ));
        }
        methods.push(m.to_ascii_uppercase());
    }
    Ok(methods)
}

/// `routes[i].policies`: the stack, as indices of named policies, each at most once.
fn stack(at: &str, names: &[String], policies: &[PolicyEntry]) -> Result<Vec<usize>, ConfigError> {
    let mut ids = Vec::with_capacity(names.len());
    for (j, p) in names.iter().enumerate() {
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
    Ok(ids)
}

/// `routes[i].cost`: at least 1, and within every stacked policy's capacity (whose leaky
/// queues must also fit `settings.max_delay_ms`).
fn cost(
    at: &str,
    cost: u64,
    ids: &[usize],
    settings: &Settings,
    policies: &[PolicyEntry],
) -> Result<u64, ConfigError> {
    let cost = in_range(&format!("{at}.cost"), cost, 1..=MAX_COST)?;
    for &k in ids {
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
    Ok(cost)
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
