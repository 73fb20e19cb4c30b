//! States as the store keeps them: without the enum's tag (a store has one policy, so its
//! algorithm is known) and in as few 64-bit words as the algorithm needs.
//!
//! | algorithm | words | layout |
//! |---|---|---|
//! | GCRA | 2 | the 128-bit TAT |
//! | leaky queue | 2 | the 128-bit last departure |
//! | fixed window | 2 | window; count |
//! | concurrency | 2 | in flight; 0 |
//! | token bucket | 3 | the 128-bit credit; last refill |
//! | leaky bucket | 3 | the 128-bit level; last leak |
//! | sliding window | 3 | window; previous count; current count |
//! | sliding log | boxed | the log |

use alloc::boxed::Box;

use crate::algorithms::{
    concurrency::ConcurrencyState, fixed_window::FixedWindowState, gcra::GcraState,
    leaky_bucket::LeakyBucketState, leaky_queue::LeakyQueueState, sliding_log::SlidingLogState,
    sliding_window::SlidingWindowState, token_bucket::TokenBucketState,
};
use crate::{Algorithm, State};

/// How a store keeps its policy's states.
pub(super) trait Cell: Sized {
    /// Packs a state of the store's algorithm (`None` for a state this cell cannot hold,
    /// which a store never produces: it would be dropped, leaving the key fresh).
    fn pack(state: State) -> Option<Self>;
    /// Moves the state out (the cell is left to be overwritten by [`Cell::put`]).
    fn take(&mut self, algorithm: Algorithm) -> State;
    /// A copy of the state, the cell untouched.
    fn read(&self, algorithm: Algorithm) -> State;
    /// Overwrites the cell with `state`; `false` if this cell cannot hold it.
    fn put(&mut self, state: State) -> bool {
        match Self::pack(state) {
            Some(c) => {
                *self = c;
                true
            }
            None => false,
        }
    }
}

/// The cell width a policy's states need.
pub(super) enum Width {
    /// Two words (with the `compact-store` feature, two-word states take three-word cells:
    /// one store instantiation less, for a smaller `.wasm`).
    #[cfg(not(feature = "compact-store"))]
    Narrow,
    /// Three words.
    Wide,
    /// A boxed sliding log.
    Log,
}

impl Width {
    pub fn of(algorithm: Algorithm) -> Width {
        match algorithm {
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::SlidingWindow => {
                Width::Wide
            }
            Algorithm::SlidingLog => Width::Log,
            #[cfg(not(feature = "compact-store"))]
            Algorithm::Gcra
            | Algorithm::LeakyQueue
            | Algorithm::FixedWindow
            | Algorithm::Concurrency => Width::Narrow,
            #[cfg(feature = "compact-store")]
            Algorithm::Gcra
            | Algorithm::LeakyQueue
            | Algorithm::FixedWindow
            | Algorithm::Concurrency => Width::Wide,
        }
    }
}

fn hi(v: u128) -> u64 {
    (v >> 64) as u64
}

fn join(hi: u64, lo: u64) -> u128 {
    ((hi as u128) << 64) | lo as u128
}

/// Packs into `w` (2 or 3 words); `false` if the state needs more words than `w` has.
#[inline(always)]
fn pack_words(state: State, w: &mut [u64]) -> bool {
    let [a, b, rest @ ..] = w else { return false };
    match state {
        State::Gcra(g) => (*a, *b) = (hi(g.tat), g.tat as u64),
        State::LeakyQueue(q) => (*a, *b) = (hi(q.last_departure), q.last_departure as u64),
        State::SlidingWindow(s) => match rest {
            [c, ..] => (*a, *b, *c) = (s.window, s.prev, s.cur),
            [] => return false,
        },
        State::FixedWindow(f) => (*a, *b) = (f.window, f.count),
        State::Concurrency(c) => (*a, *b) = (c.in_flight, 0),
        State::TokenBucket(t) => match rest {
            [c, ..] => (*a, *b, *c) = (hi(t.credit), t.credit as u64, t.last),
            [] => return false,
        },
        State::LeakyBucket(l) => match rest {
            [c, ..] => (*a, *b, *c) = (hi(l.level), l.level as u64, l.last),
            [] => return false,
        },
        State::SlidingLog(_) => return false,
    }
    true
}

