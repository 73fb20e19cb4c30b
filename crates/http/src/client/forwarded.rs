//! Forwarding headers read from the right, trusted hops skipped.

use std::net::IpAddr;

use super::{Cidr, HeaderError};

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
/// hops cost two allocations per request (PERF.md, "Measured reasons in the code").
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
