//! Clocks for the callers that own counters in this process (the keyed limiter's
//! [`acquire_with`](crate::keyed::KeyedLimiter::acquire_with), tollgate-tower's and tollgate-rls's
//! memory stores): the core's decisions never read a clock, they take `now` from one of
//! these.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::Nanos;

/// A clock: [`Nanos`] since a fixed epoch (each clock says which), the same for every key
/// it times.
pub trait Clock: Send + Sync + 'static {
    /// The time now.
    fn now(&self) -> Nanos;
}

/// The system's clock: nanoseconds since the Unix epoch (0 before it), so that fixed windows
/// start on whole seconds, minutes, hours and days since 1970, as Envoy's rate limit service
/// counts them, and processes on different machines agree on them. It goes back when the
/// system's time is set back (the core never over-admits then).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// The process's monotonic clock ([`Instant`]), counted from the clock's creation: never
/// going back, and meaningful only within the process.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock(Instant);

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock(Instant::now())
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Nanos {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock set by hand (tests, simulations): shared by its clones, so a test can move it
/// while a store runs on it.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock at `now`.
    pub fn new(now: Nanos) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(now)))
    }

    /// Sets the time.
    pub fn set(&self, now: Nanos) {
        self.0.store(now, Ordering::Relaxed);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Nanos) {
        self.0.fetch_add(by, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_is_shared_by_its_clones() {
        let clock = ManualClock::new(5);
        let seen = clock.clone();
        clock.advance(10);
        assert_eq!(seen.now(), 15);
        seen.set(100);
        assert_eq!(clock.now(), 100);
    }

    #[test]
    fn the_system_clock_counts_from_the_unix_epoch() {
        // 2020-01-01 in Unix seconds: any machine running this test is later.
        assert!(SystemClock.now() > 1_577_836_800 * crate::NANOS_PER_SEC);
    }
}
