//! Which rule a request's descriptor matches: envoyproxy/ratelimit's rules.
//!
//! * Level by level: the descriptor's first entry is looked up among the domain's
//!   descriptors, the second among the matched node's nested descriptors, and so on.
//! * At each level the most specific first: `key_value` exactly, then the wildcard values
//!   (`*` anywhere, each matching any run of characters) in file order, then `key` alone
//!   (any value).
//! * A rule applies only at the level of the descriptor's last entry: a descriptor with
//!   more entries than the tree is deep, or one that stops above the rule, matches nothing.
//! * The counter's key is the domain and every entry's key and value; an entry matched by a
//!   `share_threshold` wildcard contributes the pattern instead of its value, so every
//!   matching value shares one counter.

use std::sync::Arc;

use tollgate::fair_share::skips_tenant_window;

use crate::config::{Config, Limit, Rule, Unit};

/// A descriptor's matched rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Matched {
    /// The rule.
    pub rule: Arc<Rule>,
    /// The counter's key (`domain_key_value_key2_value2_`, envoyproxy/ratelimit's cache key
    /// without its time suffix: tollgate's states carry their own window).
    pub key: String,
    /// The key its metrics are counted under (the rule's `full_key`, or with the request's
    /// values for `detailed_metric` and `value_to_metric`).
    pub metric_key: String,
    /// A fair share's tenant window: its counter key (`key` is then the shared counter's:
    /// the same key without the tenant's value). `None` without a fair share, or for a
    /// tenant that has no window (empty, `default`, or no entry of the `tenant_key`).
    pub tenant: Option<String>,
}

/// Whether `value` matches `parts` (a pattern split at its `*`s): it starts with the first
/// part, ends with the last, and holds the middle ones in order between them.
pub fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    if parts.iter().map(String::len).sum::<usize>() > value.len() {
        return false;
    }
    let Some(rest) = value.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some(mut rest) = rest.strip_suffix(last.as_str()) else {
        return false;
    };
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The counter key of `entries` in `domain`, with `patterns[i]` (where set) in place of
/// entry `i`'s value.
fn counter_key(domain: &str, entries: &[(&str, &str)], patterns: &[Option<String>]) -> String {
    let mut key = format!("{domain}_");
    for (i, (k, v)) in entries.iter().enumerate() {
        key.push_str(k);
        key.push('_');
        key.push_str(patterns.get(i).and_then(|p| p.as_deref()).unwrap_or(v));
        key.push('_');
    }
    key
}

impl Config {
    /// The rule that the descriptor `entries` (key, value) matches in `domain`, if any.
    pub fn find(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Matched> {
        let mut node = self.domains.get(domain)?;
        let mut rule = None;
        let mut patterns: Vec<Option<String>> = vec![None; entries.len()];
        let mut detailed = String::from(domain);
        let mut by_value = String::from(domain);
        for (i, (k, v)) in entries.iter().enumerate() {
            let with_value = format!("{k}_{v}");
            let mut next = node.children.get(&with_value);
            let mut wildcard = None;
            if next.is_none() {
                if let Some((pattern, _)) = node
                    .wildcards
                    .iter()
                    .find(|(_, parts)| wildcard_match(parts, &with_value))
                {
                    next = node.children.get(pattern);
                    wildcard = Some(pattern.as_str());
                }
            }
            let matched_value = next.is_some();
            if next.is_none() {
                next = node.children.get(*k);
            }
            let Some(found) = next else { break };
            let pattern_value = wildcard.map(|p| p.strip_prefix(&format!("{k}_")).unwrap_or(p));
            if found.share_threshold {
                patterns[i] = pattern_value.map(str::to_string);
            }
            detailed.push('.');
            detailed.push_str(k);
            detailed.push('_');
            detailed.push_str(patterns[i].as_deref().unwrap_or(v));
            let shown = match pattern_value {
                Some(p) if found.share_threshold => Some(p),
                Some(_) if found.value_to_metric => Some(*v),
                Some(p) => Some(p),
                None if matched_value || found.value_to_metric => Some(*v),
                None => None,
            };
            by_value.push('.');
            by_value.push_str(k);
            if let Some(s) = shown.filter(|s| !s.is_empty()) {
                by_value.push('_');
                by_value.push_str(s);
            }
            if i + 1 == entries.len() {
                rule = found.rule.clone();
            }
            if found.children.is_empty() {
                break;
            }
            node = found;
        }
        let rule = rule?;
        let metric_key = if rule.detailed_metric {
            detailed
        } else {
            by_value
        };
        let (key, tenant) = counter_keys(domain, entries, patterns, &rule);
        Some(Matched {
            key,
            rule,
            metric_key,
            tenant,
        })
    }
}

/// The counter's key of `rule` for `entries` (`patterns`: the wildcard pattern counted in
/// place of an entry's value), and a fair share's tenant window's key: the tenant's key is
/// the plain one, and the shared counter's leaves every tenant's value out.
fn counter_keys(
    domain: &str,
    entries: &[(&str, &str)],
    mut patterns: Vec<Option<String>>,
    rule: &Rule,
) -> (String, Option<String>) {
    let key = counter_key(domain, entries, &patterns);
    let Some(share) = &rule.fair_share else {
        return (key, None);
    };
    let at = match &share.tenant_key {
        Some(tk) => entries.iter().rposition(|(k, _)| k == tk),
        None => entries.len().checked_sub(1),
    };
    let Some(at) = at else {
        return (key, None);
    };
    let tenant = (!skips_tenant_window(Some(entries[at].1))).then_some(key);
    // The shared counter: every tenant's value left out.
    patterns[at] = Some(String::new());
    (counter_key(domain, entries, &patterns), tenant)
}

/// The rule for a descriptor that carries its own limit (Envoy's `RateLimitOverride`):
/// `requests_per_unit` per `unit`, never in shadow mode. `None` for an unknown unit.
pub fn override_rule(domain: &str, entries: &[(&str, &str)], requests: u32, unit: Unit) -> Matched {
    let mut full_key = String::from(domain);
    for (k, v) in entries {
        full_key.push('.');
        full_key.push_str(k);
        if !v.is_empty() {
            full_key.push('_');
            full_key.push_str(v);
        }
    }
    Matched {
        key: counter_key(domain, entries, &[]),
        metric_key: full_key.clone(),
        tenant: None,
        rule: Arc::new(Rule {
            full_key,
            limit: Limit::per_unit(requests, unit),
            name: None,
            replaces: Vec::new(),
            shadow_mode: false,
            detailed_metric: false,
            fair_share: None,
        }),
    }
}
