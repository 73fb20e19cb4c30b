//! The configuration: envoyproxy/ratelimit's YAML format, read unchanged, and its
//! validation rules, with errors that name the file and the path in it.
//!
//! One file holds one `domain` and a tree of `descriptors`; each node has a `key`, an
//! optional `value` (`*` matches any run of characters, anywhere in it), an optional
//! `rate_limit` (`unit` + `requests_per_unit`, or `unlimited`, with `name` and `replaces`),
//! flags (`shadow_mode`, `detailed_metric`, `value_to_metric`, `share_threshold`) and nested
//! `descriptors`. Matching lives in [`crate::matching`].
//!
//! The extension: `rate_limit: { policy: "<tollgate policy>" }` instead of `unit` and
//! `requests_per_unit` (`"sliding-window 600/10min"`, `"10/s burst 40"`, ...), parsed by the
//! core's [`tollgate::Policy`]; and a fair share by a descriptor entry, `tenant_policy`
//! (with an optional `tenant_key`): see [`TenantShare`].

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_norway::Value;
use tollgate::fair_share::FairShare;
use tollgate::{Policy, Quota};

mod yaml;

use yaml::Loader;

/// The window units of Envoy's `RateLimit.Unit`, with their lengths as envoyproxy/ratelimit
/// counts them (a month is 30 days, a year 365).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3600 seconds.
    Hour,
    /// 86400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's length in seconds.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// The name as the YAML and the proto spell it (upper case; the YAML reads any case).
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// A unit by name, in any case (`UNKNOWN` and anything else: `None`).
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(name))
    }

    /// The unit whose length is exactly `window` nanoseconds, if any.
    pub fn of_window(window: u64) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.seconds() * tollgate::NANOS_PER_SEC == window)
    }
}

/// What a matched rule limits with.
#[derive(Clone, Debug, PartialEq)]
pub enum Limit {
    /// `unlimited: true`: always OK, never counted.
    Unlimited,
    /// `requests_per_unit: 0`: always OVER_LIMIT (envoyproxy/ratelimit's way to block).
    Block(Unit),
    /// A counted limit: the core policy (a fixed window of one unit for `unit` +
    /// `requests_per_unit`), and the unit it was written in, if any.
    Counted {
        /// The policy that decides.
        policy: Policy,
        /// The unit of a `unit`/`requests_per_unit` limit (`None` for a `policy:` string).
        unit: Option<Unit>,
    },
}

impl Limit {
    /// The limit of `requests_per_unit` per `unit`, as envoyproxy/ratelimit counts it: a
    /// fixed window of one unit, aligned to the clock (0 blocks).
    pub fn per_unit(requests: u32, unit: Unit) -> Limit {
        match NonZeroU64::new(u64::from(requests)) {
            None => Limit::Block(unit),
            Some(n) => {
                let quota = Quota::new(n, Duration::from_secs(unit.seconds()))
                    .expect("every unit is a valid window and a u32 a valid count");
                Limit::Counted {
                    policy: Policy::fixed_window(quota),
                    unit: Some(unit),
                }
            }
        }
    }
}

/// One `rate_limit` block with the descriptor's flags.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// The rule's stats key: the domain and the path of `key` or `key_value` to it, joined
    /// with `.` (`messaging.message_type_marketing.to_number`).
    pub full_key: String,
    /// What it limits with.
    pub limit: Limit,
    /// `rate_limit.name` (what `replaces` refers to), if any.
    pub name: Option<String>,
    /// The names this rule replaces.
    pub replaces: Vec<String>,
    /// `shadow_mode`: the rule counts and reports, but never denies.
    pub shadow_mode: bool,
    /// `detailed_metric`: the metric key carries the request's values.
    pub detailed_metric: bool,
    /// The extension's fair share (`tenant_policy`): each tenant's own window on top of
    /// this rule's limit, which every tenant then shares.
    pub fair_share: Option<TenantShare>,
}

