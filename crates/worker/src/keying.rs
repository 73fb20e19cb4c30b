//! Keys: who a request counts against. The connecting IP (IPv6 grouped by prefix,
//! IPv4-mapped IPv6 normalised to IPv4), an API key hashed with SHA-256 before it becomes an
//! object name, a storage key or a log field, or both.

use std::net::IpAddr;

use tollgate::store::bounds::MAX_KEY_BYTES;

use crate::config::{KeyKind, Settings};

pub use tollgate_http::client::{ip_group, sha256_hex, HeaderError};
use tollgate_http::key;

/// The identity parts of one request, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The client's IP group: `ip4:203.0.113.7` or `ip6:2001:db8:1:2::/64`.
    pub ip: String,
    /// `key:<sha-256 hex>` of the API key, if one was sent.
    pub api_key: Option<String>,
    /// The tenant, if one was sent.
    pub tenant: Option<String>,
    /// The plan the key table gives the API key (`settings.api_keys`), if it names one.
    pub plan: Option<String>,
}

/// Reads a request's headers through `get` (lower-case names).
pub fn identify(
    settings: &Settings,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Identity, HeaderError> {
    let ip_text = match get("cf-connecting-ip") {
        Some(v) => Some(("cf-connecting-ip", v)),
        // The right-most entry: the one the trusted proxy in front of the worker appended.
        // Entries to its left were sent by the client, who can write anything there.
        None if settings.trust_forwarded_for => get("x-forwarded-for").map(|v| {
            let last = v.rsplit(',').next().unwrap_or("").trim().to_string();
            ("x-forwarded-for", last)
        }),
        None => None,
    };
    let ip = match ip_text {
        Some((header, v)) => {
            check(settings, header, &v)?;
            let addr: IpAddr = v.parse().map_err(|_| HeaderError::NotAnIp {
                header: header.to_string(),
            })?;
            ip_group(addr, settings.ipv4_prefix, settings.ipv6_prefix)
        }
        // Cloudflare always sets CF-Connecting-IP; without it (a local call with no IP) all
        // such requests share one bucket.
        None => key::UNKNOWN_IP.to_string(),
    };
    let api_key = match get(&settings.api_key_header) {
        Some(v) => Some(v),
        // With `[settings.jwt]`, a bearer value is a token (`crate::jwt`), not an API key.
        None if settings.jwt.is_some() => None,
        None => get("authorization").and_then(|a| {
            a.strip_prefix("Bearer ")
                .or_else(|| a.strip_prefix("bearer "))
                .map(str::to_string)
        }),
    };
    let mut plan = None;
    let api_key = match api_key {
        Some(v) if !v.is_empty() => {
            check(settings, &settings.api_key_header, &v)?;
            let hash = sha256_hex(v.as_bytes());
            plan = settings.key_plans.get(&hash).cloned();
            // With a list of valid keys, an unknown key is no key: it counts by IP, so
            // invented keys cannot mint fresh buckets.
            (settings.api_keys.is_empty() || settings.api_keys.contains(&hash))
                .then(|| key::hashed_api_key(&hash))
        }
        _ => None,
    };
    let tenant = match get(&settings.tenant_header) {
        Some(v) if !v.is_empty() => {
            // Stored as given (a fair share's tenant window): also held to the core's bound
            // on a key's bytes, whatever `max_header_bytes` allows.
            let max = settings.max_header_bytes.min(MAX_KEY_BYTES);
            tollgate_http::client::check_value(&settings.tenant_header, v.as_bytes(), max)?;
            Some(v)
        }
        _ => None,
    };
    Ok(Identity {
        ip,
        api_key,
        tenant,
        plan,
    })
}

fn check(settings: &Settings, header: &str, v: &str) -> Result<(), HeaderError> {
    tollgate_http::client::check_value(header, v.as_bytes(), settings.max_header_bytes)
}

/// The key a policy of `kind` counts this identity under.
pub fn key_for(kind: KeyKind, id: &Identity) -> String {
    match kind {
        KeyKind::Ip => id.ip.clone(),
        // Requests without an API key count by their IP, in the same policy.
        KeyKind::ApiKey => id.api_key.clone().unwrap_or_else(|| id.ip.clone()),
        KeyKind::IpApiKey => match &id.api_key {
            Some(k) => key::ip_with_api_key(&id.ip, k),
            None => id.ip.clone(),
        },
        KeyKind::Global => key::GLOBAL.to_string(),
    }
}

/// A caller-chosen key of the check API (`/v1/check`), hashed like an API key.
pub fn external_key(k: &str) -> String {
    key::external(k)
}

/// Which of `shards` objects decides `key` (FNV-1a: stable across isolates and versions).
pub fn shard_of(key: &str, shards: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % shards.max(1) as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn settings(extra: &str) -> Settings {
        Config::parse(&format!("[settings]\n{extra}\n"))
            .unwrap()
            .settings
    }

    fn id(s: &Settings, headers: &[(&str, &str)]) -> Result<Identity, HeaderError> {
        identify(s, |n| {
            headers
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn ipv6_in_one_prefix_share_a_key() {
        let s = settings("");
        let a = id(&s, &[("cf-connecting-ip", "2001:db8:1:2::1")]).unwrap();
        let b = id(&s, &[("cf-connecting-ip", "2001:db8:1:2:ffff:1:2:3")]).unwrap();
        let c = id(&s, &[("cf-connecting-ip", "2001:db8:1:3::1")]).unwrap();
        assert_eq!(a.ip, "ip6:2001:db8:1:2::/64");
        assert_eq!(a.ip, b.ip);
        assert_ne!(a.ip, c.ip);
        let s48 = settings("ipv6_prefix = 48");
        let c48 = id(&s48, &[("cf-connecting-ip", "2001:db8:1:3::1")]).unwrap();
        assert_eq!(c48.ip, "ip6:2001:db8:1::/48");
    }

    #[test]
    fn ipv4_mapped_is_ipv4() {
        let s = settings("");
        let a = id(&s, &[("cf-connecting-ip", "::ffff:203.0.113.7")]).unwrap();
        assert_eq!(a.ip, "ip4:203.0.113.7");
    }

    #[test]
    fn forwarded_for_only_when_trusted() {
        let s = settings("");
        let a = id(&s, &[("x-forwarded-for", "198.51.100.1, 10.0.0.1")]).unwrap();
        assert_eq!(a.ip, "ip:unknown");
        let a = id(
            &s,
            &[
                ("cf-connecting-ip", "203.0.113.9"),
                ("x-forwarded-for", "198.51.100.1"),
            ],
        )
        .unwrap();
        assert_eq!(a.ip, "ip4:203.0.113.9");
        let t = settings("trust_forwarded_for = true");
        // A client that sends its own X-Forwarded-For cannot choose its key: the trusted
        // proxy appended the address it saw.
        let a = id(&t, &[("x-forwarded-for", "198.51.100.1, 203.0.113.5")]).unwrap();
        assert_eq!(a.ip, "ip4:203.0.113.5");
        let a = id(&t, &[("x-forwarded-for", "203.0.113.5")]).unwrap();
        assert_eq!(a.ip, "ip4:203.0.113.5");
    }

    #[test]
    fn api_keys_are_hashed() {
        let s = settings("");
        let a = id(&s, &[("x-api-key", "secret-key-1")]).unwrap();
        let k = a.api_key.unwrap();
        assert!(!k.contains("secret"));
        assert_eq!(k, format!("key:{}", sha256_hex(b"secret-key-1")));
        let b = id(&s, &[("authorization", "Bearer secret-key-1")]).unwrap();
        assert_eq!(b.api_key.unwrap(), k);
        // With a JWT section, a bearer value is a token (read by `crate::jwt`), never a key.
        let j = settings("[settings.jwt]\njwks_url = \"https://id.example/jwks\"");
        assert_eq!(
            id(&j, &[("authorization", "Bearer secret-key-1")])
                .unwrap()
                .api_key,
            None
        );
        let c = id(&j, &[("x-api-key", "secret-key-1")]).unwrap();
        assert_eq!(
            c.api_key.unwrap(),
            k,
            "the API key header still carries a key"
        );
    }

    #[test]
    fn bad_headers_are_named() {
        let s = settings("");
        let long = "x".repeat(300);
        assert_eq!(
            id(&s, &[("x-api-key", &long)]).unwrap_err(),
            HeaderError::TooLong {
                header: "x-api-key".into(),
                len: 300
            }
        );
        assert_eq!(
            id(&s, &[("x-tenant", "caf\u{e9}")]).unwrap_err().header(),
            "x-tenant"
        );
        assert_eq!(
            id(&s, &[("cf-connecting-ip", "not-an-ip")]).unwrap_err(),
            HeaderError::NotAnIp {
                header: "cf-connecting-ip".into()
            }
        );
    }

    #[test]
    fn shards_are_stable_and_in_range() {
        for k in ["a", "b", "ip4:1.2.3.4", ""] {
            assert!(shard_of(k, 8) < 8);
            assert_eq!(shard_of(k, 8), shard_of(k, 8));
        }
        assert_eq!(shard_of("anything", 1), 0);
    }

    #[test]
    fn unknown_keys_count_by_ip_when_keys_are_listed() {
        let mut settings = Config::parse("").unwrap().settings;
        settings.api_keys = [sha256_hex(b"live_key_1"), sha256_hex(b"pro_key")]
            .into_iter()
            .collect();
        settings
            .key_plans
            .insert(sha256_hex(b"pro_key"), "pro".into());
        let id = |key: &str| {
            identify(&settings, |h| match h {
                "cf-connecting-ip" => Some("203.0.113.1".into()),
                "x-api-key" => Some(key.into()),
                _ => None,
            })
            .unwrap()
        };
        let known = id("live_key_1");
        assert_eq!(
            key_for(KeyKind::ApiKey, &known),
            format!("key:{}", sha256_hex(b"live_key_1"))
        );
        assert_eq!(known.plan, None, "listed without a plan");
        assert_eq!(id("pro_key").plan.as_deref(), Some("pro"));
        let invented = id("random-123");
        assert_eq!(invented.api_key, None);
        assert_eq!(invented.plan, None);
        assert_eq!(
            key_for(KeyKind::ApiKey, &invented),
            key_for(KeyKind::Ip, &invented)
        );
    }
}
