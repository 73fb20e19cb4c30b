//! The layer's configuration: named policies in tollgate's grammar, each on a store and
//! keyed one way; routes by method and path (the edge worker's rules, from
//! [`tollgate_http::route`]); how clients are identified; what happens when there is no
//! key or the store fails.

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;

use http::request::Parts;
use tollgate::fair_share::FairShare;
use tollgate::headers::{limit_name, tenant_name};
use tollgate::store::Limits;
use tollgate::Policy;
use tollgate_http::client::Cidr;
use tollgate_http::route::{PathMatch, Routed};

use crate::service::{policy_field, Entry, RateLimitLayer, Settings, Shared};
use crate::store::{Memory, Store};

/// A configuration the layer refuses, naming the field (`policies.api.limit`,
/// `routes[1].path`, `trusted_proxies[0]`) and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field at fault.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ConfigError {
    fn new(field: impl Into<String>, reason: impl fmt::Display) -> ConfigError {
        ConfigError {
            field: field.into(),
            reason: reason.to_string(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for ConfigError {}

/// A custom key extractor: the request's head in, a key out (`None`: the request has no
/// key, and [`MissingKey`] decides).
pub type Extractor = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// What a policy counts requests by.
#[derive(Clone)]
pub enum Key {
    /// The client's address ([`Builder::trusted_proxies`] says when a forwarding header is
    /// read), IPv6 grouped by [`Builder::ipv6_prefix`].
    Ip,
    /// The API key header ([`Builder::api_key_header`]), hashed with SHA-256 before it
    /// names anything.
    ApiKey,
    /// One counter for every request.
    Global,
    /// A key of your own (prefixed `custom:`, so it never collides with the others).
    Custom(Extractor),
}

impl Key {
    /// A custom key extractor.
    pub fn custom(f: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Key {
        Key::Custom(Arc::new(f))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Ip => f.write_str("Ip"),
            Key::ApiKey => f.write_str("ApiKey"),
            Key::Global => f.write_str("Global"),
            Key::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// What a request without a key gets (no API key header, a custom extractor answering
/// `None`). Never a 500.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// Count it by the client's address, in the same policy (the default).
    #[default]
    UseIp,
    /// Answer 400 (`missing-key`).
    Reject,
    /// Let it through unlimited, without rate-limit fields.
    Skip,
}

/// What a request gets when the store cannot decide (an error, not a denial).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Let it through (fail open), marked with a `Tollgate-Degraded` request header for
    /// the handler, and the decision-less [`crate::RateLimitInfo`].
    Open,
    /// Answer 503 with `Retry-After` (seconds) and a problem document (fail closed).
    Closed {
        /// The `Retry-After` of the 503, in seconds.
        retry_after_secs: u64,
    },
}

/// Which header the trusted proxies write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

/// One route: methods (none: any) and a path rule, and either the policy it is limited by
/// (with a cost) or an exemption. Matched in order; the first match decides; a request
/// matching no route is not limited (add `Route::new("/")` last to limit everything).
///
/// Paths are matched as [`tollgate_http::route`] does at the edge: on the normalised path,
/// ignoring ASCII case, a prefix by whole segments (`/api` matches `/api` and `/api/x`, not
/// `/apix`), `*` one segment, a final `**` the rest, a final `name*` a segment prefix.
#[derive(Clone, Debug)]
pub struct Route {
    path: String,
    methods: Vec<String>,
    policy: Option<String>,
    cost: u64,
    exempt: bool,
    shadow: bool,
}

impl Route {
    /// A route for `path` (a prefix, or a pattern with `*`), any method, cost 1.
    pub fn new(path: impl Into<String>) -> Route {
        Route {
            path: path.into(),
            methods: Vec::new(),
            policy: None,
            cost: 1,
            exempt: false,
            shadow: false,
        }
    }

    /// Only these methods (case-insensitive). `GET` also takes `HEAD`, from the same budget:
    /// HTTP defines HEAD as GET without the body (RFC 9110, section 9.3.2) and axum answers
    /// it with the GET handler ([`tollgate_http::route::method_matches`]).
    pub fn methods<I: IntoIterator<Item = S>, S: AsRef<str>>(mut self, methods: I) -> Route {
        self.methods = methods
            .into_iter()
            .map(|m| m.as_ref().to_ascii_uppercase())
            .collect();
        self
    }

    /// Limited by the named policy.
    pub fn policy(mut self, name: impl Into<String>) -> Route {
        self.policy = Some(name.into());
        self
    }

    /// Each request costs `cost` units (default 1).
    pub fn cost(mut self, cost: u64) -> Route {
        self.cost = cost;
        self
    }

    /// Never limited (e.g. health checks, `/csp-report`).
    pub fn exempt(mut self) -> Route {
        self.exempt = true;
        self
    }

    /// Decided and reported to the handler but never enforced (shadow mode for this route).
    pub fn shadow(mut self) -> Route {
        self.shadow = true;
        self
    }
}

/// A route as the layer runs it.
pub(crate) struct CompiledRoute {
    pub(crate) methods: Vec<String>,
    pub(crate) path: PathMatch,
    /// Index into the entries; `None`: exempt.
    pub(crate) entry: Option<usize>,
    pub(crate) cost: u64,
    pub(crate) shadow: bool,
}

impl Routed for CompiledRoute {
    fn methods(&self) -> &[String] {
        &self.methods
    }
    fn path(&self) -> &PathMatch {
        &self.path
    }
}

type Factory<S> = Box<dyn FnMut(&str, Limits) -> Result<S, String>>;

/// Builds a [`RateLimitLayer`]; errors are kept until [`Builder::build`], which names the
/// first field at fault.
pub struct Builder<S> {
    factory: Factory<S>,
    entries: Vec<(String, Result<S, ConfigError>, Key)>,
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

impl<S: Store> Builder<S> {
    /// A builder whose policies are decided by stores made by `factory` (given the policy's
    /// name and limits), e.g. a Redis limiter per policy.
    pub fn new<E: fmt::Display>(
        mut factory: impl FnMut(&str, Limits) -> Result<S, E> + 'static,
    ) -> Builder<S> {
        Builder {
            factory: Box::new(move |name, limits| factory(name, limits).map_err(|e| e.to_string())),
            entries: Vec::new(),
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
            entries.push(Entry {
                name: name.into(),
                store,
                key,
                names: names.into(),
                with_tenant: with_tenant.into(),
                holds_slots,
                policy_fields,
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
                let capacity = entries[e].store.limits().capacity();
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
            routes.push(CompiledRoute {
                methods: r.methods,
                path,
                entry,
                cost: r.cost,
                shadow: r.shadow,
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

fn parse(name: &str, field: &str, text: &str) -> Result<Policy, ConfigError> {
    text.parse::<Policy>()
        .map_err(|e| ConfigError::new(format!("policies.{name}.{field}"), e))
}
