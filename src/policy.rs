//! Policies: what a limit is, validated once at construction so that every decision can
//! trust it. Zero is unrepresentable (`NonZero*` types); every other bound is checked by the
//! constructors and the parser, which name the field, the value and the rule broken.

use core::fmt;
use core::num::{NonZeroU32, NonZeroU64};
use core::time::Duration;

use crate::math::Divisor;
use crate::{Field, Nanos, PolicyError, Rule, NANOS_PER_MS};

mod grammar;
#[cfg(feature = "serde")]
mod serde_form;

use grammar::parse_window;

/// The largest limit, burst or cost a policy accepts (2^40, about 1.1e12). Keeping counts
/// below it lets every product of a count and a time fit in 128 bits, exactly.
pub const MAX_COUNT: u64 = 1 << 40;
/// The shortest window: 1 ms.
pub const MIN_WINDOW: Duration = Duration::from_millis(1);
/// The longest window: 366 days.
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 86_400);

const MS_PER_SEC: u64 = 1_000;
const MS_PER_MIN: u64 = 60 * MS_PER_SEC;
const MS_PER_HOUR: u64 = 60 * MS_PER_MIN;
const MS_PER_DAY: u64 = 24 * MS_PER_HOUR;

/// The algorithms tollgate implements, each in its own module of [`crate::algorithms`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// Lazy-refill token bucket: bursts up to the capacity, sustained rate `limit/window`.
    TokenBucket,
    /// Generic cell rate algorithm: the token bucket's policing in one timestamp.
    Gcra,
    /// Sliding window counter: two fixed windows, the previous one weighted.
    SlidingWindow,
    /// Fixed window counter, windows aligned to the clock.
    FixedWindow,
    /// Sliding log: exact, keeps every admitted timestamp in the window.
    SlidingLog,
    /// Leaky bucket as a meter: the token bucket's mirror image.
    LeakyBucket,
    /// Leaky bucket as a queue: shapes traffic by delaying it, rejects when full.
    LeakyQueue,
    /// Concurrency limit: at most `n` in flight (acquire/release).
    Concurrency,
}

impl Algorithm {
    /// Every algorithm, in the order of the documentation.
    pub const ALL: [Algorithm; 8] = [
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::SlidingWindow,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::LeakyBucket,
        Algorithm::LeakyQueue,
        Algorithm::Concurrency,
    ];

