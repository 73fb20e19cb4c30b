//! Client-side backoff for callers that receive 429 or 503.
//!
//! Full jitter: before retry `n` (the first retry is `n = 1`), wait a uniformly random time
//! in `[0, min(cap, base * 2^(n-1))]`. A `Retry-After` from the server takes precedence: it
//! comes from whoever owns the limit, so it beats the client's guess. After `max_attempts`
//! attempts in all (the first request included) the client gives up. Only idempotent
//! requests, or requests that carry an idempotency key, are retried at all.
//!
//! Randomness comes from the caller (any `FnMut() -> u64`), so the schedule is testable and
//! the core needs no RNG; bindings pass `getrandom` or `crypto.getRandomValues`.
//!
//! ```
//! use core::num::NonZeroU32;
//! use tollgate::backoff::Backoff;
//! let ms = 1_000_000;
//! // Base 0.5 s, cap 10 s: the 6th retry would be 16 s, capped at 10 s.
//! let b = Backoff::new(500 * ms, 10_000 * ms, NonZeroU32::new(10).unwrap());
//! assert_eq!(b.ceiling(1), 500 * ms);
//! assert_eq!(b.ceiling(5), 8_000 * ms);
//! assert_eq!(b.ceiling(6), 10_000 * ms);
//! let mut top = || u64::MAX; // the largest random draw gives the ceiling
//! assert_eq!(b.delay(6, None, &mut top), Some(10_000 * ms));
//! assert_eq!(b.delay(2, Some(30_000 * ms), &mut top), Some(30_000 * ms)); // Retry-After wins
//! assert_eq!(b.delay(10, None, &mut top), None); // 10 attempts made: give up
//! ```

use core::num::NonZeroU32;

use crate::{Nanos, NANOS_PER_SEC};

/// A full-jitter exponential backoff schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backoff {
    base: Nanos,
    cap: Nanos,
    max_attempts: NonZeroU32,
}

impl Backoff {
    /// `base` is the first retry's ceiling, `cap` the largest ceiling, `max_attempts` the
    /// number of attempts in all, the first request included (1 means never retry).
    pub const fn new(base: Nanos, cap: Nanos, max_attempts: NonZeroU32) -> Backoff {
        Backoff {
            base,
            cap,
            max_attempts,
        }
    }

    /// The number of attempts in all.
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts.get()
    }

    /// The ceiling of retry `retry` (counted from 1): `min(cap, base * 2^(retry-1))`.
    /// Retry 0 is treated as retry 1.
    pub fn ceiling(&self, retry: u32) -> Nanos {
        let shift = retry.max(1) - 1;
        let grown = if shift >= 64 {
            u64::MAX
        } else {
            self.base.saturating_mul(1u64 << shift)
        };
        grown.min(self.cap)
    }

    /// The wait before retry `retry` (counted from 1), or `None` when the attempts are spent
    /// (`retry >= max_attempts`). `retry_after` (from the server's `Retry-After`) takes
    /// precedence over the random draw. `rng` returns uniform `u64`s.
    pub fn delay(
        &self,
        retry: u32,
        retry_after: Option<Nanos>,
        rng: &mut impl FnMut() -> u64,
    ) -> Option<Nanos> {
        if retry >= self.max_attempts.get() {
            return None;
        }
        if let Some(wait) = retry_after {
            return Some(wait);
        }
        let ceiling = self.ceiling(retry) as u128;
        // Uniform in [0, ceiling] by multiply-shift (no modulo bias worth the name).
        Some(((rng() as u128 * (ceiling + 1)) >> 64) as Nanos)
    }
}

/// Whether a response with `status` to a request with `method` may be retried: only 429
/// (limited) and 503 (shedding load), and only for idempotent methods (`GET`, `HEAD`,
/// `OPTIONS`, `TRACE`, `PUT`, `DELETE`) or requests that carry an idempotency key.
pub fn is_retryable(method: &str, has_idempotency_key: bool, status: u16) -> bool {
    let idempotent = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]
        .iter()
        .any(|m| m.eq_ignore_ascii_case(method));
    matches!(status, 429 | 503) && (idempotent || has_idempotency_key)
}

/// Parses a `Retry-After` value in delay-seconds (`"120"`, surrounding whitespace allowed)
/// into a wait; `None` for anything else (an HTTP-date included: that is `parse_retry_after`,
/// with the `http-date` feature).
/// Always available; the date form needs the `http-date` feature.
///
/// ```
/// use tollgate::backoff::parse_delay_seconds;
/// assert_eq!(parse_delay_seconds(" 120 "), Some(120_000_000_000));
/// assert_eq!(parse_delay_seconds("99999999999999999999999"), Some(u64::MAX));
/// assert_eq!(parse_delay_seconds("Sun, 06 Nov 1994 08:49:47 GMT"), None);
/// ```
pub fn parse_delay_seconds(value: &str) -> Option<Nanos> {
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = v.parse().unwrap_or(u64::MAX);
    Some(secs.saturating_mul(NANOS_PER_SEC))
}

