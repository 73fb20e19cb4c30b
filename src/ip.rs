//! Client addresses as a limiter keys them, the same in the CLI's log replay and at the edge.
//!
//! An IPv6 client usually controls a whole /64 (often much more), so counting each address
//! separately would let it rotate through fresh buckets; addresses are grouped by a prefix
//! (default /64). IPv4-mapped IPv6 (`::ffff:192.0.2.1`) is the IPv4 client it stands for.
//!
//! ```
//! use tollgate::ip::IpGroup;
//! let a: IpGroup = IpGroup::of("2001:db8:1:2:aaaa::1".parse().unwrap(), 32, 64);
//! let b: IpGroup = IpGroup::of("2001:db8:1:2:bbbb::2".parse().unwrap(), 32, 64);
//! assert_eq!(a, b);
//! assert_eq!(a.to_string(), "2001:db8:1:2::/64");
//! let mapped = IpGroup::of("::ffff:192.0.2.1".parse().unwrap(), 32, 64);
//! assert_eq!(mapped.to_string(), "192.0.2.1");
//! ```

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The default IPv6 grouping: a /64, the usual size of one customer's network.
pub const DEFAULT_V6_PREFIX: u8 = 64;

/// A client address cut to its group's network: the key a per-IP limit counts by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpGroup {
    network: IpAddr,
    prefix: u8,
}

impl IpGroup {
    /// Groups `addr`: IPv4-mapped IPv6 becomes IPv4; IPv4 keeps its first `v4_prefix` bits
    /// (32 keeps the address), IPv6 its first `v6_prefix` bits. Prefixes are clamped to the
    /// address length.
    pub fn of(addr: IpAddr, v4_prefix: u8, v6_prefix: u8) -> IpGroup {
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        match addr {
            IpAddr::V4(v4) => {
                let prefix = v4_prefix.min(32);
                let mask = u32::MAX.checked_shl(32 - prefix as u32).unwrap_or(0);
                IpGroup {
                    network: IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask)),
                    prefix,
                }
            }
            IpAddr::V6(v6) => {
                let prefix = v6_prefix.min(128);
                let mask = u128::MAX.checked_shl(128 - prefix as u32).unwrap_or(0);
                IpGroup {
                    network: IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask)),
                    prefix,
                }
            }
        }
    }

    /// The group's network address.
    pub const fn network(&self) -> IpAddr {
        self.network
    }

    /// The number of leading bits kept.
    pub const fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether the group is one whole address (a /32 or a /128).
    pub const fn is_single_address(&self) -> bool {
        match self.network {
            IpAddr::V4(_) => self.prefix == 32,
            IpAddr::V6(_) => self.prefix == 128,
        }
    }
}

impl fmt::Display for IpGroup {
    /// The address for a single address (`192.0.2.1`), else `network/prefix`
    /// (`2001:db8:1:2::/64`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_single_address() {
            write!(f, "{}", self.network)
        } else {
            write!(f, "{}/{}", self.network, self.prefix)
        }
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use std::string::{String, ToString};

    fn g(s: &str, v4: u8, v6: u8) -> String {
        IpGroup::of(s.parse().unwrap(), v4, v6).to_string()
    }

    #[test]
    fn prefixes() {
        assert_eq!(g("203.0.113.77", 32, 64), "203.0.113.77");
        assert_eq!(g("203.0.113.77", 24, 64), "203.0.113.0/24");
        assert_eq!(g("203.0.113.77", 0, 64), "0.0.0.0/0");
        assert_eq!(g("2001:db8::1", 32, 128), "2001:db8::1");
        assert_eq!(g("2001:db8:abcd:1234::1", 32, 48), "2001:db8:abcd::/48");
        assert_eq!(g("2001:db8::1", 32, 0), "::/0");
        assert_eq!(g("2001:db8::1", 32, 200), "2001:db8::1");
        assert_eq!(g("::ffff:10.1.2.3", 32, 64), "10.1.2.3");
    }
}
