//! One hot path of the core run `rounds` times, for valgrind to count the instructions
//! (`scripts/counts.sh`; see PERF.md). Not a timer: the count does not move with the load of
//! the machine, so a change of a few percent shows.
//!
//! `tollgate-counts PATH ROUNDS`: sets the path up (the keys stored, in the steady state the
//! criterion benchmark `benches/check.rs` measures), then runs `ROUNDS` operations. The script
//! runs each path at two round counts and divides the difference by the difference of the
//! rounds: the set-up, the process's start and exit cancel, and what is left is the count
//! of one operation.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::process::ExitCode;

use tollgate::keyed::KeyedLimiter;
use tollgate::stack::decide_all;
use tollgate::{decide, Nanos, Policy, State};

/// The paths, by the name the baseline file gives them.
const PATHS: &str = "direct-admit direct-decision stack-decision keyed-admit-1 keyed-check-1 \
                     keyed-admit-10k keyed-check-10k keyed-admit-1m keyed-check-1m keyed-stack-1";

/// The scrambled key sequence over `0..n` of `benches/check.rs` (the same keys in the same
/// order, so the counts and the criterion rows measure one thing).
fn key(i: u64, n: u64) -> u64 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7) % n
}

fn policy(text: &str) -> Policy {
    text.parse().expect("a valid policy")
}

/// `KeyedLimiter::admit` (`full == false`) or `check` over `n` keys, as the criterion rows
/// `keyed/tollgate` and `keyed/tollgate-decision`: 1000/s GCRA, 1 µs between checks.
fn keyed(n: u64, full: bool, rounds: u64) {
    let n = black_box(n);
    // The store's hasher is seeded from addresses (foldhash), so the count at 10k keys can
    // move with the binary's layout: before the table mixed its hash, one limiter counted
    // 237-276 instructions per check over ten seeds of one build (271-272 since). The rounds
    // go round-robin over limiters with seeds of their own, to count the mean (1 key: no
    // probe, one limiter).
    let limiters = if n == 1 {
        1
    } else {
        LIMITERS.min(160_000 / n).max(1)
    };
    let all: Vec<KeyedLimiter<u64>> = (0..limiters)
        .map(|_| {
            KeyedLimiter::new(
                policy("gcra 1000/s"),
                NonZeroUsize::new(n as usize * 2).expect("keys"),
            )
        })
        .collect();
    // Every key stored first, as criterion's warm-up leaves them (the scrambled order reaches
    // some keys late, and an insertion among the counted rounds would make the count depend
    // on where they fall): the steady state, the table grown, no insertion.
    for lim in &all {
        for k in 0..n {
            black_box(check(lim, k, 0));
        }
    }
    // From 10 ms on, past every stored key's 1 ms: each check finds its key, as it would
    // after criterion's warm-up.
    let mut now: Nanos = 10_000_000;
    for i in 0..rounds {
        now += 1_000;
        let lim = &all[(i % limiters) as usize];
        let k = key(i / limiters, n);
        black_box(if full {
            check(lim, k, now)
        } else {
            admit(lim, k, now)
        });
    }
}

/// The most limiters [`keyed`] spreads its rounds over (see there).
const LIMITERS: u64 = 16;

// One call of each keyed operation, out of line: the library's code as any caller's call
// site gets it, the same whatever the loop around it (inlined into the loop, the count moved
// with how the harness's own code was optimised).

#[inline(never)]
fn check(lim: &KeyedLimiter<u64>, key: u64, now: Nanos) -> bool {
    lim.check(&key, now, 1).unwrap().allowed
}

#[inline(never)]
fn admit(lim: &KeyedLimiter<u64>, key: u64, now: Nanos) -> bool {
    lim.admit(&key, now, 1).unwrap().is_allowed()
}

fn run(path: &str, rounds: u64) -> bool {
    let allow = policy("gcra 1000/s");
    match path {
        // `direct/tollgate/injected/allow`: the short answer, time advancing 1 ms a check.
        "direct-admit" => {
            let mut state = None;
            let mut now: Nanos = 0;
            for _ in 0..rounds {
                now += 1_000_000;
                black_box(
                    tollgate::admit(&allow, &mut state, black_box(now), 1)
                        .unwrap()
                        .is_allowed(),
                );
            }
        }
        // `direct/tollgate/decision/allow`: the full decision, the state moved in and out.
        "direct-decision" => {
            let mut state = None;
            let mut now: Nanos = 0;
            for _ in 0..rounds {
                now += 1_000_000;
                let (d, s) = decide(&allow, state.take(), black_box(now), 1).unwrap();
                state = s;
                black_box(d);
            }
        }
        // A stack of two limits (per second and per minute) decided all or nothing.
        "stack-decision" => {
            let minute = policy("gcra 100000/min");
            let (mut a, mut b): (Option<State>, Option<State>) = (None, None);
            let mut now: Nanos = 0;
            for _ in 0..rounds {
                now += 1_000_000;
                let mut limits = [(&allow, &mut a), (&minute, &mut b)];
                black_box(decide_all(&mut limits, black_box(now), 1).unwrap().decision);
            }
        }
        "keyed-admit-1" => keyed(1, false, rounds),
        "keyed-check-1" => keyed(1, true, rounds),
        "keyed-admit-10k" => keyed(10_000, false, rounds),
        "keyed-check-10k" => keyed(10_000, true, rounds),
        "keyed-admit-1m" => keyed(1_000_000, false, rounds),
        "keyed-check-1m" => keyed(1_000_000, true, rounds),
        // The same stack in a keyed limiter, one key.
        "keyed-stack-1" => {
            let lim: KeyedLimiter<u64> = KeyedLimiter::stack(
                &[allow, policy("gcra 100000/min")],
                NonZeroUsize::new(2).expect("keys"),
            )
            .unwrap();
            let mut now: Nanos = 0;
            for _ in 0..rounds {
                now += 1_000;
                black_box(lim.check(&7, now, 1).unwrap().allowed);
            }
        }
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
            eprintln!("usage: tollgate-counts PATH ROUNDS; PATH is one of: {PATHS}");
            ExitCode::from(2)
        }
    }
}
