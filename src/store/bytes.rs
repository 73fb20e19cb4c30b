//! The state byte codec: [`State::to_bytes`] / [`State::from_bytes`], a small versioned
//! binary layout, the same in every runtime (Rust, the npm package's wasm, the Redis
//! module), so that processes of any language can share one limit in one store.

use alloc::vec::Vec;
use core::fmt;

use crate::algorithms::{
    concurrency::ConcurrencyState,
    fixed_window::FixedWindowState,
    gcra::GcraState,
    leaky_bucket::LeakyBucketState,
    leaky_queue::LeakyQueueState,
    sliding_log::{Entry, SlidingLogState},
    sliding_window::SlidingWindowState,
    token_bucket::TokenBucketState,
};
use crate::{Algorithm, State};

/// The version of the byte layout written by [`State::to_bytes`].
pub const STATE_BYTES_VERSION: u8 = 1;

/// Why stored bytes are not a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateBytesError {
    /// Fewer or more bytes than the layout of the state's algorithm.
    Length {
        /// The algorithm the bytes say.
        algorithm: Algorithm,
        /// How many bytes there were.
        len: usize,
    },
    /// Too short to hold the header (version and algorithm).
    Truncated,
    /// A layout version this build does not know.
    Version(u8),
    /// An algorithm code this build does not know.
    Algorithm(u8),
    /// A sliding log's entries out of time order, or one of cost zero.
    LogOrder,
}

impl fmt::Display for StateBytesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateBytesError::Length { algorithm, len } => {
                write!(f, "corrupt {algorithm} state: {len} bytes")
            }
            StateBytesError::Truncated => f.write_str("corrupt state: shorter than its header"),
            StateBytesError::Version(v) => write!(f, "state bytes of unknown version {v}"),
            StateBytesError::Algorithm(a) => write!(f, "state bytes of unknown algorithm {a}"),
            StateBytesError::LogOrder => {
                f.write_str("corrupt sliding-log state: entries out of order or of cost zero")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for StateBytesError {}

/// The one-byte code of each algorithm in the state layout (stable: stored bytes depend on it).
const fn code(a: Algorithm) -> u8 {
    match a {
        Algorithm::TokenBucket => 1,
        Algorithm::Gcra => 2,
        Algorithm::SlidingWindow => 3,
        Algorithm::FixedWindow => 4,
        Algorithm::SlidingLog => 5,
        Algorithm::LeakyBucket => 6,
        Algorithm::LeakyQueue => 7,
        Algorithm::Concurrency => 8,
    }
}

/// Reads fixed-width little-endian integers from a byte slice of a checked length.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u64(&mut self) -> u64 {
        let (head, rest) = self.0.split_at(8);
        self.0 = rest;
        u64::from_le_bytes(head.try_into().unwrap_or([0; 8]))
    }
    fn u128(&mut self) -> u128 {
        let (head, rest) = self.0.split_at(16);
        self.0 = rest;
        u128::from_le_bytes(head.try_into().unwrap_or([0; 16]))
    }
}

