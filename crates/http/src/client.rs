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
//! * **An API key is hashed** with SHA-256 before it names anything ([`api_key_name`]):
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

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use sha2::{Digest, Sha256};
use tollgate::ip::IpGroup;

/// A request header the limiter could not use: answer 400 (`invalid-header`), naming the
/// header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Longer than the configured maximum.
    TooLong {
        /// The header's name.
        header: String,
        /// Its length in bytes.
        len: usize,
    },
    /// Not visible ASCII (0x20-0x7e), e.g. non-UTF-8 or control bytes.
    NotVisibleAscii {
        /// The header's name.
        header: String,
    },
    /// The header (or the hop of a forwarding header being read) is not an IP address.
    NotAnIp {
        /// The header's name.
        header: String,
    },
}

impl HeaderError {
    /// The header at fault.
    pub fn header(&self) -> &str {
        match self {
            HeaderError::TooLong { header, .. }
            | HeaderError::NotVisibleAscii { header }
            | HeaderError::NotAnIp { header } => header,
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::TooLong { header, len } => {
                write!(f, "header {header} is too long ({len} bytes)")
            }
            HeaderError::NotVisibleAscii { header } => {
                write!(f, "header {header} must be visible ASCII")
            }
            HeaderError::NotAnIp { header } => write!(f, "header {header} is not an IP address"),
        }
    }
}

impl std::error::Error for HeaderError {}

/// Checks a header value before it is used as (part of) a key: at most `max_len` bytes,
/// visible ASCII and spaces only.
pub fn check_value(header: &str, value: &[u8], max_len: usize) -> Result<(), HeaderError> {
    if value.len() > max_len {
        return Err(HeaderError::TooLong {
            header: header.to_string(),
            len: value.len(),
        });
    }
    if !value.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(HeaderError::NotVisibleAscii {
            header: header.to_string(),
        });
    }
    Ok(())
}

/// Lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The key an API key counts under (see [`crate::key`], where every key name is spelled).
pub use crate::key::api_key_name;

/// The IP's group, by the core's rule ([`tollgate::ip::IpGroup`]: IPv4-mapped IPv6 becomes
/// IPv4; IPv6 is cut to `v6_prefix` bits, IPv4 to `v4_prefix` bits, the default /32 keeping
/// the address), tagged with its family: `ip4:203.0.113.7`, `ip6:2001:db8:1:2::/64`.
pub fn ip_group(addr: IpAddr, v4_prefix: u8, v6_prefix: u8) -> String {
    let group = IpGroup::of(addr, v4_prefix, v6_prefix);
    match group.network() {
        // The most common key, written digit by digit: `format!` took 200-290 ns against
        // 30-50 ns (measured 2026-12-03 on 2 shared cores), the largest part of keying a
        // request in the tower layer (`crates/tower/examples/bench.rs cost`).
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

/// A network, e.g. a trusted proxy's: `10.0.0.0/8`, `2001:db8::/32`, or one address
/// (`127.0.0.1`, `::1`). IPv4-mapped IPv6 addresses are matched as the IPv4 they stand for
/// (a dual-stack socket reports an IPv4 peer as `::ffff:a.b.c.d`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    group: IpGroup,
}

/// Why a [`Cidr`] did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CidrError {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a network: {}", self.text, self.reason)
    }
}

impl std::error::Error for CidrError {}

impl Cidr {
    /// The network of `addr` cut to `prefix` bits (clamped to the address length).
    pub fn new(addr: IpAddr, prefix: u8) -> Cidr {
        Cidr {
            group: IpGroup::of(addr, prefix, prefix),
        }
    }

