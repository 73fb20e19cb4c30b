//! The layer and its service: route, key, decide, answer.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use serde_json::json;
use tollgate::headers::{decision_headers, problem as quota_problem, rate_limit_policy, Named};
use tollgate::Decision;
use tollgate_http::client::{self, Cidr, HeaderError};
use tollgate_http::route;
use tower_layer::Layer;
use tower_service::Service;

use crate::body::{ResponseBody, Slot};
use crate::config::{CompiledRoute, Key, MissingKey, OnError, ProxyHeader};
use crate::grpc;
use crate::store::{Checked, Source, Store};

/// The rate limit's decision for this request, in the request's extensions for the
/// handler (`Extension<RateLimitInfo>` in axum).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitInfo {
    /// The policy that decided.
    pub policy: Arc<str>,
    /// The combined decision; `None` when the store failed and the layer failed open.
    pub decision: Option<Decision>,
    /// Each limit's decision, in stack order (empty when the store failed).
    pub each: Vec<Decision>,
    /// Each limit's name, as in the `RateLimit` fields.
    pub names: Arc<[String]>,
    /// Where it was decided (`None` when the store failed).
    pub source: Option<Source>,
    /// Shadow mode: the decision is reported, not enforced (a denied request got through).
    pub shadow: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) trusted: Vec<Cidr>,
    pub(crate) proxy_header: ProxyHeader,
    pub(crate) ipv4_prefix: u8,
    pub(crate) ipv6_prefix: u8,
    pub(crate) api_key_header: String,
    pub(crate) tenant_header: String,
    pub(crate) max_header_bytes: usize,
    pub(crate) missing_key: MissingKey,
    pub(crate) on_error: OnError,
    pub(crate) shadow: bool,
    pub(crate) legacy: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            trusted: Vec::new(),
            proxy_header: ProxyHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: tollgate::ip::DEFAULT_V6_PREFIX,
            api_key_header: "x-api-key".into(),
            tenant_header: "x-tenant".into(),
            max_header_bytes: 256,
            missing_key: MissingKey::UseIp,
            on_error: OnError::Open,
            shadow: false,
            legacy: false,
        }
    }
}

/// One named policy on its store.
pub(crate) struct Entry<S> {
    pub(crate) name: Arc<str>,
    pub(crate) store: S,
    pub(crate) key: Key,
    /// The names of the layers' limits (`api` or `api.1`, `api.2`, ...).
    pub(crate) names: Arc<[String]>,
    /// The same and, for a fair share, its tenant window's (`api.tenant`) last.
    pub(crate) with_tenant: Arc<[String]>,
    /// Whether a limit is a concurrency limit: an admitted request holds slots until its
    /// response ends.
    pub(crate) holds_slots: bool,
    /// The `RateLimit-Policy` values of `names` and of `with_tenant`: they depend on the
    /// limits alone, so they are written once (per request, writing them was a fifth of
    /// the layer's own time; see the crate's README).
    pub(crate) policy_fields: [HeaderValue; 2],
}