/// Parses a `Retry-After` value into a wait: delay-seconds (`"120"`), or an HTTP-date in any
/// of the three RFC 9110 forms (`Sun, 06 Nov 1994 08:49:37 GMT`, the obsolete RFC 850
/// `Sunday, 06-Nov-94 08:49:37 GMT` and asctime `Sun Nov  6 08:49:37 1994`), measured from
/// `now_unix_secs`. A date in the past means no wait. `None` for anything else.
///
/// Needs the `http-date` feature (on by default; about 7 KB of wasm, which a `no_std` build
/// that never reads `Retry-After` dates can leave out).
///
/// ```
/// use tollgate::backoff::parse_retry_after;
/// assert_eq!(parse_retry_after("120", 0), Some(120_000_000_000));
/// let now = 784_111_777; // 1994-11-06 08:49:37 UTC
/// assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now), Some(10_000_000_000));
/// assert_eq!(parse_retry_after("Sunday, 06-Nov-94 08:49:47 GMT", now), Some(10_000_000_000));
/// assert_eq!(parse_retry_after("Sun Nov  6 08:49:47 1994", now), Some(10_000_000_000));
/// assert_eq!(parse_retry_after("soon", now), None);
/// ```
#[cfg(feature = "http-date")]
pub fn parse_retry_after(value: &str, now_unix_secs: u64) -> Option<Nanos> {
    if let Some(wait) = parse_delay_seconds(value) {
        return Some(wait);
    }
    let at = parse_http_date(value.trim())?;
    Some(
        at.saturating_sub(now_unix_secs)
            .saturating_mul(NANOS_PER_SEC),
    )
}

#[cfg(feature = "http-date")]
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

#[cfg(feature = "http-date")]
fn month(m: &str) -> Option<u32> {
    MONTHS.iter().position(|n| *n == m).map(|i| i as u32 + 1)
}

#[cfg(feature = "http-date")]
fn num(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(feature = "http-date")]
fn clock(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.split(':');
    let (h, m, sec) = (num(it.next()?)?, num(it.next()?)?, num(it.next()?)?);
    (it.next().is_none() && h < 24 && m < 60 && sec <= 60).then_some((h, m, sec))
}

#[cfg(feature = "http-date")]
/// Unix seconds of an HTTP-date (RFC 9110 section 5.6.7), in GMT.
fn parse_http_date(s: &str) -> Option<u64> {
    let mut w = s.split_ascii_whitespace();
    let first = w.next()?;
    let (y, mo, d, time) = if first.ends_with(',') {
        let second = w.next()?;
        if second.contains('-') {
            // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
            let mut p = second.split('-');
            let (d, mo, yy) = (num(p.next()?)?, month(p.next()?)?, num(p.next()?)?);
            let time = clock(w.next()?)?;
            if w.next()? != "GMT" {
                return None;
            }
            // Two-digit years: RFC 9110 says a year more than 50 years ahead is in the past.
            let y = if yy < 100 {
                if yy < 70 {
                    2000 + yy
                } else {
                    1900 + yy
                }
            } else {
                yy
            };
            (y, mo, d, time)
        } else {
            // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
            let d = num(second)?;
            let mo = month(w.next()?)?;
            let y = num(w.next()?)?;
            let time = clock(w.next()?)?;
            if w.next()? != "GMT" {
                return None;
            }
            (y, mo, d, time)
        }
    } else {
        // asctime: Sun Nov  6 08:49:37 1994
        let mo = month(w.next()?)?;
        let d = num(w.next()?)?;
        let time = clock(w.next()?)?;
        let y = num(w.next()?)?;
        (y, mo, d, time)
    };
    if w.next().is_some() || !(1..=31).contains(&d) || y < 1970 {
        return None;
    }
    let days = days_from_civil(y as i64, mo as i64, d as i64);
    let secs = days * 86_400 + (time.0 * 3600 + time.1 * 60 + time.2) as i64;
    u64::try_from(secs).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date, `m` in 1..=12 (Howard Hinnant's
/// algorithm): the calendar step of [`parse_retry_after`], for other date formats too
/// (the CLI's access logs).
///
/// ```
/// assert_eq!(tollgate::backoff::days_from_civil(1970, 1, 1), 0);
/// assert_eq!(tollgate::backoff::days_from_civil(2000, 3, 1), 11_017);
/// assert_eq!(tollgate::backoff::days_from_civil(1969, 12, 31), -1);
/// ```
#[cfg(feature = "http-date")]
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
