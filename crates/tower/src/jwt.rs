//! Verified JWTs as callers ([`PlanChoice::Jwt`](crate::PlanChoice::Jwt)): the
//! signature checked with the `jsonwebtoken` crate's crypto (RustCrypto), everything else
//! (size, form, algorithms pinned per key, `kid`, `exp`/`nbf` with leeway, `iss`/`aud`, the
//! subject and plan claims) by the rules every front end shares,
//! [`tollgate_http::jwt`].
//!
//! **Keys** ([`JwtKeys`]) come from PEM files, a shared secret or a JWKS document, each
//! pinned to one algorithm. The set is replaced at run time ([`JwtKeys::replace`]: the
//! application fetches its issuer's JWKS when it wants, e.g. every few minutes and on an
//! unknown `kid`); a new `kid` is accepted at once, and a removed one refused at once,
//! cached verifications included.
//!
//! **A verified token is not verified again** until it expires: a bounded cache
//! ([`MAX_VERIFIED`] tokens, [`MAX_VERIFIED_BYTES`] of them in all) keeps its caller. A
//! signature check costs far more than a rate-limit decision, and the same client sends the
//! same token with every request. The cache is keyed by the token itself, compared whole,
//! under a randomly seeded hash (foldhash, as the core's keyed limiter): a SHA-256 of each
//! token cost more than the rest of the request (PERF.md, "Plans by a verified JWT").

use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey};
use tollgate_http::jwt::{parse, Alg, Caller, JwtError, Rules};

/// The most verified tokens remembered.
pub const MAX_VERIFIED: usize = 10_000;

/// The most bytes of verified tokens remembered (tokens are usually 200 bytes to 1 KiB).
pub const MAX_VERIFIED_BYTES: usize = 4 << 20;

/// A verification key pinned to one algorithm, with its key id if it has one.
#[derive(Clone)]
pub struct JwtKey {
    kid: Option<String>,
    alg: Alg,
    key: DecodingKey,
}

/// A key that could not be read: which one, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtKeyError {
    /// The key (its `kid`, or its place in a JWKS: `keys[2]`).
    pub key: String,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for JwtKeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JWT key {}: {}", self.key, self.reason)
    }
}

impl std::error::Error for JwtKeyError {}

impl JwtKey {
    /// An HS256 shared secret.
    pub fn hs256(kid: Option<&str>, secret: &[u8]) -> JwtKey {
        JwtKey {
            kid: kid.map(str::to_owned),
            alg: Alg::Hs256,
            key: DecodingKey::from_secret(secret),
        }
    }

    /// An RS256 public key (PEM).
    pub fn rs256_pem(kid: Option<&str>, pem: &[u8]) -> Result<JwtKey, JwtKeyError> {
        JwtKey::pem(kid, Alg::Rs256, DecodingKey::from_rsa_pem(pem))
    }

    /// An ES256 (P-256) public key (PEM).
    pub fn es256_pem(kid: Option<&str>, pem: &[u8]) -> Result<JwtKey, JwtKeyError> {
        JwtKey::pem(kid, Alg::Es256, DecodingKey::from_ec_pem(pem))
    }

    /// An EdDSA (Ed25519) public key (PEM).
    pub fn ed25519_pem(kid: Option<&str>, pem: &[u8]) -> Result<JwtKey, JwtKeyError> {
        JwtKey::pem(kid, Alg::EdDsa, DecodingKey::from_ed_pem(pem))
    }

    fn pem(
        kid: Option<&str>,
        alg: Alg,
        key: jsonwebtoken::errors::Result<DecodingKey>,
    ) -> Result<JwtKey, JwtKeyError> {
        let key = key.map_err(|e| JwtKeyError {
            key: kid.unwrap_or("(no kid)").to_owned(),
            reason: format!("not a {} public key in PEM: {e}", alg.name()),
        })?;
        Ok(JwtKey {
            kid: kid.map(str::to_owned),
            alg,
            key,
        })
    }

