//! Verified JWTs as callers: the rules every front end applies to a bearer token before
//! its claims choose a key and a plan. This module owns everything but the signature's
//! maths, which each front end does with its platform's crypto (the tower layer with the
//! `jsonwebtoken` crate, the edge with WebCrypto), so the rules are written once:
//!
//! 1. **Size**: a token longer than [`Rules::max_bytes`] is refused before any decoding.
//! 2. **Form** ([`parse`]): three base64url parts without padding, the header and the
//!    payload JSON objects.
//! 3. **Algorithm**: RS256, ES256, EdDSA or HS256 ([`Alg`]); `none` and every other name
//!    are refused.
//! 4. **Key** ([`Token::key`]): each key is pinned to one algorithm, and a token is
//!    checked only against keys of its own `alg`. An HS256 token "signed" with an RSA
//!    public key as its secret finds no HS256 key: algorithm confusion is refused. A token
//!    naming a `kid` needs that key (a key removed from the set refuses its tokens); one
//!    without a `kid` needs exactly one key of its algorithm.
//! 5. **Signature**: the front end's, over [`Token::signing_input`].
//! 6. **Claims** ([`Token::caller`], only after the signature): `exp` is required and,
//!    with `nbf`, checked with [`Rules::leeway_secs`]; `iss` and `aud` (a string or a list)
//!    when the rules name them; the subject claim a non-empty string. The plan claim, when
//!    the rules name one, is read if it is a string.
//!
//! Every refusal is a [`JwtError`]; none of them echoes the token.
//!
//! ```
//! use tollgate_http::jwt::{parse, Alg, JwtError, Rules};
//! let rules = Rules::default();
//! // {"alg":"none"}.{"sub":"a","exp":9999999999}.
//! let unsigned = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIiwiZXhwIjo5OTk5OTk5OTk5fQ.";
//! assert_eq!(parse(unsigned, &rules).unwrap_err(), JwtError::Algorithm("none".into()));
//! // {"alg":"HS256","kid":"k1"}.{"sub":"alice","plan":"pro","exp":2000000000}.<signature>
//! let token = "eyJhbGciOiJIUzI1NiIsImtpZCI6ImsxIn0.\
//!              eyJzdWIiOiJhbGljZSIsInBsYW4iOiJwcm8iLCJleHAiOjIwMDAwMDAwMDB9.c2ln";
//! let t = parse(token, &rules).unwrap();
//! assert_eq!((t.alg(), t.kid()), (Alg::Hs256, Some("k1")));
//! // (the front end verifies the signature over t.signing_input() here)
//! let caller = t.caller(&Rules { plan_claim: Some("plan".into()), ..rules }, 1_700_000_000).unwrap();
//! assert_eq!((caller.subject.as_str(), caller.plan.as_deref()), ("alice", Some("pro")));
//! ```

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Map, Value};

/// The signature algorithms a key may be pinned to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alg {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// ECDSA on P-256 with SHA-256.
    Es256,
    /// Ed25519.
    EdDsa,
    /// HMAC with SHA-256 (a shared secret).
    Hs256,
}

impl Alg {
    /// The `alg` header value.
    pub const fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Es256 => "ES256",
            Alg::EdDsa => "EdDSA",
            Alg::Hs256 => "HS256",
        }
    }

    /// The algorithm named `name` (`None` for `none` and every unsupported name).
    pub fn from_name(name: &str) -> Option<Alg> {
        [Alg::Rs256, Alg::Es256, Alg::EdDsa, Alg::Hs256]
            .into_iter()
            .find(|a| a.name() == name)
    }
}

/// What a front end requires of a token beyond its signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The `iss` required, if any.
    pub issuer: Option<String>,
    /// An audience the `aud` must name, if any.
    pub audience: Option<String>,
    /// How far `exp` and `nbf` may be off (clocks differ between the issuer and us).
    pub leeway_secs: u64,
    /// The longest token accepted, in bytes.
    pub max_bytes: usize,
    /// The claim naming the caller (counted as `sub:<value>`).
    pub subject_claim: String,
    /// The claim naming the caller's plan, if plans are chosen by a claim.
    pub plan_claim: Option<String>,
}