impl State {
    /// The state as bytes, for a store that keeps bytes (Redis, a file): one byte of layout
    /// version ([`STATE_BYTES_VERSION`]), one byte naming the algorithm, then the state's
    /// fields as little-endian integers in declaration order (a sliding log: each entry's
    /// `at` and `cost`). The same bytes in every runtime.
    ///
    /// ```
    /// use tollgate::algorithms::gcra::GcraState;
    /// use tollgate::State;
    /// let s = State::Gcra(GcraState { tat: 5 });
    /// let bytes = s.to_bytes();
    /// assert_eq!(bytes, [1, 2, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    /// assert_eq!(State::from_bytes(&bytes), Ok(s));
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(34);
        self.write_bytes(&mut out);
        out
    }

    /// [`State::to_bytes`], appended to `out`: for a stored value that carries more than
    /// the state ([`crate::store::fleet::encode_value`]), without a `Vec` of the state's
    /// bytes made and copied for each write.
    pub(crate) fn write_bytes(&self, out: &mut Vec<u8>) {
        out.push(STATE_BYTES_VERSION);
        out.push(code(self.algorithm()));
        match self {
            State::TokenBucket(s) => {
                out.extend_from_slice(&s.credit.to_le_bytes());
                out.extend_from_slice(&s.last.to_le_bytes());
            }
            State::Gcra(s) => out.extend_from_slice(&s.tat.to_le_bytes()),
            State::SlidingWindow(s) => {
                out.extend_from_slice(&s.window.to_le_bytes());
                out.extend_from_slice(&s.prev.to_le_bytes());
                out.extend_from_slice(&s.cur.to_le_bytes());
            }
            State::FixedWindow(s) => {
                out.extend_from_slice(&s.window.to_le_bytes());
                out.extend_from_slice(&s.count.to_le_bytes());
            }
            State::SlidingLog(s) => {
                for e in &s.entries {
                    out.extend_from_slice(&e.at.to_le_bytes());
                    out.extend_from_slice(&e.cost.to_le_bytes());
                }
            }
            State::LeakyBucket(s) => {
                out.extend_from_slice(&s.level.to_le_bytes());
                out.extend_from_slice(&s.last.to_le_bytes());
            }
            State::LeakyQueue(s) => out.extend_from_slice(&s.last_departure.to_le_bytes()),
            State::Concurrency(s) => out.extend_from_slice(&s.in_flight.to_le_bytes()),
        }
    }

    /// Reads bytes written by [`State::to_bytes`]. Bytes of the wrong length, an unknown
    /// version or algorithm, or a sliding log out of order are an error, never a guess.
    /// (Any field values are accepted: every algorithm decides safely on any state.)
    pub fn from_bytes(bytes: &[u8]) -> Result<State, StateBytesError> {
        let [version, algorithm, body @ ..] = bytes else {
            return Err(StateBytesError::Truncated);
        };
        if *version != STATE_BYTES_VERSION {
            return Err(StateBytesError::Version(*version));
        }
        let algorithm = Algorithm::ALL
            .into_iter()
            .find(|a| code(*a) == *algorithm)
            .ok_or(StateBytesError::Algorithm(*algorithm))?;
        let expected = match algorithm {
            Algorithm::TokenBucket | Algorithm::LeakyBucket => Some(24),
            Algorithm::Gcra | Algorithm::LeakyQueue => Some(16),
            Algorithm::SlidingWindow => Some(24),
            Algorithm::FixedWindow => Some(16),
            Algorithm::Concurrency => Some(8),
            Algorithm::SlidingLog => None,
        };
        let length_ok = match expected {
            Some(n) => body.len() == n,
            None => body.len() % 16 == 0,
        };
        if !length_ok {
            return Err(StateBytesError::Length {
                algorithm,
                len: bytes.len(),
            });
        }
        let mut r = Reader(body);
        Ok(match algorithm {
            Algorithm::TokenBucket => State::TokenBucket(TokenBucketState {
                credit: r.u128(),
                last: r.u64(),
            }),
            Algorithm::Gcra => State::Gcra(GcraState { tat: r.u128() }),
            Algorithm::SlidingWindow => State::SlidingWindow(SlidingWindowState {
                window: r.u64(),
                prev: r.u64(),
                cur: r.u64(),
            }),
            Algorithm::FixedWindow => State::FixedWindow(FixedWindowState {
                window: r.u64(),
                count: r.u64(),
            }),
            Algorithm::SlidingLog => {
                let mut entries = alloc::collections::VecDeque::with_capacity(body.len() / 16);
                while !r.0.is_empty() {
                    let e = Entry {
                        at: r.u64(),
                        cost: r.u64(),
                    };
                    let in_order = entries.back().is_none_or(|last: &Entry| last.at < e.at);
                    if e.cost == 0 || !in_order {
                        return Err(StateBytesError::LogOrder);
                    }
                    entries.push_back(e);
                }
                State::SlidingLog(SlidingLogState { entries })
            }
            Algorithm::LeakyBucket => State::LeakyBucket(LeakyBucketState {
                level: r.u128(),
                last: r.u64(),
            }),
            Algorithm::LeakyQueue => State::LeakyQueue(LeakyQueueState {
                last_departure: r.u128(),
            }),
            Algorithm::Concurrency => State::Concurrency(ConcurrencyState { in_flight: r.u64() }),
        })
    }
}
