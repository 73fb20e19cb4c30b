//! Small integer helpers shared by the algorithms. All arithmetic is exact: rates are the
//! fraction `limit / window`, and the algorithms work in "scaled" units (nanoseconds times
//! `limit`, or tokens times `window`) so that no division happens before a comparison.
//!
//! Products need 128 bits, but the quotients the algorithms report almost always fit in 64,
//! and a 64-bit division is several times cheaper than a 128-bit one: the helpers take the
//! short path when both operands fit.

use crate::Nanos;

/// `ceil(a / b)` for `b > 0`.
#[inline]
pub(crate) fn ceil_div(a: u128, b: u128) -> u128 {
    if (a | b) >> 64 == 0 {
        (a as u64).div_ceil(b as u64) as u128
    } else {
        a.div_ceil(b)
    }
}

/// The exact product `a * b` of two `u64`s. On targets without a native 64x64->128
/// multiplication (wasm32, where `u128 * u128` is a call to `__multi3`, which multiplies all
/// 128 bits) it is four 32x32->64 multiplications, inlined, and one when both operands fit
/// in 32 bits; elsewhere it is the native widening multiplication. Same result everywhere.
#[inline(always)]
pub(crate) fn mul_wide(a: u64, b: u64) -> u128 {
    #[cfg(target_pointer_width = "64")]
    {
        a as u128 * b as u128
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        mul_wide_split(a, b)
    }
}

/// [`mul_wide`] from 32-bit halves (compiled and tested on every target).
#[inline(always)]
#[cfg_attr(target_pointer_width = "64", allow(dead_code))]
pub(crate) fn mul_wide_split(a: u64, b: u64) -> u128 {
    if (a | b) >> 32 == 0 {
        return (a * b) as u128;
    }
    mul_wide_halves(a, b)
}

/// The general case of [`mul_wide_split`], out of line: the algorithms multiply in a dozen
/// places, and only the 32-bit case needs to be inlined into each.
#[inline(never)]
fn mul_wide_halves(a: u64, b: u64) -> u128 {
    const LO: u64 = 0xffff_ffff;
    let (a0, a1, b0, b1) = (a & LO, a >> 32, b & LO, b >> 32);
    let (p00, p01, p10, p11) = (a0 * b0, a0 * b1, a1 * b0, a1 * b1);
    // At most 3 * (2^32 - 1): no overflow.
    let mid = (p00 >> 32) + (p01 & LO) + (p10 & LO);
    let lo = (mid << 32) | (p00 & LO);
    let hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
    ((hi as u128) << 64) | lo as u128
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

/// Division by a divisor fixed when a policy is built, done as a multiplication and a shift
/// (the classic round-up method, as in libdivide's unsigned 64-bit divider). Every decision
/// divides by its policy's `limit` and window, and a hardware 64-bit division costs tens of
/// cycles; this is a few. Exact for every `u64` numerator (property-tested against `/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Divisor {
    d: u64,
    magic: u64,
    shift: u8,
    add: bool,
}

impl Divisor {
    /// A divider by `d` (> 0; 0 is treated as 1, which never happens for a validated policy).
    pub(crate) const fn new(d: u64) -> Divisor {
        let d = if d == 0 { 1 } else { d };
        let log2 = 63 - d.leading_zeros();
        if d & (d - 1) == 0 {
            return Divisor {
                d,
                magic: 0,
                shift: log2 as u8,
                add: false,
            };
        }
        let num = 1u128 << (64 + log2);
        let proposed = (num / d as u128) as u64;
        let rem = (num % d as u128) as u64;
        if d - rem < (1u64 << log2) {
            Divisor {
                d,
                magic: proposed + 1,
                shift: log2 as u8,
                add: false,
            }
        } else {
            // The 65-bit case: double the quotient and correct with the doubled remainder.
            let twice_rem = rem.wrapping_add(rem);
            let carry = (twice_rem >= d || twice_rem < rem) as u64;
            Divisor {
                d,
                magic: proposed
                    .wrapping_add(proposed)
                    .wrapping_add(carry)
                    .wrapping_add(1),
                shift: log2 as u8,
                add: true,
            }
        }
    }