impl Default for Rules {
    /// No issuer or audience required, 60 s of leeway, 8 KiB, the subject in `sub`, no
    /// plan claim.
    fn default() -> Rules {
        Rules {
            issuer: None,
            audience: None,
            leeway_secs: 60,
            max_bytes: 8 * 1024,
            subject_claim: "sub".into(),
            plan_claim: None,
        }
    }
}

/// Why a token is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwtError {
    /// Longer than [`Rules::max_bytes`].
    TooLarge {
        /// Its length.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// Not three base64url parts with JSON objects: which part, and why.
    Malformed(&'static str),
    /// An `alg` that is not one of [`Alg`] (`none` among them).
    Algorithm(String),
    /// No key for the token: its `kid` is not in the set, or no key has its algorithm.
    UnknownKey,
    /// No `kid`, and more than one key of the token's algorithm.
    AmbiguousKey,
    /// The signature does not verify.
    BadSignature,
    /// `exp` (with the leeway) has passed.
    Expired,
    /// `nbf` (with the leeway) has not come.
    NotYetValid,
    /// `iss` is not the required issuer.
    Issuer,
    /// `aud` does not name the required audience.
    Audience,
    /// A required claim is missing or of the wrong type.
    Claim(String),
}

impl fmt::Display for JwtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwtError::TooLarge { bytes, max } => {
                write!(f, "the token is {bytes} bytes, over the bound of {max}")
            }
            JwtError::Malformed(why) => write!(f, "the token is malformed: {why}"),
            JwtError::Algorithm(alg) => write!(f, "the token's algorithm {alg:?} is not accepted"),
            JwtError::UnknownKey => {
                f.write_str("no key verifies this token (unknown kid or algorithm)")
            }
            JwtError::AmbiguousKey => {
                f.write_str("the token names no kid and several keys have its algorithm")
            }
            JwtError::BadSignature => f.write_str("the token's signature does not verify"),
            JwtError::Expired => f.write_str("the token has expired"),
            JwtError::NotYetValid => f.write_str("the token is not valid yet (nbf)"),
            JwtError::Issuer => f.write_str("the token's issuer is not the one required"),
            JwtError::Audience => f.write_str("the token's audience does not include this API"),
            JwtError::Claim(c) => write!(f, "the token's {c:?} claim is missing or not valid"),
        }
    }
}

impl std::error::Error for JwtError {}

impl JwtError {
    /// The 401 problem document a front end answers a refused token with (when its route
    /// refuses invalid tokens rather than counting them as anonymous).
    pub fn problem(&self) -> String {
        crate::problem::problem(401, "invalid-token", &self.to_string(), json!({}))
    }

    /// The `WWW-Authenticate` value of that answer (RFC 6750, section 3).
    pub const WWW_AUTHENTICATE: &'static str = "Bearer error=\"invalid_token\"";
}

/// A token whose form and algorithm passed: its signature and claims still to check.
#[derive(Clone, Debug)]
pub struct Token<'a> {
    alg: Alg,
    kid: Option<String>,
    signing_input: &'a str,
    signature: Vec<u8>,
    claims: Map<String, Value>,
}

/// The token's caller: who, under which plan, until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The subject claim's value.
    pub subject: String,
    /// The plan claim's value, when the rules name one and it is a string.
    pub plan: Option<String>,
    /// `exp`, in seconds since the epoch (a cache of verified tokens keeps it until then).
    pub expires: u64,
}

fn part(text: &str, which: &'static str) -> Result<Vec<u8>, JwtError> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| JwtError::Malformed(which))
}

fn object(bytes: &[u8], which: &'static str) -> Result<Map<String, Value>, JwtError> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(JwtError::Malformed(which)),
    }
}