    /// The name used by the compact grammar, JSON, the CLI and every binding.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token-bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::SlidingWindow => "sliding-window",
            Algorithm::FixedWindow => "fixed-window",
            Algorithm::SlidingLog => "sliding-log",
            Algorithm::LeakyBucket => "leaky-bucket",
            Algorithm::LeakyQueue => "leaky-queue",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// Looks an algorithm up by its [`name`](Self::name) (ASCII case-insensitive).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        // Not inlined: the compiler otherwise unrolls the search into eight inlined
        // comparisons (3 KB of wasm).
        #[inline(never)]
        fn same(a: &str, b: &str) -> bool {
            a.eq_ignore_ascii_case(b)
        }
        Algorithm::ALL.into_iter().find(|a| same(a.name(), name))
    }

    /// Whether the algorithm has a bucket (and so a `burst` capacity separate from its rate).
    pub const fn is_bucket(self) -> bool {
        matches!(
            self,
            Algorithm::TokenBucket
                | Algorithm::Gcra
                | Algorithm::LeakyBucket
                | Algorithm::LeakyQueue
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `limit` per `window`: a count of cost units and a length of time.
///
/// ```
/// use core::num::NonZeroU32;
/// use tollgate::Quota;
/// const API: Quota = Quota::per_minute(NonZeroU32::new(600).unwrap());
/// assert_eq!(API.limit(), 600);
/// assert_eq!(API.window(), 60_000_000_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: NonZeroU64,
    /// The window in nanoseconds (whole milliseconds; kept in nanoseconds because every
    /// decision works in them).
    window: NonZeroU64,
    /// Division by `limit`, precomputed (every bucket decision divides by it).
    by_limit: Divisor,
    /// Division by the window in nanoseconds, precomputed.
    by_window: Divisor,
}

impl Quota {
    const fn build(limit: NonZeroU64, window_ms: NonZeroU64) -> Quota {
        let window = window_ms.get() * NANOS_PER_MS;
        Quota {
            limit,
            window: match NonZeroU64::new(window) {
                Some(w) => w,
                None => NonZeroU64::MIN,
            },
            by_limit: Divisor::new(limit.get()),
            by_window: Divisor::new(window),
        }
    }

    const fn of(limit: NonZeroU32, window_ms: u64) -> Quota {
        Quota::build(
            NonZeroU64::new(limit.get() as u64).unwrap(),
            NonZeroU64::new(window_ms).unwrap(),
        )
    }

    /// `limit` per second.
    pub const fn per_second(limit: NonZeroU32) -> Quota {
        Quota::of(limit, MS_PER_SEC)
    }
    /// `limit` per minute.
    pub const fn per_minute(limit: NonZeroU32) -> Quota {
        Quota::of(limit, MS_PER_MIN)
    }
    /// `limit` per hour.
    pub const fn per_hour(limit: NonZeroU32) -> Quota {
        Quota::of(limit, MS_PER_HOUR)
    }
    /// `limit` per day.
    pub const fn per_day(limit: NonZeroU32) -> Quota {
        Quota::of(limit, MS_PER_DAY)
    }

    /// `limit` per `window`. The window must be whole milliseconds between [`MIN_WINDOW`]
    /// and [`MAX_WINDOW`]; the limit at most [`MAX_COUNT`].
    pub fn new(limit: NonZeroU64, window: Duration) -> Result<Quota, PolicyError> {
        check_count(Field::Limit, limit.get())?;
        let nanos = window.as_nanos();
        let ms = window.as_millis();
        if window < MIN_WINDOW {
            return Err(window_error(ms as u64, Rule::TooSmall { min: 1 }));
        }
        if window > MAX_WINDOW {
            return Err(window_error(
                ms.min(u64::MAX as u128) as u64,
                Rule::TooLarge {
                    max: MAX_WINDOW.as_millis() as u64,
                },
            ));
        }
        if nanos % NANOS_PER_MS as u128 != 0 {
            return Err(window_error(ms as u64, Rule::NotWholeMilliseconds));
        }
        Ok(Quota::build(
            limit,
            NonZeroU64::new(ms as u64).unwrap_or(NonZeroU64::MIN),
        ))
    }

    /// The number of cost units per window.
    pub const fn limit(&self) -> u64 {
        self.limit.get()
    }

    /// The window, in nanoseconds.
    pub const fn window(&self) -> Nanos {
        self.window.get()
    }

    /// The window, in milliseconds.
    pub const fn window_ms(&self) -> u64 {
        self.window.get() / NANOS_PER_MS
    }

    pub(crate) const fn by_limit(&self) -> Divisor {
        self.by_limit
    }

    pub(crate) const fn by_window(&self) -> Divisor {
        self.by_window
    }
}

fn window_error(ms: u64, rule: Rule) -> PolicyError {
    let mut e = PolicyError::number(Field::Window, ms, rule);
    // Say the unit, so "1" is not read as one second.
    let mut buf = [0u8; 24];
    let text = write_ms(&mut buf, ms);
    e.value = crate::Snippet::new(text);
    e
}

fn write_ms(buf: &mut [u8; 24], ms: u64) -> &str {
    let n = crate::Snippet::number(ms);
    let digits = n.as_str().as_bytes();
    buf[..digits.len()].copy_from_slice(digits);
    buf[digits.len()..digits.len() + 2].copy_from_slice(b"ms");
    core::str::from_utf8(&buf[..digits.len() + 2]).unwrap_or("")
}

fn check_count(field: Field, n: u64) -> Result<(), PolicyError> {
    if n > MAX_COUNT {
        Err(PolicyError::number(
            field,
            n,
            Rule::TooLarge { max: MAX_COUNT },
        ))
    } else {
        Ok(())
    }
}

/// A bucket: a refill (or leak) rate and a capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bucket {
    rate: Quota,
    capacity: NonZeroU64,
}

impl Bucket {
    /// A bucket whose capacity equals the rate's limit.
    pub const fn new(rate: Quota) -> Bucket {
        Bucket {
            rate,
            capacity: rate.limit,
        }
    }

    /// The same bucket with another capacity (at most [`MAX_COUNT`]).
    pub fn with_capacity(self, capacity: NonZeroU64) -> Result<Bucket, PolicyError> {
        check_count(Field::Burst, capacity.get())?;
        Ok(Bucket { capacity, ..self })
    }

    /// The refill (token bucket, GCRA) or leak (leaky bucket) rate.
    pub const fn rate(&self) -> Quota {
        self.rate
    }

    /// The most the bucket holds: the largest burst.
    pub const fn capacity(&self) -> u64 {
        self.capacity.get()
    }
}

