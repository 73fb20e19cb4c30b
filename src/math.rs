//! Small integer helpers shared by the algorithms. All arithmetic is exact: rates are the
//! fraction `limit / window`, and the algorithms work in "scaled" units (nanoseconds times
//! `limit`, or tokens times `window`) so that no division happens before a comparison.

use crate::Nanos;

/// `ceil(a / b)` for `b > 0`.
#[inline]
pub(crate) const fn ceil_div(a: u128, b: u128) -> u128 {
    a.div_ceil(b)
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
pub(crate) const fn scaled_to_nanos(scaled: u128, limit: u64) -> Nanos {
    sat_nanos(ceil_div(scaled, limit as u128))
}
