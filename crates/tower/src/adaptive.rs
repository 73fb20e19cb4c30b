//! Adaptive concurrency per route: [`AdaptiveLayer`] runs the core's gradient controller
//! ([`tollgate::adaptive::gradient`]) for each of its routes, sheds what the limit has no
//! room for with a 503 and `Retry-After` (or first queues it, up to a bound and for at most
//! a deadline: [`AdaptiveBuilder::queue`]), and measures each admitted request from its
//! admission (the inner service's call) to the end of its response body.
//!
//! A limit is per process by nature: it measures what this process's requests see, so it
//! has no fleet store (unlike [`crate::RateLimitLayer`]'s policies).

pub(crate) mod limit;
mod queue;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tollgate::adaptive::gradient::{Gradient, GradientParams};
use tollgate::adaptive::Outcome;
use tollgate::clock::MonotonicClock;
use tollgate_http::route::{self, PathMatch, Routed};
use tower_layer::Layer;
use tower_service::Service;

use limit::{outcome_of, Admission, Permit, RouteLimit};
use queue::Queue;

use crate::body::{End, ResponseBody, Slot};
use crate::future::BoxFuture;
use crate::ConfigError;

/// The most requests a route's queue may be given ([`AdaptiveBuilder::queue`]).
pub const MAX_WAITING: usize = 1_000_000;

/// The longest deadline a queue may be given ([`AdaptiveBuilder::queue`]): an hour, far
/// beyond any client's patience.
pub const MAX_QUEUE_DEADLINE: Duration = Duration::from_secs(3600);

impl Routed for RouteLimit {
    fn methods(&self) -> &[String] {
        &self.methods
    }
    fn path(&self) -> &PathMatch {
        &self.path
    }
}

/// Builds an [`AdaptiveLayer`]: routes in order (the first match decides; a request
/// matching none is not limited), each with its own controller.
///
/// ```
/// use tollgate::adaptive::gradient::GradientParams;
/// use tollgate_tower::AdaptiveLayer;
/// let layer = AdaptiveLayer::builder()
///     .route("/api", &[] as &[&str], GradientParams { initial_limit: 10, ..GradientParams::default() })
///     .build()
///     .unwrap();
/// assert_eq!(layer.limit("/api"), Some(10));
/// let err = AdaptiveLayer::builder()
///     .route("/api", &["GET"], GradientParams { percentile: 100, ..GradientParams::default() })
///     .build()
///     .unwrap_err();
/// assert_eq!(err.field, "routes[0].percentile");
/// ```
#[derive(Clone, Debug, Default)]
pub struct AdaptiveBuilder {
    routes: Vec<(String, Vec<String>, GradientParams)>,
    retry_after_secs: Option<u32>,
    queue: Option<(usize, Duration)>,
}

impl AdaptiveBuilder {
    /// Adds a route: `path` (a prefix or a pattern, matched as [`crate::Route`] is), the
    /// methods it takes (none: any), and its controller's parameters.
    pub fn route<I: IntoIterator<Item = M>, M: AsRef<str>>(
        mut self,
        path: impl Into<String>,
        methods: I,
        params: GradientParams,
    ) -> AdaptiveBuilder {
        let methods = methods
            .into_iter()
            .map(|m| m.as_ref().to_ascii_uppercase())
            .collect();
        self.routes.push((path.into(), methods, params));
        self
    }

    /// The `Retry-After` of a shed request, in seconds (default 1: the limit moves once
    /// per window, a fraction of a second).
    pub fn retry_after_secs(mut self, secs: u32) -> AdaptiveBuilder {
        self.retry_after_secs = Some(secs);
        self
    }

    /// Queues a request the limit has no room for instead of shedding it at once: each
    /// route gets a queue of at most `max_waiting` requests, admitted first come first
    /// served as slots free up (when the limit has shrunk, only as the requests in flight
    /// fall below it), each waiting at most `deadline` from its arrival. A request arriving
    /// with `max_waiting` already waiting, or whose deadline passes while it waits, is shed
    /// as without a queue (503, `Retry-After`, the problem document). A waiter whose client
    /// goes away leaves the queue. Without this option, nothing waits.
    ///
    /// The wait is not service time: an admitted request's latency, the controller's
    /// sample, runs from its admission, and a request shed from the queue is no sample at
    /// all (it never reached the service). So the queue hides nothing from the controller,
    /// and its requests come back slower by their wait: keep `deadline` well under the
    /// clients' timeout.
    ///
    /// `max_waiting` from 1 to [`MAX_WAITING`] and `deadline` from 1 ms to
    /// [`MAX_QUEUE_DEADLINE`]; anything else is a [`ConfigError`] naming
    /// `queue.max_waiting` or `queue.deadline` (leave the option out for no queue).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::adaptive::gradient::GradientParams;
    /// use tollgate_tower::AdaptiveLayer;
    /// let layer = AdaptiveLayer::builder()
    ///     .route("/api", &[] as &[&str], GradientParams::default())
    ///     .queue(50, Duration::from_millis(500))
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(layer.waiting("/api"), Some(0));
    /// let err = AdaptiveLayer::builder()
    ///     .route("/api", &[] as &[&str], GradientParams::default())
    ///     .queue(0, Duration::from_millis(500))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.field, "queue.max_waiting");
    /// ```
    pub fn queue(mut self, max_waiting: usize, deadline: Duration) -> AdaptiveBuilder {
        self.queue = Some((max_waiting, deadline));
        self
    }

