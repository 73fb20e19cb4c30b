//! Reading one file's YAML tree: every key checked against envoyproxy/ratelimit's (and the
//! `policy` and `tenant_policy` extensions'), every error naming the path in the file.

use std::sync::Arc;

use serde_norway::{Mapping, Value};
use tollgate::fair_share::FairShare;
use tollgate::{Algorithm, Policy};

use super::{ConfigError, Limit, Node, Rule, TenantShare, Unit};

const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "quota_mode",
];
const RATE_LIMIT_KEYS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "policy",
    "tenant_policy",
    "tenant_key",
];

pub(super) struct Loader<'a> {
    pub(super) file: &'a str,
}

impl Loader<'_> {
    pub(super) fn err(&self, path: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_string(),
            path: path.to_string(),
            reason: reason.into(),
        }
    }

    pub(super) fn mapping<'v>(
        &self,
        v: &'v Value,
        path: &str,
        known: &[&str],
    ) -> Result<&'v serde_norway::Mapping, ConfigError> {
        let Value::Mapping(m) = v else {
            return Err(self.err(path, "expected a mapping"));
        };
        for k in m.keys() {
            let Value::String(k) = k else {
                return Err(self.err(path, format!("key {k:?} is not a string")));
            };
            if !known.contains(&k.as_str()) {
                return Err(self.err(&join(path, k), format!("unknown key '{k}'")));
            }
        }
        Ok(m)
    }

    pub(super) fn string(
        &self,
        m: &serde_norway::Mapping,
        path: &str,
        key: &str,
    ) -> Result<String, ConfigError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            // YAML reads `value: 50` as a number; the Go loader reads it as the text.
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(Value::Bool(b)) => Ok(b.to_string()),
            Some(_) => Err(self.err(&join(path, key), "expected a string")),
        }
    }

    fn flag(&self, m: &serde_norway::Mapping, path: &str, key: &str) -> Result<bool, ConfigError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.err(&join(path, key), "expected true or false")),
        }
    }

    pub(super) fn list<'v>(
        &self,
        m: &'v serde_norway::Mapping,
        path: &str,
        key: &str,
    ) -> Result<&'v [Value], ConfigError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Sequence(s)) => Ok(s),
            Some(_) => Err(self.err(&join(path, key), "expected a list")),
        }
    }

    pub(super) fn descriptors(
        &self,
        node: &mut Node,
        list: &[Value],
        path: &str,
        parent_key: &str,
    ) -> Result<(), ConfigError> {
        for (i, d) in list.iter().enumerate() {
            let here = format!("{path}[{i}]");
            let m = self.mapping(d, &here, DESCRIPTOR_KEYS)?;
            let key = self.string(m, &here, "key")?;
            if key.is_empty() {
                return Err(self.err(&join(&here, "key"), "descriptor has empty key"));
            }
            let value = self.string(m, &here, "value")?;
            let final_key = if value.is_empty() {
                key.clone()
            } else {
                format!("{key}_{value}")
            };
            let full_key = format!("{parent_key}{final_key}");
            if node.children.contains_key(&final_key) {
                return Err(self.err(
                    &here,
                    format!("duplicate descriptor composite key '{full_key}'"),
                ));
            }
            if self.flag(m, &here, "quota_mode")? {
                return Err(self.err(
                    &join(&here, "quota_mode"),
                    "quota_mode is not supported by tollgate-rls",
                ));
            }
            let shadow_mode = self.flag(m, &here, "shadow_mode")?;
            let detailed_metric = self.flag(m, &here, "detailed_metric")?;
            let share_threshold = self.flag(m, &here, "share_threshold")?;
            if share_threshold && !final_key.contains('*') {
                return Err(self.err(
                    &join(&here, "share_threshold"),
                    format!("share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"),
                ));
            }
            let rule = match m.get("rate_limit") {
                None | Some(Value::Null) => None,
                Some(rl) => Some(Arc::new(self.rate_limit(
                    rl,
                    &join(&here, "rate_limit"),
                    full_key.clone(),
                    shadow_mode,
                    detailed_metric,
                )?)),
            };
            let mut child = Node {
                rule,
                value_to_metric: self.flag(m, &here, "value_to_metric")?,
                share_threshold,
                ..Node::default()
            };
            let nested = self.list(m, &here, "descriptors")?;
            self.descriptors(
                &mut child,
                nested,
                &join(&here, "descriptors"),
                &format!("{full_key}."),
            )?;
            if final_key.contains('*') {
                let parts = final_key.split('*').map(str::to_string).collect();
                node.wildcards.push((final_key.clone(), parts));
            }
            node.children.insert(final_key, child);
        }
        Ok(())
    }

    fn rate_limit(
        &self,
        v: &Value,
        path: &str,
        full_key: String,
        shadow_mode: bool,
        detailed_metric: bool,
    ) -> Result<Rule, ConfigError> {
        let m = self.mapping(v, path, RATE_LIMIT_KEYS)?;
        let unlimited = self.flag(m, path, "unlimited")?;
        let unit_text = self.string(m, path, "unit")?;
        let unit = Unit::parse(&unit_text);
        let policy_text = self.string(m, path, "policy")?;
        let requests = match m.get("requests_per_unit") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Some(n),
                None => {
                    return Err(self.err(
                        &join(path, "requests_per_unit"),
                        format!("{n} is not a count from 0 to {}", u32::MAX),
                    ))
                }
            },
            Some(_) => return Err(self.err(&join(path, "requests_per_unit"), "expected a number")),
        };
        let limit = if unlimited {
            if unit.is_some() {
                return Err(self.err(
                    &join(path, "unit"),
                    "should not specify rate limit unit when unlimited",
                ));
            }
            if !policy_text.is_empty() {
                return Err(self.err(
                    &join(path, "policy"),
                    "should not specify a policy when unlimited",
                ));
            }
            Limit::Unlimited
        } else if !policy_text.is_empty() {
            if !unit_text.is_empty() || requests.is_some() {
                return Err(self.err(
                    &join(path, "policy"),
                    "a policy replaces unit and requests_per_unit: give one or the other",
                ));
            }
            let policy = self.policy(&policy_text, &join(path, "policy"))?;
            Limit::Counted { policy, unit: None }
        } else {
            let Some(unit) = unit else {
                return Err(self.err(
                    &join(path, "unit"),
                    format!("invalid rate limit unit '{unit_text}'"),
                ));
            };
            Limit::per_unit(requests.unwrap_or(0), unit)
        };
        let fair_share = self.fair_share(m, path, &limit)?;
        let name = self.string(m, path, "name")?;
        let replaces = self.replaces(m, path, &name)?;
        Ok(Rule {
            full_key,
            limit,
            name: (!name.is_empty()).then_some(name),
            replaces,
            shadow_mode,
            detailed_metric,
            fair_share,
        })
    }

    /// The names a rule at `path` named `name` `replaces` (none empty, not its own).
    fn replaces(&self, m: &Mapping, path: &str, name: &str) -> Result<Vec<String>, ConfigError> {
        let mut replaces = Vec::new();
        for (i, r) in self.list(m, path, "replaces")?.iter().enumerate() {
            let here = format!("{}[{i}]", join(path, "replaces"));
            let rm = self.mapping(r, &here, &["name"])?;
            let n = self.string(rm, &here, "name")?;
            if n.is_empty() {
                return Err(self.err(&here, "should not have an empty replaces entry"));
            }
            if n == name {
                return Err(self.err(&here, "replaces should not contain name of same descriptor"));
            }
            replaces.push(n);
        }
        Ok(replaces)
    }

    /// A `policy` (or `tenant_policy`) text at `path`: the core's parse, and none that
    /// needs a release or a delay.
    fn policy(&self, text: &str, path: &str) -> Result<Policy, ConfigError> {
        let policy: Policy = text.parse().map_err(|e| self.err(path, format!("{e}")))?;
        match policy.algorithm() {
            Algorithm::Concurrency | Algorithm::LeakyQueue => Err(self.err(
                path,
                format!(
                    "{} cannot be used here: Envoy's protocol has no release and no delay",
                    policy.algorithm()
                ),
            )),
            _ => Ok(policy),
        }
    }

    /// `tenant_policy` and `tenant_key`: a fair share over the rule's counted `limit`.
    fn fair_share(
        &self,
        m: &Mapping,
        path: &str,
        limit: &Limit,
    ) -> Result<Option<TenantShare>, ConfigError> {
        let text = self.string(m, path, "tenant_policy")?;
        let key = self.string(m, path, "tenant_key")?;
        if text.is_empty() {
            if m.contains_key("tenant_key") {
                return Err(self.err(
                    &join(path, "tenant_key"),
                    "a tenant_key needs a tenant_policy",
                ));
            }
            return Ok(None);
        }
        let here = join(path, "tenant_policy");
        let Limit::Counted { policy: shared, .. } = limit else {
            return Err(self.err(
                &here,
                "a fair share needs a counted limit to share (a policy, or unit and requests_per_unit above 0)",
            ));
        };
        let tenant = self.policy(&text, &here)?;
        let policies =
            FairShare::new(*shared, tenant).map_err(|e| self.err(&here, e.to_string()))?;
        if m.contains_key("tenant_key") && key.is_empty() {
            return Err(self.err(&join(path, "tenant_key"), "should not be empty"));
        }
        Ok(Some(TenantShare {
            policies,
            tenant_key: (!key.is_empty()).then_some(key),
        }))
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}