    /// The keys of a JWKS document (`{"keys": [...]}`). Each key's algorithm is its `alg`
    /// when present, else what its type says (RSA: RS256, EC P-256: ES256, OKP Ed25519:
    /// EdDSA); symmetric keys (`oct`) are refused (a secret does not belong in a published
    /// key set), as is any other algorithm.
    pub fn from_jwks(json: &str) -> Result<Vec<JwtKey>, JwtKeyError> {
        let set: JwkSet = serde_json::from_str(json).map_err(|e| JwtKeyError {
            key: "(the set)".into(),
            reason: format!("not a JWKS document: {e}"),
        })?;
        set.keys
            .iter()
            .enumerate()
            .map(|(i, jwk)| {
                let name = jwk
                    .common
                    .key_id
                    .clone()
                    .unwrap_or_else(|| format!("keys[{i}]"));
                let fail = |reason: String| JwtKeyError {
                    key: name.clone(),
                    reason,
                };
                let by_type = match &jwk.algorithm {
                    AlgorithmParameters::RSA(_) => Some(Alg::Rs256),
                    AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => {
                        Some(Alg::Es256)
                    }
                    AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
                        Some(Alg::EdDsa)
                    }
                    _ => None,
                };
                let named = match jwk.common.key_algorithm {
                    None => None,
                    Some(KeyAlgorithm::RS256) => Some(Alg::Rs256),
                    Some(KeyAlgorithm::ES256) => Some(Alg::Es256),
                    Some(KeyAlgorithm::EdDSA) => Some(Alg::EdDsa),
                    Some(other) => {
                        return Err(fail(format!("algorithm {other:?} is not accepted")))
                    }
                };
                let alg = match (named, by_type) {
                    (Some(a), Some(t)) if a == t => a,
                    (None, Some(t)) => t,
                    _ => {
                        return Err(fail(
                            "not an RSA, P-256 or Ed25519 public key of its alg".into(),
                        ))
                    }
                };
                let key = DecodingKey::from_jwk(jwk).map_err(|e| fail(e.to_string()))?;
                Ok(JwtKey {
                    kid: jwk.common.key_id.clone(),
                    alg,
                    key,
                })
            })
            .collect()
    }

    fn describe(&self) -> (Option<&str>, Alg) {
        (self.kid.as_deref(), self.alg)
    }
}

/// The set of keys tokens are verified with, replaceable at run time.
pub struct JwtKeys {
    /// The keys, and the set's generation (a verification cached under an older one is
    /// checked again).
    set: RwLock<(Arc<[JwtKey]>, u64)>,
}

impl JwtKeys {
    /// A set of `keys`.
    pub fn new(keys: Vec<JwtKey>) -> Arc<JwtKeys> {
        Arc::new(JwtKeys {
            set: RwLock::new((keys.into(), 0)),
        })
    }

    /// Replaces the set: the next request verifies with `keys` (a token of a removed key
    /// is refused even if it was verified before).
    pub fn replace(&self, keys: Vec<JwtKey>) {
        let mut set = self.set.write().unwrap_or_else(|e| e.into_inner());
        let generation = set.1 + 1;
        *set = (keys.into(), generation);
    }

    fn current(&self) -> (Arc<[JwtKey]>, u64) {
        let set = self.set.read().unwrap_or_else(|e| e.into_inner());
        (set.0.clone(), set.1)
    }
}

/// What a route does with a request whose token is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidToken {
    /// Counts it as a request without a token: by IP, under the default plan.
    Anonymous,
    /// Answers 401 with a problem document (`error: invalid-token`) and
    /// `WWW-Authenticate: Bearer error="invalid_token"`.
    Reject,
}

/// Verifies bearer tokens: the keys, the rules and what to do with a refused token.
pub struct Jwt {
    keys: Arc<JwtKeys>,
    rules: Rules,
    invalid: InvalidToken,
    verified: Mutex<Verified>,
}

/// The verified tokens: each one's caller and the key set's generation it was verified
/// under, and their bytes in all.
#[derive(Default)]
struct Verified {
    tokens: hashbrown::HashMap<Box<str>, (Caller, u64)>,
    bytes: usize,
}

impl Jwt {
    /// Verifies with `keys` under `rules`; a refused token counts as anonymous (see
    /// [`Jwt::on_invalid`]).
    pub fn new(keys: Arc<JwtKeys>, rules: Rules) -> Jwt {
        Jwt {
            keys,
            rules,
            invalid: InvalidToken::Anonymous,
            verified: Mutex::new(Verified::default()),
        }
    }