    /// Whether `addr` is in this network.
    pub fn contains(&self, addr: IpAddr) -> bool {
        IpGroup::of(addr, self.group.prefix(), self.group.prefix()) == self.group
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.group.network(), self.group.prefix())
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let err = |reason| CidrError {
            text: s.to_string(),
            reason,
        };
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| err("not an IP address"))?;
        // An IPv4-mapped address is the IPv4 it stands for, prefix included.
        let (addr, bits) = match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), 32u8),
                None => (addr, 128),
            },
            IpAddr::V4(_) => (addr, 32),
        };
        let prefix = match prefix {
            None => bits,
            Some(p) => {
                let p: u8 = p
                    .trim()
                    .parse()
                    .map_err(|_| err("the prefix is not a number"))?;
                let p = if bits == 32 && addr.is_ipv4() && s.contains(':') {
                    p.checked_sub(96)
                        .ok_or_else(|| err("prefix too short for ::ffff:0:0/96"))?
                } else {
                    p
                };
                if p > bits {
                    return Err(err("the prefix is longer than the address"));
                }
                p
            }
        };
        if Cidr::new(addr, prefix).group.network() != addr {
            return Err(err("host bits are set below the prefix"));
        }
        Ok(Cidr::new(addr, prefix))
    }
}

/// The hops of `X-Forwarded-For` (all its lines, in order), left to right, trimmed.
pub fn forwarded_for_hops<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    values
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect()
}

/// The hops of RFC 7239 `Forwarded` (all its lines, in order), left to right: the `for=`
/// node of each element, unquoted (`""` for an element without one).
pub fn forwarded_hops<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut hops = Vec::new();
    for v in values {
        for element in split_outside_quotes(v, ',') {
            let node = split_outside_quotes(element, ';')
                .into_iter()
                .filter_map(|pair| pair.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("for"))
                .map(|(_, v)| {
                    let v = v.trim();
                    v.strip_prefix('"')
                        .and_then(|v| v.strip_suffix('"'))
                        .unwrap_or(v)
                });
            hops.push(node.unwrap_or(""));
        }
    }
    hops
}

/// Splits at `sep` outside double quotes (a quoted-string may hold `,` or `;`).
fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut quoted, mut escaped, mut start) = (false, false, 0);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                out.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// One hop's address: `203.0.113.7`, `203.0.113.7:8080`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:4711`. `unknown`, obfuscated nodes (`_hidden`) and anything else: `None`.
pub fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return addr.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6);
    }
    let (addr, port) = hop.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    addr.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// The client's address: `peer` itself unless it is in `trusted`; then the forwarding
/// header's `hops` (left to right, as [`forwarded_for_hops`] or [`forwarded_hops`] give
/// them) are read from the right, each trusted hop skipped, and the first hop that is not
/// trusted is the client. When every hop is trusted, the left-most is. A hop that is read
/// and is not an address is a [`HeaderError::NotAnIp`] naming `header`; hops left of the
/// client are never read.
pub fn client_ip(
    peer: IpAddr,
    trusted: &[Cidr],
    hops: &[&str],
    header: &str,
) -> Result<IpAddr, HeaderError> {
    client_ip_from_right(peer, trusted, hops.iter().rev().copied(), header)
}

/// The hops of `X-Forwarded-For` (all its lines, in order) from the right, trimmed: the
/// hops of [`forwarded_for_hops`] in reverse, without collecting them (a server reads this
/// header on every request behind a proxy; see [`client_ip_from_right`]).
pub fn forwarded_for_hops_from_right<'a>(
    values: impl DoubleEndedIterator<Item = &'a str>,
) -> impl Iterator<Item = &'a str> {
    values.rev().flat_map(|v| v.rsplit(',')).map(str::trim)
}

/// [`client_ip`] with the hops given from the right (as
/// [`forwarded_for_hops_from_right`] gives them): only the hops up to the client are read,
/// and nothing is collected. The tower layer keys each request through it: collecting the
/// hops cost two allocations per request (measured 2026-12-03 with
/// `crates/tower/examples/bench.rs cost`, see that crate's README).
pub fn client_ip_from_right<'a>(
    peer: IpAddr,
    trusted: &[Cidr],
    hops_from_right: impl IntoIterator<Item = &'a str>,
    header: &str,
) -> Result<IpAddr, HeaderError> {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    let mut client = peer;
    if !is_trusted(client) {
        return Ok(client);
    }
    for hop in hops_from_right {
        client = parse_hop(hop).ok_or_else(|| HeaderError::NotAnIp {
            header: header.to_string(),
        })?;
        if !is_trusted(client) {
            break;
        }
    }
    Ok(client)
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
        let k = api_key_name(b"secret-key-1");
        assert!(k.starts_with("key:") && !k.contains("secret") && k.len() == 4 + 64);
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
