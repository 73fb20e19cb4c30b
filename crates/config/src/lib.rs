#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;

use serde::Deserialize;

mod groups;
mod jwt;
mod policies;
mod routes;
mod settings;
#[cfg(test)]
mod tests;

pub use groups::Group;
pub use jwt::{
    jwk_key, InvalidToken, JwtKeyConfig, JwtKeyData, JwtSettings, MAX_JWKS_BYTES, MAX_JWT_KEYS,
};
pub use policies::{capacity, max_delay_ms, KeyKind, PolicyEntry, PolicyPlans, MAX_PLANS};
pub use routes::{Mode, OnError, PathMatch, Route, SettleRule};
pub use settings::Settings;

/// The most objects one policy group may be sharded over.
pub const MAX_SHARDS: u32 = 1024;
/// The most a route's cost may be (the core's own bound on counts).
pub const MAX_COST: u64 = tollgate::MAX_COUNT;

/// The var naming the policies the load test decides with one object per key (see
/// [`Config::objects_per_key`]).
pub const OBJECT_PER_KEY_VAR: &str = "BENCH_OBJECT_PER_KEY";

/// An invalid config: the path of the field at fault and what is wrong with it. The shape
/// every front end answers with (the tower layer's builder too), from `tollgate-http`.
pub use tollgate_http::config::ConfigError;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    settings: settings::RawSettings,
    #[serde(default)]
    policies: BTreeMap<String, policies::RawPolicy>,
    #[serde(default)]
    routes: Vec<routes::RawRoute>,
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
        let (settings, key_plans) = settings::validate(raw.settings)?;
        let (mut policies, shard_wish) = policies::validate(raw.policies)?;
        check_key_plans(&key_plans, &policies)?;
        let mut routes = routes::validate(raw.routes, &settings, &policies)?;
        let groups = groups::assign(&mut policies, &shard_wish, &mut routes, settings.shards);
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

    /// The load test's comparison: decides the groups of the policies named in `names`
    /// (comma-separated, the [`OBJECT_PER_KEY_VAR`] var) with one object per key instead
    /// of shards. Not part of the config document: the naive design is only kept to
    /// measure against (`bench/config.json`).
    pub fn objects_per_key(&mut self, names: &str) -> Result<(), ConfigError> {
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some((_, entry)) = self.policy(name) else {
                return Err(ConfigError::new(
                    OBJECT_PER_KEY_VAR,
                    format!("no policy named {name:?}"),
                ));
            };
            let group = entry.group;
            if !groups::one_key(&self.policies, group) {
                return Err(ConfigError::new(
                    OBJECT_PER_KEY_VAR,
                    format!(
                        "{name:?}: one object per key needs every policy stacked with it to count by the same key"
                    ),
                ));
            }
            self.groups[group].object_per_key = true;
        }
        Ok(())
    }
}

/// Every plan the key table names (`(field, plan)`) is one of every policy of plans: a key
/// table is shared by the policies of plans, so a plan missing from one of them would
/// leave that policy without limits for the key.
fn check_key_plans(
    named: &[(String, String)],
    policies: &[PolicyEntry],
) -> Result<(), ConfigError> {
    for (field, plan) in named {
        let with_plans = policies
            .iter()
            .filter_map(|p| Some((&p.name, p.plans.as_ref()?)));
        let mut any = false;
        for (name, plans) in with_plans {
            any = true;
            if plans.plans.get(plan).is_err() {
                return Err(ConfigError::new(
                    field,
                    format!("no plan named {plan:?} in policies.{name}.plans"),
                ));
            }
        }
        if !any {
            return Err(ConfigError::new(
                field,
                "no policy has plans: give a policy plans, or list the key without one",
            ));
        }
    }
    Ok(())
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// `value` if it lies in `range`, else an error naming `field`.
fn in_range<T: PartialOrd + fmt::Display>(
    field: &str,
    value: T,
    range: RangeInclusive<T>,
) -> Result<T, ConfigError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::new(
            field,
            format!(
                "{value} must be between {} and {}",
                range.start(),
                range.end()
            ),
        ))
    }
}

fn check_shards(field: &str, n: u32) -> Result<(), ConfigError> {
    in_range(field, n, 1..=MAX_SHARDS).map(|_| ())
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
