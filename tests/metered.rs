//! `tollgate::metrics::Metered` (feature `metrics`): the keyed limiter's decisions, waits and
//! slots as a real recorder of the `metrics` facade sees them (metrics-util's debugging
//! recorder; metrics-util is the registry the Prometheus exporter is built on), after
//! scripted sequences whose every count is known.
#![cfg(feature = "metrics-facade")]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::{ready, Future};
use std::num::NonZeroUsize;
use std::task::{Context, Poll, Waker};

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tollgate::fair_share::FairShare;
use tollgate::keyed::{AcquireError, KeyedLimiter, Wait};
use tollgate::metrics::facade::{describe, wait_buckets};
use tollgate::metrics::{
    Metered, CONCURRENCY_IN_USE, DECISIONS, INSTRUMENTS, NEAR_LIMIT, STORE_FAILURES, WAIT_DURATION,
};
use tollgate::{DecideError, Policy, NANOS_PER_MS};

fn policy(s: &str) -> Policy {
    s.parse().unwrap()
}

/// Runs `script` with a fresh debugging recorder as this thread's recorder, then reads every
/// series once: `name{label=value,...}` (labels sorted) to its value.
fn recorded(script: impl FnOnce()) -> BTreeMap<String, DebugValue> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, script);
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}

/// The counter `name{labels}`; absent fails (a series that should be registered cannot pass
/// as a zero).
fn counter(series: &BTreeMap<String, DebugValue>, name: &str, labels: &[&str]) -> u64 {
    let mut labels: Vec<&str> = labels.to_vec();
    labels.sort();
    let key = format!("{name}{{{}}}", labels.join(","));
    match series.get(&key) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{key}: {other:?} in {series:#?}"),
    }
}

fn decisions(series: &BTreeMap<String, DebugValue>, policy: &str, outcome: &str) -> u64 {
    counter(
        series,
        DECISIONS.prometheus,
        &[
            &format!("tollgate_policy={policy}"),
            &format!("tollgate_outcome={outcome}"),
            "tollgate_source=store",
        ],
    )
}

/// Polls `f` once: the script's sleeps complete at once (a test clock that the sleeps
/// advance), so one poll runs it to its end.
fn run<T>(f: impl Future<Output = T>) -> T {
    match std::pin::pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => unreachable!("the test clock's sleeps are ready at once"),
    }
}

#[test]
fn checks_count_by_outcome_and_near_limit() {
    let series = recorded(|| {
        let limiter = KeyedLimiter::new(policy("fixed-window 10/s"), NonZeroUsize::MIN);
        let limiter = Metered::new(limiter, "login");
        let mut allowed = 0;
        for _ in 0..13 {
            allowed += limiter.check("alice", 0, 1).unwrap().allowed as u32;
        }
        assert_eq!(allowed, 10);
        // Above the capacity: an error, not a decision, not counted.
        assert!(matches!(
            limiter.check("alice", 0, 11),
            Err(DecideError::CostExceedsCapacity { .. })
        ));
        // The next window: 3 more admitted, leaving 9, 8, 7 (not near).
        for _ in 0..3 {
            assert!(limiter.check("alice", 1_000_000_000, 1).unwrap().allowed);
        }
    });
    assert_eq!(decisions(&series, "login", "admitted"), 13);
    assert_eq!(decisions(&series, "login", "denied"), 3);
    assert_eq!(decisions(&series, "login", "shadow_denied"), 0);
    // 10 per window: the 9th and 10th admissions left 1 and 0, under 20% of 10.
    assert_eq!(
        counter(&series, NEAR_LIMIT.prometheus, &["tollgate_policy=login"]),
        2
    );
    for outcome in ["admitted", "denied", "shadow_denied"] {
        for source in ["deny_cache", "fallback"] {
            let labels = [
                "tollgate_policy=login".to_string(),
                format!("tollgate_outcome={outcome}"),
                format!("tollgate_source={source}"),
            ];
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            assert_eq!(counter(&series, DECISIONS.prometheus, &labels), 0);
        }
    }
    let failures = series
        .iter()
        .filter(|(k, _)| k.starts_with(STORE_FAILURES.prometheus))
        .count();
    assert_eq!(failures, 9, "registered, never counted: no store to fail");
    for name in series.keys() {
        let name = name.split('{').next().unwrap();
        assert!(INSTRUMENTS.iter().any(|i| i.prometheus == name), "{name}");
        assert!(!name.contains("alice"), "a key is never a label");
    }
    assert!(
        !series
            .keys()
            .any(|k| k.starts_with(WAIT_DURATION.prometheus)
                || k.starts_with(CONCURRENCY_IN_USE.prometheus)),
        "no waits and no slots: their series are not registered"
    );
}

