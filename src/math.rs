//! Small integer helpers shared by the algorithms. All arithmetic is exact: rates are the
//! fraction `limit / window`, and the algorithms work in "scaled" units (nanoseconds times
//! `limit`, or tokens times `window`) so that no division happens before a comparison.
//!
//! Products need 128 bits, but the quotients the algorithms report almost always fit in 64,
//! and a 64-bit division is several times cheaper than a 128-bit one: the helpers take the
//! short path when both operands fit.

use crate::Nanos;

/// `floor(a / b)` for `b > 0`.
#[inline]
pub(crate) fn div(a: u128, b: u128) -> u128 {
    if (a | b) >> 64 == 0 {
        ((a as u64) / (b as u64)) as u128
    } else {
        a / b
    }
}

/// `ceil(a / b)` for `b > 0`.
#[inline]
pub(crate) fn ceil_div(a: u128, b: u128) -> u128 {
    if (a | b) >> 64 == 0 {
        (a as u64).div_ceil(b as u64) as u128
    } else {
        a.div_ceil(b)
    }
}

/// Narrows a u128 duration in nanoseconds to [`Nanos`], saturating.
#[inline]
pub(crate) const fn sat_nanos(v: u128) -> Nanos {
    if v > u64::MAX as u128 {
        u64::MAX
    } else {
        v as u64
    }
}

/// `ceil(scaled / limit)` as nanoseconds: converts a span measured in scaled time
/// (nanoseconds times `limit`) back to nanoseconds, rounding up so that a caller never
/// retries too early.
#[inline]
pub(crate) fn scaled_to_nanos(scaled: u128, limit: u64) -> Nanos {
    sat_nanos(ceil_div(scaled, limit as u128))
}