    /// What a route does with a refused token.
    pub fn on_invalid(mut self, invalid: InvalidToken) -> Jwt {
        self.invalid = invalid;
        self
    }

    pub(crate) fn invalid(&self) -> InvalidToken {
        self.invalid
    }

    /// The caller of `token` at `now_secs`.
    pub(crate) fn verify_at(&self, token: &str, now_secs: u64) -> Result<Caller, JwtError> {
        let (keys, generation) = self.keys.current();
        let verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((caller, g)) = verified.tokens.get(token) {
            if *g == generation && now_secs <= caller.expires.saturating_add(self.rules.leeway_secs)
            {
                return Ok(caller.clone());
            }
        }
        drop(verified);
        let t = parse(token, &self.rules)?;
        let key = t.key(&keys, JwtKey::describe)?;
        let signature = &token[t.signing_input().len() + 1..];
        let alg = match key.alg {
            Alg::Rs256 => Algorithm::RS256,
            Alg::Es256 => Algorithm::ES256,
            Alg::EdDsa => Algorithm::EdDSA,
            Alg::Hs256 => Algorithm::HS256,
        };
        let good =
            jsonwebtoken::crypto::verify(signature, t.signing_input().as_bytes(), &key.key, alg)
                .unwrap_or(false);
        if !good {
            return Err(JwtError::BadSignature);
        }
        let caller = t.caller(&self.rules, now_secs)?;
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        let v = &mut *verified;
        if v.tokens.len() >= MAX_VERIFIED || v.bytes + token.len() > MAX_VERIFIED_BYTES {
            // Bounded: the expired and those of an older key set go first; if every one is
            // live, all go (each is verified again once, at its next request).
            let leeway = self.rules.leeway_secs;
            v.tokens.retain(|_, (c, g)| {
                *g == generation && now_secs <= c.expires.saturating_add(leeway)
            });
            if v.tokens.len() >= MAX_VERIFIED || v.bytes + token.len() > MAX_VERIFIED_BYTES {
                v.tokens.clear();
            }
            v.bytes = v.tokens.keys().map(|t| t.len()).sum();
        }
        if v.tokens
            .insert(token.into(), (caller.clone(), generation))
            .is_none()
        {
            v.bytes += token.len();
        }
        Ok(caller)
    }

    /// The caller of `token` now.
    pub(crate) fn verify(&self, token: &str) -> Result<Caller, JwtError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.verify_at(token, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};

    const SECRET: &[u8] = b"a test secret of thirty-two bytes!";
    const NOW: u64 = 1_700_000_000;

    fn token(k: usize) -> String {
        let claims = serde_json::json!({ "sub": format!("u{k}"), "exp": NOW + 60 });
        encode(
            &Header::default(),
            &claims,
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap()
    }

    fn jwt() -> Jwt {
        Jwt::new(
            JwtKeys::new(vec![JwtKey::hs256(None, SECRET)]),
            Rules::default(),
        )
    }

    #[test]
    fn the_cache_of_verified_tokens_stays_within_its_bound() {
        let jwt = jwt();
        for k in 0..=MAX_VERIFIED {
            assert_eq!(
                jwt.verify_at(&token(k), NOW).unwrap().subject,
                format!("u{k}")
            );
        }
        let v = jwt.verified.lock().unwrap();
        assert!(v.tokens.len() <= MAX_VERIFIED, "{}", v.tokens.len());
        // The last one verified is remembered, and the byte count is the tokens'.
        assert!(v.tokens.contains_key(token(MAX_VERIFIED).as_str()));
        assert_eq!(v.bytes, v.tokens.keys().map(|t| t.len()).sum::<usize>());
    }

    #[test]
    fn a_cached_token_is_refused_once_it_expires() {
        let jwt = jwt();
        let t = token(1);
        assert!(jwt.verify_at(&t, NOW).is_ok());
        // exp + the 60 s leeway has passed: the cache does not answer for it.
        assert_eq!(jwt.verify_at(&t, NOW + 121).unwrap_err(), JwtError::Expired);
    }
}