#[test]
fn a_stack_and_a_fair_share_count_one_combined_decision() {
    let series = recorded(|| {
        let stack = KeyedLimiter::stack(
            &[policy("fixed-window 3/s"), policy("fixed-window 5/min")],
            NonZeroUsize::MIN,
        )
        .unwrap();
        let stack = Metered::on_route(stack, "stacked", "/api");
        for _ in 0..4 {
            stack.check("k", 0, 1).unwrap();
        }
        // The per-second limit is full again, the per-minute one has 2 left: 2 more.
        for _ in 0..3 {
            stack.check("k", 1_000_000_000, 1).unwrap();
        }
        let fair = FairShare::new(policy("fixed-window 10/s"), policy("fixed-window 2/s")).unwrap();
        let fair = Metered::new(KeyedLimiter::fair_share(fair, NonZeroUsize::MIN), "fair");
        for tenant in ["a", "a", "a", "b"] {
            fair.check_detailed("k", Some(tenant), 0, 1).unwrap();
        }
    });
    let stacked = |outcome: &str| {
        let outcome = format!("tollgate_outcome={outcome}");
        counter(
            &series,
            DECISIONS.prometheus,
            &[
                "tollgate_policy=stacked",
                "tollgate_route=/api",
                &outcome,
                "tollgate_source=store",
            ],
        )
    };
    assert_eq!(stacked("admitted"), 5);
    assert_eq!(stacked("denied"), 2);
    assert_eq!(decisions(&series, "fair", "admitted"), 3);
    assert_eq!(decisions(&series, "fair", "denied"), 1);
    // The combined decision reports the binding limit: the first window's admissions left
    // 2, 1, 0 of 3 (only 0 is under 20%), the second window's 1 and 0 of the minute's 5
    // (1 is exactly 20%, 0 is under).
    let near = counter(
        &series,
        NEAR_LIMIT.prometheus,
        &["tollgate_policy=stacked", "tollgate_route=/api"],
    );
    assert_eq!(near, 2);
}

#[test]
fn waits_count_by_result_on_the_limiters_clock() {
    let ms = |n| n * NANOS_PER_MS;
    let series = recorded(|| {
        let limiter = KeyedLimiter::new(policy("gcra 10/s burst 1"), NonZeroUsize::MIN);
        let limiter = Metered::new(limiter, "paced");
        let now = Cell::new(0);
        let clock = || now.get();
        let sleep = |d| {
            now.set(now.get() + d);
            ready(())
        };
        // At once, then after 100 ms of sleep, then a deadline shorter than the retry time:
        // given up at once, nothing slept.
        run(limiter.acquire_with("k", Wait::new(1, ms(500)), clock, sleep)).unwrap();
        run(limiter.acquire_with("k", Wait::new(1, ms(500)), clock, sleep)).unwrap();
        let err = run(limiter.acquire_with("k", Wait::new(1, ms(50)), clock, sleep));
        assert!(matches!(err, Err(AcquireError::Timeout { waited: 0, .. })));
        assert_eq!(now.get(), ms(100));
        // A cost above the capacity: no wait, no decision.
        let err = run(limiter.acquire_with("k", Wait::new(2, ms(50)), clock, sleep));
        assert!(matches!(err, Err(AcquireError::Decide(_))));
    });
    assert_eq!(decisions(&series, "paced", "admitted"), 2);
    assert_eq!(decisions(&series, "paced", "denied"), 1);
    let waits = |result: &str| match series.get(&format!(
        "{}{{tollgate_policy=paced,tollgate_wait_result={result}}}",
        WAIT_DURATION.prometheus
    )) {
        Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.0).collect::<Vec<f64>>(),
        other => panic!("{result}: {other:?}"),
    };
    assert_eq!(waits("admitted"), [0.0, 0.1], "in seconds");
    assert_eq!(waits("gave_up"), [0.0]);
    assert_eq!(wait_buckets().len(), tollgate::metrics::WAIT_BUCKETS.len());
}