/// A validated rate-limiting policy: an algorithm and its parameters.
///
/// Built from Rust (`const fn` constructors), from the compact grammar
/// (`[<algorithm>] <limit>/<window> [burst <n>]` or `concurrency <n>`) via [`FromStr`](core::str::FromStr), or
/// from JSON/TOML with the `serde` feature (either that string, or a table with `algorithm`,
/// `limit`, `window` and optional `burst`).
///
/// ```
/// use tollgate::{Algorithm, Policy};
/// let p: Policy = "sliding-window 600/10min".parse().unwrap();
/// assert_eq!(p.algorithm(), Algorithm::SlidingWindow);
/// assert_eq!(p.limit(), 600);
/// assert_eq!(p.to_string(), "sliding-window 600/10min");
/// let b: Policy = "10/s burst 40".parse().unwrap();
/// assert_eq!(b.limit(), 40); // a bucket's limit is its capacity
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Lazy-refill token bucket.
    TokenBucket(Bucket),
    /// GCRA (one timestamp; same admissions as the token bucket).
    Gcra(Bucket),
    /// Leaky bucket as a meter.
    LeakyBucket(Bucket),
    /// Leaky bucket as a queue (shaping; decisions carry a delay).
    LeakyQueue(Bucket),
    /// Sliding window counter.
    SlidingWindow(Quota),
    /// Fixed window, aligned to the clock.
    FixedWindow(Quota),
    /// Sliding log (needs the `alloc` feature to decide).
    SlidingLog(Quota),
    /// At most this many in flight.
    Concurrency(NonZeroU64),
}

impl Policy {
    /// A token bucket refilled at `rate`, capacity `rate.limit()`.
    pub const fn token_bucket(rate: Quota) -> Policy {
        Policy::TokenBucket(Bucket::new(rate))
    }
    /// A GCRA limiter at `rate`, burst `rate.limit()`.
    pub const fn gcra(rate: Quota) -> Policy {
        Policy::Gcra(Bucket::new(rate))
    }
    /// A leaky bucket meter leaking at `rate`, capacity `rate.limit()`.
    pub const fn leaky_bucket(rate: Quota) -> Policy {
        Policy::LeakyBucket(Bucket::new(rate))
    }
    /// A leaky bucket queue draining at `rate`, `rate.limit()` slots.
    pub const fn leaky_queue(rate: Quota) -> Policy {
        Policy::LeakyQueue(Bucket::new(rate))
    }
    /// A sliding window counter.
    pub const fn sliding_window(quota: Quota) -> Policy {
        Policy::SlidingWindow(quota)
    }
    /// A fixed window counter.
    pub const fn fixed_window(quota: Quota) -> Policy {
        Policy::FixedWindow(quota)
    }
    /// A sliding log.
    pub const fn sliding_log(quota: Quota) -> Policy {
        Policy::SlidingLog(quota)
    }
    /// A concurrency limit of `max_in_flight`.
    pub const fn concurrency(max_in_flight: NonZeroU32) -> Policy {
        Policy::Concurrency(NonZeroU64::new(max_in_flight.get() as u64).unwrap())
    }

    /// The same policy with another burst capacity; an error for the window algorithms and
    /// the concurrency limit, which have no bucket.
    pub fn with_burst(self, burst: NonZeroU64) -> Result<Policy, PolicyError> {
        match self {
            Policy::TokenBucket(b) => Ok(Policy::TokenBucket(b.with_capacity(burst)?)),
            Policy::Gcra(b) => Ok(Policy::Gcra(b.with_capacity(burst)?)),
            Policy::LeakyBucket(b) => Ok(Policy::LeakyBucket(b.with_capacity(burst)?)),
            Policy::LeakyQueue(b) => Ok(Policy::LeakyQueue(b.with_capacity(burst)?)),
            _ => Err(PolicyError::number(
                Field::Burst,
                burst.get(),
                Rule::BurstNotApplicable,
            )),
        }
    }

    /// The policy's algorithm.
    pub const fn algorithm(&self) -> Algorithm {
        match self {
            Policy::TokenBucket(_) => Algorithm::TokenBucket,
            Policy::Gcra(_) => Algorithm::Gcra,
            Policy::LeakyBucket(_) => Algorithm::LeakyBucket,
            Policy::LeakyQueue(_) => Algorithm::LeakyQueue,
            Policy::SlidingWindow(_) => Algorithm::SlidingWindow,
            Policy::FixedWindow(_) => Algorithm::FixedWindow,
            Policy::SlidingLog(_) => Algorithm::SlidingLog,
            Policy::Concurrency(_) => Algorithm::Concurrency,
        }
    }

