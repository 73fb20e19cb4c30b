//! `[settings.jwt]`: callers named by a verified JWT (issue 41). The token's subject is the
//! caller's key (`sub:<subject>`, counted by the policies keyed by `api-key`) and a claim
//! names its plan; the rules a token must pass are [`tollgate_http::jwt`]'s, the keys
//! checked here come from the file (a JWK or a PEM public key, or the name of the secret
//! holding an HS256 key: a secret is never written in the file) and/or a JWKS URL.
//!
//! ```
//! use tollgate_config::{Config, InvalidToken, JwtKeyData};
//! let c = Config::parse(r#"
//! [settings.jwt]
//! jwks_url = "https://id.example/.well-known/jwks.json"
//! keys = [{ kid = "hs-1", alg = "HS256", secret = "JWT_SECRET" }]
//! plan_claim = "plan"
//! audience = "api"
//! on_invalid = "reject"
//! "#).unwrap();
//! let jwt = c.settings.jwt.unwrap();
//! assert_eq!(jwt.rules.plan_claim.as_deref(), Some("plan"));
//! assert_eq!(jwt.keys[0].data, JwtKeyData::SecretBinding("JWT_SECRET".into()));
//! assert_eq!((jwt.on_invalid, jwt.jwks_max_age_secs), (InvalidToken::Reject, 300));
//! ```

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value};
use tollgate_http::jwt::{Alg, Rules};

use super::{in_range, ConfigError};

/// The most keys given in the file, and the most a JWKS document may hold.
pub const MAX_JWT_KEYS: usize = 32;

/// The largest JWKS document read (larger ones are refused and the last good set kept).
pub const MAX_JWKS_BYTES: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJwt {
    keys: Option<Vec<RawKey>>,
    jwks_url: Option<String>,
    jwks_max_age_secs: Option<u64>,
    jwks_min_refetch_secs: Option<u64>,
    issuer: Option<String>,
    audience: Option<String>,
    leeway_secs: Option<u64>,
    max_bytes: Option<usize>,
    subject_claim: Option<String>,
    plan_claim: Option<String>,
    on_invalid: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    kid: Option<String>,
    alg: Option<String>,
    jwk: Option<Value>,
    pem: Option<String>,
    secret: Option<String>,
}

/// What a request whose bearer token is refused gets (`settings.jwt.on_invalid`, and a
/// route's own `on_invalid_token`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InvalidToken {
    /// Counted as a request without a token: by IP, under the default plan (`"anonymous"`).
    Anonymous,
    /// A 401 problem document with `WWW-Authenticate: Bearer error="invalid_token"`
    /// (`"reject"`).
    Reject,
}

/// A verification key's material, as the file gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwtKeyData {
    /// A public JWK's members (`kty` and those of its type only: `n`, `e`; `crv`, `x`, `y`).
    Jwk(Map<String, Value>),
    /// A public key's DER (SubjectPublicKeyInfo), from its PEM.
    Spki(Vec<u8>),
    /// The name of the secret (or var) holding an HS256 key's bytes.
    SecretBinding(String),
}

/// A verification key pinned to one algorithm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtKeyConfig {
    /// The key id a token names it by, if any.
    pub kid: Option<String>,
    /// The only algorithm it verifies.
    pub alg: Alg,
    /// Its material.
    pub data: JwtKeyData,
}

/// `[settings.jwt]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtSettings {
    /// The keys given in the file.
    pub keys: Vec<JwtKeyConfig>,
    /// Where the issuer publishes its key set, if anywhere (`https://`, or `http://` for a
    /// local issuer).
    pub jwks_url: Option<String>,
    /// How long a fetched key set is used before it is fetched again (default 300 s).
    pub jwks_max_age_secs: u64,
    /// The least time between two fetches of the key set that a token of an unknown `kid`
    /// causes (default 30 s): a client sending invented `kid`s cannot make the edge fetch
    /// on every request.
    pub jwks_min_refetch_secs: u64,
    /// What a token must pass besides its signature.
    pub rules: Rules,
    /// What a refused token gets.
    pub on_invalid: InvalidToken,
}