#[test]
fn the_concurrency_gauge_follows_taken_and_released_slots() {
    let series = recorded(|| {
        let limiter = KeyedLimiter::new(policy("concurrency 3"), NonZeroUsize::MIN);
        let limiter = Metered::new(limiter, "slots");
        assert!(limiter.check("k", 0, 2).unwrap().allowed);
        assert!(!limiter.check("k", 0, 2).unwrap().allowed, "1 slot left");
        assert!(limiter.check("k", 0, 1).unwrap().allowed);
        limiter.release("k", 2).unwrap();
        // Not a concurrency limit: an error, nothing given back.
        let other = Metered::new(
            KeyedLimiter::new(policy("10/s"), NonZeroUsize::MIN),
            "slots",
        );
        assert!(other.release("k", 1).is_err());
        // A fair share's tenant window is never released (a release reaches the shared
        // policy only), so its admissions take no slots: the gauge would only ever rise.
        let fair = FairShare::new(policy("100/s"), policy("concurrency 2")).unwrap();
        let fair = Metered::new(KeyedLimiter::fair_share(fair, NonZeroUsize::MIN), "slots");
        assert!(
            fair.check_detailed("k", Some("t"), 0, 1)
                .unwrap()
                .decision
                .allowed
        );
    });
    match series.get(&format!(
        "{}{{tollgate_policy=slots}}",
        CONCURRENCY_IN_USE.prometheus
    )) {
        Some(DebugValue::Gauge(v)) => assert_eq!(v.0, 1.0, "3 taken, 2 given back"),
        other => panic!("{other:?} in {series:#?}"),
    }
    assert_eq!(decisions(&series, "slots", "admitted"), 3);
    assert_eq!(decisions(&series, "slots", "denied"), 1);
}

#[test]
fn describe_gives_every_instrument_its_help_and_unit() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        describe();
        let limiter = Metered::new(
            KeyedLimiter::new(policy("10/s"), NonZeroUsize::MIN),
            "described",
        );
        limiter.check("k", 0, 1).unwrap();
    });
    let snapshot = snapshotter.snapshot().into_vec();
    assert_eq!(snapshot.len(), 9 + 1 + 9);
    for (key, unit, description, _) in snapshot {
        let instrument = INSTRUMENTS
            .iter()
            .find(|i| i.prometheus == key.key().name())
            .unwrap();
        assert_eq!(description.as_deref(), Some(instrument.description));
        assert_eq!(unit, Some(metrics::Unit::Count));
    }
}

#[test]
fn without_a_recorder_a_metered_limiter_decides_as_the_limiter() {
    let plain = KeyedLimiter::new(policy("fixed-window 3/s"), NonZeroUsize::MIN);
    let metered = Metered::new(
        KeyedLimiter::new(policy("fixed-window 3/s"), NonZeroUsize::MIN),
        "none",
    );
    for i in 0..5 {
        assert_eq!(
            metered.check("k", i, 1).unwrap(),
            plain.check("k", i, 1).unwrap()
        );
    }
    assert_eq!(metered.limiter().len(), 1);
}
