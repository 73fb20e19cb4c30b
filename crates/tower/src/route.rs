//! Routes: which requests a policy limits, matched by the edge worker's rules
//! ([`tollgate_http::route`]).

use std::fmt;
use std::sync::Arc;

use http::header::HeaderName;
use http::{request, response};
use tollgate_http::route::{PathMatch, Routed};

/// Whether a response counts ([`Route::count_when`]).
type Counts = Arc<dyn Fn(&response::Parts) -> bool + Send + Sync>;
/// A request's estimated cost ([`Route::measured`]).
type Estimate = Arc<dyn Fn(&request::Parts) -> u64 + Send + Sync>;

/// How a route's charge is settled after the response (reserve, then settle: the core's
/// [`tollgate::settle`]).
#[derive(Clone)]
pub(crate) enum Settling {
    /// The route's cost is reserved; a response for which `counts` is false gives it all
    /// back.
    ByResponse(Counts),
    /// The estimate is reserved; the handler reports the actual cost, settled when the
    /// response body ends or is dropped.
    Measured {
        estimate: Estimate,
        header: Option<HeaderName>,
    },
}

impl fmt::Debug for Settling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Settling::ByResponse(_) => f.write_str("ByResponse(..)"),
            Settling::Measured { header, .. } => f
                .debug_struct("Measured")
                .field("header", header)
                .finish_non_exhaustive(),
        }
    }
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
    pub(crate) path: String,
    pub(crate) methods: Vec<String>,
    pub(crate) policy: Option<String>,
    pub(crate) cost: u64,
    pub(crate) exempt: bool,
    pub(crate) shadow: bool,
    pub(crate) settle: Option<Settling>,
    /// A header name [`Route::actual_header`] could not parse (refused by the builder).
    pub(crate) bad_header: Option<String>,
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
            settle: None,
            bad_header: None,
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

    /// Counts a request only if its response `counts`: the route's cost is reserved when
    /// the request is admitted, and given back in full (settled at 0) when `counts` says
    /// the response does not count. E.g. a login route that counts only failures
    /// (`|r| r.status.is_client_error()`), or a route that refunds what the server failed
    /// (`|r| !r.status.is_server_error()`). An error from the inner service (no response)
    /// leaves the cost charged. Replaces [`Route::measured`].
    ///
    /// Memory store, a policy of one limit (not a concurrency limit or a leaky queue),
    /// without tenant or plans: the builder refuses others with `routes[i].settle`.
    pub fn count_when(
        mut self,
        counts: impl Fn(&response::Parts) -> bool + Send + Sync + 'static,
    ) -> Route {
        self.settle = Some(Settling::ByResponse(Arc::new(counts)));
        self
    }

    /// A cost measured by the handler: `estimate` of the request is reserved when it is
    /// admitted; the handler reports the actual cost through a [`crate::ActualCost`]
    /// response extension (which it may keep setting while it streams the body) or the
    /// header [`Route::actual_header`] (removed before the client sees it). The actual is
    /// settled when the response body ends, or when it is dropped (the client went away):
    /// a body dropped settles what was reported so far, and a response that reported
    /// nothing (or a header that is not a number) leaves the estimate charged, as a
    /// reservation never settled does. An overage is charged in full (a debt later
    /// requests wait out). An estimate above the policy's capacity is the store's error
    /// (the layer's `on_error` answers). Replaces [`Route::count_when`]; the same stores
    /// as it.
    pub fn measured(
        mut self,
        estimate: impl Fn(&request::Parts) -> u64 + Send + Sync + 'static,
    ) -> Route {
        let header = match &self.settle {
            Some(Settling::Measured { header, .. }) => header.clone(),
            _ => None,
        };
        self.settle = Some(Settling::Measured {
            estimate: Arc::new(estimate),
            header,
        });
        self
    }

    /// The response header carrying the actual cost of a [`Route::measured`] route (a
    /// decimal integer, e.g. `x-actual-cost: 412`), removed from the response. A value
    /// that is not one (or is above 2^40) reports nothing, as the edge's `cost_header` does
    /// (`tollgate_http::settle::parse_cost`). Call it after [`Route::measured`].
    pub fn actual_header(mut self, name: &str) -> Route {
        match (HeaderName::from_bytes(name.as_bytes()), &mut self.settle) {
            (Ok(n), Some(Settling::Measured { header, .. })) => *header = Some(n),
            _ => self.bad_header = Some(name.to_string()),
        }
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
    /// Reserve, then settle after the response (`None`: a plain check).
    pub(crate) settle: Option<Settling>,
    /// The route's series (its policy's, labelled with its path pattern).
    #[cfg(feature = "metrics")]
    pub(crate) metrics: crate::metrics::RouteMetrics,
}

impl Routed for CompiledRoute {
    fn methods(&self) -> &[String] {
        &self.methods
    }
    fn path(&self) -> &PathMatch {
        &self.path
    }
}