/// Unpacks what [`pack_words`] wrote for `algorithm`.
#[inline(always)]
fn unpack_words(w: &[u64], algorithm: Algorithm) -> State {
    let (a, b, c) = (
        w.first().copied().unwrap_or(0),
        w.get(1).copied().unwrap_or(0),
        w.get(2).copied().unwrap_or(0),
    );
    match algorithm {
        Algorithm::Gcra => State::Gcra(GcraState { tat: join(a, b) }),
        Algorithm::LeakyQueue => State::LeakyQueue(LeakyQueueState {
            last_departure: join(a, b),
        }),
        Algorithm::SlidingWindow => State::SlidingWindow(SlidingWindowState {
            window: a,
            prev: b,
            cur: c,
        }),
        Algorithm::FixedWindow => State::FixedWindow(FixedWindowState {
            window: a,
            count: b,
        }),
        Algorithm::Concurrency => State::Concurrency(ConcurrencyState { in_flight: a }),
        Algorithm::TokenBucket => State::TokenBucket(TokenBucketState {
            credit: join(a, b),
            last: c,
        }),
        Algorithm::LeakyBucket => State::LeakyBucket(LeakyBucketState {
            level: join(a, b),
            last: c,
        }),
        // Never stored in words (`Width::of`); reads as an empty log.
        Algorithm::SlidingLog => State::SlidingLog(SlidingLogState::default()),
    }
}

impl<const N: usize> Cell for [u64; N] {
    #[inline(always)]
    fn pack(state: State) -> Option<Self> {
        let mut w = [0; N];
        pack_words(state, &mut w).then_some(w)
    }

    #[inline(always)]
    fn take(&mut self, algorithm: Algorithm) -> State {
        unpack_words(self, algorithm)
    }

    #[inline(always)]
    fn read(&self, algorithm: Algorithm) -> State {
        unpack_words(self, algorithm)
    }
}

impl Cell for Box<SlidingLogState> {
    fn pack(state: State) -> Option<Self> {
        match state {
            State::SlidingLog(l) => Some(Box::new(l)),
            _ => None,
        }
    }

    fn take(&mut self, _: Algorithm) -> State {
        State::SlidingLog(core::mem::take(&mut **self))
    }

    fn read(&self, _: Algorithm) -> State {
        State::SlidingLog((**self).clone())
    }

    /// Reuses the box.
    fn put(&mut self, state: State) -> bool {
        match state {
            State::SlidingLog(l) => {
                **self = l;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(s: State) {
        let alg = s.algorithm();
        let back = match Width::of(alg) {
            #[cfg(not(feature = "compact-store"))]
            Width::Narrow => <[u64; 2]>::pack(s.clone()).unwrap().take(alg),
            Width::Wide => <[u64; 3]>::pack(s.clone()).unwrap().take(alg),
            Width::Log => Box::<SlidingLogState>::pack(s.clone()).unwrap().take(alg),
        };
        assert_eq!(back, s);
    }

    #[test]
    fn every_state_round_trips_through_its_cell() {
        let big = u128::MAX - 12345;
        round_trip(State::Gcra(GcraState { tat: big }));
        round_trip(State::LeakyQueue(LeakyQueueState {
            last_departure: big,
        }));
        round_trip(State::TokenBucket(TokenBucketState {
            credit: big,
            last: u64::MAX - 1,
        }));
        round_trip(State::LeakyBucket(LeakyBucketState {
            level: big,
            last: 7,
        }));
        round_trip(State::SlidingWindow(SlidingWindowState {
            window: u64::MAX,
            prev: u64::MAX - 1,
            cur: 3,
        }));
        round_trip(State::FixedWindow(FixedWindowState {
            window: 9,
            count: u64::MAX,
        }));
        round_trip(State::Concurrency(ConcurrencyState {
            in_flight: u64::MAX,
        }));
        let mut log = SlidingLogState::default();
        log.entries
            .push_back(crate::algorithms::sliding_log::Entry { at: 5, cost: 2 });
        round_trip(State::SlidingLog(log));
    }

    #[test]
    fn a_narrow_cell_refuses_a_wide_state() {
        let s = State::TokenBucket(TokenBucketState { credit: 1, last: 2 });
        assert!(<[u64; 2]>::pack(s).is_none());
    }
}
