//! tollgate vs governor, side by side in one run.
//!
//! `cargo bench --bench check` runs criterion on:
//! * a direct check (one limiter, one state) with injected time and with a real clock, on the
//!   allow path and on the deny path;
//! * a keyed check at 1, 10k and 1M keys (injected time, keys in a scrambled order);
//!
//! each first for the answer governor gives (admitted or not, and the wait: tollgate's
//! `admit`), then for tollgate's full decision (`decide`, `decide_in_place`,
//! `KeyedLimiter::check`: remaining and reset too, which governor does not report);
//!
//! then measures resident bytes per key at 1M keys (each limiter in a fresh child process),
//! and prints one table with the tollgate/governor ratios. Both run GCRA with the same quota.
//! `BENCH_QUICK=1` shortens the measurement (noisier).

use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use governor::clock::{Clock, FakeRelativeClock};
use governor::{Quota as GQuota, RateLimiter};
use tollgate::keyed::KeyedLimiter;
use tollgate::{admit, decide, decide_in_place, Nanos, Policy, Verdict};

const KEYS: [u64; 3] = [1, 10_000, 1_000_000];

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// A cheap scrambled key sequence over `0..n`.
fn key(i: u64, n: u64) -> u64 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7) % n
}

fn direct(c: &mut Criterion) {
    let mut g = c.benchmark_group("direct");
    // Allow path: 1000/s, time advancing 1 ms per check: every check admitted.
    let allow: Policy = "gcra 1000/s".parse().unwrap();
    let gq = GQuota::per_second(nz(1000));
    // Deny path: burst 10, time frozen after the burst: every check denied.
    let deny: Policy = "gcra 10/s".parse().unwrap();
    let gq_deny = GQuota::per_second(nz(10));

    // The same answer as governor's `check`: admitted or not (`admit`, inlined, computes
    // nothing else), and on a denial the wait (governor computes it from its `NotUntil`).
    g.bench_function("tollgate/injected/allow", |b| {
        let mut state = None;
        let mut now: Nanos = 0;
        b.iter(|| {
            now += 1_000_000;
            black_box(
                admit(&allow, &mut state, black_box(now), 1)
                    .unwrap()
                    .is_allowed(),
            )
        })
    });
    g.bench_function("governor/injected/allow", |b| {
        let clock = FakeRelativeClock::default();
        let lim = RateLimiter::direct_with_clock(gq, clock.clone());
        b.iter(|| {
            clock.advance(Duration::from_millis(1));
            black_box(lim.check().is_ok())
        })
    });
    let drained = || {
        let mut state = None;
        while admit(&deny, &mut state, 0, 1).unwrap().is_allowed() {}
        state
    };
    g.bench_function("tollgate/injected/deny", |b| {
        let mut state = drained();
        b.iter(|| {
            black_box(
                admit(&deny, &mut state, black_box(0), 1)
                    .unwrap()
                    .is_allowed(),
            )
        })
    });
    g.bench_function("governor/injected/deny", |b| {
        let clock = FakeRelativeClock::default();
        let lim = RateLimiter::direct_with_clock(gq_deny, clock);
        while lim.check().is_ok() {}
        b.iter(|| black_box(lim.check().is_ok()))
    });
    g.bench_function("tollgate/injected/deny+wait", |b| {
        let mut state = drained();
        b.iter(
            || match admit(&deny, &mut state, black_box(0), 1).unwrap() {
                Verdict::Allowed { .. } => black_box(0),
                Verdict::Denied { retry_after } => black_box(retry_after),
            },
        )
    });
    g.bench_function("governor/injected/deny+wait", |b| {
        let clock = FakeRelativeClock::default();
        let lim = RateLimiter::direct_with_clock(gq_deny, clock.clone());
        while lim.check().is_ok() {}
        b.iter(|| match lim.check() {
            Ok(()) => black_box(Duration::ZERO),
            Err(not_until) => black_box(not_until.wait_time_from(clock.now())),
        })
    });
    // A real clock: tollgate takes time as an argument, so it reads the clock governor's
    // default clock reads (quanta's TSC clock); the std clock is shown too.
    let huge: Policy = "gcra 1000000000/s".parse().unwrap();
    g.bench_function("tollgate/real-clock/allow", |b| {
        let clock = quanta::Clock::new();
        let start = clock.raw();
        let mut state = None;
        b.iter(|| {
            let now = clock.delta_as_nanos(start, clock.raw());
            black_box(admit(&huge, &mut state, now, 1).unwrap().is_allowed())
        })
    });
    g.bench_function("tollgate/std-clock/allow", |b| {
        let start = Instant::now();
        let mut state = None;
        b.iter(|| {
            let now = start.elapsed().as_nanos() as Nanos;
            black_box(admit(&huge, &mut state, now, 1).unwrap().is_allowed())
        })
    });
    g.bench_function("governor/real-clock/allow", |b| {
        let lim = RateLimiter::direct(GQuota::per_second(nz(1_000_000_000)));
        b.iter(|| black_box(lim.check().is_ok()))
    });
    // The full decision (remaining, reset, wait), which governor does not report: what a
    // service pays to send `RateLimit` headers on every answer.
    g.bench_function("tollgate/decision/allow", |b| {
        let mut state = None;
        let mut now: Nanos = 0;
        b.iter(|| {
            now += 1_000_000;
            let (d, s) = decide(&allow, state.take(), black_box(now), 1).unwrap();
            state = s;
            black_box(d)
        })
    });
    g.bench_function("tollgate/decision/deny", |b| {
        let mut state = drained();
        b.iter(|| {
            let (d, s) = decide(&deny, state.take(), black_box(0), 1).unwrap();
            state = s;
            black_box(d)
        })
    });
    // The same full decision on a state kept in place (`decide_in_place`): no move of the
    // state and the decision through memory.
    g.bench_function("tollgate/decision-in-place/allow", |b| {
        let mut state = None;
        let mut now: Nanos = 0;
        b.iter(|| {
            now += 1_000_000;
            black_box(decide_in_place(&allow, &mut state, black_box(now), 1).unwrap())
        })
    });
    g.bench_function("tollgate/decision-in-place/deny", |b| {
        let mut state = drained();
        b.iter(|| black_box(decide_in_place(&deny, &mut state, black_box(0), 1).unwrap()))
    });
    g.finish();
}