    /// Checks every route's path and parameters, naming the first at fault
    /// (`routes[1].path`, `routes[0].max_limit`), and the queue's bounds.
    pub fn build(self) -> Result<AdaptiveLayer, ConfigError> {
        if let Some((max_waiting, deadline)) = self.queue {
            if !(1..=MAX_WAITING).contains(&max_waiting) {
                return Err(ConfigError::new(
                    "queue.max_waiting",
                    format_args!("{max_waiting}: must be from 1 to {MAX_WAITING} (leave the queue out to shed at once)"),
                ));
            }
            if !(Duration::from_millis(1)..=MAX_QUEUE_DEADLINE).contains(&deadline) {
                return Err(ConfigError::new(
                    "queue.deadline",
                    format_args!("{deadline:?}: must be from 1 ms to 1 h (leave the queue out to shed at once)"),
                ));
            }
        }
        let clock = Arc::new(MonotonicClock::default());
        let mut routes = Vec::with_capacity(self.routes.len());
        for (i, (pattern, methods, params)) in self.routes.into_iter().enumerate() {
            let path = PathMatch::parse(&pattern)
                .map_err(|e| ConfigError::new(format!("routes[{i}].path"), e))?;
            let gradient = Gradient::new(params).map_err(|e| {
                ConfigError::new(
                    format!("routes[{i}].{}", e.param.name()),
                    format_args!("{}: {}", e.value, e.rule),
                )
            })?;
            routes.push(Arc::new(RouteLimit::new(
                pattern,
                methods,
                path,
                gradient,
                Arc::clone(&clock),
                self.queue.map(|(max, deadline)| Queue::new(max, deadline)),
            )));
        }
        Ok(AdaptiveLayer {
            shared: Arc::new(AdaptiveShared {
                routes,
                retry_after: self.retry_after_secs.unwrap_or(1).into(),
            }),
        })
    }
}

struct AdaptiveShared {
    routes: Vec<Arc<RouteLimit>>,
    retry_after: HeaderValue,
}

/// A tower layer that limits the requests in flight per route with a limit that follows
/// the latency the service shows (the core's gradient controller). Cheap to clone: the
/// routes' controllers are shared behind an `Arc`.
#[derive(Clone)]
pub struct AdaptiveLayer {
    shared: Arc<AdaptiveShared>,
}

impl AdaptiveLayer {
    /// A builder with no routes.
    pub fn builder() -> AdaptiveBuilder {
        AdaptiveBuilder::default()
    }

    /// The limit now of the route declared with `path` (`None`: no such route).
    pub fn limit(&self, path: &str) -> Option<u64> {
        self.route(path).map(|r| r.limit())
    }

    /// The requests in flight now on the route declared with `path`.
    pub fn in_flight(&self, path: &str) -> Option<u64> {
        self.route(path).map(|r| r.in_flight())
    }

    /// The requests waiting now in the queue of the route declared with `path` (0 without
    /// a queue).
    pub fn waiting(&self, path: &str) -> Option<usize> {
        self.route(path).map(|r| r.waiting())
    }

    fn route(&self, path: &str) -> Option<&Arc<RouteLimit>> {
        self.shared.routes.iter().find(|r| r.pattern == path)
    }
}

impl std::fmt::Debug for AdaptiveLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for r in &self.shared.routes {
            m.entry(&r.pattern, &r.limit());
        }
        m.finish()
    }
}

impl<Svc> Layer<Svc> for AdaptiveLayer {
    type Service = Adaptive<Svc>;

