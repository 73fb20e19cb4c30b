//! Client backoff: full jitter within its ceiling, Retry-After first, bounded attempts.

use std::num::NonZeroU32;

use tollgate::backoff::{is_retryable, parse_retry_after, Backoff};

const MS: u64 = 1_000_000;

#[test]
fn full_jitter_stays_within_the_ceiling_and_covers_it() {
    let b = Backoff::new(100 * MS, 2_000 * MS, NonZeroU32::new(8).unwrap());
    let mut seed = 7u64;
    let mut rng = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for retry in 1..8 {
        let ceiling = b.ceiling(retry);
        assert_eq!(ceiling, ((100 * MS) << (retry - 1)).min(2_000 * MS));
        let draws: Vec<u64> = (0..2000)
            .map(|_| b.delay(retry, None, &mut rng).unwrap())
            .collect();
        assert!(draws.iter().all(|&d| d <= ceiling));
        // spread over the whole range, not clustered: both quarters are hit
        assert!(draws.iter().any(|&d| d < ceiling / 4));
        assert!(draws.iter().any(|&d| d > ceiling / 4 * 3));
    }
    assert_eq!(
        b.delay(8, None, &mut rng),
        None,
        "8 attempts in all: no 8th retry"
    );
    assert_eq!(b.delay(1, None, &mut || 0), Some(0));
}

#[test]
fn ceilings_never_overflow() {
    let b = Backoff::new(u64::MAX / 2, u64::MAX, NonZeroU32::new(u32::MAX).unwrap());
    assert_eq!(b.ceiling(70), u64::MAX);
    assert_eq!(b.ceiling(0), u64::MAX / 2);
}

#[test]
fn only_idempotent_or_keyed_requests_retry_on_429_and_503() {
    assert!(is_retryable("GET", false, 429));
    assert!(is_retryable("put", false, 503));
    assert!(!is_retryable("POST", false, 429));
    assert!(is_retryable("POST", true, 429));
    assert!(!is_retryable("GET", false, 500));
    assert!(!is_retryable("GET", false, 200));
}

#[test]
fn retry_after_forms() {
    assert_eq!(parse_retry_after(" 0 ", 5), Some(0));
    assert_eq!(
        parse_retry_after("99999999999999999999999", 0),
        Some(u64::MAX)
    );
    // a date in the past means no wait
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 2_000_000_000),
        Some(0)
    );
    for bad in [
        "",
        "-1",
        "1.5",
        "Sun, 06 Nov 1994 08:49:37 PST",
        "Sun, 32 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 25:49:37 GMT",
    ] {
        assert_eq!(parse_retry_after(bad, 0), None, "{bad:?}");
    }
    // 2026-12-02 00:00:00 GMT
    assert_eq!(
        parse_retry_after("Wed, 02 Dec 2026 00:00:00 GMT", 1_796_169_600 - 60),
        Some(60_000 * MS)
    );
}
