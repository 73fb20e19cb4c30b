//! The keyed limiter's check recorded on the `metrics` facade (`tollgate::metrics::Metered`,
//! the core's feature `metrics-facade`) for valgrind to count (`scripts/counts.sh`; see PERF.md), in
//! a binary of its own: built with the `metered` feature of this crate (the core's
//! `metrics`), so that `tollgate-counts`, the core without the feature, is the build the
//! other rows count (one `lto` unit each: a path added to a binary re-lays out the others).
//!
//! `tollgate-counts-metered PATH ROUNDS`, as `tollgate-counts`. The paths are
//! `keyed-check-1`'s: one key, `gcra 1000/s`, 1 µs apart.
//!
//! * `keyed-check-unmetered-1`: `KeyedLimiter::check` in this binary (the hook's baseline in
//!   the same build);
//! * `keyed-check-metered-1`: `Metered::check` with no recorder installed (the facade's
//!   no-op handles: the hook's own cost);
//! * `keyed-check-metered-prometheus-1`: `Metered::check` with `metrics-exporter-prometheus`'s
//!   recorder installed (built, not served: no thread, no listener), each decision an add
//!   on its atomic counter through the facade's handle. Building the recorder reads the
//!   clock (its calibration runs for a time, not a number of instructions), so its set-up
//!   count varies by one to two million instructions from run to run: the script counts
//!   this path inside [`counted`] only (at 400k rounds of the whole run, 404-410 were seen).

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::process::ExitCode;

use tollgate::keyed::KeyedLimiter;
use tollgate::metrics::Metered;
use tollgate::Nanos;

/// The paths, by the name the baseline file gives them.
const PATHS: &str =
    "keyed-check-unmetered-1 keyed-check-metered-1 keyed-check-metered-prometheus-1";

fn limiter() -> KeyedLimiter<u64> {
    KeyedLimiter::new(
        "gcra 1000/s".parse().expect("a valid policy"),
        NonZeroUsize::new(2).expect("keys"),
    )
}

// One call of each operation, out of line (as `tollgate-counts` does).

#[inline(never)]
fn check(lim: &KeyedLimiter<u64>, key: u64, now: Nanos) -> bool {
    lim.check(&key, now, 1).unwrap().allowed
}

#[inline(never)]
fn metered_check(lim: &Metered<u64>, key: u64, now: Nanos) -> bool {
    lim.check(&key, now, 1).unwrap().allowed
}

/// `rounds` metered checks of one key, 1 µs apart from `now` on. Out of line and named
/// `counted`: the script counts the Prometheus path inside it only (callgrind's
/// `--toggle-collect`), the recorder's set-up left out (see `scripts/counts.sh`).
#[inline(never)]
fn counted(lim: &Metered<u64>, mut now: Nanos, rounds: u64) {
    for _ in 0..rounds {
        now += 1_000;
        black_box(metered_check(lim, black_box(7), now));
    }
}

/// `rounds` checks of one key, 1 µs apart (after one that stores the key).
fn run(path: &str, rounds: u64) -> bool {
    let mut now: Nanos = 10_000_000;
    match path {
        "keyed-check-unmetered-1" => {
            let lim = limiter();
            black_box(check(&lim, 7, 0));
            for _ in 0..rounds {
                now += 1_000;
                black_box(check(&lim, black_box(7), now));
            }
        }
        "keyed-check-metered-1" | "keyed-check-metered-prometheus-1" => {
            if path == "keyed-check-metered-prometheus-1" {
                let recorder =
                    metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
                metrics::set_global_recorder(recorder).expect("the first recorder");
            }
            let lim = Metered::new(limiter(), "counted");
            // The first decision registers the series (with the recorder, if any).
            black_box(metered_check(&lim, 7, 0));
            counted(&lim, now, rounds);
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
            eprintln!("usage: tollgate-counts-metered PATH ROUNDS; PATH is one of: {PATHS}");
            ExitCode::from(2)
        }
    }
}
