//! Callers named by a verified JWT at the edge (`[settings.jwt]`, issue 41), as plain Rust
//! (tested on the host): what a fetched key set holds, when it is fetched again, and what a
//! verified (or refused) token makes of a request's identity. The token rules are
//! [`tollgate_http::jwt`]'s; the signature is checked with WebCrypto (the wasm-only
//! `jwt_edge` module).
//!
//! # Bounds
//! * **Verified tokens** ([`MAX_VERIFIED`] per isolate, [`MAX_VERIFIED_BYTES`] of them in
//!   all): a repeated token is not verified again until its `exp` (with the leeway), nor
//!   after the key set it was verified under changed.
//! * **The JWKS** is fetched on an isolate's first token, again once it is older than
//!   `jwks_max_age_secs` (default 300 s), and early when a token names a `kid` the set
//!   lacks, at most once per `jwks_min_refetch_secs` (default 30 s) per isolate: a rotated
//!   key is picked up within that bound, and invented `kid`s cannot make the edge fetch on
//!   every request. A removed key is refused as soon as a fetch no longer lists it. A failed
//!   fetch keeps the last good set. Until an isolate's first fetch has succeeded, each
//!   request that needs the set fetches it (a request may not wait on another request's
//!   I/O in Workers).

use tollgate::store::bounds::MAX_KEY_BYTES;
use tollgate_config::{jwk_key, JwtSettings, MAX_JWKS_BYTES, MAX_JWT_KEYS};
use tollgate_http::jwt::{Alg, Caller, JwtError, VerifiedTokens};
use tollgate_http::key;

use crate::keying::Identity;

/// The most verified tokens an isolate remembers.
pub const MAX_VERIFIED: usize = 4096;

/// The most bytes of verified tokens an isolate remembers (tokens are usually 200 bytes to
/// 1 KiB).
pub const MAX_VERIFIED_BYTES: usize = 2 << 20;

/// A key of a JWKS document, pinned to its algorithm: its `kid`, and its public members
/// (what WebCrypto imports).
pub type JwksKey = (
    Option<String>,
    Alg,
    serde_json::Map<String, serde_json::Value>,
);

/// The signing keys of a JWKS document (`{"keys": [...]}`), each pinned by
/// [`tollgate_config::jwk_key`]. Keys a front end cannot use are skipped, not fatal (an
/// issuer's set may hold encryption keys, `"use": "enc"`, or keys of other algorithms): a
/// token naming one finds no key. A document over [`MAX_JWKS_BYTES`], with more than
/// [`MAX_JWT_KEYS`] keys, or not a JWKS is refused (the caller keeps its last good set).
pub fn jwks_keys(text: &str) -> Result<Vec<JwksKey>, String> {
    if text.len() > MAX_JWKS_BYTES {
        return Err(format!(
            "{} bytes, over the bound of {MAX_JWKS_BYTES}",
            text.len()
        ));
    }
    let doc: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Some(keys) = doc.get("keys").and_then(|k| k.as_array()) else {
        return Err("not a JWKS document (no keys array)".into());
    };
    if keys.len() > MAX_JWT_KEYS {
        return Err(format!(
            "{} keys, over the bound of {MAX_JWT_KEYS}",
            keys.len()
        ));
    }
    Ok(keys
        .iter()
        .filter_map(|k| k.as_object())
        .filter(|k| k.get("use").and_then(|u| u.as_str()).unwrap_or("sig") == "sig")
        .filter_map(|k| {
            let kid = k.get("kid").and_then(|v| v.as_str()).map(str::to_owned);
            let (alg, public) = jwk_key(k).ok()?;
            Some((kid, alg, public))
        })
        .collect())
}

/// When an isolate last fetched the key set, by the isolate's clock (ms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JwksTimes {
    /// The last fetch that gave a set, if any.
    pub fetched_ms: Option<u64>,
    /// The last fetch started, whatever came of it.
    pub tried_ms: Option<u64>,
}

impl JwksTimes {
    /// Whether a request at `now_ms` fetches the set: it has none yet, or it is older than
    /// `jwks_max_age_secs` (one request refetches, the others use the set meanwhile), or
    /// the token's `kid` is not in it (`unknown_kid`); the last two at most once per
    /// `jwks_min_refetch_secs`.
    pub fn due(&self, jwt: &JwtSettings, now_ms: u64, unknown_kid: bool) -> bool {
        let Some(fetched) = self.fetched_ms else {
            return true;
        };
        let since_try = now_ms.saturating_sub(self.tried_ms.unwrap_or(fetched));
        let stale = now_ms.saturating_sub(fetched) >= jwt.jwks_max_age_secs * 1000;
        (stale || unknown_kid) && since_try >= jwt.jwks_min_refetch_secs * 1000
    }
}

/// The caller of `token` if the isolate verified it before, under key set `generation`,
/// and it has not expired at `now_secs` (with the leeway): the whole of a repeated token's
/// cost before its identity ([`apply`]). What `scripts/counts.sh` counts as the edge's
/// cached-token path (`edge-jwt-10k`).
pub fn remembered(
    jwt: &JwtSettings,
    verified: &VerifiedTokens,
    generation: u64,
    token: &str,
    now_secs: u64,
) -> Option<Caller> {
    verified
        .get(token, generation, now_secs, jwt.rules.leeway_secs)
        .cloned()
}