/// Steps 1 to 3: the token's size, form and algorithm.
pub fn parse<'a>(token: &'a str, rules: &Rules) -> Result<Token<'a>, JwtError> {
    if token.len() > rules.max_bytes {
        return Err(JwtError::TooLarge {
            bytes: token.len(),
            max: rules.max_bytes,
        });
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed("not three parts separated by dots"));
    };
    let header = object(
        &part(h, "header is not base64url")?,
        "header is not a JSON object",
    )?;
    let alg = match header.get("alg") {
        Some(Value::String(a)) => {
            Alg::from_name(a).ok_or_else(|| JwtError::Algorithm(a.clone()))?
        }
        _ => return Err(JwtError::Malformed("header has no alg")),
    };
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(k)) => Some(k.clone()),
        Some(_) => return Err(JwtError::Malformed("kid is not a string")),
    };
    let claims = object(
        &part(p, "payload is not base64url")?,
        "payload is not a JSON object",
    )?;
    let signature = part(s, "signature is not base64url")?;
    Ok(Token {
        alg,
        kid,
        signing_input: &token[..h.len() + 1 + p.len()],
        signature,
        claims,
    })
}

impl<'a> Token<'a> {
    /// The header's algorithm.
    pub fn alg(&self) -> Alg {
        self.alg
    }

    /// The header's key id, if any.
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// What the signature signs: `<header>.<payload>` as sent.
    pub fn signing_input(&self) -> &'a str {
        self.signing_input
    }

    /// The signature's bytes.
    pub fn signature(&self) -> &[u8] {
        &self.signature
    }

    /// Step 4: the one key of `keys` this token may be verified with. `describe` gives a
    /// key's id (if any) and the algorithm it is pinned to.
    pub fn key<'k, K>(
        &self,
        keys: &'k [K],
        describe: impl Fn(&K) -> (Option<&str>, Alg),
    ) -> Result<&'k K, JwtError> {
        let mut same_alg = keys.iter().filter(|k| describe(k).1 == self.alg);
        match &self.kid {
            Some(kid) => same_alg
                .find(|k| describe(k).0 == Some(kid.as_str()))
                .ok_or(JwtError::UnknownKey),
            None => match (same_alg.next(), same_alg.next()) {
                (Some(k), None) => Ok(k),
                (None, _) => Err(JwtError::UnknownKey),
                (Some(_), Some(_)) => Err(JwtError::AmbiguousKey),
            },
        }
    }

    /// Step 6, once the signature has verified: the claims at `now_secs` (seconds since
    /// the epoch).
    pub fn caller(&self, rules: &Rules, now_secs: u64) -> Result<Caller, JwtError> {
        let c = &self.claims;
        let secs = |name: &str| match c.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
                .map(Some)
                .ok_or_else(|| JwtError::Claim(name.into())),
        };
        let expires = secs("exp")?.ok_or_else(|| JwtError::Claim("exp".into()))?;
        if now_secs > expires.saturating_add(rules.leeway_secs) {
            return Err(JwtError::Expired);
        }
        if let Some(nbf) = secs("nbf")? {
            if now_secs.saturating_add(rules.leeway_secs) < nbf {
                return Err(JwtError::NotYetValid);
            }
        }
        if let Some(iss) = &rules.issuer {
            if c.get("iss").and_then(Value::as_str) != Some(iss.as_str()) {
                return Err(JwtError::Issuer);
            }
        }
        if let Some(aud) = &rules.audience {
            let named = match c.get("aud") {
                Some(Value::String(a)) => a == aud,
                Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(aud.as_str())),
                _ => false,
            };
            if !named {
                return Err(JwtError::Audience);
            }
        }
        let subject = match c.get(&rules.subject_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(JwtError::Claim(rules.subject_claim.clone())),
        };
        let plan = rules
            .plan_claim
            .as_ref()
            .and_then(|name| c.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Caller {
            subject,
            plan,
            expires,
        })
    }
}

