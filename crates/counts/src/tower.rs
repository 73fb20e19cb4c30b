//! One request through `tollgate-tower`'s layer, for valgrind to count (`scripts/counts.sh`;
//! see PERF.md): the layer of `crates/tower/examples/bench.rs` (`tollgate` mode: one route,
//! `gcra 100/s burst 100` per client IP, the loopback proxy trusted) in front of the same
//! axum handler, called in process as that example's `cost` mode calls it (no socket, no
//! HTTP/1 framing), on one thread.
//!
//! Two binaries, one source: `tollgate-counts-tower` (this crate's feature `tower`:
//! tollgate-tower without `metrics`) and `tollgate-counts-tower-metered` (`tower-metered`:
//! with it, `src/tower_metered.rs`). The example itself cannot be the build without the
//! feature (its crate's self dev-dependency turns `metrics` on for every example), and its
//! clock is the process's: under valgrind the share of requests admitted at 1 key would
//! move with the machine's speed, and with it the count. Here the store's clock is a
//! [`ManualClock`] moved 1 µs a request.
//!
//! `tollgate-counts-tower[-metered] PATH ROUNDS`, as `tollgate-counts`: the set-up (every
//! key's first request), then `ROUNDS` requests.
//!
//! * `tower-1`, `tower-10k` (`tollgate-counts-tower`): one client (denied after the burst,
//!   as floods are answered), or 10k clients by `X-Forwarded-For` in turn (each one's
//!   request 10 ms after its last: admitted, the handler runs);
//! * `tower-apikey-10k`, `tower-plans-10k` (`tollgate-counts-tower`): 10k clients by API
//!   key in turn, counted by the key (`Key::ApiKey`, the same policy), or by a policy of
//!   plans choosing each key's plan through a table of the 10k keys' SHA-256 (half free,
//!   half pro; `Builder::plans`): what choosing the plan adds to a request (issue 41:
//!   at most 5%, held by `benches/counts-ratios.tsv`);
//! * `tower-jwt-10k` (`tollgate-counts-tower`): 10k clients by a bearer token each (HS256,
//!   signed in the set-up, half free, half pro by their `plan` claim; `PlanChoice::Jwt`).
//!   The set-up's first request of each verifies its token; the counted ones find it in
//!   the cache of verified tokens, as a client's repeated token does (issue 41: plan
//!   resolution with a cached token at most 5% over `tower-apikey-10k`);
//! * `tower-bare-1`, `tower-bare-10k`: the handler without the layer (by hand, for the
//!   layer's own share: not in the suite);
//! * `tower-metrics-1`, `tower-metrics-10k` (`tollgate-counts-tower-metered`): the layer
//!   with `metrics` and no recorder installed (the facade's no-op handles);
//! * `tower-prometheus-1`, `tower-prometheus-10k`: the same with
//!   `metrics-exporter-prometheus`'s recorder installed (built, not served). Building it
//!   calibrates `quanta`'s clock for a time, not a number of instructions, so the set-up
//!   varies by a few million instructions from run to run: the script counts the tower
//!   paths inside [`counted`] only.

use std::hint::black_box;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::ops::Range;
use std::process::ExitCode;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request};
use axum::routing::get;
use axum::Router;
use tollgate_tower::{Builder, Key, ManualClock, Memory, PlanChoice, Route};
use tower::{Service, ServiceExt};

/// The paths this build counts.
#[cfg(not(feature = "tower-metered"))]
const PATHS: &str =
    "tower-1 tower-10k tower-apikey-10k tower-plans-10k tower-jwt-10k tower-bare-1 tower-bare-10k";
#[cfg(feature = "tower-metered")]
const PATHS: &str = "tower-metrics-1 tower-metrics-10k tower-prometheus-1 tower-prometheus-10k";

/// Which layer a path runs, and how its clients are told apart.
// The metered build counts the per-IP layer only.
#[cfg_attr(feature = "tower-metered", allow(dead_code))]
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// No layer.
    Bare,
    /// `examples/bench.rs`'s: per client IP (`X-Forwarded-For`).
    Ip,
    /// The same policy per API key.
    ApiKey,
    /// A policy of plans, the plan chosen by the API key's SHA-256.
    Plans,
    /// A policy of plans, the plan chosen by a verified JWT's claim.
    Jwt,
}

/// The HS256 secret the `Layer::Jwt` tokens are signed with.
const SECRET: &[u8] = b"the counts' secret, 32 bytes or more";

/// The bearer token of client `k` (`Layer::Jwt`): subject `user-k`, half free, half pro,
/// expiring a day from now (the layer checks `exp` on the wall clock).
fn token(k: usize) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        + 86_400;
    let plan = if k % 2 == 0 { "free" } else { "pro" };
    let claims = serde_json::json!({ "sub": format!("user-{k}"), "plan": plan, "exp": exp });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET),
    )
    .expect("a token")
}

/// The plans of the `Layer::Plans` and `Layer::Jwt` paths.
const PLANS: &[(&str, &[&str])] = &[
    ("anonymous", &["gcra 10/s"]),
    ("free", &["gcra 100/s burst 100"]),
    ("pro", &["gcra 1000/s burst 1000"]),
];

/// The API key of client `k` (the `Layer::ApiKey` and `Layer::Plans` paths).
fn api_key(k: usize) -> String {
    format!("key-{k}")
}