    /// Whether an admission holds slots until it is released: a concurrency limit (the
    /// only algorithm that [`crate::release`] applies to; every other one is freed by time).
    pub const fn holds_slots(&self) -> bool {
        matches!(self, Policy::Concurrency(_))
    }

    /// The most a key can hold, reported as [`crate::Decision::limit`]: the capacity of a
    /// bucket, the limit of a window, the maximum in flight. No single cost may exceed it.
    pub const fn limit(&self) -> u64 {
        match self {
            Policy::TokenBucket(b)
            | Policy::Gcra(b)
            | Policy::LeakyBucket(b)
            | Policy::LeakyQueue(b) => b.capacity(),
            Policy::SlidingWindow(q) | Policy::FixedWindow(q) | Policy::SlidingLog(q) => q.limit(),
            Policy::Concurrency(n) => n.get(),
        }
    }

    /// The rate or window quota, if the policy has one (all but the concurrency limit).
    pub const fn quota(&self) -> Option<Quota> {
        match self {
            Policy::TokenBucket(b)
            | Policy::Gcra(b)
            | Policy::LeakyBucket(b)
            | Policy::LeakyQueue(b) => Some(b.rate),
            Policy::SlidingWindow(q) | Policy::FixedWindow(q) | Policy::SlidingLog(q) => Some(*q),
            Policy::Concurrency(_) => None,
        }
    }

    /// The bucket, for the four bucket algorithms.
    pub const fn bucket(&self) -> Option<Bucket> {
        match self {
            Policy::TokenBucket(b)
            | Policy::Gcra(b)
            | Policy::LeakyBucket(b)
            | Policy::LeakyQueue(b) => Some(*b),
            _ => None,
        }
    }

    /// Whether the policy's sustained rate (limit per window) is above `other`'s. Policies
    /// without a rate (concurrency) compare by their limit.
    pub fn rate_exceeds(&self, other: &Policy) -> bool {
        match (self.quota(), other.quota()) {
            (Some(a), Some(b)) => {
                (a.limit() as u128) * (b.window_ms() as u128)
                    > (b.limit() as u128) * (a.window_ms() as u128)
            }
            _ => self.limit() > other.limit(),
        }
    }

    /// Builds a policy from its parts, as the JSON/TOML form and the bindings do.
    /// `window` uses the grammar's window syntax (`s`, `10min`, `500ms`); `burst` is allowed
    /// for the bucket algorithms only. For `concurrency`, `limit` is the maximum in flight and
    /// `window` must be `None`.
    pub fn from_parts(
        algorithm: Algorithm,
        limit: u64,
        window: Option<&str>,
        burst: Option<u64>,
    ) -> Result<Policy, PolicyError> {
        let limit_nz = nonzero(Field::Limit, limit)?;
        if algorithm == Algorithm::Concurrency {
            check_count(Field::MaxInFlight, limit)?;
            if let Some(w) = window {
                return Err(PolicyError::new(Field::Window, w, Rule::Unexpected));
            }
            if let Some(b) = burst {
                return Err(PolicyError::number(
                    Field::Burst,
                    b,
                    Rule::BurstNotApplicable,
                ));
            }
            return Ok(Policy::Concurrency(limit_nz));
        }
        let window = window.ok_or(PolicyError::new(Field::Window, "", Rule::Missing))?;
        let window_ms = parse_window(window)?;
        let quota = Quota::new(limit_nz, Duration::from_millis(window_ms))?;
        let policy = match algorithm {
            Algorithm::TokenBucket => Policy::token_bucket(quota),
            Algorithm::Gcra => Policy::gcra(quota),
            Algorithm::LeakyBucket => Policy::leaky_bucket(quota),
            Algorithm::LeakyQueue => Policy::leaky_queue(quota),
            Algorithm::SlidingWindow => Policy::sliding_window(quota),
            Algorithm::FixedWindow => Policy::fixed_window(quota),
            Algorithm::SlidingLog => Policy::sliding_log(quota),
            Algorithm::Concurrency => Policy::Concurrency(limit_nz),
        };
        match burst {
            Some(b) => policy.with_burst(nonzero(Field::Burst, b)?),
            None => Ok(policy),
        }
    }
}

fn nonzero(field: Field, n: u64) -> Result<NonZeroU64, PolicyError> {
    NonZeroU64::new(n).ok_or(PolicyError::number(field, n, Rule::Zero))
}