/// The tokens a front end has verified, each with its caller and the generation of the key
/// set it was verified under, so that a repeated token is not verified again: a signature
/// check costs far more than a rate-limit decision, and a client sends the same token with
/// every request. Bounded by a count and by the tokens' bytes in all; answers a token only
/// while it is unexpired (with the leeway) and only under the key set it was verified with
/// (a key removed since refuses its tokens at once).
///
/// Only verified tokens enter, so a client cannot fill it with tokens of its choosing
/// beyond the valid ones it holds.
///
/// ```
/// use tollgate_http::jwt::{Caller, VerifiedTokens};
/// let mut cache = VerifiedTokens::new(2, 1024);
/// let alice = Caller { subject: "alice".into(), plan: None, expires: 100 };
/// cache.insert("t1", alice.clone(), 0, 50, 10);
/// assert_eq!(cache.get("t1", 0, 110, 10), Some(&alice)); // exp + leeway
/// assert_eq!(cache.get("t1", 0, 111, 10), None); // expired
/// assert_eq!(cache.get("t1", 1, 50, 10), None); // another key set
/// ```
#[derive(Clone, Debug, Default)]
pub struct VerifiedTokens {
    tokens: std::collections::HashMap<Box<str>, (Caller, u64)>,
    bytes: usize,
    max_tokens: usize,
    max_bytes: usize,
}

impl VerifiedTokens {
    /// An empty cache of at most `max_tokens` tokens and `max_bytes` of them in all.
    pub fn new(max_tokens: usize, max_bytes: usize) -> VerifiedTokens {
        VerifiedTokens {
            max_tokens,
            max_bytes,
            ..VerifiedTokens::default()
        }
    }

    /// The caller of `token` if it was verified under key set `generation` and has not
    /// expired at `now_secs` (with `leeway_secs`).
    pub fn get(
        &self,
        token: &str,
        generation: u64,
        now_secs: u64,
        leeway_secs: u64,
    ) -> Option<&Caller> {
        let (caller, g) = self.tokens.get(token)?;
        (*g == generation && now_secs <= caller.expires.saturating_add(leeway_secs))
            .then_some(caller)
    }

    /// Remembers that `token` verified as `caller` under key set `generation`. When full,
    /// the expired and those of an older key set go first; if every one is live, all go
    /// (each is verified again once, at its next request). A token over the byte bound
    /// alone is not kept.
    pub fn insert(
        &mut self,
        token: &str,
        caller: Caller,
        generation: u64,
        now_secs: u64,
        leeway_secs: u64,
    ) {
        if token.len() > self.max_bytes || self.max_tokens == 0 {
            return;
        }
        let full = |v: &VerifiedTokens| {
            v.tokens.len() >= v.max_tokens || v.bytes + token.len() > v.max_bytes
        };
        if full(self) {
            self.tokens.retain(|_, (c, g)| {
                *g == generation && now_secs <= c.expires.saturating_add(leeway_secs)
            });
            if full(self) {
                self.tokens.clear();
            }
            self.bytes = self.tokens.keys().map(|t| t.len()).sum();
        }
        if self
            .tokens
            .insert(token.into(), (caller, generation))
            .is_none()
        {
            self.bytes += token.len();
        }
    }

