//! Keying a request as a limiter at the edge would: by client address, with IPv6 grouped by
//! prefix (one subscriber usually owns a whole /64, so a per-address key is trivially
//! evaded) and IPv4-mapped IPv6 (`::ffff:192.0.2.1`) normalised to its IPv4 address (a
//! dual-stack socket reports IPv4 clients that way; they must share the IPv4 key).
//!
//! The grouping itself is the core's `tollgate::ip::IpGroup`, shared with the edge worker.

use std::fmt;
use std::net::IpAddr;

use std::str::FromStr;
use tollgate::ip::IpGroup;

/// How each log line becomes a limiter key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySpec {
    /// The client address; IPv6 addresses grouped by their first `v6_prefix` bits (128:
    /// the whole address). IPv4 addresses are always whole.
    Ip {
        /// The IPv6 prefix length, 1 to 128.
        v6_prefix: u8,
    },
    /// The value of a named field (a CSV column, or an access-log field such as
    /// `remote_user` or `user_agent`).
    Field(String),
}

/// A `--key` value that is not `ip`, `ip/<1-128>` or `field:<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpecError(String);

impl fmt::Display for KeySpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid key \"{}\" (expected ip, ip/<IPv6 prefix 1-128> such as ip/64, or field:<name>)",
            self.0
        )
    }
}

impl std::error::Error for KeySpecError {}

impl FromStr for KeySpec {
    type Err = KeySpecError;

    fn from_str(text: &str) -> Result<KeySpec, KeySpecError> {
        let bad = || KeySpecError(text.to_owned());
        if text == "ip" {
            return Ok(KeySpec::Ip { v6_prefix: 128 });
        }
        if let Some(bits) = text.strip_prefix("ip/") {
            let n: u8 = bits.parse().map_err(|_| bad())?;
            return match n {
                1..=128 => Ok(KeySpec::Ip { v6_prefix: n }),
                _ => Err(bad()),
            };
        }
        match text.strip_prefix("field:") {
            Some(name) if !name.is_empty() => Ok(KeySpec::Field(name.to_owned())),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for KeySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySpec::Ip { v6_prefix: 128 } => f.write_str("ip"),
            KeySpec::Ip { v6_prefix } => write!(f, "ip/{v6_prefix}"),
            KeySpec::Field(name) => write!(f, "field:{name}"),
        }
    }
}

/// The key of a client address: IPv4 (including IPv4-mapped IPv6) as the address itself,
/// IPv6 as its `/v6_prefix` network (`2001:db8:1:2::/64`), or the address when the prefix
/// is 128 (the core's [`tollgate::ip::IpGroup`], the rule the edge worker keys by). Text
/// that is not an IP address (a Unix socket, a host name) is its own key.
pub fn client_key(addr: &str, v6_prefix: u8) -> String {
    match addr.parse::<IpAddr>() {
        Ok(ip) => IpGroup::of(ip, 32, v6_prefix).to_string(),
        Err(_) => addr.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_grouped_by_prefix() {
        assert_eq!(client_key("2001:db8:1:2:3:4:5:6", 64), "2001:db8:1:2::/64");
        assert_eq!(client_key("2001:DB8:1:2::ffff", 64), "2001:db8:1:2::/64");
        assert_eq!(client_key("2001:db8:1:3::1", 64), "2001:db8:1:3::/64");
        assert_eq!(client_key("2001:db8:1:2:3:4:5:6", 48), "2001:db8:1::/48");
        assert_eq!(client_key("2001:db8::1", 128), "2001:db8::1");
    }

    #[test]
    fn ipv4_mapped_is_ipv4() {
        assert_eq!(client_key("::ffff:192.0.2.7", 64), "192.0.2.7");
        assert_eq!(client_key("::ffff:c000:207", 128), "192.0.2.7");
        assert_eq!(client_key("192.0.2.7", 64), "192.0.2.7");
        // The deprecated IPv4-compatible form is a different (IPv6) address.
        assert_eq!(client_key("::192.0.2.7", 64), "::/64");
    }

    #[test]
    fn non_addresses_are_their_own_key() {
        assert_eq!(client_key("unix:", 64), "unix:");
        assert_eq!(client_key("example.org", 64), "example.org");
    }

    #[test]
    fn key_specs_parse_and_print() {
        assert_eq!("ip".parse(), Ok(KeySpec::Ip { v6_prefix: 128 }));
        assert_eq!("ip/64".parse(), Ok(KeySpec::Ip { v6_prefix: 64 }));
        assert_eq!(
            "field:user_agent".parse(),
            Ok(KeySpec::Field("user_agent".into()))
        );
        for bad in ["ip/0", "ip/129", "ip/x", "field:", "host", ""] {
            assert!(bad.parse::<KeySpec>().is_err(), "{bad}");
        }
        assert_eq!(KeySpec::Ip { v6_prefix: 56 }.to_string(), "ip/56");
    }
}