fn keyed(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed");
    for n in KEYS {
        let limiter = || -> KeyedLimiter<u64> {
            KeyedLimiter::new(
                "gcra 1000/s".parse().unwrap(),
                NonZeroUsize::new(n as usize * 2).unwrap(),
            )
        };
        // `tollgate`: the short answer (`admit`); `tollgate-decision`: the full decision.
        for (name, full) in [("tollgate", false), ("tollgate-decision", true)] {
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
                let lim = limiter();
                let mut i = 0u64;
                let mut now: Nanos = 0;
                b.iter(|| {
                    i += 1;
                    now += 1_000;
                    if full {
                        black_box(lim.check(&key(i, n), now, 1).unwrap().allowed)
                    } else {
                        black_box(lim.admit(&key(i, n), now, 1).unwrap().is_allowed())
                    }
                })
            });
        }
        g.bench_with_input(BenchmarkId::new("governor", n), &n, |b, &n| {
            let clock = FakeRelativeClock::default();
            let lim = RateLimiter::dashmap_with_clock(GQuota::per_second(nz(1000)), clock.clone());
            let mut i = 0u64;
            b.iter(|| {
                i += 1;
                clock.advance(Duration::from_micros(1));
                black_box(lim.check_key(&key(i, n)).is_ok())
            })
        });
    }
    g.finish();
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Child-process mode: fill one limiter with 1M keys and print resident bytes per key.
fn measure_bytes_per_key(which: &str) {
    let n = 1_000_000u64;
    let before = rss_bytes();
    let stored;
    let kept: Box<dyn std::any::Any> = match which {
        "tollgate" => {
            let lim: KeyedLimiter<u64> = KeyedLimiter::new(
                "gcra 1000/s".parse().unwrap(),
                NonZeroUsize::new(n as usize).unwrap(),
            );
            for k in 0..n {
                lim.check(&k, 0, 1).unwrap();
            }
            // Sharded: each of 16 shards holds its share of the bound, so a few keys of the
            // fullest shards are evicted; count what is stored.
            stored = lim.len() as u64;
            Box::new(lim)
        }
        _ => {
            let lim = RateLimiter::dashmap_with_clock(
                GQuota::per_second(nz(1000)),
                FakeRelativeClock::default(),
            );
            for k in 0..n {
                let _ = lim.check_key(&k);
            }
            stored = lim.len() as u64;
            Box::new(lim)
        }
    };
    let after = rss_bytes();
    assert!(stored >= n / 100 * 99, "{stored} keys stored");
    println!("{}", (after - before) as f64 / stored as f64);
    drop(kept);
}

