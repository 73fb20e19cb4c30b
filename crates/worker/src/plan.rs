//! The plan of a request, as plain Rust (tested on the host): from a route and a client's
//! identity, or from a policy and a key (the check and admin APIs), which limits decide it,
//! where each limit's state is stored (its slot), which object decides, and under which key
//! the isolate's deny cache remembers a denial. Also the APIs' bearer check.
//!
//! # Slots (storage keys)
//! * `<policy>|<i>|<key>`: the `i`-th limit of a policy entry (0 for a single limit).
//! * `<policy>|t|<key>|<tenant>`: a fair share's tenant window.
//!
//! Keys are `ip4:…`/`ip6:…/64`, `key:<sha-256>`, `<ip>+key:<sha-256>`, `global`, or
//! `ext:<sha-256>` for the check API ([`crate::keying`]).
//!
//! # Objects
//! A policy's group ([`crate::config::Group`]) is spread over `shards` objects named
//! `<group>#<shard>`, the shard an FNV-1a hash of the key ([`keying::shard_of`]); a route's
//! object is chosen by the key of its first policy (a group whose policies count by
//! different keys has one shard). The load test's naive design names one object per key:
//! `<group>#k:<key>`.

use tollgate::fair_share::skips_tenant_window;
use tollgate::headers::{limit_name, tenant_name};
use tollgate::Policy;

use crate::config::{Config, KeyKind, PolicyEntry, Route};
use crate::keying::{self, Identity};
use crate::protocol::{Limit, Owner};

/// One limit of a request, as the response names it.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitName {
    /// The policy entry it belongs to (index into [`Config::policies`]).
    pub policy: usize,
    /// The name in `RateLimit`/`RateLimit-Policy`: the entry's name, `<name>.<n>` for the
    /// n-th limit of a stacked entry, `<name>.tenant` for a fair share's tenant window.
    pub name: String,
    /// The limit's policy.
    pub limit: Policy,
    /// Whether this is a fair share's tenant window (keyed by key and tenant).
    pub tenant: bool,
}

/// The limits of the policy entries `policies` (a route's stack, or one entry), in the
/// order they are sent to the object: each entry's limits (a policy of plans: the limits
/// of `plan`, else its default plan's), then its tenant window when `with_tenant`.
pub fn limit_names(
    config: &Config,
    policies: &[usize],
    with_tenant: bool,
    plan: Option<&str>,
) -> Vec<LimitName> {
    let mut out = Vec::new();
    for &k in policies {
        let e = &config.policies[k];
        let limits = e.limits_of(plan);
        for (i, p) in limits.iter().enumerate() {
            out.push(LimitName {
                policy: k,
                name: limit_name(&e.name, i, limits.len()),
                limit: *p,
                tenant: false,
            });
        }
        if let (Some(t), true) = (e.tenant, with_tenant) {
            out.push(LimitName {
                policy: k,
                name: tenant_name(&e.name),
                limit: t,
                tenant: true,
            });
        }
    }
    out
}

/// The slot of the `index`-th limit of policy `policy` for `key`.
pub fn slot(policy: &str, index: usize, key: &str) -> String {
    format!("{policy}|{index}|{key}")
}

/// The policy named in a slot (either form above; policy names have no `|`).
pub fn policy_of_slot(slot: &str) -> &str {
    slot.split('|').next().unwrap_or(slot)
}

/// The slot of the tenant window of policy `policy` for `key` and `tenant`.
pub fn tenant_slot(policy: &str, key: &str, tenant: &str) -> String {
    format!("{policy}|t|{key}|{tenant}")
}

/// The object deciding `key` for the policies of `group`.
pub fn object_name(config: &Config, group: usize, key: &str) -> String {
    let g = &config.groups[group];
    if g.object_per_key {
        format!("{}#k:{}", g.name, key)
    } else {
        format!("{}#{}", g.name, keying::shard_of(key, g.shards))
    }
}

/// The most limits a plan of `plans` has (a key's own limits may have no more).
pub fn most_limits(plans: &crate::config::PolicyPlans) -> usize {
    plans
        .plans
        .iter()
        .map(|p| p.limits().layers().len())
        .max()
        .unwrap_or(0)
}

/// What one request asks of one object.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The limits as the response names them.
    pub names: Vec<LimitName>,
    /// The limits with their slots, in the same order.
    pub limits: Vec<Limit>,
    /// The object that decides them all.
    pub object: String,
    /// The key's slots of its policies of plans past the plan's limits (see
    /// [`crate::protocol::Check::spare`]).
    pub spare: Vec<String>,
    /// The key's stack of the (first) policy of plans among the limits, where its
    /// override applies.
    pub owner: Option<Owner>,
}

impl Plan {
    /// The plan of a request on `route` from `id`; `None` for a route without policies
    /// (exempt).
    pub fn for_route(config: &Config, route: &Route, id: &Identity) -> Option<Plan> {
        let group = route.group?;
        let tenant = id.tenant.as_deref();
        let plan = id.plan.as_deref();
        Some(Plan::new(
            config,
            &route.policies,
            group,
            tenant,
            plan,
            |e| keying::key_for(e.key, id),
        ))
    }

    /// The plan of the check and admin APIs: policy entry `k` for `key`, with the tenant
    /// window of `tenant` (a fair share's).
    pub fn for_policy(config: &Config, k: usize, key: &str, tenant: Option<&str>) -> Plan {
        Plan::for_policy_in(config, k, key, tenant, None)
    }