    /// How many tokens are remembered.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The bytes of the tokens remembered.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The token of an `Authorization: Bearer <token>` value (`None` for another scheme).
pub fn bearer(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(v: &Value) -> String {
        URL_SAFE_NO_PAD.encode(v.to_string())
    }

    fn token(header: Value, claims: Value) -> String {
        format!(
            "{}.{}.{}",
            b64(&header),
            b64(&claims),
            URL_SAFE_NO_PAD.encode(b"sig")
        )
    }

    const NOW: u64 = 1_700_000_000;

    #[test]
    fn none_and_unknown_algorithms_are_refused_by_name() {
        for alg in ["none", "HS512", "RS384", "nOnE"] {
            let t = token(json!({ "alg": alg }), json!({ "sub": "a", "exp": NOW }));
            assert_eq!(
                parse(&t, &Rules::default()).unwrap_err(),
                JwtError::Algorithm(alg.into())
            );
        }
    }

    #[test]
    fn a_token_over_the_bound_is_refused_before_decoding() {
        let rules = Rules {
            max_bytes: 10,
            ..Rules::default()
        };
        let e = parse("!!!!!!!!!!!", &rules).unwrap_err();
        assert_eq!(e, JwtError::TooLarge { bytes: 11, max: 10 });
    }

    #[test]
    fn malformed_tokens_name_the_part() {
        let r = Rules::default();
        assert_eq!(
            parse("a.b", &r).unwrap_err(),
            JwtError::Malformed("not three parts separated by dots")
        );
        assert_eq!(
            parse("a.b.c.d", &r).unwrap_err(),
            JwtError::Malformed("not three parts separated by dots")
        );
        assert_eq!(
            parse("***.e30.", &r).unwrap_err(),
            JwtError::Malformed("header is not base64url")
        );
        let h = b64(&json!({ "alg": "HS256" }));
        assert_eq!(
            parse(&format!("{h}.WzFd."), &r).unwrap_err(),
            JwtError::Malformed("payload is not a JSON object")
        );
    }

    /// A test key: its id and algorithm.
    fn describe<'k>(k: &'k (Option<&'static str>, Alg)) -> (Option<&'k str>, Alg) {
        (k.0, k.1)
    }

    #[test]
    fn keys_are_pinned_to_their_algorithm_so_confusion_finds_none() {
        // An RSA key only: an HS256 token (its "secret" the RSA public key) has no key.
        let keys = [(Some("rsa"), Alg::Rs256)];
        let hs = token(json!({ "alg": "HS256", "kid": "rsa" }), json!({}));
        let t = parse(&hs, &Rules::default()).unwrap();
        assert_eq!(t.key(&keys, describe).unwrap_err(), JwtError::UnknownKey);
        let rs = token(json!({ "alg": "RS256", "kid": "rsa" }), json!({}));
        assert!(parse(&rs, &Rules::default())
            .unwrap()
            .key(&keys, describe)
            .is_ok());
    }

    #[test]
    fn a_kid_must_be_in_the_set_and_no_kid_needs_one_key_of_the_algorithm() {
        let keys = [
            (Some("a"), Alg::Es256),
            (Some("b"), Alg::Es256),
            (None, Alg::Hs256),
        ];
        let of = |h: Value| {
            let t = token(h, json!({}));
            parse(&t, &Rules::default())
                .unwrap()
                .key(&keys, describe)
                .map(|k| k.0)
        };
        assert_eq!(of(json!({ "alg": "ES256", "kid": "b" })), Ok(Some("b")));
        assert_eq!(
            of(json!({ "alg": "ES256", "kid": "gone" })),
            Err(JwtError::UnknownKey)
        );
        assert_eq!(of(json!({ "alg": "ES256" })), Err(JwtError::AmbiguousKey));
        assert_eq!(of(json!({ "alg": "HS256" })), Ok(None));
        assert_eq!(of(json!({ "alg": "EdDSA" })), Err(JwtError::UnknownKey));
    }

    fn caller(claims: Value, rules: &Rules) -> Result<Caller, JwtError> {
        let t = token(json!({ "alg": "HS256" }), claims);
        parse(&t, rules).unwrap().caller(rules, NOW)
    }

    #[test]
    fn exp_is_required_and_checked_with_the_leeway() {
        let r = Rules::default(); // 60 s
        assert_eq!(
            caller(json!({ "sub": "a" }), &r),
            Err(JwtError::Claim("exp".into()))
        );
        assert!(caller(json!({ "sub": "a", "exp": NOW - 60 }), &r).is_ok());
        assert_eq!(
            caller(json!({ "sub": "a", "exp": NOW - 61 }), &r),
            Err(JwtError::Expired)
        );
        assert_eq!(
            caller(json!({ "sub": "a", "exp": "soon" }), &r),
            Err(JwtError::Claim("exp".into()))
        );
    }

    #[test]
    fn nbf_is_checked_with_the_leeway() {
        let r = Rules::default();
        let at = |nbf: u64| caller(json!({ "sub": "a", "exp": NOW + 600, "nbf": nbf }), &r);
        assert!(at(NOW + 60).is_ok());
        assert_eq!(at(NOW + 61), Err(JwtError::NotYetValid));
    }

    #[test]
    fn issuer_and_audience_are_checked_when_required() {
        let r = Rules {
            issuer: Some("https://id.example".into()),
            audience: Some("api".into()),
            ..Rules::default()
        };
        let ok =
            json!({ "sub": "a", "exp": NOW, "iss": "https://id.example", "aud": ["web", "api"] });
        assert!(caller(ok, &r).is_ok());
        let other_iss =
            json!({ "sub": "a", "exp": NOW, "iss": "https://evil.example", "aud": "api" });
        assert_eq!(caller(other_iss, &r), Err(JwtError::Issuer));
        let other_aud =
            json!({ "sub": "a", "exp": NOW, "iss": "https://id.example", "aud": "web" });
        assert_eq!(caller(other_aud, &r), Err(JwtError::Audience));
    }

    #[test]
    fn the_subject_and_plan_come_from_the_named_claims() {
        let r = Rules {
            subject_claim: "uid".into(),
            plan_claim: Some("tier".into()),
            ..Rules::default()
        };
        let c = caller(json!({ "uid": "u1", "tier": "pro", "exp": NOW }), &r).unwrap();
        assert_eq!(c.subject, "u1");
        assert_eq!(c.plan.as_deref(), Some("pro"));
        assert_eq!(c.expires, NOW);
        assert_eq!(
            caller(json!({ "sub": "u1", "exp": NOW }), &r),
            Err(JwtError::Claim("uid".into()))
        );
        assert_eq!(
            caller(json!({ "uid": "", "exp": NOW }), &r),
            Err(JwtError::Claim("uid".into()))
        );
        // A plan claim that is not a string is no plan.
        let c = caller(json!({ "uid": "u1", "tier": 3, "exp": NOW }), &r).unwrap();
        assert_eq!(c.plan, None);
    }

    #[test]
    fn bearer_reads_the_token_of_the_bearer_scheme_only() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("Bearer"), None);
    }

    #[test]
    fn a_refusal_is_a_401_problem_that_never_echoes_the_token() {
        let t = token(
            json!({ "alg": "HS256" }),
            json!({ "sub": "secret-subject" }),
        );
        let e = parse(&t, &Rules::default())
            .unwrap()
            .caller(&Rules::default(), NOW)
            .unwrap_err();
        let body = e.problem();
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], 401);
        assert_eq!(v["title"], "Unauthorized");
        assert_eq!(v["error"], "invalid-token");
        assert_eq!(
            v["detail"],
            "the token's \"exp\" claim is missing or not valid"
        );
        assert!(!body.contains(&t) && !body.contains("secret-subject"));
    }

    fn alice(expires: u64) -> Caller {
        Caller {
            subject: "alice".into(),
            plan: Some("pro".into()),
            expires,
        }
    }

    #[test]
    fn the_verified_tokens_stay_within_their_count_and_bytes() {
        let mut cache = VerifiedTokens::new(3, 1000);
        for k in 0..10 {
            cache.insert(&format!("token-{k}"), alice(NOW + 60), 0, NOW, 60);
            assert!(cache.len() <= 3, "{}", cache.len());
            assert!(cache.bytes() <= 1000);
        }
        // The last one verified is remembered, and the byte count is the tokens'.
        assert!(cache.get("token-9", 0, NOW, 60).is_some());
        assert_eq!(cache.bytes(), cache.len() * "token-9".len());
        let mut small = VerifiedTokens::new(100, 20);
        small.insert("0123456789", alice(NOW), 0, NOW, 0);
        small.insert("abcdefghij", alice(NOW), 0, NOW, 0);
        small.insert("ABCDEFGHIJ", alice(NOW), 0, NOW, 0);
        assert_eq!((small.len(), small.bytes()), (1, 10));
        small.insert(&"x".repeat(21), alice(NOW), 0, NOW, 0);
        assert_eq!(small.len(), 1, "a token over the bound alone is not kept");
    }

    #[test]
    fn a_full_cache_drops_the_expired_and_older_key_sets_first() {
        let mut cache = VerifiedTokens::new(3, 1000);
        cache.insert("old-set", alice(NOW + 600), 0, NOW, 0);
        cache.insert("expired", alice(NOW - 1), 1, NOW - 10, 0);
        cache.insert("live", alice(NOW + 600), 1, NOW, 0);
        cache.insert("new", alice(NOW + 600), 1, NOW, 0);
        assert_eq!(cache.len(), 2);
        assert!(cache.get("live", 1, NOW, 0).is_some());
        assert!(cache.get("new", 1, NOW, 0).is_some());
    }
}
