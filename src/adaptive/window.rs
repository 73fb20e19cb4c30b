//! A latency histogram for one sampling window, and its percentiles, in fixed memory.
//!
//! Latencies fall into log-linear buckets: eight per power of two (each at most 1/8 of its
//! lower bound wide, so a percentile is within 12.5% before interpolation), from 1 ns to
//! about 18 minutes (2^40 ns, longer latencies count as 2^40), plus one bucket for requests
//! that have no latency because they failed for load or timed out: those rank above every
//! latency. A percentile interpolates linearly inside its bucket (the samples of a bucket
//! are assumed spread evenly over it).
//!
//! Counts are `u16`: a window holds at most [`Window::CAPACITY`] samples, and the gradient
//! controller closes a window that is full.
//!
//! ```
//! use tollgate::adaptive::window::Window;
//! let ms = 1_000_000;
//! let mut w = Window::default();
//! for i in 1..=100 {
//!     w.record(Some(i * ms)); // 1 ms, 2 ms, ..., 100 ms
//! }
//! let p90 = w.percentile(90).unwrap();
//! assert!(p90 > 88 * ms && p90 < 92 * ms, "{p90}");
//! w.record(None); // a timeout ranks above every latency
//! assert_eq!(w.count(), 101);
//! assert_eq!(w.congested(), 1);
//! assert_eq!(w.percentile(100), None);
//! ```

use crate::Nanos;

/// Buckets per power of two, as a shift.
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// The largest power of two kept (2^40 ns, about 18 minutes).
const TOP_EXP: u32 = 40;
/// Latency buckets; one more holds the congestion samples.
const LATENCY_BUCKETS: usize = (TOP_EXP as usize - SUB_BITS as usize + 2) * SUB;
const BUCKETS: usize = LATENCY_BUCKETS + 1;

/// The latencies of one window. Plain data (`Copy`, 628 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    counts: [u16; BUCKETS],
    count: u16,
}

impl Default for Window {
    fn default() -> Window {
        Window {
            counts: [0; BUCKETS],
            count: 0,
        }
    }
}

/// The bucket of a latency.
fn bucket(latency: Nanos) -> usize {
    let v = latency.min((1 << (TOP_EXP + 1)) - 1);
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let mantissa = (v >> (exp - SUB_BITS)) as usize & (SUB - 1);
    (exp - SUB_BITS + 1) as usize * SUB + mantissa
}

/// A bucket's lower bound and width.
fn bounds(index: usize) -> (Nanos, Nanos) {
    if index < SUB {
        return (index as u64, 1);
    }
    let exp = (index / SUB) as u32 + SUB_BITS - 1;
    let width = 1u64 << (exp - SUB_BITS);
    (((SUB + index % SUB) as u64) << (exp - SUB_BITS), width)
}

impl Window {
    /// The most samples one window holds.
    pub const CAPACITY: u16 = u16::MAX;

    /// Records one sample: `Some(latency)`, or `None` for a request that failed for load or
    /// timed out. A full window ignores further samples ([`Window::is_full`]).
    pub fn record(&mut self, latency: Option<Nanos>) {
        if self.is_full() {
            return;
        }
        let i = latency.map_or(LATENCY_BUCKETS, bucket);
        self.counts[i] += 1;
        self.count += 1;
    }

    /// The number of samples.
    pub const fn count(&self) -> u64 {
        self.count as u64
    }

    /// The number of congestion samples (overload answers and timeouts).
    pub const fn congested(&self) -> u64 {
        self.counts[LATENCY_BUCKETS] as u64
    }

    /// Whether the window holds [`Window::CAPACITY`] samples.
    pub const fn is_full(&self) -> bool {
        self.count == Self::CAPACITY
    }

    /// The `pct`-th percentile (`pct` in 0..=100, larger values read as 100) of the
    /// latencies, where congestion samples rank above every latency: `None` when the
    /// percentile falls among them, or when the window is empty.
    pub fn percentile(&self, pct: u8) -> Option<Nanos> {
        let total = self.count as u64;
        // The rank of the sample at the percentile, counted from 1.
        let rank = (total * pct.min(100) as u64).div_ceil(100).max(1);
        if total == 0 {
            return None;
        }
        let mut below = 0u64;
        for (i, &n) in self.counts[..LATENCY_BUCKETS].iter().enumerate() {
            let n = n as u64;
            if below + n >= rank {
                let (low, width) = bounds(i);
                // Interpolated: the k-th of n samples spread evenly over the bucket.
                return Some(low + width * (rank - below) / n);
            }
            below += n;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_latency_falls_in_the_bucket_whose_bounds_hold_it() {
        for v in (0..5_000u64).chain([1 << 20, (1 << 20) + 12_345, 1 << 39, (1 << 41) - 1]) {
            let (low, width) = bounds(bucket(v));
            assert!(low <= v && v < low + width, "{v}: [{low}, {})", low + width);
        }
    }

    #[test]
    fn buckets_are_at_most_an_eighth_of_their_lower_bound_wide() {
        for i in SUB..LATENCY_BUCKETS {
            let (low, width) = bounds(i);
            assert!(width * 8 <= low, "bucket {i}: {low} + {width}");
        }
    }

    #[test]
    fn latencies_beyond_the_top_share_the_last_latency_bucket() {
        assert_eq!(bucket(u64::MAX), LATENCY_BUCKETS - 1);
        assert_eq!(bucket(1 << 41), LATENCY_BUCKETS - 1);
    }

    #[test]
    fn one_constant_latency_is_its_own_percentile_within_a_bucket() {
        let mut w = Window::default();
        for _ in 0..1000 {
            w.record(Some(10_000_000));
        }
        let p = w.percentile(90).unwrap();
        assert!(
            (10_000_000..10_000_000 + 10_000_000 / 8).contains(&p),
            "{p}"
        );
    }

    #[test]
    fn a_full_window_ignores_further_samples() {
        let mut w = Window::default();
        for _ in 0..Window::CAPACITY {
            w.record(Some(1));
        }
        w.record(None);
        assert!(w.is_full());
        assert_eq!(w.congested(), 0);
    }

    #[test]
    fn congestion_beyond_the_percentile_has_no_latency() {
        let mut w = Window::default();
        for _ in 0..8 {
            w.record(Some(1_000));
        }
        w.record(None);
        w.record(None);
        assert_eq!(w.percentile(80).map(|p| p < 1_200), Some(true));
        assert_eq!(w.percentile(90), None);
    }
}
