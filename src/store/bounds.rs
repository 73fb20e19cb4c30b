//! How much one request may ask of a store: the bounds every front end enforces where the
//! caller decides the size of the work (tollgate-rls's descriptors, tollgate's Redis
//! module's `TOLLGATE.REQUEST`, the edge's check API, the npm and tower middleware's key
//! functions). One set of numbers, so that a request one front end accepts is never refused
//! by the store behind it.
//!
//! Without them one request could make a process do unbounded work (a stack of 100,000
//! limits, a key of a megabyte) or keep unbounded memory (every distinct key is stored until
//! its window ends). Above a bound a request is refused with an [`OverBound`] that says
//! which bound and by how much; a refusal charges nothing.
//!
//! * [`Bound::Limits`]: the limits (counters on separate keys) one request may charge
//!   together, and the descriptors of one Envoy request. Real configurations use a handful.
//! * [`Bound::Entries`]: the entries (key/value pairs) of one Envoy descriptor, the parts of
//!   one key. envoyproxy/ratelimit's configurations nest a few levels deep.
//! * [`Bound::KeyBytes`]: the bytes of one key part a caller gives: a client key returned
//!   by a middleware's key function, a check API's key, one descriptor entry's key or value.
//!   An IP address, an API key's hash, a user or tenant id, a route's path all fit; a
//!   longer one is not a key but a payload (hash it first, if it must be one).
//!
//! ```
//! use tollgate::store::bounds::{check, Bound};
//! assert!(check(Bound::Limits, 64).is_ok());
//! let e = check(Bound::Limits, 8_000).unwrap_err();
//! assert_eq!(e.to_string(), "8000 limits, at most 64");
//! let e = check(Bound::KeyBytes, 1 << 20).unwrap_err();
//! assert_eq!(e.to_string(), "1048576 bytes, at most 1024");
//! ```

use core::fmt;

/// One of the bounds on a request's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bound {
    /// Limits charged together by one request; descriptors of one Envoy request.
    Limits,
    /// Entries of one descriptor.
    Entries,
    /// Bytes of one key part a caller gives.
    KeyBytes,
}

/// The most limits one request may charge together ([`Bound::Limits`]).
pub const MAX_LIMITS: usize = 64;
/// The most entries one descriptor may have ([`Bound::Entries`]).
pub const MAX_ENTRIES: usize = 16;
/// The most bytes one key part may have ([`Bound::KeyBytes`]).
pub const MAX_KEY_BYTES: usize = 1024;

impl Bound {
    /// The largest size allowed.
    pub const fn max(self) -> usize {
        match self {
            Bound::Limits => MAX_LIMITS,
            Bound::Entries => MAX_ENTRIES,
            Bound::KeyBytes => MAX_KEY_BYTES,
        }
    }

    /// What is counted, in the plural ("limits", "entries", "bytes").
    pub const fn unit(self) -> &'static str {
        match self {
            Bound::Limits => "limits",
            Bound::Entries => "entries",
            Bound::KeyBytes => "bytes",
        }
    }
}

/// A request over a bound: which bound, and the size it had. Its `Display` reads
/// `"<size> <unit>, at most <max>"`; a front end puts the field's name before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OverBound {
    /// The bound passed.
    pub bound: Bound,
    /// The size the request had.
    pub size: usize,
}

impl fmt::Display for OverBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}, at most {}",
            self.size,
            self.bound.unit(),
            self.bound.max()
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for OverBound {}

/// `Ok` when `size` is within `bound`, otherwise the [`OverBound`] to answer.
pub const fn check(bound: Bound, size: usize) -> Result<(), OverBound> {
    if size <= bound.max() {
        Ok(())
    } else {
        Err(OverBound { bound, size })
    }
}

/// [`check`] of one key part's length in bytes ([`Bound::KeyBytes`]).
pub const fn check_key(key: &[u8]) -> Result<(), OverBound> {
    check(Bound::KeyBytes, key.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn a_size_at_its_bound_passes_and_one_more_is_refused_with_both_numbers() {
        for bound in [Bound::Limits, Bound::Entries, Bound::KeyBytes] {
            assert_eq!(check(bound, bound.max()), Ok(()));
            assert_eq!(
                check(bound, bound.max() + 1),
                Err(OverBound {
                    bound,
                    size: bound.max() + 1
                })
            );
        }
        assert_eq!(
            check(Bound::Entries, 17).unwrap_err().to_string(),
            "17 entries, at most 16"
        );
        assert!(check_key(&[b'k'; MAX_KEY_BYTES]).is_ok());
        assert!(check_key(&[b'k'; MAX_KEY_BYTES + 1]).is_err());
    }
}
