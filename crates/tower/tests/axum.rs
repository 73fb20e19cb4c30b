//! The layer in a real axum server on a loopback port, driven by a real HTTP client
//! (hyper-util's), one connection source address per simulated peer (127.0.0.1, 127.0.0.2,
//! ::1 are all the local machine).

mod common;

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;

use axum::extract::Extension;
use axum::http::HeaderMap;
use axum::routing::any;
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use sfv::{BareItem, ListEntry, Parser};
use tollgate::NANOS_PER_SEC;
use tollgate_tower::{
    Builder, Key, ManualClock, Memory, MissingKey, ProxyHeader, RateLimitInfo, RateLimitLayer,
    Route, Store,
};

/// Reports what the layer told the handler.
async fn echo(info: Option<Extension<RateLimitInfo>>, headers: HeaderMap) -> String {
    let h = |n: &str| {
        headers
            .get(n)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    match info {
        Some(Extension(i)) => format!(
            "policy={} allowed={:?} remaining={:?} shadow={} shadow-header={} degraded={} source={:?}",
            i.policy,
            i.decision.map(|d| d.allowed),
            i.each.iter().map(|d| d.remaining).collect::<Vec<_>>(),
            i.shadow,
            h("tollgate-shadow"),
            h("tollgate-degraded"),
            i.source,
        ),
        None => "unlimited".into(),
    }
}

/// Serves `layer` around `echo` on an ephemeral port of `ip`.
async fn serve<S: Store>(ip: &str, layer: RateLimitLayer<S>) -> SocketAddr {
    let app = Router::new()
        .route("/{*rest}", any(echo))
        .route("/", any(echo))
        .layer(layer);
    let addr = common::serve(app, ip.parse::<IpAddr>().unwrap()).await;
    addr
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A client whose connections come from `from`.
fn client(from: &str) -> HttpClient {
    let mut c = HttpConnector::new();
    c.set_local_address(Some(from.parse().unwrap()));
    Client::builder(TokioExecutor::new()).build(c)
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

async fn send(c: &HttpClient, addr: SocketAddr, path: &str, headers: &[(&str, &[u8])]) -> Answer {
    let mut req = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = c.request(req.body(Full::default()).unwrap()).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

fn keys() -> NonZeroUsize {
    NonZeroUsize::new(10_000).unwrap()
}

/// A memory-store builder on a hand-set clock.
fn manual(clock: &ManualClock) -> Builder<Memory<ManualClock>> {
    let clock = clock.clone();
    Builder::new(move |_, limits| Memory::with_clock(limits, keys(), clock.clone()))
}

/// `(name, [(param, integer)])` of each item of a Structured Field List.
fn sf_list(value: &str) -> Vec<(String, Vec<(String, i64)>)> {
    Parser::new(value)
        .parse::<sfv::List>()
        .unwrap_or_else(|e| panic!("{value:?} is not a Structured Field List: {e}"))
        .into_iter()
        .map(|entry| match entry {
            ListEntry::Item(item) => {
                let BareItem::String(name) = item.bare_item else {
                    panic!("{value:?}: the item is not a String")
                };
                let params = item
                    .params
                    .into_iter()
                    .map(|(k, v)| match v {
                        BareItem::Integer(i) => (k.as_str().to_string(), i64::from(i)),
                        other => panic!("{value:?}: parameter {k:?} is {other:?}"),
                    })
                    .collect();
                (name.as_str().to_string(), params)
            }
            ListEntry::InnerList(_) => panic!("{value:?}: an inner list"),
        })
        .collect()
}

fn param(items: &[(String, Vec<(String, i64)>)], item: usize, key: &str) -> i64 {
    items[item]
        .1
        .iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key} in {items:?}"))
        .1
}

#[tokio::test]
async fn keys_by_peer_ip_and_a_spoofed_header_changes_nothing() {
    let layer = RateLimitLayer::memory(keys())
        .policy("per-ip", "fixed-window 3/hour", Key::Ip)
        .route(Route::new("/").policy("per-ip"))
        .build()
        .unwrap();
    let addr = serve("127.0.0.1", layer).await;
    let (a, b) = (client("127.0.0.1"), client("127.0.0.2"));
    for i in 0..3 {
        // Each request claims another client; no proxy is trusted, so it is not read.
        let spoof = format!("198.51.100.{i}");
        let r = send(&a, addr, "/", &[("x-forwarded-for", spoof.as_bytes())]).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let rl = sf_list(r.header("ratelimit").unwrap());
        assert_eq!(rl[0].0, "per-ip");
        assert_eq!(param(&rl, 0, "r"), 2 - i);
    }
    let r = send(&a, addr, "/", &[("x-forwarded-for", b"203.0.113.99")]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    // Another peer has its own count.
    let r = send(&b, addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(param(&sf_list(r.header("ratelimit").unwrap()), 0, "r"), 2);
}

#[tokio::test]
async fn the_429_is_parsed_back() {
    let layer = RateLimitLayer::memory(keys())
        .policy("per-ip", "fixed-window 1/hour", Key::Ip)
        .route(Route::new("/").policy("per-ip"))
        .build()
        .unwrap();
    let addr = serve("127.0.0.1", layer).await;
    let c = client("127.0.0.1");
    let ok = send(&c, addr, "/x", &[]).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.header("retry-after"), None);
    let r = send(&c, addr, "/x", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    let policy = sf_list(r.header("ratelimit-policy").unwrap());
    assert_eq!(policy[0].0, "per-ip");
    assert_eq!(param(&policy, 0, "q"), 1);
    assert_eq!(param(&policy, 0, "w"), 3600);
    let rl = sf_list(r.header("ratelimit").unwrap());
    assert_eq!((rl[0].0.as_str(), param(&rl, 0, "r")), ("per-ip", 0));
    let t = param(&rl, 0, "t");
    assert!((1..=3600).contains(&t), "t={t}");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry), "retry-after {retry}");
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated-policies"], serde_json::json!(["per-ip"]));
    assert_eq!(
        r.body,
        tollgate::headers::quota_exceeded(&["per-ip"], retry),
        "the core's body"
    );
}

#[tokio::test]
async fn forwarded_headers_only_through_trusted_proxies_from_the_right() {
    for header in [ProxyHeader::XForwardedFor, ProxyHeader::Forwarded] {
        let layer = RateLimitLayer::memory(keys())
            .policy("per-ip", "fixed-window 2/hour", Key::Ip)
            .route(Route::new("/").policy("per-ip"))
            .trusted_proxies(["127.0.0.1"])
            .proxy_header(header)
            .build()
            .unwrap();
        let addr = serve("127.0.0.1", layer).await;
        let (proxy, stranger) = (client("127.0.0.1"), client("127.0.0.2"));
        let name = match header {
            ProxyHeader::XForwardedFor => "x-forwarded-for",
            ProxyHeader::Forwarded => "forwarded",
        };
        let chain = |spoof: &str, client: &str| match header {
            ProxyHeader::XForwardedFor => format!("{spoof}, {client}"),
            ProxyHeader::Forwarded => format!("for={spoof}, for=\"{client}:4711\""),
        };
        // The client's own (left) entries differ every time: still one client.
        for spoof in ["1.1.1.1", "2.2.2.2"] {
            let v = chain(spoof, "203.0.113.5");
            let r = send(&proxy, addr, "/", &[(name, v.as_bytes())]).await;
            assert_eq!(r.status, StatusCode::OK, "{header:?}");
        }
        let v = chain("3.3.3.3", "203.0.113.5");
        let r = send(&proxy, addr, "/", &[(name, v.as_bytes())]).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{header:?}");
        // Another client behind the same proxy has its own count.
        let v = chain("3.3.3.3", "203.0.113.6");
        let r = send(&proxy, addr, "/", &[(name, v.as_bytes())]).await;
        assert_eq!(r.status, StatusCode::OK, "{header:?}");
        // A peer that is not a trusted proxy is keyed by itself, whatever it sends.
        for fake in ["203.0.113.7", "203.0.113.8", "203.0.113.9"] {
            let v = chain("x", fake);
            let r = send(&stranger, addr, "/", &[(name, v.as_bytes())]).await;
            let expect = if fake == "203.0.113.9" {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            assert_eq!(r.status, expect, "{header:?} {fake}");
        }
    }
}

#[tokio::test]
async fn ipv6_clients_share_their_64_and_mapped_ipv4_is_ipv4() {
    // A real IPv6 connection when ::1 can be bound; the clients' addresses come through
    // the trusted proxy ::1 (the machine has one IPv6 address of its own).
    let ip = match std::net::TcpListener::bind("[::1]:0") {
        Ok(_) => "::1",
        Err(_) => "127.0.0.1",
    };
    let layer = RateLimitLayer::memory(keys())
        .policy("per-ip", "fixed-window 2/hour", Key::Ip)
        .route(Route::new("/").policy("per-ip"))
        .trusted_proxies([ip])
        .build()
        .unwrap();
    let addr = serve(ip, layer).await;
    let c = client(ip);
    let xff = |v: &'static str| [("x-forwarded-for", v.as_bytes())];
    assert_eq!(
        send(&c, addr, "/", &xff("2001:db8:1:2::1")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&c, addr, "/", &xff("2001:db8:1:2:ffff:ffff:ffff:ffff"))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        send(&c, addr, "/", &xff("2001:db8:1:2:abcd::9"))
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS,
        "a third address of the same /64"
    );
    assert_eq!(
        send(&c, addr, "/", &xff("2001:db8:1:3::1")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&c, addr, "/", &xff("203.0.113.5")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&c, addr, "/", &xff("::ffff:203.0.113.5")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&c, addr, "/", &xff("203.0.113.5")).await.status,
        StatusCode::TOO_MANY_REQUESTS,
        "::ffff:203.0.113.5 counted as 203.0.113.5"
    );
}

#[tokio::test]
async fn stacks_charge_all_or_nothing() {
    let clock = ManualClock::new(1_000 * NANOS_PER_SEC);
    let layer = manual(&clock)
        .stack(
            "api",
            &["fixed-window 2/min", "fixed-window 5/hour"],
            Key::Ip,
        )
        .route(Route::new("/").policy("api"))
        .build()
        .unwrap();
    let addr = serve("127.0.0.1", layer).await;
    let c = client("127.0.0.1");
    for _ in 0..2 {
        assert_eq!(send(&c, addr, "/", &[]).await.status, StatusCode::OK);
    }
    // The minute window denies; the hour window had room and must not be charged.
    let r = send(&c, addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    let rl = sf_list(r.header("ratelimit").unwrap());
    assert_eq!(rl.len(), 1);
    assert_eq!(rl[0].0, "api.1", "the minute window binds");
    let policy = sf_list(r.header("ratelimit-policy").unwrap());
    assert_eq!(
        policy.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(),
        ["api.1", "api.2"]
    );
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["api.1"]));
    clock.advance(60 * NANOS_PER_SEC);
    let r = send(&c, addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.body.contains("remaining=[1, 2]"),
        "the hour window counted 3 admitted requests, not 4: {}",
        r.body
    );
}

#[tokio::test]
async fn exempt_routes_and_route_matching() {
    let layer = RateLimitLayer::memory(keys())
        .policy("per-ip", "fixed-window 1/hour", Key::Ip)
        .policy("login", "fixed-window 1/hour", Key::Ip)
        .route(Route::new("/health").exempt())
        .route(Route::new("/csp-report").methods(["POST"]).exempt())
        .route(Route::new("/api/login").methods(["POST"]).policy("login"))
        .route(Route::new("/").policy("per-ip"))
        .build()
        .unwrap();
    let addr = serve("127.0.0.1", layer).await;
    let c = client("127.0.0.1");
    for path in ["/health", "/HEALTH/deep", "//health", "/x/../health"] {
        for _ in 0..3 {
            let r = send(&c, addr, path, &[]).await;
            assert_eq!(r.status, StatusCode::OK, "{path}");
            assert_eq!(r.body, "unlimited", "{path}");
            assert_eq!(r.header("ratelimit"), None);
        }
    }
    // A prefix is whole segments: /healthz is limited.
    assert_eq!(send(&c, addr, "/healthz", &[]).await.status, StatusCode::OK);
    assert_eq!(
        send(&c, addr, "/healthz", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The exemption is for POST only; GET /csp-report falls to the catch-all.
    assert_eq!(
        send(&c, addr, "/csp-report", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // An escaped separator cannot be routed safely: 400, not a pass.
    let r = send(&c, addr, "/health%2F..%2Fapi", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("invalid-path"), "{}", r.body);
}

#[tokio::test]
async fn exactly_50_of_400_concurrent_requests() {
    let layer = RateLimitLayer::memory(keys())
        .policy("per-ip", "fixed-window 50/hour", Key::Ip)
        .route(Route::new("/").policy("per-ip"))
        .build()
        .unwrap();
    let addr = serve("127.0.0.1", layer).await;
    let c = client("127.0.0.1");
    let tasks: Vec<_> = (0..400)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { send(&c, addr, "/", &[]).await.status })
        })
        .collect();
    let (mut ok, mut limited) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => limited += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((ok, limited), (50, 350));
}

#[tokio::test]
async fn bad_headers_are_400_naming_the_header() {
    let layer = RateLimitLayer::memory(keys())
        .policy("per-key", "fixed-window 10/hour", Key::ApiKey)
        .fair_share("tenants", "10/s", "2/s", Key::Ip)
        .route(Route::new("/t").policy("tenants"))
        .route(Route::new("/").policy("per-key"))
        .trusted_proxies(["127.0.0.1"])
        .build()
        .unwrap();
    let addr = serve("127.0.0.1", layer).await;
    let c = client("127.0.0.1");
    let long = vec![b'k'; 300];
    let cases: [(&str, &str, &[u8]); 5] = [
        ("/", "x-api-key", &long),
        ("/", "x-api-key", b"caf\xc3\xa9"),
        ("/", "x-api-key", b"\xff\xfe"),
        ("/t", "x-tenant", b"t\xe9"),
        ("/t", "x-forwarded-for", b"not-an-ip"),
    ];
    for (path, name, value) in cases {
        let r = send(&c, addr, path, &[(name, value)]).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{name}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(body["header"], name, "{}", r.body);
    }
    // Good values pass.
    let r = send(&c, addr, "/t", &[("x-tenant", b"acme")]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        sf_list(r.header("ratelimit-policy").unwrap())
            .iter()
            .map(|i| i.0.as_str())
            .collect::<Vec<_>>(),
        ["tenants", "tenants.tenant"]
    );
}

#[tokio::test]
async fn api_keys_are_hashed_and_missing_keys_get_the_declared_answer() {
    let clock = ManualClock::new(0);
    let build = |missing| {
        manual(&clock)
            .policy("per-key", "fixed-window 2/hour", Key::ApiKey)
            .policy(
                "per-user",
                "fixed-window 2/hour",
                Key::custom(|p| {
                    p.headers
                        .get("x-user")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                }),
            )
            .route(Route::new("/user").policy("per-user"))
            .route(Route::new("/").policy("per-key"))
            .missing_key(missing)
            .build()
            .unwrap()
    };
    let layer = build(MissingKey::UseIp);
    let addr = serve("127.0.0.1", layer.clone()).await;
    let c = client("127.0.0.1");
    let r = send(&c, addr, "/", &[("x-api-key", b"secret-key-1")]).await;
    assert_eq!(r.status, StatusCode::OK);
    let store = layer.store("per-key").unwrap();
    let hashed = tollgate_http::key::api_key_name(b"secret-key-1");
    assert_eq!(store.limiter().len(), 1);
    assert_eq!(
        store.limiter().peek(hashed.as_str(), 0).unwrap().remaining,
        1
    );
    assert_eq!(
        store.limiter().peek("secret-key-1", 0).unwrap().remaining,
        2
    );
    // No key: counted by IP in the same policy.
    send(&c, addr, "/", &[]).await;
    assert_eq!(store.limiter().len(), 2);
    assert_eq!(
        store.limiter().peek("ip4:127.0.0.1", 0).unwrap().remaining,
        1
    );
    // The custom extractor.
    for _ in 0..2 {
        let r = send(&c, addr, "/user", &[("x-user", b"ann")]).await;
        assert_eq!(r.status, StatusCode::OK);
    }
    let r = send(&c, addr, "/user", &[("x-user", b"ann")]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        send(&c, addr, "/user", &[("x-user", b"bob")]).await.status,
        StatusCode::OK
    );

    let addr = serve("127.0.0.1", build(MissingKey::Reject)).await;
    let r = send(&c, addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("missing-key"), "{}", r.body);
    let addr = serve("127.0.0.1", build(MissingKey::Skip)).await;
    for _ in 0..5 {
        let r = send(&c, addr, "/user", &[]).await;
        assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "unlimited"));
        assert_eq!(r.header("ratelimit"), None);
    }
}

#[tokio::test]
async fn a_custom_key_or_tenant_over_the_core_bound_is_a_400_naming_the_field_and_charges_nothing()
{
    use tollgate::store::bounds::MAX_KEY_BYTES;
    let layer = RateLimitLayer::memory(keys())
        .policy(
            "per-user",
            "fixed-window 5/hour",
            Key::custom(|p| {
                p.headers
                    .get("x-user")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            }),
        )
        .route(Route::new("/").policy("per-user"))
        .build()
        .unwrap();
    let addr = serve("127.0.0.1", layer.clone()).await;
    let c = client("127.0.0.1");
    // The name the store is given, `custom:<key>`, is held to the bound.
    let at_bound = "u".repeat(MAX_KEY_BYTES - "custom:".len());
    let r = send(&c, addr, "/", &[("x-user", at_bound.as_bytes())]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let over = "u".repeat(MAX_KEY_BYTES - "custom:".len() + 1);
    let r = send(&c, addr, "/", &[("x-user", over.as_bytes())]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.header("content-type"),
        Some(tollgate_http::problem::CONTENT_TYPE)
    );
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["error"], "over-bound");
    assert_eq!(v["field"], "key");
    assert_eq!(v["size"], MAX_KEY_BYTES + 1);
    assert_eq!(v["max"], MAX_KEY_BYTES);
    // Refused before the store: only the key at the bound was counted.
    let store = layer.store("per-user").unwrap();
    assert_eq!(store.limiter().len(), 1);

    // A tenant is a key part too, whatever the header bound lets through.
    let layer = RateLimitLayer::memory(keys())
        .fair_share("tenants", "10/s", "2/s", Key::Ip)
        .route(Route::new("/").policy("tenants"))
        .max_header_bytes(4 * MAX_KEY_BYTES)
        .build()
        .unwrap();
    let addr = serve("127.0.0.1", layer).await;
    let tenant = "t".repeat(MAX_KEY_BYTES);
    let r = send(&c, addr, "/", &[("x-tenant", tenant.as_bytes())]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let tenant = "t".repeat(MAX_KEY_BYTES + 1);
    let r = send(&c, addr, "/", &[("x-tenant", tenant.as_bytes())]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        (v["error"].as_str(), v["field"].as_str()),
        (Some("over-bound"), Some("tenant"))
    );
}

#[tokio::test]
async fn shadow_mode_reports_without_enforcing() {
    let layer = RateLimitLayer::memory(keys())
        .policy("per-ip", "fixed-window 1/hour", Key::Ip)
        .route(Route::new("/shadow").policy("per-ip").shadow())
        .route(Route::new("/").policy("per-ip"))
        .build()
        .unwrap();
    let addr = serve("127.0.0.1", layer).await;
    let c = client("127.0.0.1");
    let r = send(&c, addr, "/shadow", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.body.contains("allowed=Some(true)") && r.body.contains("shadow-header=allowed"),
        "{}",
        r.body
    );
    let r = send(&c, addr, "/shadow", &[]).await;
    assert_eq!(r.status, StatusCode::OK, "shadow never denies");
    assert!(
        r.body.contains("allowed=Some(false)")
            && r.body.contains("shadow=true")
            && r.body.contains("shadow-header=denied; policies=\"per-ip\""),
        "{}",
        r.body
    );
    assert_eq!(r.header("ratelimit"), None);
    // The same policy enforced on another route: the same count denies there.
    assert_eq!(
        send(&c, addr, "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[test]
fn configuration_errors_name_the_field() {
    let e = RateLimitLayer::memory(keys())
        .policy("api", "10/fortnight", Key::Ip)
        .route(Route::new("/").policy("api"))
        .build()
        .err()
        .unwrap();
    assert_eq!(e.field, "policies.api.limit", "{e}");
    let e = RateLimitLayer::memory(keys())
        .policy("api", "10/s", Key::Ip)
        .route(Route::new("/").policy("nope"))
        .build()
        .err()
        .unwrap();
    assert_eq!(e.field, "routes[0].policy", "{e}");
    let e = RateLimitLayer::memory(keys())
        .policy("api", "10/s", Key::Ip)
        .route(Route::new("/").policy("api").cost(11))
        .build()
        .err()
        .unwrap();
    assert_eq!(e.field, "routes[0].cost", "{e}");
    let e = RateLimitLayer::memory(keys())
        .policy("api", "10/s", Key::Ip)
        .route(Route::new("/").policy("api"))
        .trusted_proxies(["10.0.0.1/8"])
        .build()
        .err()
        .unwrap();
    assert_eq!(e.field, "trusted_proxies[0]", "{e}");
    let e = RateLimitLayer::memory(keys())
        .fair_share("fs", "10/s", "20/s", Key::Ip)
        .route(Route::new("/").policy("fs"))
        .build()
        .err()
        .unwrap();
    assert_eq!(e.field, "policies.fs.tenant", "{e}");
    let e = RateLimitLayer::memory(keys())
        .fair_share("fs", "concurrency 10", "concurrency 2", Key::Ip)
        .route(Route::new("/").policy("fs"))
        .build()
        .err()
        .unwrap();
    assert_eq!(e.field, "policies.fs.tenant", "{e}");
}
