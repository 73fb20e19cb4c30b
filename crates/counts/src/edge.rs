//! The edge worker's Rust work on a limited request, on the host, for valgrind to count
//! (`scripts/counts.sh`; see PERF.md): what the isolate does before its call to the
//! coordinator object, from the request's headers to the plan and its deny-cache key
//! (`crates/worker/src/fetch.rs`'s limited path: `keying::identify`, the bearer token's
//! caller, `Plan::for_route`, `Plan::cache_key`). The object's decision and the runtime's
//! glue (Workers RPC, WebCrypto) are not in it: they run in workerd, which valgrind does not
//! count here. So the ratio below compares the Rust part the token adds to the Rust part of
//! the path it is added to, not the whole request.
//!
//! `tollgate-counts-edge PATH ROUNDS`, as `tollgate-counts`: the set-up, then `ROUNDS`
//! requests, counted inside [`counted`] only (the set-up signs and caches 10k tokens).
//!
//! * `edge-apikey-10k`: 10k clients by API key in turn, each key's plan from the key table
//!   of their 10k SHA-256 (half free, half pro): the SHA-256 of the key and the table.
//! * `edge-jwt-10k`: 10k clients by a bearer token each (half free, half pro by their
//!   `plan` claim), each verified before (as a client's repeated token is): the isolate's
//!   cache of verified tokens answers (`tollgate_worker::jwt::remembered`), and the caller
//!   becomes the identity (`jwt::apply`). Issue 41: plan resolution with a cached token at
//!   most 5% over `edge-apikey-10k` (`benches/counts-ratios.tsv`).

use std::hint::black_box;
use std::ops::Range;
use std::process::ExitCode;

use tollgate_http::jwt::{bearer, Caller, VerifiedTokens};
use tollgate_worker::config::Config;
use tollgate_worker::jwt::{apply, remembered, MAX_VERIFIED, MAX_VERIFIED_BYTES};
use tollgate_worker::keying::identify;
use tollgate_worker::plan::Plan;

const PATHS: &str = "edge-apikey-10k edge-jwt-10k";
const KEYS: usize = 10_000;
/// The clock of every request (seconds): the tokens expire an hour later.
const NOW: u64 = 1_700_000_000;

fn api_key(k: usize) -> String {
    format!("live_key_{k:05}")
}

/// A token-shaped bearer value of client `k` (its signature is never checked here: the
/// counted requests find it verified).
fn token(k: usize) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let plan = if k % 2 == 0 { "free" } else { "pro" };
    let claims = format!(
        r#"{{"sub":"user-{k}","plan":"{plan}","exp":{}}}"#,
        NOW + 3600
    );
    let sig = URL_SAFE_NO_PAD.encode([k as u8; 32]);
    format!("{header}.{}.{sig}", URL_SAFE_NO_PAD.encode(claims))
}

/// The config: one route, a policy of plans keyed by API key; the key table of the 10k
/// keys (`jwt == false`) or a JWT section (`jwt == true`).
fn config(jwt: bool) -> Config {
    let who = if jwt {
        // One listed key keeps invented API keys off fresh buckets (as the config requires).
        format!(
            "api_keys = [\"{}\"]\n[settings.jwt]\nkeys = [{{ alg = \"HS256\", secret = \"JWT_SECRET\" }}]\nplan_claim = \"plan\"\n",
            tollgate_http::client::sha256_hex(b"unused")
        )
    } else {
        let keys: Vec<String> = (0..KEYS)
            .map(|k| {
                let plan = if k % 2 == 0 { "free" } else { "pro" };
                let hash = tollgate_http::client::sha256_hex(api_key(k).as_bytes());
                format!("{{ sha256 = \"{hash}\", plan = \"{plan}\" }}")
            })
            .collect();
        format!("api_keys = [{}]\n", keys.join(", "))
    };
    Config::parse(&format!(
        "[settings]\n{who}\
         [policies.api]\nkey = \"api-key\"\ndefault = \"free\"\n\
         plans = [{{ name = \"free\", limit = \"100/min\" }}, {{ name = \"pro\", limit = \"1000/min\" }}]\n\
         [[routes]]\npath = \"/api/\"\npolicies = [\"api\"]\n"
    ))
    .expect("a valid config")
}

/// Requests `range` (request `i` from client `i % KEYS`). Out of line and named `counted`:
/// the script counts the instructions inside it only.
#[inline(never)]
fn counted(cfg: &Config, verified: &VerifiedTokens, headers: &[(&str, String)], range: Range<u64>) {
    let route = &cfg.routes[0];
    for i in range {
        let (name, value) = &headers[i as usize % headers.len()];
        let get = |n: &str| {
            if n == *name {
                Some(value.clone())
            } else if n == "cf-connecting-ip" {
                Some("203.0.113.7".to_string())
            } else {
                None
            }
        };
        let mut id = identify(&cfg.settings, get).expect("an identity");
        if let Some(jwt) = &cfg.settings.jwt {
            let token = bearer(value).expect("a bearer token");
            let caller = remembered(jwt, verified, 0, token, NOW).expect("verified before");
            apply(jwt, &mut id, caller).expect("a subject");
        }
        let plan = Plan::for_route(cfg, route, &id).expect("a limited route");
        black_box(plan.cache_key(&route.name));
    }
}

fn run(jwt: bool, rounds: u64) {
    let cfg = config(jwt);
    let mut verified = VerifiedTokens::new(MAX_VERIFIED.max(KEYS), MAX_VERIFIED_BYTES * 4);
    let headers: Vec<(&str, String)> = (0..KEYS)
        .map(|k| {
            if jwt {
                let t = token(k);
                let caller = Caller {
                    subject: format!("user-{k}"),
                    plan: Some(if k % 2 == 0 { "free" } else { "pro" }.into()),
                    expires: NOW + 3600,
                };
                verified.insert(&t, caller, 0, NOW, 60);
                ("authorization", format!("Bearer {t}"))
            } else {
                ("x-api-key", api_key(k))
            }
        })
        .collect();
    let keys = KEYS as u64;
    counted(&cfg, &verified, &headers, 0..keys);
    counted(&cfg, &verified, &headers, keys..keys + rounds);
}

/// `tollgate-counts-edge PATH ROUNDS`.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds = args.get(1).and_then(|r| r.parse::<u64>().ok());
    let jwt = match args.first().map(String::as_str) {
        Some("edge-apikey-10k") => Some(false),
        Some("edge-jwt-10k") => Some(true),
        _ => None,
    };
    match (jwt, rounds) {
        (Some(jwt), Some(rounds)) => {
            run(jwt, rounds);
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: tollgate-counts-edge PATH ROUNDS; PATH is one of: {PATHS}");
            ExitCode::from(2)
        }
    }
}