fn bytes_per_key(which: &str) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let out = Command::new(exe)
        .env("TOLLGATE_BENCH_BYTES", which)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Mean time per iteration (ns) of a finished criterion benchmark.
fn mean_ns(id: &str) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    // criterion keeps `group/function/param` as nested folders, but a '/' inside a
    // function name becomes '_': try both.
    let nested = dir.join("criterion").join(id);
    let flat = match id.split_once('/') {
        Some((group, rest)) => dir
            .join("criterion")
            .join(group)
            .join(rest.replace('/', "_")),
        None => nested.clone(),
    };
    let text = std::fs::read_to_string(nested.join("new/estimates.json"))
        .or_else(|_| std::fs::read_to_string(flat.join("new/estimates.json")))
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn report() {
    println!("\ntollgate vs governor (GCRA, same quota; mean time per check; ratio < 1 means tollgate is faster)");
    println!(
        "{:<40} {:>12} {:>12} {:>8}",
        "check", "tollgate", "governor", "ratio"
    );
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let direct = |name: &str, t: &str, g: &str| {
        (
            format!("direct, {name}"),
            format!("direct/tollgate/{t}"),
            format!("direct/governor/{g}"),
        )
    };
    println!("-- the same answer (admitted, or the wait):");
    rows.push(direct("injected/allow", "injected/allow", "injected/allow"));
    rows.push(direct("injected/deny", "injected/deny", "injected/deny"));
    rows.push(direct(
        "injected/deny+wait",
        "injected/deny+wait",
        "injected/deny+wait",
    ));
    rows.push(direct(
        "quanta clock/allow",
        "real-clock/allow",
        "real-clock/allow",
    ));
    rows.push(direct(
        "std clock/allow (vs quanta)",
        "std-clock/allow",
        "real-clock/allow",
    ));
    for n in KEYS {
        rows.push((
            format!("keyed, {n} keys"),
            format!("keyed/tollgate/{n}"),
            format!("keyed/governor/{n}"),
        ));
    }
    print_rows(&rows);
    println!("-- tollgate's full decision (+ remaining, reset), vs governor's short answer:");
    let mut rows = vec![
        direct("decision/allow", "decision/allow", "injected/allow"),
        direct("decision/deny", "decision/deny", "injected/deny+wait"),
        direct(
            "decision in place/allow",
            "decision-in-place/allow",
            "injected/allow",
        ),
        direct(
            "decision in place/deny",
            "decision-in-place/deny",
            "injected/deny+wait",
        ),
    ];
    for n in KEYS {
        rows.push((
            format!("keyed decision, {n} keys"),
            format!("keyed/tollgate-decision/{n}"),
            format!("keyed/governor/{n}"),
        ));
    }
    print_rows(&rows);
    let (t, g) = (bytes_per_key("tollgate"), bytes_per_key("governor"));
    match (t, g) {
        (Some(t), Some(g)) => println!(
            "{:<40} {:>10.1}B  {:>10.1}B  {:>8.2}",
            "resident bytes per key, 1M keys",
            t,
            g,
            t / g
        ),
        _ => println!("resident bytes per key: not measured"),
    }
}

fn print_rows(rows: &[(String, String, String)]) {
    for (name, t, g) in rows {
        match (mean_ns(t), mean_ns(g)) {
            (Some(t), Some(g)) => {
                println!("{name:<40} {:>10.1}ns {:>10.1}ns {:>8.2}", t, g, t / g)
            }
            _ => println!("{name:<40} (not measured)"),
        }
    }
}

fn main() {
    if let Ok(which) = std::env::var("TOLLGATE_BENCH_BYTES") {
        measure_bytes_per_key(&which);
        return;
    }
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(if quick { 10 } else { 30 })
        .warm_up_time(Duration::from_millis(if quick { 200 } else { 1000 }))
        .measurement_time(Duration::from_millis(if quick { 500 } else { 3000 }));
    direct(&mut c);
    keyed(&mut c);
    c.final_summary();
    report();
}
