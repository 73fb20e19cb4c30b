//! The builder: named policies in tollgate's grammar, each on a store and keyed one way;
//! routes by method and path; how clients are identified; what happens when there is no
//! key or the store fails. Everything is checked in [`Builder::build`], which names the
//! first field at fault ([`ConfigError`], the shape the edge's config errors have too).

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;

use tollgate::fair_share::FairShare;
use tollgate::headers::{limit_name, tenant_name};
use tollgate::plans::Plans;
use tollgate::store::Limits;
use tollgate::Policy;
use tollgate_http::client::Cidr;
use tollgate_http::config::ConfigError;
use tollgate_http::route::PathMatch;

use crate::key::Key;
use crate::layer::RateLimitLayer;
use crate::plans::{PlanChoice, PlanMeta};
use crate::route::{CompiledRoute, Route};
use crate::settings::{MissingKey, OnError, ProxyHeader, Settings};
use crate::shared::{policy_field, Entry, Shared};
#[cfg(feature = "redis")]
use crate::store::RedisPlanStore;
use crate::store::{Clock, Memory, Store};

type Factory<S> = Box<dyn FnMut(&str, Limits) -> Result<S, String>>;

/// Builds a [`RateLimitLayer`]; errors are kept until [`Builder::build`], which names the
/// first field at fault.
pub struct Builder<S> {
    factory: Factory<S>,
    entries: Vec<(String, Result<S, ConfigError>, Key)>,
    /// The policies of plans: their names, plans and how a request's plan is chosen.
    plans: Vec<(String, Plans, PlanChoice)>,
    routes: Vec<Route>,
    settings: Settings,
    trusted: Vec<String>,
}

impl RateLimitLayer<Memory> {
    /// A layer on the in-memory store: every policy keeps at most `max_keys` limited keys
    /// per limit (idle keys are evicted first).
    pub fn memory(max_keys: NonZeroUsize) -> Builder<Memory> {
        Builder::new(move |_, limits| Memory::new(limits, max_keys).map_err(|e| e.to_string()))
    }
}

/// The most per-key overrides a policy of plans keeps ([`Memory::plan_limiter`]'s
/// `set` refuses more).
pub const MAX_OVERRIDES: usize = 10_000;

impl<C: Clock> Builder<Memory<C>> {
    /// A policy of plans (`[("free", &["100/min"]), ("pro", &["1000/min"])]`, each a policy
    /// or an all-or-nothing stack), a request's plan and key chosen by `choice`: its API key
    /// through a table of SHA-256 hashes, or your function; a caller without a known key
    /// counts by IP under the default plan. A key that changes plan keeps what it has spent
    /// ([`tollgate::carry`]). The `RateLimit` fields name the plan's limits (`pro`, or
    /// `pro.1`, `pro.2`, ...). Overrides at run time: [`Memory::plan_limiter`] (at most
    /// [`MAX_OVERRIDES`]).
    ///
    /// For a fleet, the same on Redis: `Builder::redis_plans` (feature `redis`).
    pub fn plans(mut self, name: &str, plans: &[(&str, &[&str])], choice: PlanChoice) -> Self {
        let parsed = Plans::parse(plans)
            .map_err(|e| ConfigError::new(format!("policies.{name}.plans"), e))
            .and_then(|p| {
                let limits = p
                    .get(choice.default_plan())
                    .cloned()
                    .map_err(|_| no_default(name, &choice))?;
                Ok((p, limits))
            });
        let store = match parsed {
            Ok((p, limits)) => {
                self.plans.push((name.to_string(), p.clone(), choice));
                (self.factory)(name, limits)
                    .map(|m| m.with_plans(p, MAX_OVERRIDES))
                    .map_err(|e| ConfigError::new(format!("policies.{name}"), e))
            }
            Err(e) => Err(e),
        };
        self.entries.push((name.to_string(), store, Key::Ip));
        self
    }
}

/// A policy of plans whose default plan is not one of them.
fn no_default(name: &str, choice: &PlanChoice) -> ConfigError {
    ConfigError::new(
        format!("policies.{name}.default"),
        format!("no plan named {:?}", choice.default_plan()),
    )
}