/// The algorithm a JWK verifies: its `alg` when present, else what its type says (RSA:
/// RS256, EC P-256: ES256, OKP Ed25519: EdDSA); and its public members only. A symmetric
/// key (`oct`) is refused (a secret does not belong in a key set), as is another
/// algorithm, a private key, or a member that is not base64url. Used for the keys in the
/// file and for each key of a fetched JWKS.
pub fn jwk_key(jwk: &Map<String, Value>) -> Result<(Alg, Map<String, Value>), String> {
    let text = |name: &str| jwk.get(name).and_then(Value::as_str);
    let kty = text("kty").ok_or("a JWK needs kty")?;
    if jwk.contains_key("d") {
        return Err("a private key (it has d): give the public key only".into());
    }
    let (by_type, members): (Alg, &[&str]) = match (kty, text("crv")) {
        ("RSA", _) => (Alg::Rs256, &["n", "e"]),
        ("EC", Some("P-256")) => (Alg::Es256, &["crv", "x", "y"]),
        ("OKP", Some("Ed25519")) => (Alg::EdDsa, &["crv", "x"]),
        ("oct", _) => {
            return Err("a symmetric key (oct): give an HS256 secret by its binding name".into())
        }
        (k, crv) => {
            return Err(format!(
                "kty {k:?} (crv {crv:?}) is not RSA, EC P-256 or OKP Ed25519"
            ))
        }
    };
    if let Some(named) = text("alg") {
        if Alg::from_name(named) != Some(by_type) {
            return Err(format!(
                "alg {named:?} is not accepted for a {kty} key (only {})",
                by_type.name()
            ));
        }
    }
    let mut public = Map::new();
    public.insert("kty".into(), kty.into());
    for m in members {
        let v = text(m).ok_or_else(|| format!("a {kty} JWK needs {m}"))?;
        if *m != "crv" && URL_SAFE_NO_PAD.decode(v).is_err() {
            return Err(format!("{m} is not base64url"));
        }
        public.insert((*m).into(), v.into());
    }
    Ok((by_type, public))
}

/// The DER of a PEM `PUBLIC KEY` block.
fn spki(pem: &str) -> Result<Vec<u8>, String> {
    let body = pem
        .trim()
        .strip_prefix("-----BEGIN PUBLIC KEY-----")
        .and_then(|b| b.strip_suffix("-----END PUBLIC KEY-----"))
        .ok_or("not a PEM public key (-----BEGIN PUBLIC KEY----- ... -----END PUBLIC KEY-----)")?;
    let b64: String = body.split_whitespace().collect();
    STANDARD
        .decode(b64)
        .map_err(|_| "the PEM body is not base64".to_string())
}

fn key(at: &str, raw: RawKey) -> Result<JwtKeyConfig, ConfigError> {
    let named = match raw.alg.as_deref() {
        None => None,
        Some(a) => Some(Alg::from_name(a).ok_or_else(|| {
            ConfigError::new(
                format!("{at}.alg"),
                format!("{a:?} is not RS256, ES256, EdDSA or HS256"),
            )
        })?),
    };
    let (alg, data) = match (raw.jwk, raw.pem, raw.secret) {
        (Some(jwk), None, None) => {
            let Value::Object(jwk) = jwk else {
                return Err(ConfigError::new(format!("{at}.jwk"), "not a JWK object"));
            };
            let (alg, public) =
                jwk_key(&jwk).map_err(|e| ConfigError::new(format!("{at}.jwk"), e))?;
            if named.is_some_and(|n| n != alg) {
                return Err(ConfigError::new(
                    format!("{at}.alg"),
                    format!("the JWK is a {} key", alg.name()),
                ));
            }
            (alg, JwtKeyData::Jwk(public))
        }
        (None, Some(pem), None) => {
            let alg = match named {
                Some(Alg::Hs256) | None => {
                    return Err(ConfigError::new(
                        format!("{at}.alg"),
                        "a PEM key needs alg RS256, ES256 or EdDSA",
                    ))
                }
                Some(a) => a,
            };
            let der = spki(&pem).map_err(|e| ConfigError::new(format!("{at}.pem"), e))?;
            (alg, JwtKeyData::Spki(der))
        }
        (None, None, Some(name)) => {
            if named != Some(Alg::Hs256) {
                return Err(ConfigError::new(
                    format!("{at}.alg"),
                    "a secret is an HS256 key: alg = \"HS256\"",
                ));
            }
            let ok =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok {
                return Err(ConfigError::new(
                    format!("{at}.secret"),
                    format!(
                        "{name:?} is not a binding name: the secret itself goes in a worker secret (wrangler secret put NAME), named here"
                    ),
                ));
            }
            (Alg::Hs256, JwtKeyData::SecretBinding(name))
        }
        _ => {
            return Err(ConfigError::new(
                at,
                "give one of jwk, pem (with alg) or secret (with alg = \"HS256\")",
            ))
        }
    };
    Ok(JwtKeyConfig {
        kid: raw.kid,
        alg,
        data,
    })
}

