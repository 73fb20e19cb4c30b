//! States as the store keeps them: without the enum's tag (a store has one policy, so its
//! algorithm is known), in three 64-bit words, or boxed for the sliding log (whose log grows
//! with the limit).
//!
//! | algorithm | words |
//! |---|---|
//! | GCRA | the 128-bit TAT; 0 |
//! | leaky queue | the 128-bit last departure; 0 |
//! | fixed window | window; count; 0 |
//! | concurrency | in flight; 0; 0 |
//! | token bucket | the 128-bit credit; last refill |
//! | leaky bucket | the 128-bit level; last leak |
//! | sliding window | window; previous count; current count |
//! | sliding log | (boxed) |

use alloc::boxed::Box;

use crate::algorithms::{
    concurrency::ConcurrencyState, fixed_window::FixedWindowState, gcra::GcraState,
    leaky_bucket::LeakyBucketState, leaky_queue::LeakyQueueState, sliding_log::SlidingLogState,
    sliding_window::SlidingWindowState, token_bucket::TokenBucketState,
};
use crate::{Algorithm, State};

/// One key's state in the store.
pub(super) enum Cell {
    /// Every state but the sliding log, as in the table above.
    Words([u64; 3]),
    /// The sliding log.
    Log(Box<SlidingLogState>),
}

fn hi(v: u128) -> u64 {
    (v >> 64) as u64
}

fn join(hi: u64, lo: u64) -> u128 {
    ((hi as u128) << 64) | lo as u128
}

impl Cell {
    /// Packs a state.
    #[inline(always)]
    pub fn pack(state: State) -> Cell {
        Cell::Words(match state {
            State::Gcra(g) => [hi(g.tat), g.tat as u64, 0],
            State::LeakyQueue(q) => [hi(q.last_departure), q.last_departure as u64, 0],
            State::FixedWindow(f) => [f.window, f.count, 0],
            State::Concurrency(c) => [c.in_flight, 0, 0],
            State::TokenBucket(t) => [hi(t.credit), t.credit as u64, t.last],
            State::LeakyBucket(l) => [hi(l.level), l.level as u64, l.last],
            State::SlidingWindow(s) => [s.window, s.prev, s.cur],
            State::SlidingLog(l) => return Cell::Log(Box::new(l)),
        })
    }

    /// Moves the state of `algorithm` (the store's) out; the cell is left to be overwritten
    /// by [`Cell::put`].
    #[inline(always)]
    pub fn take(&mut self, algorithm: Algorithm) -> State {
        match self {
            Cell::Words(w) => unpack(w, algorithm),
            Cell::Log(l) => State::SlidingLog(core::mem::take(&mut **l)),
        }
    }

    /// A copy of the state, the cell untouched.
    pub fn read(&self, algorithm: Algorithm) -> State {
        match self {
            Cell::Words(w) => unpack(w, algorithm),
            Cell::Log(l) => State::SlidingLog((**l).clone()),
        }
    }

    /// Overwrites the cell with `state` (a log reuses its box).
    #[inline(always)]
    pub fn put(&mut self, state: State) {
        match (self, state) {
            (Cell::Log(l), State::SlidingLog(new)) => **l = new,
            (cell, state) => *cell = Cell::pack(state),
        }
    }
}

/// Unpacks what [`Cell::pack`] wrote for `algorithm`.
#[inline(always)]
fn unpack(&[a, b, c]: &[u64; 3], algorithm: Algorithm) -> State {
    match algorithm {
        Algorithm::Gcra => State::Gcra(GcraState { tat: join(a, b) }),
        Algorithm::LeakyQueue => State::LeakyQueue(LeakyQueueState {
            last_departure: join(a, b),
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
        Algorithm::SlidingWindow => State::SlidingWindow(SlidingWindowState {
            window: a,
            prev: b,
            cur: c,
        }),
        // A log is never kept in words (`Cell::pack`); reads as an empty log.
        Algorithm::SlidingLog => State::SlidingLog(SlidingLogState::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(s: State) {
        let alg = s.algorithm();
        assert_eq!(Cell::pack(s.clone()).read(alg), s);
        assert_eq!(Cell::pack(s.clone()).take(alg), s);
        // Over a cell that held another state of the same algorithm.
        let mut cell = Cell::pack(s.clone());
        cell.put(s.clone());
        assert_eq!(cell.take(alg), s);
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
}