    /// `floor(n / d)` for a 64-bit `n`.
    #[inline]
    pub(crate) fn div_u64(self, n: u64) -> u64 {
        // On wasm the division itself: a runtime compiles `i64.div_u` to one hardware
        // division, while the multiplication below needs the high half of a 64x64 product,
        // which wasm32 has no operator for (`mul_wide`: four 32-bit multiplications). The
        // npm package's `check` runs fewer wasm operators this way, and no slower in Node
        // (PERF.md, "Measured reasons in the code").
        if cfg!(target_family = "wasm") {
            return n / core::num::NonZeroU64::new(self.d).unwrap_or(core::num::NonZeroU64::MIN);
        }
        if self.magic == 0 {
            return n >> self.shift;
        }
        let q = (mul_wide(self.magic, n) >> 64) as u64;
        if self.add {
            (((n - q) >> 1) + q) >> self.shift
        } else {
            q >> self.shift
        }
    }

    /// `floor(n / d)`.
    #[inline]
    pub(crate) fn div(self, n: u128) -> u128 {
        if n >> 64 == 0 {
            self.div_u64(n as u64) as u128
        } else {
            n / self.wide()
        }
    }

    /// `ceil(n / d)`.
    #[inline]
    pub(crate) fn ceil_div(self, n: u128) -> u128 {
        if n >> 64 == 0 {
            // q * d <= n fits in 64 bits: one 64-bit multiplication checks the remainder.
            let (n, q) = (n as u64, self.div_u64(n as u64));
            return (q + (q.wrapping_mul(self.d) != n) as u64) as u128;
        }
        let q = n / self.wide();
        q + (q * self.d as u128 != n) as u128
    }

    /// The divisor as a `NonZeroU128`: a division by it cannot panic, so the compiler may
    /// drop a quotient nobody reads ([`crate::admit`] relies on that).
    #[inline(always)]
    fn wide(self) -> core::num::NonZeroU128 {
        match core::num::NonZeroU128::new(self.d as u128) {
            Some(d) => d,
            None => core::num::NonZeroU128::MIN,
        }
    }

    /// `ceil(scaled / d)` as nanoseconds, saturating (for `d` = a policy's limit: scaled time
    /// back to nanoseconds, rounded up so that a caller never retries too early).
    #[inline]
    pub(crate) fn to_nanos(self, scaled: u128) -> Nanos {
        sat_nanos(self.ceil_div(scaled))
    }
}

#[cfg(test)]
mod tests {
    use super::{mul_wide, mul_wide_split, Divisor};

    #[test]
    fn multiplies_exactly() {
        let edges = [
            0,
            1,
            2,
            3,
            0xffff_ffff,
            1 << 32,
            (1 << 32) + 1,
            1 << 63,
            u64::MAX - 1,
            u64::MAX,
        ];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let check = |a: u64, b: u64| {
            let want = a as u128 * b as u128;
            assert_eq!(mul_wide_split(a, b), want, "{a} * {b}");
            assert_eq!(mul_wide(a, b), want, "{a} * {b}");
        };
        for a in edges {
            for b in edges {
                check(a, b);
            }
        }
        for _ in 0..200_000 {
            let (a, b) = (next() >> (next() % 64), next() >> (next() % 64));
            check(a, b);
        }
    }

    fn check(d: u64, n: u64) {
        let div = Divisor::new(d);
        assert_eq!(div.div_u64(n), n / d, "{n} / {d}");
        assert_eq!(
            div.ceil_div(n as u128),
            (n as u128).div_ceil(d as u128),
            "ceil {n} / {d}"
        );
    }

    #[test]
    fn divides_exactly_at_the_edges() {
        let ds = [
            1,
            2,
            3,
            5,
            6,
            7,
            10,
            60,
            1000,
            1_000_000,
            1_000_000_000,
            60_000_000_000,
            86_400_000_000_000,
            31_622_400_000_000_000,
            1 << 40,
            (1 << 40) - 1,
            u64::MAX,
            u64::MAX - 1,
            u64::MAX / 3,
            641,
            6_700_417,
        ];
        let ns = [
            0,
            1,
            2,
            3,
            999,
            1 << 32,
            (1 << 63) - 1,
            1 << 63,
            u64::MAX,
            u64::MAX - 1,
        ];
        for d in ds {
            for n in ns {
                check(d, n);
                check(d, n.wrapping_add(d));
                check(d, d.wrapping_mul(3).wrapping_sub(1));
            }
        }
    }

    #[test]
    fn divides_exactly_on_pseudo_random_inputs() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let d = next() >> (next() % 64);
            let n = next() >> (next() % 64);
            check(d.max(1), n);
        }
    }
}