fn claim_name(field: &str, name: String) -> Result<String, ConfigError> {
    if name.is_empty() || name.len() > 64 {
        return Err(ConfigError::new(field, "a claim name of 1 to 64 bytes"));
    }
    Ok(name)
}

/// Checks `settings.jwt` (the first broken field is the one named).
pub(super) fn validate(raw: RawJwt) -> Result<JwtSettings, ConfigError> {
    let listed = raw.keys.unwrap_or_default();
    if listed.len() > MAX_JWT_KEYS {
        return Err(ConfigError::new(
            "settings.jwt.keys",
            format!("{} keys: at most {MAX_JWT_KEYS}", listed.len()),
        ));
    }
    let keys = listed
        .into_iter()
        .enumerate()
        .map(|(i, k)| key(&format!("settings.jwt.keys[{i}]"), k))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, k) in keys.iter().enumerate() {
        let twice = keys[..i].iter().any(|o| o.kid.is_some() && o.kid == k.kid);
        if twice {
            return Err(ConfigError::new(
                format!("settings.jwt.keys[{i}].kid"),
                "listed twice: a kid names one key",
            ));
        }
    }
    if let Some(url) = &raw.jwks_url {
        if !(url.starts_with("https://") || url.starts_with("http://")) || url.contains(' ') {
            return Err(ConfigError::new(
                "settings.jwt.jwks_url",
                format!("{url:?} is not an https:// (or http://) URL"),
            ));
        }
    }
    if keys.is_empty() && raw.jwks_url.is_none() {
        return Err(ConfigError::new(
            "settings.jwt",
            "no keys: give keys, a jwks_url, or both",
        ));
    }
    let jwks_max_age_secs = in_range(
        "settings.jwt.jwks_max_age_secs",
        raw.jwks_max_age_secs.unwrap_or(300),
        1..=86_400,
    )?;
    let jwks_min_refetch_secs = in_range(
        "settings.jwt.jwks_min_refetch_secs",
        raw.jwks_min_refetch_secs.unwrap_or(30),
        1..=3600,
    )?;
    let defaults = Rules::default();
    let rules = Rules {
        issuer: raw.issuer,
        audience: raw.audience,
        leeway_secs: in_range(
            "settings.jwt.leeway_secs",
            raw.leeway_secs.unwrap_or(defaults.leeway_secs),
            0..=3600,
        )?,
        max_bytes: in_range(
            "settings.jwt.max_bytes",
            raw.max_bytes.unwrap_or(defaults.max_bytes),
            256..=65_536,
        )?,
        subject_claim: match raw.subject_claim {
            Some(s) => claim_name("settings.jwt.subject_claim", s)?,
            None => defaults.subject_claim,
        },
        plan_claim: raw
            .plan_claim
            .map(|p| claim_name("settings.jwt.plan_claim", p))
            .transpose()?,
    };
    let on_invalid = match raw.on_invalid.as_deref() {
        None | Some("anonymous") => InvalidToken::Anonymous,
        Some("reject") => InvalidToken::Reject,
        Some(other) => {
            return Err(ConfigError::new(
                "settings.jwt.on_invalid",
                format!("{other:?} is not \"anonymous\" or \"reject\""),
            ))
        }
    };
    Ok(JwtSettings {
        keys,
        jwks_url: raw.jwks_url,
        jwks_max_age_secs,
        jwks_min_refetch_secs,
        rules,
        on_invalid,
    })
}
