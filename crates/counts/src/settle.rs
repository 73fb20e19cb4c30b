//! Reserve and settle (issue 40) beside check, for valgrind to count (`scripts/counts.sh`;
//! PERF.md, "Reserve and settle"): `tollgate-counts-settle PATH ROUNDS`.
//!
//! A binary of its own: added to `tollgate-counts`, these paths grew its `main` past where
//! the compiler inlined `decide` into it, and `direct-decision` counted 249 instead of 227
//! with no change to the library. The check paths here are the baselines of the ratios
//! (benches/counts-ratios.tsv): one key of a `gcra 1000/s` limiter, stored first, from
//! 10 ms on.
//!
//! * `settle-check-1`, `settle-reserve-1`: 1 µs apart, as `keyed-check-1` (nearly every
//!   request denied: one token per ms).
//! * `settle-check-open-1`, `settle-reserve-open-1`: 1 ms apart, every request admitted
//!   (each reserve builds its reservation, dropped unsettled).
//! * `settle-reserve-settle-1`: 1 ms apart, a reserve of 1 and its settle for 0.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::process::ExitCode;

use tollgate::keyed::KeyedLimiter;
use tollgate::{Nanos, Overage};

const PATHS: &str = "settle-check-1 settle-reserve-1 settle-check-open-1 \
                     settle-reserve-open-1 settle-reserve-settle-1";

// One call of each operation, out of line, as in `src/main.rs`.

#[inline(never)]
fn check(lim: &KeyedLimiter<u64>, key: u64, now: Nanos) -> bool {
    lim.check(&key, now, 1).unwrap().allowed
}

/// A reserve of 1, its reservation (if admitted) kept in memory, as a caller that holds it
/// has it, and dropped unsettled.
#[inline(never)]
fn reserve(lim: &KeyedLimiter<u64>, key: u64, now: Nanos) -> bool {
    let (d, r) = lim.reserve(&key, now, 1).unwrap();
    black_box(&r);
    d.allowed
}

/// A reserve of 1 and its settle for 0 (the whole estimate given back).
#[inline(never)]
fn reserve_settle(lim: &KeyedLimiter<u64>, key: u64, now: Nanos) -> bool {
    let (d, r) = lim.reserve(&key, now, 1).unwrap();
    if let Some(r) = r {
        black_box(lim.settle(&key, r, 0, now, Overage::Debt).unwrap());
    }
    d.allowed
}

/// `op` each round on one key, `step` ns apart.
fn one_key(step: Nanos, rounds: u64, op: fn(&KeyedLimiter<u64>, u64, Nanos) -> bool) {
    let policy = "gcra 1000/s".parse().expect("a valid policy");
    let lim = KeyedLimiter::new(policy, NonZeroUsize::new(2).expect("keys"));
    black_box(check(&lim, 7, 0));
    let mut now: Nanos = 10_000_000;
    for _ in 0..rounds {
        now += step;
        black_box(op(&lim, black_box(7), now));
    }
}

fn run(path: &str, rounds: u64) -> bool {
    match path {
        "settle-check-1" => one_key(1_000, rounds, check),
        "settle-reserve-1" => one_key(1_000, rounds, reserve),
        "settle-check-open-1" => one_key(1_000_000, rounds, check),
        "settle-reserve-open-1" => one_key(1_000_000, rounds, reserve),
        "settle-reserve-settle-1" => one_key(1_000_000, rounds, reserve_settle),
        _ => return false,
    }
    true
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds = args.get(1).and_then(|r| r.parse::<u64>().ok());
    match (args.first(), rounds) {
        (Some(path), Some(rounds)) if run(path, rounds) => ExitCode::SUCCESS,
        _ => {
            eprintln!("usage: tollgate-counts-settle PATH ROUNDS; PATH is one of: {PATHS}");
            ExitCode::from(2)
        }
    }
}
