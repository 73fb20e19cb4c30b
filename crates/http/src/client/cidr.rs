//! Networks (a trusted proxy's), matched by the core's grouping rule.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use tollgate::ip::IpGroup;

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
