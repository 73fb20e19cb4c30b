//! Keying a request as a limiter at the edge would: by client address, with IPv6 grouped by
//! prefix (one subscriber usually owns a whole /64, so a per-address key is trivially
//! evaded) and IPv4-mapped IPv6 (`::ffff:192.0.2.1`) normalised to its IPv4 address (a
//! dual-stack socket reports IPv4 clients that way; they must share the IPv4 key).
//!
//! The edge worker applies the same rules; this module could move to the core.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

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

/// Normalises an address: IPv4-mapped IPv6 becomes IPv4; everything else is unchanged.
pub fn normalise(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The key of a client address: IPv4 (including IPv4-mapped IPv6) as the address itself,
/// IPv6 as its `/v6_prefix` network (`2001:db8:1:2::/64`), or the address when the prefix
/// is 128. Text that is not an IP address (a Unix socket, a host name) is its own key.
pub fn client_key(addr: &str, v6_prefix: u8) -> String {
    let Ok(ip) = addr.parse::<IpAddr>() else {
        return addr.to_owned();
    };
    match normalise(ip) {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) if v6_prefix >= 128 => v6.to_string(),
        IpAddr::V6(v6) => {
            let prefix = u32::from(v6_prefix.clamp(1, 127));
            let mask = u128::MAX << (128 - prefix);
            let network = Ipv6Addr::from(u128::from(v6) & mask);
            format!("{network}/{prefix}")
        }
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
