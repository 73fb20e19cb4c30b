//! Routes: which requests a policy limits, matched by the edge worker's rules
//! ([`tollgate_http::route`]).

use tollgate_http::route::{PathMatch, Routed};

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