    fn layer(&self, inner: Svc) -> Adaptive<Svc> {
        Adaptive {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`AdaptiveLayer`] wraps around an inner one.
#[derive(Clone)]
pub struct Adaptive<Svc> {
    inner: Svc,
    shared: Arc<AdaptiveShared>,
}

// `Clone + Send + 'static` (the bounds of `RateLimit` too): a queued request's future owns
// the inner service it calls once admitted, and is boxed.
impl<Svc, ReqB, B> Service<Request<ReqB>> for Adaptive<Svc>
where
    Svc: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    ReqB: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<ResponseBody<B>>;
    type Error = Svc::Error;
    type Future = AdaptiveFuture<Svc::Future, B, Svc::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // A path that does not normalise matches no route here: refusing it is the
        // router's (or the rate limit layer's) business, not the capacity's.
        let found = route::normalized(req.uri().path()).ok().and_then(|path| {
            let method = req.method().as_str();
            self.shared
                .routes
                .iter()
                .find(|r| route::matches(&***r, method, &path))
        });
        let permit = match found.map(|r| (r, r.admit())) {
            None => None,
            Some((_, Admission::Now(permit))) => Some(permit),
            Some((r, Admission::Shed)) => {
                return AdaptiveFuture::shed(shed(r, &self.shared.retry_after))
            }
            Some((r, Admission::Wait(waiter))) => {
                // The request waits in a future of its own (boxed: only a queued request
                // pays for it), with the inner service driven to readiness; the clone
                // serves the next request.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                let route = Arc::clone(r);
                let retry_after = self.shared.retry_after.clone();
                let deadline = tokio::time::Instant::now() + route.queue_deadline();
                return AdaptiveFuture::queued(Box::pin(async move {
                    match tokio::time::timeout_at(deadline, waiter).await {
                        Ok(permit) => Ok(admitted(inner.call(req).await?, Some(permit))),
                        Err(_) => Ok(shed(&route, &retry_after)),
                    }
                }));
            }
        };
        AdaptiveFuture {
            kind: Kind::Forward {
                future: self.inner.call(req),
                permit,
            },
        }
    }
}

/// An admitted request's response, its body holding the request's permit (if the route
/// gave it one). The permit is finished when the body ends: with the status's outcome at
/// its last frame, as a timeout when it fails or is dropped unfinished (the real latency
/// is unknown).
fn admitted<B>(resp: Response<B>, permit: Option<Permit>) -> Response<ResponseBody<B>> {
    let outcome = outcome_of(resp.status());
    let slot = match permit {
        Some(mut permit) => Slot::until(move |end| {
            permit.finish(match end {
                End::Finished => outcome,
                End::Cut => Outcome::Timeout,
            })
        }),
        None => Slot::none(),
    };
    resp.map(|b| ResponseBody::inner(b, slot))
}

/// The 503 of a shed request: a problem document, as the rate limit layer's own answers.
fn shed<B>(route: &RouteLimit, retry_after: &HeaderValue) -> Response<ResponseBody<B>> {
    let detail = format!(
        "the service is at its concurrency limit ({} in flight); retry later",
        route.limit()
    );
    let body = tollgate_http::problem::problem(
        503,
        "concurrency-limit",
        &detail,
        serde_json::json!({ "limit": route.limit() }),
    );
    let mut resp = Response::new(ResponseBody::own(Bytes::from(body)));
    *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(tollgate_http::problem::CONTENT_TYPE),
    );
    h.insert(RETRY_AFTER, retry_after.clone());
    resp
}

pin_project! {
    /// The response future of [`Adaptive`]: the inner service's response, its body holding
    /// the request's permit, or the layer's 503; for a queued request, its wait and then
    /// either.
    pub struct AdaptiveFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        Forward { #[pin] future: F, permit: Option<Permit> },
        Shed { response: Option<Response<ResponseBody<B>>> },
        Queued { future: BoxFuture<Result<Response<ResponseBody<B>>, E>> },
    }
}

impl<F, B, E> AdaptiveFuture<F, B, E> {
    fn shed(response: Response<ResponseBody<B>>) -> Self {
        AdaptiveFuture {
            kind: Kind::Shed {
                response: Some(response),
            },
        }
    }

    fn queued(future: BoxFuture<Result<Response<ResponseBody<B>>, E>>) -> Self {
        AdaptiveFuture {
            kind: Kind::Queued { future },
        }
    }
}

impl<F, B, E> Future for AdaptiveFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Forward { future, permit } => {
                // An error (a timeout layer's, a broken connection) drops the permit: a
                // timeout to the controller.
                let resp = std::task::ready!(future.poll(cx))?;
                Poll::Ready(Ok(admitted(resp, permit.take())))
            }
            KindProj::Shed { response } => Poll::Ready(Ok(response
                .take()
                .expect("AdaptiveFuture polled after completion"))),
            KindProj::Queued { future } => future.as_mut().poll(cx),
        }
    }
}