#[cfg(feature = "redis")]
impl<C> RateLimitLayer<RedisPlanStore<C>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A layer of policies of plans on Redis ([`Builder::redis_plans`]). It holds policies
    /// of plans only (a layer's policies share one store type): put other Redis policies in
    /// a layer on `tollgate_redis::RedisLimiter` (requests of routes a layer does not match
    /// pass through it).
    pub fn redis_plans() -> Builder<RedisPlanStore<C>> {
        Builder::new(|_, _| {
            Err("a layer of plans on Redis holds policies of plans only \
                 (Builder::redis_plans): put this policy in a layer on RedisLimiter")
        })
    }
}

#[cfg(feature = "redis")]
impl<C> Builder<RedisPlanStore<C>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A policy of plans on Redis: [`Builder::plans`]'s (a request's plan and key chosen by
    /// `choice`, an unknown key by IP under the default plan, the `RateLimit` fields named
    /// after the plan that decided, an override's own limits as `own`), every decision
    /// `plans`'s (`tollgate_redis::RedisPlans`: exact across the fleet, spend kept across
    /// plan changes, its declared fallback while Redis is unreachable). Overrides at run
    /// time: [`RedisPlanStore::plans`], stored in Redis, so every process of the fleet
    /// decides under one at its next request of that key.
    pub fn redis_plans(
        mut self,
        name: &str,
        plans: tollgate_redis::RedisPlans<C>,
        choice: PlanChoice,
    ) -> Self {
        let store = match RedisPlanStore::new(plans, choice.default_plan()) {
            Ok(store) => {
                let plans = store.plans().plans().clone();
                self.plans.push((name.to_string(), plans, choice));
                Ok(store)
            }
            Err(_) => Err(no_default(name, &choice)),
        };
        self.entries.push((name.to_string(), store, Key::Ip));
        self
    }
}

impl<S: Store> Builder<S> {
    /// A builder whose policies are decided by stores made by `factory` (given the policy's
    /// name and limits), e.g. a Redis limiter per policy.
    pub fn new<E: fmt::Display>(
        mut factory: impl FnMut(&str, Limits) -> Result<S, E> + 'static,
    ) -> Builder<S> {
        Builder {
            factory: Box::new(move |name, limits| factory(name, limits).map_err(|e| e.to_string())),
            entries: Vec::new(),
            plans: Vec::new(),
            routes: Vec::new(),
            settings: Settings::default(),
            trusted: Vec::new(),
        }
    }

    fn add(mut self, name: &str, limits: Result<Limits, ConfigError>, key: Key) -> Self {
        let store = limits.and_then(|l| {
            (self.factory)(name, l).map_err(|e| ConfigError::new(format!("policies.{name}"), e))
        });
        self.entries.push((name.to_string(), store, key));
        self
    }

    /// A policy in tollgate's grammar (`"10/s burst 20"`, `"sliding-window 600/10min"`),
    /// named `name` in `RateLimit` fields, counted by `key`.
    pub fn policy(self, name: &str, policy: &str, key: Key) -> Self {
        let limits = parse(name, "limit", policy).map(Limits::single);
        self.add(name, limits, key)
    }

    /// An all-or-nothing stack (`["10/s", "fixed-window 1000/day"]`): a request is charged
    /// by every limit or by none. The limits are named `<name>.1`, `<name>.2`, ...
    pub fn stack(self, name: &str, policies: &[&str], key: Key) -> Self {
        let limits = policies
            .iter()
            .enumerate()
            .map(|(i, p)| parse(name, &format!("stack[{i}]"), p))
            .collect::<Result<Vec<Policy>, _>>()
            .and_then(|ps| {
                Limits::stack(&ps)
                    .map_err(|e| ConfigError::new(format!("policies.{name}.stack"), e))
            });
        self.add(name, limits, key)
    }

    /// A fair share: `shared` per key protects the upstream, and each tenant (the
    /// [`Builder::tenant_header`]) has its own `tenant` window on top. Requests without a
    /// tenant (or `default`) skip the tenant window. The tenant window is named
    /// `<name>.tenant`.
    pub fn fair_share(self, name: &str, shared: &str, tenant: &str, key: Key) -> Self {
        let limits = parse(name, "shared", shared).and_then(|s| {
            let t = parse(name, "tenant", tenant)?;
            FairShare::new(s, t)
                .map(Limits::fair_share)
                .map_err(|e| ConfigError::new(format!("policies.{name}.tenant"), e))
        });
        self.add(name, limits, key)
    }

    /// A policy on a store you built (its limits name the fields).
    pub fn store(mut self, name: &str, store: S, key: Key) -> Self {
        self.entries.push((name.to_string(), Ok(store), key));
        self
    }