/// The handler, behind the layer of `examples/bench.rs` on a clock set by hand (or none),
/// or its API-key and plans variants over `keys` clients.
fn app(layer: Layer, keys: usize, clock: &ManualClock) -> Router {
    let app = Router::new().route("/", get(|| async { "hello" }));
    let clock = clock.clone();
    let max_keys = NonZeroUsize::new(100_000).expect("keys");
    let builder =
        Builder::new(move |_, limits| Memory::with_clock(limits, max_keys, clock.clone()));
    let builder = match layer {
        Layer::Bare => return app,
        Layer::Ip => builder.policy("per-ip", "gcra 100/s burst 100", Key::Ip),
        Layer::ApiKey => builder.policy("per-ip", "gcra 100/s burst 100", Key::ApiKey),
        Layer::Plans => {
            let table = (0..keys)
                .map(|k| {
                    let hash = tollgate_http::client::sha256_hex(api_key(k).as_bytes());
                    (hash, if k % 2 == 0 { "free" } else { "pro" }.to_string())
                })
                .collect();
            builder.plans(
                "per-ip",
                PLANS,
                PlanChoice::ApiKeys {
                    keys: table,
                    default: "anonymous".into(),
                },
            )
        }
        Layer::Jwt => {
            use tollgate_tower::jwt::{Jwt, JwtKey, JwtKeys};
            let rules = tollgate_http::jwt::Rules {
                plan_claim: Some("plan".into()),
                ..Default::default()
            };
            let jwt = Jwt::new(JwtKeys::new(vec![JwtKey::hs256(None, SECRET)]), rules);
            builder.plans(
                "per-ip",
                PLANS,
                PlanChoice::Jwt {
                    jwt: std::sync::Arc::new(jwt),
                    default: "anonymous".into(),
                },
            )
        }
    };
    app.layer(
        builder
            .route(Route::new("/").policy("per-ip"))
            .trusted_proxies(["127.0.0.1"])
            .build()
            .expect("the layer"),
    )
}

/// `rounds` requests over `keys` clients (after one request of each), 1 µs apart.
fn run(layer: Layer, keys: usize, rounds: u64) {
    let clock = ManualClock::new(0);
    let mut svc = app(layer, keys, &clock);
    let (header, forwarded): (_, Vec<HeaderValue>) = match layer {
        Layer::ApiKey | Layer::Plans => (
            "x-api-key",
            (0..keys)
                .map(|k| HeaderValue::from_str(&api_key(k)).expect("key"))
                .collect(),
        ),
        Layer::Jwt => (
            "authorization",
            (0..keys)
                .map(|k| HeaderValue::from_str(&format!("Bearer {}", token(k))).expect("token"))
                .collect(),
        ),
        Layer::Bare | Layer::Ip => (
            "x-forwarded-for",
            (0..keys)
                .map(|k| {
                    HeaderValue::from_str(&format!("198.18.{}.{}", k / 256, k % 256)).expect("ip")
                })
                .collect(),
        ),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let keys = keys as u64;
    counted(&runtime, &mut svc, &clock, header, &forwarded, 0..keys);
    counted(
        &runtime,
        &mut svc,
        &clock,
        header,
        &forwarded,
        keys..keys + rounds,
    );
}

/// Requests `range` (request `i` from client `i % keys`), each 1 µs after the last. Out of
/// line and named `counted`: the script counts the instructions inside it only (callgrind's
/// `--toggle-collect`), the set-up left out (see `scripts/counts.sh`).
#[inline(never)]
fn counted(
    runtime: &tokio::runtime::Runtime,
    svc: &mut Router,
    clock: &ManualClock,
    header: &'static str,
    forwarded: &[HeaderValue],
    range: Range<u64>,
) {
    let peer = ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000)));
    runtime.block_on(async {
        for i in range {
            clock.advance(1_000);
            let mut req = Request::new(Body::empty());
            req.extensions_mut().insert(peer);
            if forwarded.len() > 1 {
                let v = forwarded[i as usize % forwarded.len()].clone();
                req.headers_mut().insert(header, v);
            }
            let resp = ServiceExt::<Request<Body>>::ready(&mut *svc)
                .await
                .expect("ready")
                .call(req)
                .await
                .expect("a response");
            black_box(resp.status());
        }
    });
}

/// Installs `metrics-exporter-prometheus`'s recorder (no listener, no upkeep thread).
#[cfg(feature = "tower-metered")]
fn prometheus() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    metrics::set_global_recorder(recorder).expect("the first recorder");
}

/// The path's clients (1 or 10k) and whether it runs the layer, or `None` if this build
/// does not count it.
fn path(path: &str) -> Option<(Layer, usize)> {
    let (kind, keys) = path.rsplit_once('-')?;
    let keys = match keys {
        "1" => 1,
        "10k" => 10_000,
        _ => return None,
    };
    let layer = match kind {
        #[cfg(not(feature = "tower-metered"))]
        "tower" => Layer::Ip,
        #[cfg(not(feature = "tower-metered"))]
        "tower-apikey" => Layer::ApiKey,
        #[cfg(not(feature = "tower-metered"))]
        "tower-plans" => Layer::Plans,
        #[cfg(not(feature = "tower-metered"))]
        "tower-jwt" => Layer::Jwt,
        #[cfg(not(feature = "tower-metered"))]
        "tower-bare" => Layer::Bare,
        #[cfg(feature = "tower-metered")]
        "tower-metrics" => Layer::Ip,
        #[cfg(feature = "tower-metered")]
        "tower-prometheus" => {
            prometheus();
            Layer::Ip
        }
        _ => return None,
    };
    Some((layer, keys))
}

/// `tollgate-counts-tower[-metered] PATH ROUNDS`.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds = args.get(1).and_then(|r| r.parse::<u64>().ok());
    match (args.first().and_then(|p| path(p)), rounds) {
        (Some((layer, keys)), Some(rounds)) => {
            run(layer, keys, rounds);
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "usage: tollgate-counts-tower[-metered] PATH ROUNDS; PATH is one of: {PATHS}"
            );
            ExitCode::from(2)
        }
    }
}