/// The identity of a request whose bearer token verified as `caller`: counted by its
/// subject (`sub:<subject>`, the key of the policies keyed by API key), under the plan its
/// plan claim names. A subject too long to be a key is a refused claim.
pub fn apply(jwt: &JwtSettings, id: &mut Identity, caller: Caller) -> Result<(), JwtError> {
    let k = key::jwt_subject(&caller.subject);
    if k.len() > MAX_KEY_BYTES {
        return Err(JwtError::Claim(jwt.rules.subject_claim.clone()));
    }
    id.api_key = Some(k);
    id.plan = caller.plan;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use serde_json::json;

    fn settings(extra: &str) -> JwtSettings {
        Config::parse(&format!(
            "[settings.jwt]\njwks_url = \"https://id.example/jwks\"\n{extra}\n"
        ))
        .unwrap()
        .settings
        .jwt
        .unwrap()
    }

    #[test]
    fn a_jwks_keeps_its_signing_keys_pinned_and_skips_the_rest() {
        let doc = json!({ "keys": [
            { "kid": "rsa-1", "kty": "RSA", "n": "AQAB", "e": "AQAB", "alg": "RS256" },
            { "kid": "enc", "kty": "RSA", "n": "AQAB", "e": "AQAB", "use": "enc" },
            { "kid": "secret", "kty": "oct", "k": "c2VjcmV0" },
            { "kid": "rs512", "kty": "RSA", "n": "AQAB", "e": "AQAB", "alg": "RS512" },
            { "kid": "ec-1", "kty": "EC", "crv": "P-256", "x": "AQ", "y": "Ag", "use": "sig" },
            { "kty": "OKP", "crv": "Ed25519", "x": "AQ" },
        ]});
        let keys = jwks_keys(&doc.to_string()).unwrap();
        let pinned: Vec<_> = keys.iter().map(|(k, a, _)| (k.as_deref(), *a)).collect();
        assert_eq!(
            pinned,
            [
                (Some("rsa-1"), Alg::Rs256),
                (Some("ec-1"), Alg::Es256),
                (None, Alg::EdDsa)
            ]
        );
        assert_eq!(keys[0].2.get("alg"), None, "public members only");
    }

    #[test]
    fn a_jwks_that_is_not_one_or_too_large_is_refused() {
        assert!(jwks_keys("<html>").unwrap_err().starts_with("not JSON"));
        assert!(jwks_keys("{\"keys\": 3}")
            .unwrap_err()
            .contains("no keys array"));
        let many = json!({ "keys": vec![json!({}); MAX_JWT_KEYS + 1] }).to_string();
        assert!(jwks_keys(&many)
            .unwrap_err()
            .contains("keys, over the bound"));
        let big = format!(
            "{{\"keys\": [], \"pad\": \"{}\"}}",
            "x".repeat(MAX_JWKS_BYTES)
        );
        assert!(jwks_keys(&big)
            .unwrap_err()
            .contains("bytes, over the bound"));
    }

    #[test]
    fn the_jwks_is_fetched_first_when_stale_and_on_an_unknown_kid_at_most_once_per_bound() {
        let jwt = settings("jwks_max_age_secs = 300\njwks_min_refetch_secs = 30");
        assert!(JwksTimes::default().due(&jwt, 0, false), "no set yet");
        let t = JwksTimes {
            fetched_ms: Some(1_000_000),
            tried_ms: Some(1_000_000),
        };
        assert!(
            !t.due(&jwt, 1_000_000 + 29_999, true),
            "an unknown kid, too soon"
        );
        assert!(t.due(&jwt, 1_000_000 + 30_000, true));
        assert!(!t.due(&jwt, 1_000_000 + 299_999, false), "fresh");
        assert!(t.due(&jwt, 1_000_000 + 300_000, false), "stale");
        // A failed try counts: the next is a bound later.
        let failed = JwksTimes {
            tried_ms: Some(1_290_000),
            ..t
        };
        assert!(!failed.due(&jwt, 1_310_000, false));
        assert!(failed.due(&jwt, 1_320_000, false));
    }

    #[test]
    fn a_verified_caller_counts_by_subject_under_its_plan_claim() {
        let jwt = settings("");
        let mut id = Identity {
            ip: "ip4:203.0.113.1".into(),
            api_key: None,
            tenant: None,
            plan: None,
        };
        let caller = |subject: String| Caller {
            subject,
            plan: Some("pro".into()),
            expires: 0,
        };
        apply(&jwt, &mut id, caller("alice".into())).unwrap();
        assert_eq!(id.api_key.as_deref(), Some("sub:alice"));
        assert_eq!(id.plan.as_deref(), Some("pro"));
        let long = "x".repeat(MAX_KEY_BYTES);
        assert_eq!(
            apply(&jwt, &mut id, caller(long)),
            Err(JwtError::Claim("sub".into()))
        );
    }
}