    /// Adds a route (matched in the order added).
    pub fn route(mut self, route: Route) -> Self {
        self.routes.push(route);
        self
    }

    /// Peers whose forwarding header is read (networks or addresses: `10.0.0.0/8`,
    /// `127.0.0.1`, `::1`). Empty (the default): the peer is the client, and forwarding
    /// headers are ignored.
    pub fn trusted_proxies<I: IntoIterator<Item = T>, T: Into<String>>(mut self, nets: I) -> Self {
        self.trusted = nets.into_iter().map(Into::into).collect();
        self
    }

    /// Which header the trusted proxies write (default `X-Forwarded-For`).
    pub fn proxy_header(mut self, header: ProxyHeader) -> Self {
        self.settings.proxy_header = header;
        self
    }

    /// The IPv6 prefix a client's addresses are grouped by (default 64).
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.settings.ipv6_prefix = bits;
        self
    }

    /// The IPv4 prefix a client's addresses are grouped by (default 32: the address).
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.settings.ipv4_prefix = bits;
        self
    }

    /// The header holding the API key of [`Key::ApiKey`] (default `x-api-key`).
    pub fn api_key_header(mut self, name: &str) -> Self {
        self.settings.api_key_header = name.to_ascii_lowercase();
        self
    }

    /// The header naming the tenant of a fair share (default `x-tenant`).
    pub fn tenant_header(mut self, name: &str) -> Self {
        self.settings.tenant_header = name.to_ascii_lowercase();
        self
    }

    /// The longest API key or tenant value accepted (default 256 bytes); longer is a 400.
    pub fn max_header_bytes(mut self, n: usize) -> Self {
        self.settings.max_header_bytes = n;
        self
    }

    /// What a request without a key gets (default [`MissingKey::UseIp`]).
    pub fn missing_key(mut self, choice: MissingKey) -> Self {
        self.settings.missing_key = choice;
        self
    }

    /// What a request gets when the store fails (default fail open).
    pub fn on_error(mut self, choice: OnError) -> Self {
        self.settings.on_error = choice;
        self
    }

    /// Shadow mode for every route: decide and report (the [`crate::RateLimitInfo`]
    /// extension, a `Tollgate-Shadow` request header) but never deny.
    pub fn shadow(mut self, on: bool) -> Self {
        self.settings.shadow = on;
        self
    }

    /// Also send `X-RateLimit-Limit`, `-Remaining` and `-Reset` (default off).
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.settings.legacy = on;
        self
    }

    /// Checks everything and builds the layer.
    pub fn build(self) -> Result<RateLimitLayer<S>, ConfigError> {
        let mut settings = self.settings;
        if !(1..=128).contains(&settings.ipv6_prefix) {
            return Err(ConfigError::new("ipv6_prefix", "must be between 1 and 128"));
        }
        if !(1..=32).contains(&settings.ipv4_prefix) {
            return Err(ConfigError::new("ipv4_prefix", "must be between 1 and 32"));
        }
        for (field, name) in [
            ("api_key_header", &settings.api_key_header),
            ("tenant_header", &settings.tenant_header),
        ] {
            http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ConfigError::new(field, format!("{name:?} is not a header name")))?;
        }
        settings.trusted = self
            .trusted
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.parse::<Cidr>()
                    .map_err(|e| ConfigError::new(format!("trusted_proxies[{i}]"), e))
            })
            .collect::<Result<_, _>>()?;
        let mut entries = Vec::with_capacity(self.entries.len());
        for (name, store, key) in self.entries {
            let store = store?;
            if entries.iter().any(|e: &Entry<S>| *e.name == *name) {
                return Err(ConfigError::new(
                    format!("policies.{name}"),
                    "defined twice",
                ));
            }
            let limits = store.limits();
            if limits
                .tenant()
                .is_some_and(|p| p.algorithm() == tollgate::Algorithm::Concurrency)
            {
                // Releases reach a key's layers, never a tenant's window: its slots would
                // fill and never drain.
                return Err(ConfigError::new(
                    format!("policies.{name}.tenant"),
                    "a tenant window cannot be a concurrency limit (releases reach the shared limit only)",
                ));
            }
            let holds_slots = limits.holds_slots();
            let n = limits.layers().len();
            let names: Vec<String> = (0..n).map(|i| limit_name(&name, i, n)).collect();
            let with_tenant = match limits.tenant() {
                Some(_) => names.iter().cloned().chain([tenant_name(&name)]).collect(),
                None => names.clone(),
            };
            let policy_fields = [
                policy_field(&store, &names),
                policy_field(&store, &with_tenant),
            ];
            let plans = match self.plans.iter().find(|(n, ..)| *n == name) {
                Some((_, plans, choice)) => Some(
                    PlanMeta::new(&name, plans, choice.clone())
                        .map_err(|(field, why)| ConfigError::new(field, why))?,
                ),
                None => None,
            };
            entries.push(Entry {
                name: name.into(),
                store,
                key,
                names: names.into(),
                with_tenant: with_tenant.into(),
                holds_slots,
                policy_fields,
                plans,
            });
        }
        if self.routes.is_empty() {
            return Err(ConfigError::new(
                "routes",
                "no route: add one, e.g. Route::new(\"/\").policy(\"per-ip\")",
            ));
        }
        let mut routes = Vec::with_capacity(self.routes.len());
        for (i, r) in self.routes.into_iter().enumerate() {
            let path = PathMatch::parse(&r.path)
                .map_err(|e| ConfigError::new(format!("routes[{i}].path"), e))?;
            let entry = match (&r.policy, r.exempt) {
                (_, true) => None,
                (None, false) => {
                    return Err(ConfigError::new(
                        format!("routes[{i}]"),
                        "needs a policy, or .exempt()",
                    ))
                }
                (Some(p), false) => {
                    Some(entries.iter().position(|e| &*e.name == p).ok_or_else(|| {
                        ConfigError::new(
                            format!("routes[{i}].policy"),
                            format!("no policy named {p:?}"),
                        )
                    })?)
                }
            };
            if let Some(e) = entry {
                let capacity = match &entries[e].plans {
                    Some(plans) => plans.capacity(),
                    None => entries[e].store.limits().capacity(),
                };
                if r.cost == 0 || r.cost > capacity {
                    return Err(ConfigError::new(
                        format!("routes[{i}].cost"),
                        format!(
                            "{} must be between 1 and the policy's capacity {capacity}",
                            r.cost
                        ),
                    ));
                }
            }
            if let Some(h) = &r.bad_header {
                return Err(ConfigError::new(
                    format!("routes[{i}].actual_header"),
                    format!("{h:?} is not a header name, or was set before .measured()"),
                ));
            }
            if let (Some(e), Some(_)) = (entry, &r.settle) {
                settleable(&entries[e])
                    .map_err(|why| ConfigError::new(format!("routes[{i}].settle"), why))?;
            }
            #[cfg(feature = "metrics")]
            let metrics =
                crate::metrics::RouteMetrics::new(entry.map_or("", |e| &*entries[e].name), &r.path);
            routes.push(CompiledRoute {
                #[cfg(feature = "metrics")]
                metrics,
                methods: r.methods,
                path,
                entry,
                cost: r.cost,
                shadow: r.shadow,
                settle: r.settle,
            });
        }
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                entries,
                routes,
                settings,
            }),
        })
    }
}