/// The `RateLimit-Policy` value of these limits (names, in the order of
/// [`policies`]). The field describes the limits, not a decision: the items' decisions
/// are never read, so none is needed.
pub(crate) fn policy_field<S: Store>(store: &S, names: &[String]) -> HeaderValue {
    let none = Decision::default();
    let items: Vec<Named<'_>> = names
        .iter()
        .zip(policies(store))
        .map(|(name, policy)| Named {
            name,
            policy,
            decision: &none,
        })
        .collect();
    // The core writes visible ASCII only.
    HeaderValue::try_from(rate_limit_policy(&items))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

pub(crate) struct Shared<S> {
    pub(crate) entries: Vec<Entry<S>>,
    pub(crate) routes: Vec<CompiledRoute>,
    pub(crate) settings: Settings,
}

/// A tower layer that rate-limits requests by route with tollgate's policies. Cheap to
/// clone: everything is shared behind an `Arc`. Built with [`RateLimitLayer::memory`] or
/// [`crate::Builder::new`].
pub struct RateLimitLayer<S> {
    pub(crate) shared: Arc<Shared<S>>,
}

impl<S> Clone for RateLimitLayer<S> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: Store> RateLimitLayer<S> {
    /// The store of the policy named `name` (to inspect it), if there is one.
    pub fn store(&self, name: &str) -> Option<&S> {
        self.shared
            .entries
            .iter()
            .find(|e| &*e.name == name)
            .map(|e| &e.store)
    }
}

impl<S, Svc> Layer<Svc> for RateLimitLayer<S> {
    type Service = RateLimit<Svc, S>;

    fn layer(&self, inner: Svc) -> Self::Service {
        RateLimit {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service of [`RateLimitLayer`].
pub struct RateLimit<Svc, S> {
    inner: Svc,
    shared: Arc<Shared<S>>,
}

impl<Svc: Clone, S> Clone for RateLimit<Svc, S> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The header fields the layer adds to a response: `RateLimit-Policy` (written once per
/// policy) and the core's fields of the decision, as the core gives them (typed when added,
/// not collected again: one allocation less per request).
#[derive(Default)]
struct Fields {
    policy: Option<HeaderValue>,
    decided: Vec<(&'static str, String)>,
}

impl<Svc, S, ReqB, B> Service<Request<ReqB>> for RateLimit<Svc, S>
where
    Svc: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    S: Store,
    ReqB: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<ResponseBody<B>>;
    type Error = Svc::Error;
    type Future = ResponseFuture<Svc::Future, B, Svc::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    /// Routes and keys the request, then decides: at once when the store can (in memory),
    /// calling the inner service that was driven to readiness; otherwise in the returned
    /// future, with a clone of the inner service (the one driven to readiness serves this
    /// request, the clone the next). Why not always the future: it cloned axum's router per
    /// request and moved a large state machine; measured 2026-12-03 with perf at 10k keys
    /// (`bench/run.sh`'s server), see the crate's README.
    ///
    /// An admitted request's concurrency slots are held from the decision on: by `call`
    /// itself while it calls the inner service, then by the returned future, then by the
    /// response's body ([`ResponseBody`]); whichever is dropped holding them gives them
    /// back.
    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        let grpc = grpc::is_grpc(req.headers());
        let target = match target(&shared, req) {
            Target::Check(t) => t,
            Target::Pass(req) => {
                return forward(self.inner.call(req), Fields::default(), Slot::none())
            }
            Target::Answer(resp) => return answered(resp, grpc),
        };
        let entry = &shared.entries[target.entry];
        if let Some(result) =
            entry
                .store
                .check_now(&target.key, target.tenant.as_deref(), target.cost)
        {
            return match answer(&shared, target, result, grpc) {
                Answer::Forward(req, fields, slot) => forward(self.inner.call(req), fields, slot),
                Answer::Respond(resp) => answered(resp, grpc),
            };
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let waiting: BoxFuture<_> = Box::pin(async move {
            let entry = &shared.entries[target.entry];
            let result = entry
                .store
                .check(&target.key, target.tenant.as_deref(), target.cost)
                .await;
            match answer(&shared, target, result, grpc) {
                Answer::Forward(req, fields, slot) => {
                    let resp = inner.call(req).await?;
                    let mut resp = resp.map(|body| ResponseBody::inner(body, slot));
                    add_fields(&mut resp, fields);
                    Ok(resp)
                }
                Answer::Respond(resp) => Ok(own_answer(resp, grpc)),
            }
        });
        ResponseFuture {
            kind: Kind::Waiting { future: waiting },
        }
    }
}

pin_project! {
    /// The response future of [`RateLimit`]: the inner service's response with the rate
    /// limit's fields added, the layer's own answer (a 429, a 400, a 503), or, for a store
    /// that waits (Redis), the decision and then either. Not boxed when the store decides
    /// at once (a box is an allocation and a copy of the inner service's future per
    /// request; see the crate's README).
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        Forward { #[pin] future: F, fields: Fields, slot: Slot },
        Answered { response: Option<Response<ResponseBody<B>>> },
        Waiting { future: BoxFuture<Result<Response<ResponseBody<B>>, E>> },
    }
}

/// The layer's own response, as a gRPC client expects it for a gRPC call.
fn own_answer<B>(response: Response<ResponseBody<B>>, grpc: bool) -> Response<ResponseBody<B>> {
    if grpc {
        grpc::answer(response)
    } else {
        response
    }
}

/// A future of the layer's own response ([`own_answer`]).
fn answered<F, B, E>(response: Response<ResponseBody<B>>, grpc: bool) -> ResponseFuture<F, B, E> {
    ResponseFuture {
        kind: Kind::Answered {
            response: Some(own_answer(response, grpc)),
        },
    }
}

/// The inner service's response, with the rate limit's header fields added; its body holds
/// the request's concurrency slots (an error from the inner service drops them with this
/// future).
fn forward<F, B, E>(future: F, fields: Fields, slot: Slot) -> ResponseFuture<F, B, E> {
    ResponseFuture {
        kind: Kind::Forward {
            future,
            fields,
            slot,
        },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Forward {
                future,
                fields,
                slot,
            } => {
                let resp = std::task::ready!(future.poll(cx))?;
                let slot = std::mem::replace(slot, Slot::none());
                let mut resp = resp.map(|body| ResponseBody::inner(body, slot));
                add_fields(&mut resp, std::mem::take(fields));
                Poll::Ready(Ok(resp))
            }
            KindProj::Answered { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after it completed"))),
            KindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

/// What a request is counted under, or why it is not.
enum Keyed {
    Key(String),
    Skip,
}

/// Why a request is answered 400 before it is decided.
enum Refusal {
    Header(HeaderError),
    MissingKey,
}

impl Refusal {
    fn answer<B>(self) -> Response<ResponseBody<B>> {
        match self {
            Refusal::Header(e) => header_problem(&e),
            Refusal::MissingKey => problem(
                400,
                "missing-key",
                "the request carries no key for this route's rate limit",
                json!({}),
            ),
        }
    }
}

/// Where a request goes before the decision.
enum Target<ReqB, B> {
    /// Not rate-limited (no route, no policy on its route, or no key and `skip`).
    Pass(Request<ReqB>),
    /// To be decided.
    Check(Checking<ReqB>),
    /// Refused before the decision (a 400).
    Answer(Response<ResponseBody<B>>),
}

/// What the layer does after the decision.
enum Answer<ReqB, B> {
    /// Passes the request on (the decision in its extensions), adds these header fields to
    /// the response, and holds its concurrency slots (if any) until the response ends.
    Forward(Request<ReqB>, Fields, Slot),
    /// Answers itself: a 429, or a 503 when the store failed and the layer fails closed.
    Respond(Response<ResponseBody<B>>),
}

/// A request to decide: its policy, key, tenant and cost.
struct Checking<ReqB> {
    entry: usize,
    key: String,
    tenant: Option<String>,
    cost: u64,
    shadow: bool,
    parts: Parts,
    body: ReqB,
}

/// Routes and keys a request.
fn target<S, ReqB, B>(shared: &Shared<S>, req: Request<ReqB>) -> Target<ReqB, B> {
    let settings = &shared.settings;
    let path = match route::normalized(req.uri().path()) {
        Ok(p) => p,
        Err(e) => return Target::Answer(problem(400, "invalid-path", &e.to_string(), json!({}))),
    };
    let Some(r) = route::find(&shared.routes, req.method().as_str(), &path) else {
        return Target::Pass(req);
    };
    let Some(entry_index) = r.entry else {
        return Target::Pass(req);
    };
    let (cost, shadow) = (r.cost, r.shadow || settings.shadow);
    let entry = &shared.entries[entry_index];
    let (parts, body) = req.into_parts();
    let key = match key_of(settings, &entry.key, &parts) {
        Ok(Keyed::Key(k)) => k,
        Ok(Keyed::Skip) => return Target::Pass(Request::from_parts(parts, body)),
        Err(refusal) => return Target::Answer(refusal.answer()),
    };
    let tenant = if entry.with_tenant.len() > entry.names.len() {
        match header_text(settings, &parts, &settings.tenant_header) {
            Ok(t) => t.filter(|t| !t.is_empty()),
            Err(e) => return Target::Answer(header_problem(&e)),
        }
    } else {
        None
    };
    Target::Check(Checking {
        entry: entry_index,
        key,
        tenant,
        cost,
        shadow,
        parts,
        body,
    })
}

/// The layer's answer to a decision (or to the store's failure).
///
/// For a gRPC call (`grpc`), a 429 also carries its message for `grpc-message` (written only
/// then: it costs allocations on the path that answers floods).
fn answer<S: Store, ReqB, B>(
    shared: &Arc<Shared<S>>,
    target: Checking<ReqB>,
    result: Result<Checked, S::Error>,
    grpc: bool,
) -> Answer<ReqB, B> {
    let settings = &shared.settings;
    let entry = &shared.entries[target.entry];
    let Checking {
        entry: entry_index,
        key,
        cost,
        shadow,
        mut parts,
        body,
        ..
    } = target;
    match result {
        Ok(checked) => {
            let names = if checked.each.len() > entry.names.len() {
                Arc::clone(&entry.with_tenant)
            } else {
                Arc::clone(&entry.names)
            };
            let mut named = names
                .iter()
                .zip(checked.each.iter())
                .zip(policies(&entry.store))
                .map(|((name, decision), policy)| Named {
                    name,
                    policy,
                    decision,
                });
            // A single limit's item stays on the stack: one allocation less per request.
            let one: [Named<'_>; 1];
            let many: Vec<Named<'_>>;
            let items: &[Named<'_>] = match named.next() {
                Some(first) if checked.each.len() == 1 => {
                    one = [first];
                    &one
                }
                first => {
                    many = first.into_iter().chain(named).collect();
                    &many
                }
            };
            let allowed = checked.decision.allowed;
            if shadow {
                let note = if allowed {
                    "allowed".to_string()
                } else {
                    let violated: Vec<&str> = items
                        .iter()
                        .filter(|n| !n.decision.allowed)
                        .map(|n| n.name)
                        .collect();
                    format!("denied; policies=\"{}\"", violated.join(","))
                };
                if let Ok(v) = HeaderValue::from_str(&note) {
                    parts
                        .headers
                        .insert(HeaderName::from_static("tollgate-shadow"), v);
                }
            }
            let fields = if shadow {
                Fields::default()
            } else {
                let policy = &entry.policy_fields[usize::from(names.len() > entry.names.len())];
                Fields {
                    policy: Some(policy.clone()),
                    decided: decision_headers(items, settings.legacy),
                }
            };
            let body_429 = (!allowed && !shadow)
                .then(|| quota_problem(items))
                .flatten();
            let message = (body_429.is_some() && grpc).then(|| quota_message(items));
            if let Some(body) = body_429 {
                let mut resp = full(StatusCode::TOO_MANY_REQUESTS, body, message);
                add_fields(&mut resp, fields);
                return Answer::Respond(resp);
            }
            // Admitted (enforced or in shadow mode), so charged: a concurrency limit's
            // slots are taken until the response ends.
            let slot = if allowed && entry.holds_slots {
                Slot::held(shared, entry_index, key, cost)
            } else {
                Slot::none()
            };
            parts.extensions.insert(RateLimitInfo {
                policy: Arc::clone(&entry.name),
                decision: Some(checked.decision),
                each: checked.each,
                names,
                source: Some(checked.source),
                shadow,
            });
            Answer::Forward(Request::from_parts(parts, body), fields, slot)
        }
        Err(error) => match settings.on_error {
            OnError::Open => {
                parts.headers.insert(
                    HeaderName::from_static("tollgate-degraded"),
                    HeaderValue::from_static("fail-open; reason=store-error"),
                );
                parts.extensions.insert(RateLimitInfo {
                    policy: Arc::clone(&entry.name),
                    decision: None,
                    each: Vec::new(),
                    names: Arc::clone(&entry.names),
                    source: None,
                    shadow,
                });
                Answer::Forward(
                    Request::from_parts(parts, body),
                    Fields::default(),
                    Slot::none(),
                )
            }
            OnError::Closed { retry_after_secs } => {
                let mut resp = problem(
                    503,
                    "store-unavailable",
                    &format!("the rate limiter could not decide ({error}); retry later"),
                    json!({}),
                );
                let h = resp.headers_mut();
                h.insert(http::header::RETRY_AFTER, retry_after_secs.into());
                h.insert(
                    HeaderName::from_static("tollgate-degraded"),
                    HeaderValue::from_static("fail-closed; reason=store-error"),
                );
                Answer::Respond(resp)
            }
        },
    }
}

/// A 429's message for a gRPC client: the problem document's `detail` and the limits that
/// denied.
fn quota_message(items: &[Named<'_>]) -> String {
    let wait = items
        .iter()
        .filter_map(|n| tollgate::headers::retry_after(n.decision))
        .max()
        .unwrap_or(1);
    let violated: Vec<&str> = items
        .iter()
        .filter(|n| !n.decision.allowed)
        .map(|n| n.name)
        .collect();
    format!(
        "Rate limit exceeded; retry in {wait} s. Violated policies: {}",
        violated.join(", ")
    )
}

/// The policies of a store's decisions, in the order of `Checked::each`.
fn policies<S: Store>(store: &S) -> impl Iterator<Item = &tollgate::Policy> {
    let limits = store.limits();
    limits.layers().iter().chain(limits.tenant())
}

fn key_of(settings: &Settings, key: &Key, parts: &Parts) -> Result<Keyed, Refusal> {
    let found = match key {
        Key::Ip => return ip_key(settings, parts).map(Keyed::Key),
        Key::Global => return Ok(Keyed::Key("global".into())),
        Key::ApiKey => header_text(settings, parts, &settings.api_key_header)
            .map_err(Refusal::Header)?
            .filter(|k| !k.is_empty())
            .map(|k| client::api_key_name(k.as_bytes())),
        Key::Custom(f) => f(parts).map(|k| format!("custom:{k}")),
    };
    match (found, settings.missing_key) {
        (Some(k), _) => Ok(Keyed::Key(k)),
        (None, MissingKey::UseIp) => ip_key(settings, parts).map(Keyed::Key),
        (None, MissingKey::Skip) => Ok(Keyed::Skip),
        (None, MissingKey::Reject) => Err(Refusal::MissingKey),
    }
}

/// The peer's address: a `SocketAddr` extension, or axum's `ConnectInfo<SocketAddr>`.
fn peer(parts: &Parts) -> Option<IpAddr> {
    if let Some(a) = parts.extensions.get::<SocketAddr>() {
        return Some(a.ip());
    }
    #[cfg(feature = "axum")]
    if let Some(a) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(a.0.ip());
    }
    None
}

/// The client's IP group: the peer, or through trusted proxies the forwarding header read
/// from the right. Without a peer address (the server did not record it) every such
/// request shares the key `ip:unknown`.
fn ip_key(settings: &Settings, parts: &Parts) -> Result<String, Refusal> {
    let Some(peer) = peer(parts) else {
        return Ok("ip:unknown".into());
    };
    let mut ip = peer;
    if settings.trusted.iter().any(|c| c.contains(peer)) {
        let (name, all) = match settings.proxy_header {
            ProxyHeader::XForwardedFor => {
                ("x-forwarded-for", parts.headers.get_all(&X_FORWARDED_FOR))
            }
            ProxyHeader::Forwarded => ("forwarded", parts.headers.get_all(http::header::FORWARDED)),
        };
        // Every line is checked, including those left of the client that are never read.
        if all.iter().any(|v| v.to_str().is_err()) {
            return Err(Refusal::Header(HeaderError::NotVisibleAscii {
                header: name.to_string(),
            }));
        }
        let lines = all.iter().map(|v| v.to_str().unwrap_or_default());
        ip = match settings.proxy_header {
            // Read from the right as the hops come, nothing collected (see `client_ip_from_right`).
            ProxyHeader::XForwardedFor => client::client_ip_from_right(
                peer,
                &settings.trusted,
                client::forwarded_for_hops_from_right(lines),
                name,
            ),
            ProxyHeader::Forwarded => client::client_ip(
                peer,
                &settings.trusted,
                &client::forwarded_hops(lines),
                name,
            ),
        }
        .map_err(Refusal::Header)?;
    }
    Ok(client::ip_group(
        ip,
        settings.ipv4_prefix,
        settings.ipv6_prefix,
    ))
}

/// A header's value, checked (length, visible ASCII); `None` when absent.
fn header_text(
    settings: &Settings,
    parts: &Parts,
    name: &str,
) -> Result<Option<String>, HeaderError> {
    let Some(v) = parts.headers.get(name) else {
        return Ok(None);
    };
    client::check_value(name, v.as_bytes(), settings.max_header_bytes)?;
    // Visible ASCII is UTF-8.
    Ok(Some(String::from_utf8_lossy(v.as_bytes()).into_owned()))
}

fn header_problem<B>(e: &HeaderError) -> Response<ResponseBody<B>> {
    problem(
        400,
        "invalid-header",
        &e.to_string(),
        json!({ "header": e.header() }),
    )
}

/// One of the layer's own answers: a problem document, and its message for a gRPC client
/// (when there may be one).
fn full<B>(status: StatusCode, body: String, message: Option<String>) -> Response<ResponseBody<B>> {
    let mut resp = Response::new(ResponseBody::own(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(tollgate_http::problem::CONTENT_TYPE),
    );
    if let Some(message) = message {
        resp.extensions_mut().insert(grpc::Message(message));
    }
    resp
}

fn problem<B>(
    status: u16,
    kind: &str,
    detail: &str,
    extra: serde_json::Value,
) -> Response<ResponseBody<B>> {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    full(
        code,
        tollgate_http::problem::problem(status, kind, detail, extra),
        // (A 400 or a 503 is rare: not worth knowing whether the call is gRPC here.)
        Some(detail.to_string()),
    )
}

/// Looked up by a `HeaderName`, not by its text, which `http` would parse per request.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

fn header_name(name: &'static str) -> Option<HeaderName> {
    Some(match name {
        "RateLimit-Policy" => RATELIMIT_POLICY,
        "RateLimit" => RATELIMIT,
        "Retry-After" => http::header::RETRY_AFTER,
        "Cache-Control" => http::header::CACHE_CONTROL,
        other => HeaderName::from_bytes(other.as_bytes()).ok()?,
    })
}

/// The core's fields as header names and values.
fn typed(fields: Vec<(&'static str, String)>) -> impl Iterator<Item = (HeaderName, HeaderValue)> {
    fields
        .into_iter()
        // The core writes visible ASCII only; a value that is not is left out, never a 500.
        .filter_map(|(name, value)| Some((header_name(name)?, HeaderValue::try_from(value).ok()?)))
}

fn add_fields<B>(resp: &mut Response<B>, fields: Fields) {
    let h = resp.headers_mut();
    if let Some(policy) = fields.policy {
        h.insert(RATELIMIT_POLICY, policy);
    }
    for (name, value) in typed(fields.decided) {
        h.insert(name, value);
    }
}