    /// [`Plan::for_policy`] under the plan `plan` of a policy of plans (`None`: its
    /// default plan).
    pub fn for_policy_in(
        config: &Config,
        k: usize,
        key: &str,
        tenant: Option<&str>,
        plan: Option<&str>,
    ) -> Plan {
        let group = config.policies[k].group;
        Plan::new(config, &[k], group, tenant, plan, |_| key.to_string())
    }

    fn new(
        config: &Config,
        policies: &[usize],
        group: usize,
        tenant: Option<&str>,
        plan: Option<&str>,
        key_of: impl Fn(&PolicyEntry) -> String,
    ) -> Plan {
        let tenant = tenant.filter(|t| !skips_tenant_window(Some(t)));
        let names = limit_names(config, policies, tenant.is_some(), plan);
        let mut spare = Vec::new();
        let mut owner = None;
        let mut at = 0;
        for &k in policies {
            let e = &config.policies[k];
            let len = e.limits_of(plan).len();
            if let (Some(plans), None) = (&e.plans, &owner) {
                let key = key_of(e);
                for i in len..most_limits(plans) {
                    spare.push(slot(&e.name, i, &key));
                }
                owner = Some(Owner {
                    policy: e.name.clone(),
                    key,
                    at,
                    len,
                });
            }
            at += len;
        }
        let mut limits = Vec::with_capacity(names.len());
        let mut index = 0;
        let mut last = usize::MAX;
        for n in &names {
            if n.policy != last {
                index = 0;
                last = n.policy;
            }
            let e = &config.policies[n.policy];
            let key = key_of(e);
            let slot = match (n.tenant, tenant) {
                (true, Some(t)) => tenant_slot(&e.name, &key, t),
                _ => slot(&e.name, index, &key),
            };
            limits.push(Limit {
                slot,
                policy: n.limit,
            });
            index += 1;
        }
        let first = &config.policies[policies[0]];
        Plan {
            names,
            limits,
            object: object_name(config, group, &key_of(first)),
            spare,
            owner,
        }
    }

    /// The names of the limits decided by when the key's override replaced its plan's
    /// (`limits`, the object's [`crate::protocol::ObjectResponse::Decided::overridden`]): the
    /// owner's named `<policy>` or `<policy>.<n>`, as any stack is.
    pub fn overridden_names(&self, config: &Config, limits: &[Policy]) -> Vec<LimitName> {
        let Some(owner) = &self.owner else {
            return self.names.clone();
        };
        let n = (limits.len() + owner.len).saturating_sub(self.names.len());
        let mut names = self.names[..owner.at].to_vec();
        let k = config.policy(&owner.policy).map_or(0, |(k, _)| k);
        for i in 0..n {
            names.push(LimitName {
                policy: k,
                name: limit_name(&owner.policy, i, n),
                limit: limits[owner.at + i],
                tenant: false,
            });
        }
        names.extend_from_slice(&self.names[owner.at + owner.len..]);
        names
    }

    /// The deny-cache key of this plan for requests of one kind: `<kind>` then every slot,
    /// a line each. A route's kind is its name; the check API's is `api` and the cost (a
    /// denial holds for its cost, a smaller one might pass sooner). An admin reset drops
    /// the entries holding a slot it reset.
    pub fn cache_key(&self, kind: &str) -> String {
        let mut out = kind.to_string();
        for l in &self.limits {
            out.push('\n');
            out.push_str(&l.slot);
        }
        out
    }
}

/// The key of policy `entry` that the admin API looks up: `key` as given to `/v1/check`,
/// or the `ip` and/or `api_key` a request would send, or the `subject` of its verified JWT
/// (`[settings.jwt]`) in place of the API key.
pub fn admin_key(
    config: &Config,
    entry: &PolicyEntry,
    key: Option<&str>,
    ip: Option<&str>,
    api_key: Option<&str>,
    subject: Option<&str>,
) -> Result<String, String> {
    if let Some(k) = key {
        if ip.is_some() || api_key.is_some() || subject.is_some() {
            return Err("give either key, or ip/apiKey/subject".into());
        }
        return Ok(keying::external_key(k));
    }
    if api_key.is_some() && subject.is_some() {
        return Err("give either apiKey or subject (a request counts by one)".into());
    }
    let ip = match ip {
        Some(ip) => {
            let addr: std::net::IpAddr = ip
                .parse()
                .map_err(|_| format!("{ip:?} is not an IP address"))?;
            let s = &config.settings;
            keying::ip_group(addr, s.ipv4_prefix, s.ipv6_prefix)
        }
        None if matches!(entry.key, KeyKind::Ip | KeyKind::IpApiKey) => {
            return Err(format!("policy {} counts by IP: give ip", entry.name))
        }
        None => tollgate_http::key::UNKNOWN_IP.into(),
    };
    let id = Identity {
        ip,
        api_key: api_key
            .map(|k| tollgate_http::key::api_key_name(k.as_bytes()))
            .or_else(|| subject.map(tollgate_http::key::jwt_subject)),
        tenant: None,
        plan: None,
    };
    Ok(keying::key_for(entry.key, &id))
}

/// Whether an `Authorization` header value carries `Bearer <secret>`; compared in constant
/// time in the secret's length.
pub fn bearer_ok(authorization: Option<&str>, secret: &str) -> bool {
    let Some(token) = authorization.and_then(|a| a.strip_prefix("Bearer ")) else {
        return false;
    };
    token.len() == secret.len()
        && token
            .bytes()
            .zip(secret.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests;