/// Why a route cannot reserve and settle on `entry`, if it cannot: the store must settle
/// (the memory and Redis stores do; a store of your own says so with `Store::settles`),
/// and the policy must be one limit that settles (a concurrency limit
/// gives its slots back instead; a leaky queue, a shaper, refuses a reserve), without a
/// tenant window or plans (the core's reserve charges neither).
fn settleable<S: Store>(entry: &Entry<S>) -> Result<(), String> {
    if !entry.store.settles() {
        return Err("this store cannot reserve and settle (Store::settles is false)".into());
    }
    if entry.plans.is_some() {
        return Err("a policy of plans cannot settle yet".into());
    }
    let limits = entry.store.limits();
    if limits.tenant().is_some() {
        return Err(
            "a fair share cannot settle (a reserve does not charge the tenant window)".into(),
        );
    }
    match limits.layers() {
        [p] if matches!(
            p.algorithm(),
            tollgate::Algorithm::Concurrency | tollgate::Algorithm::LeakyQueue
        ) =>
        {
            Err(format!("a {} limit cannot settle", p.algorithm()))
        }
        [_] => Ok(()),
        _ => Err("a stack cannot settle on a route yet: use a policy of one limit".into()),
    }
}

fn parse(name: &str, field: &str, text: &str) -> Result<Policy, ConfigError> {
    text.parse::<Policy>()
        .map_err(|e| ConfigError::new(format!("policies.{name}.{field}"), e))
}