/// A fair share by a descriptor entry: the rule's limit is shared by every value of that
/// entry (the tenants), and each tenant also has its own window; a request passes only
/// when both have room (the core's [`FairShare`], decided all or nothing with the
/// request's other limits). A tenant that is empty or `default` has no window of its own
/// (the core's [`tollgate::fair_share::skips_tenant_window`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TenantShare {
    /// The shared policy and the per-tenant one, validated by the core (a tenant may not
    /// have more than the shared limit).
    pub policies: FairShare,
    /// `tenant_key`: the key of the descriptor entry whose value is the tenant (`None`:
    /// the entry the rule is on, the descriptor's last).
    pub tenant_key: Option<String>,
}

/// A node of a domain's descriptor tree.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// Children by `key` or `key_value` (a wildcard child also by its pattern).
    pub children: HashMap<String, Node>,
    /// Wildcard children in file order: the pattern (`key_val*`) and its parts split at `*`.
    pub wildcards: Vec<(String, Vec<String>)>,
    /// The rule at this node, if it has a `rate_limit`.
    pub rule: Option<Arc<Rule>>,
    /// `value_to_metric`.
    pub value_to_metric: bool,
    /// `share_threshold`: every value matching this wildcard shares one counter.
    pub share_threshold: bool,
}

/// Every loaded domain.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Domain name to its descriptor tree (the root node has no rule).
    pub domains: HashMap<String, Node>,
}

/// Why a configuration was not loaded: the file, the path in it and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or the name given to a text).
    pub file: String,
    /// Where in the file (`descriptors[1].rate_limit.unit`), empty for the whole file.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.file, self.reason)
        } else {
            write!(f, "{}: {}: {}", self.file, self.path, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Adds one file's text (named `file` in errors). A domain already loaded is an error
    /// (envoyproxy/ratelimit's default; it has no merging here).
    pub fn add(&mut self, file: &str, text: &str) -> Result<(), ConfigError> {
        let loader = Loader { file };
        let root: Value = serde_norway::from_str(text)
            .map_err(|e| loader.err("", format!("error loading config file: {e}")))?;
        let m = loader.mapping(&root, "", &["domain", "descriptors"])?;
        let domain = loader.string(m, "", "domain")?;
        if domain.is_empty() {
            return Err(loader.err("domain", "config file cannot have empty domain"));
        }
        if self.domains.contains_key(&domain) {
            return Err(loader.err(
                "domain",
                format!("duplicate domain '{domain}' in config file"),
            ));
        }
        let mut node = Node::default();
        let list = loader.list(m, "", "descriptors")?;
        loader.descriptors(&mut node, list, "descriptors", &format!("{domain}."))?;
        self.domains.insert(domain, node);
        Ok(())
    }

    /// A configuration from texts (name, YAML), in order.
    pub fn from_texts<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (name, text) in files {
            config.add(name, text)?;
        }
        Ok(config)
    }

    /// What `--check-config` says of a valid configuration loaded from `dir`: how many
    /// domains, and their names in order.
    pub fn summary(&self, dir: &Path) -> String {
        let mut domains: Vec<&str> = self.domains.keys().map(String::as_str).collect();
        domains.sort();
        format!(
            "{} domain(s) from {}: {}",
            domains.len(),
            dir.display(),
            domains.join(", ")
        )
    }

    /// Loads every `*.yaml` and `*.yml` file of `dir` (not recursing; files whose name
    /// starts with `.` are skipped), in name order.
    pub fn load_dir(dir: &Path) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for path in config_files(dir)? {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(&path).map_err(|e| ConfigError {
                file: name.clone(),
                path: String::new(),
                reason: format!("cannot read: {e}"),
            })?;
            config.add(&name, &text)?;
        }
        Ok(config)
    }
}

/// The configuration files of `dir`, in name order.
pub fn config_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let entries = std::fs::read_dir(dir).map_err(|e| ConfigError {
        file: dir.display().to_string(),
        path: String::new(),
        reason: format!("cannot read the directory: {e}"),
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !name.starts_with('.')
                && (name.ends_with(".yaml") || name.ends_with(".yml"))
                && p.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}
