//! Client keys: who a request counts against, from what a server can trust.
//!
//! * **The client's address** is the peer of the connection, unless that peer is one of
//!   the operator's **trusted proxies**: then the proxy's forwarding header
//!   (`X-Forwarded-For`, or RFC 7239 `Forwarded`) is read **from the right**, each trusted
//!   hop skipped, and the first address not trusted is the client ([`client_ip`]). Entries
//!   left of it were written by the client itself and are never read: a client that sends
//!   `X-Forwarded-For: 1.2.3.4` only adds an entry its first proxy appends after. (Taking
//!   the left-most entry, as some limiters do, lets every client pick its own key.)
//! * **Addresses are grouped** by the core's rule ([`tollgate::ip::IpGroup`]): IPv4-mapped
//!   IPv6 is the IPv4 client it stands for, IPv6 is cut to a prefix (default /64, the
//!   usual size of one customer's network) so a client cannot rotate through fresh keys
//!   ([`ip_group`]).
//! * **An API key is hashed** with SHA-256 before it names anything ([`crate::key::api_key_name`]):
//!   keys, logs and stores only ever hold `key:<hex>`.
//! * **Header values are checked** before use ([`check_value`]): too long, or not visible
//!   ASCII, is a [`HeaderError`] naming the header, for the caller to answer 400.
//!
//! ```
//! use std::net::IpAddr;
//! use tollgate_http::client::{client_ip, forwarded_for_hops, Cidr};
//! let trusted: Vec<Cidr> = vec!["10.0.0.0/8".parse().unwrap()];
//! let peer: IpAddr = "10.0.0.2".parse().unwrap();
//! // The client wrote "6.6.6.6"; the proxy appended the address it saw.
//! let hops = forwarded_for_hops(["6.6.6.6, 203.0.113.9"]);
//! let ip = client_ip(peer, &trusted, &hops, "x-forwarded-for").unwrap();
//! assert_eq!(ip, "203.0.113.9".parse::<IpAddr>().unwrap());
//! // The same header from a peer that is not a trusted proxy changes nothing.
//! let stranger: IpAddr = "198.51.100.7".parse().unwrap();
//! assert_eq!(client_ip(stranger, &trusted, &hops, "x-forwarded-for").unwrap(), stranger);
//! ```

use std::net::IpAddr;

use sha2::{Digest, Sha256};
use tollgate::ip::IpGroup;

mod cidr;
mod forwarded;
mod header;

pub use cidr::{Cidr, CidrError};
pub use forwarded::{
    client_ip, client_ip_from_right, forwarded_for_hops, forwarded_for_hops_from_right,
    forwarded_hops, parse_hop,
};
pub use header::{check_value, HeaderError};

/// Lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The IP's group, by the core's rule ([`tollgate::ip::IpGroup`]: IPv4-mapped IPv6 becomes
/// IPv4; IPv6 is cut to `v6_prefix` bits, IPv4 to `v4_prefix` bits, the default /32 keeping
/// the address), tagged with its family: `ip4:203.0.113.7`, `ip6:2001:db8:1:2::/64`.
pub fn ip_group(addr: IpAddr, v4_prefix: u8, v6_prefix: u8) -> String {
    let group = IpGroup::of(addr, v4_prefix, v6_prefix);
    match group.network() {
        // The most common key, written digit by digit: `format!` took several times as
        // long, the largest part of keying a request in the tower layer
        // (PERF.md, "Measured reasons in the code").
        IpAddr::V4(v4) if group.is_single_address() => {
            let mut key = String::with_capacity("ip4:255.255.255.255".len());
            key.push_str("ip4:");
            for (i, &octet) in v4.octets().iter().enumerate() {
                if i > 0 {
                    key.push('.');
                }
                if octet >= 100 {
                    key.push(char::from(b'0' + octet / 100));
                }
                if octet >= 10 {
                    key.push(char::from(b'0' + octet / 10 % 10));
                }
                key.push(char::from(b'0' + octet % 10));
            }
            key
        }
        IpAddr::V4(_) => format!("ip4:{group}"),
        IpAddr::V6(_) => format!("ip6:{group}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn nets(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn cidrs_parse_and_match() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains(ip("10.255.0.1")));
        assert!(c.contains(ip("::ffff:10.1.2.3")), "IPv4-mapped is IPv4");
        assert!(!c.contains(ip("11.0.0.1")));
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
        let mapped: Cidr = "::ffff:192.168.0.0/112".parse().unwrap();
        assert_eq!(mapped.to_string(), "192.168.0.0/16");
        for bad in [
            "10.0.0.1/8",
            "10.0.0.0/33",
            "proxy",
            "10.0.0.0/x",
            "::1/129",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn hops_are_read_from_the_right() {
        let t = nets(&["10.0.0.0/8", "::1"]);
        let h = "x-forwarded-for";
        // Two trusted proxies; the client wrote a spoofed entry first.
        let hops = forwarded_for_hops(["1.1.1.1, 203.0.113.9", "10.0.0.5"]);
        assert_eq!(
            client_ip(ip("10.0.0.2"), &t, &hops, h).unwrap(),
            ip("203.0.113.9")
        );
        // An untrusted peer: its header is not read at all, even when it is garbage.
        let junk = forwarded_for_hops(["not an ip"]);
        assert_eq!(
            client_ip(ip("198.51.100.1"), &t, &junk, h).unwrap(),
            ip("198.51.100.1")
        );
        // A trusted peer with garbage where the client should be: a named error.
        assert_eq!(
            client_ip(ip("10.0.0.2"), &t, &junk, h),
            Err(HeaderError::NotAnIp { header: h.into() })
        );
        // Garbage left of the client is never read.
        let hops = forwarded_for_hops(["garbage, 203.0.113.9"]);
        assert_eq!(
            client_ip(ip("::1"), &t, &hops, h).unwrap(),
            ip("203.0.113.9")
        );
        // Every hop trusted: the left-most; no header: the peer.
        let hops = forwarded_for_hops(["10.0.0.9"]);
        assert_eq!(
            client_ip(ip("10.0.0.2"), &t, &hops, h).unwrap(),
            ip("10.0.0.9")
        );
        assert_eq!(
            client_ip(ip("10.0.0.2"), &t, &[], h).unwrap(),
            ip("10.0.0.2")
        );
    }

    #[test]
    fn hops_from_the_right_are_the_hops_reversed() {
        let t = nets(&["10.0.0.0/8"]);
        let h = "x-forwarded-for";
        for lines in [
            &["1.1.1.1, 203.0.113.9", "10.0.0.5"][..],
            &["garbage, 203.0.113.9 ,10.0.0.7"],
            &["10.0.0.9"],
            &["not an ip"],
            &[" 203.0.113.1 ", "", "10.0.0.1,10.0.0.2"],
            &[],
        ] {
            let mut hops = forwarded_for_hops(lines.iter().copied());
            let from_right: Vec<&str> =
                forwarded_for_hops_from_right(lines.iter().copied()).collect();
            assert_eq!(
                client_ip_from_right(ip("10.0.0.2"), &t, from_right.iter().copied(), h),
                client_ip(ip("10.0.0.2"), &t, &hops, h),
                "{lines:?}"
            );
            hops.reverse();
            assert_eq!(from_right, hops, "{lines:?}");
        }
    }

    #[test]
    fn forwarded_elements() {
        let hops = forwarded_hops([
            r#"for=192.0.2.43, for="[2001:db8:cafe::17]:4711";proto=https"#,
            r#"proto=http;For=198.51.100.17:8080;by=10.0.0.1, by=x"#,
        ]);
        assert_eq!(
            hops,
            [
                "192.0.2.43",
                "[2001:db8:cafe::17]:4711",
                "198.51.100.17:8080",
                ""
            ]
        );
        assert_eq!(parse_hop(hops[1]), Some(ip("2001:db8:cafe::17")));
        assert_eq!(parse_hop(hops[2]), Some(ip("198.51.100.17")));
        for bad in [
            "",
            "unknown",
            "_hidden",
            "[::1]x",
            "1.2.3.4:",
            "1.2.3.4:123456",
        ] {
            assert_eq!(parse_hop(bad), None, "{bad}");
        }
        let t = nets(&["10.0.0.0/8"]);
        let hops = forwarded_hops([r#"for=6.6.6.6, for="[2001:db8::1]:1""#]);
        assert_eq!(
            client_ip(ip("10.1.1.1"), &t, &hops, "forwarded").unwrap(),
            ip("2001:db8::1")
        );
    }

    #[test]
    fn groups_and_hashes() {
        assert_eq!(
            ip_group(ip("2001:db8:1:2::1"), 32, 64),
            "ip6:2001:db8:1:2::/64"
        );
        assert_eq!(
            ip_group(ip("::ffff:203.0.113.7"), 32, 64),
            "ip4:203.0.113.7"
        );
        // The IPv4 address written digit by digit is the address as std writes it.
        for a in [
            "0.0.0.0",
            "9.10.99.100",
            "255.255.255.255",
            "198.18.39.15",
            "10.0.0.1",
        ] {
            assert_eq!(ip_group(ip(a), 32, 64), format!("ip4:{a}"));
        }
        assert_eq!(ip_group(ip("203.0.113.77"), 24, 64), "ip4:203.0.113.0/24");
    }

    #[test]
    fn values_are_checked() {
        assert!(check_value("x-api-key", b"abc def", 10).is_ok());
        assert_eq!(
            check_value("x-api-key", &[b'x'; 11], 10),
            Err(HeaderError::TooLong {
                header: "x-api-key".into(),
                len: 11
            })
        );
        assert_eq!(
            check_value("x-tenant", "caf\u{e9}".as_bytes(), 10)
                .unwrap_err()
                .header(),
            "x-tenant"
        );
    }
}
