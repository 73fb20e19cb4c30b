//! Key names: what a request is counted under, spelled the same by every front end, so a
//! client has one key whether the edge worker or the tower layer limits it (and an admin
//! API or a log names it the same way). A raw secret never becomes a key: API keys and
//! caller-chosen keys are hashed first.
//!
//! * an IP group: `ip4:203.0.113.7`, `ip6:2001:db8:1:2::/64` ([`crate::client::ip_group`]),
//!   or [`UNKNOWN_IP`] when the server did not record the peer;
//! * an API key: `key:<sha-256 hex>` ([`api_key_name`]); with the IP: `<ip>+key:<...>`
//!   ([`ip_with_api_key`]);
//! * [`GLOBAL`]: one counter for every request;
//! * a caller-chosen key of the edge's check API: `ext:<sha-256 hex>` ([`external`]);
//! * a key of the application's own extractor: `custom:<key>` ([`custom`]);
//! * the subject of a verified JWT: `sub:<subject>` ([`jwt_subject`]).
//!
//! The prefixes keep the kinds apart: no API key, custom key or address can name another
//! kind's counter.

use crate::client::sha256_hex;

/// The key of every request whose peer address is unknown (the server did not record it;
/// at the edge, no `CF-Connecting-IP`): they share one counter.
pub const UNKNOWN_IP: &str = "ip:unknown";

/// The key of a policy counting every request together.
pub const GLOBAL: &str = "global";

/// The key an API key counts under: `key:<sha-256 hex>`, so the raw key never becomes a
/// storage key, an object name or a log field.
pub fn api_key_name(raw: &[u8]) -> String {
    hashed_api_key(&sha256_hex(raw))
}

/// [`api_key_name`] of a key whose SHA-256 (lower-case hex) is already known (the edge
/// hashes a key once, to look it up in its list of valid keys and to name it).
pub fn hashed_api_key(sha256_hex: &str) -> String {
    format!("key:{sha256_hex}")
}

/// The key of a policy counting by IP and API key together: `<ip group>+<api key name>`.
pub fn ip_with_api_key(ip: &str, api_key: &str) -> String {
    format!("{ip}+{api_key}")
}

/// A caller-chosen key (the edge's check API, `/v1/check`), hashed like an API key:
/// `ext:<sha-256 hex>`.
pub fn external(key: &str) -> String {
    format!("ext:{}", sha256_hex(key.as_bytes()))
}

/// The key of a caller a verified JWT names (`crate::jwt`): `sub:<subject>`. A subject is
/// not a secret (the issuer signed it for anyone to read), and an operator sets its
/// override by it.
pub fn jwt_subject(subject: &str) -> String {
    format!("sub:{subject}")
}

/// A key from the application's own extractor (the tower layer's `Key::Custom`):
/// `custom:<key>`.
pub fn custom(key: &str) -> String {
    format!("custom:{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_kept_apart_and_secrets_hashed() {
        let k = api_key_name(b"secret-key-1");
        assert!(k.starts_with("key:") && !k.contains("secret") && k.len() == 4 + 64);
        let e = external("secret-key-1");
        assert_eq!(e, format!("ext:{}", &k[4..]), "the same hash, another kind");
        assert_eq!(hashed_api_key(&sha256_hex(b"secret-key-1")), k);
        assert_eq!(custom("tenant-7"), "custom:tenant-7");
        assert_eq!(
            ip_with_api_key("ip4:192.0.2.1", &k),
            format!("ip4:192.0.2.1+{k}")
        );
        assert_ne!(UNKNOWN_IP, GLOBAL);
    }
}
