//! Property tests on random traces: the exact bounds of each algorithm, the equivalences
//! between the bucket algorithms, exact retry times, and "never panics" on hostile input.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tollgate::{
    admit, decide, decide_in_place, DecideError, Decision, Nanos, Policy, State, Verdict,
    NANOS_PER_MS,
};

/// Decides one request with every entry point: `decide` (state moved in and out),
/// `decide_in_place` and `admit` (state in place). Checks that they agree on the answer and
/// the next state, that an error leaves the state untouched and that `remaining` never
/// exceeds the limit; returns `decide`'s result.
fn decide_all_ways(
    p: &Policy,
    state: &Option<State>,
    now: Nanos,
    cost: u64,
) -> Result<Result<(Decision, Option<State>), DecideError>, TestCaseError> {
    let mut in_place = state.clone();
    let verdict = admit(p, &mut in_place, now, cost);
    let mut full_in_place = state.clone();
    let full = decide_in_place(p, &mut full_in_place, now, cost);
    let moved = decide(p, state.clone(), now, cost);
    match &moved {
        Ok((d, s)) => {
            prop_assert!(d.remaining <= d.limit);
            prop_assert_eq!(verdict, Ok(Verdict::from(d)));
            prop_assert_eq!(&in_place, s);
            prop_assert_eq!(full, Ok(*d));
            prop_assert_eq!(&full_in_place, s);
        }
        Err(e) => {
            prop_assert_eq!(verdict, Err(*e));
            prop_assert_eq!(&in_place, state);
            prop_assert_eq!(full, Err(*e));
            prop_assert_eq!(&full_in_place, state);
        }
    }
    Ok(moved)
}

/// Runs a trace of `(time, cost)` requests (times non-decreasing) through one key.
fn run(policy: &Policy, trace: &[(Nanos, u64)]) -> Vec<Decision> {
    let mut state: Option<State> = None;
    trace
        .iter()
        .map(|&(t, c)| {
            let (d, s) = decide(policy, state.take(), t, c).unwrap();
            state = s;
            d
        })
        .collect()
}

/// Sorted random times (ms resolution, within a few seconds) with costs up to `max_cost`.
fn trace(max_cost: u64) -> impl Strategy<Value = Vec<(Nanos, u64)>> {
    prop::collection::vec((0u64..4_000, 1..=max_cost), 1..160).prop_map(|mut v| {
        v.sort();
        v.into_iter()
            .map(|(ms, c)| (ms * NANOS_PER_MS, c))
            .collect()
    })
}

/// The largest admitted cost in any window `[s, s + len]` (closed: the strictest reading).
fn max_in_closed(admitted: &[(Nanos, u64)], len: Nanos) -> u64 {
    let mut best = 0;
    for (i, &(s, _)) in admitted.iter().enumerate() {
        let sum: u64 = admitted[i..]
            .iter()
            .take_while(|(t, _)| *t <= s + len)
            .map(|(_, c)| c)
            .sum();
        best = best.max(sum);
    }
    best
}

/// The largest admitted cost in any half-open window `(e - len, e]`.
fn max_in_half_open(admitted: &[(Nanos, u64)], len: Nanos) -> u64 {
    let mut best = 0;
    for &(e, _) in admitted {
        let sum: u64 = admitted
            .iter()
            .filter(|(t, _)| *t + len > e && *t <= e)
            .map(|(_, c)| c)
            .sum();
        best = best.max(sum);
    }
    best
}

fn admitted(trace: &[(Nanos, u64)], ds: &[Decision]) -> Vec<(Nanos, u64)> {
    trace
        .iter()
        .zip(ds)
        .filter(|(_, d)| d.allowed)
        .map(|(r, _)| *r)
        .collect()
}

fn bucket_policy(alg: &str, limit: u64, window_ms: u64, burst: u64) -> Policy {
    format!("{alg} {limit}/{window_ms}ms burst {burst}")
        .parse()
        .unwrap()
}

/// Any `u128`, with its extremes and values near the scaled-time range (2^96..2^105) often.
fn edgy_u128() -> impl Strategy<Value = u128> {
    prop_oneof![
        Just(u128::MAX),
        (0u128..1 << 20).prop_map(|d| u128::MAX - d),
        (0u128..1 << 105),
        any::<u128>(),
    ]
}

/// Any `u64`, with its extremes often.
fn edgy_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(u64::MAX),
        (0u64..1 << 20).prop_map(|d| u64::MAX - d),
        any::<u64>()
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Token bucket, GCRA and leaky meter admit at most B + r*T in any interval of length T.
    #[test]
    fn buckets_admit_at_most_burst_plus_rate_times_t(
        limit in 1u64..20, window_ms in 1u64..2_000, burst in 1u64..20,
        t in trace(3), span_ms in 1u64..3_000,
    ) {
        for alg in ["token-bucket", "gcra", "leaky-bucket"] {
            let p = bucket_policy(alg, limit, window_ms, burst);
            let trace: Vec<_> = t.iter().map(|&(at, c)| (at, c.min(burst))).collect();
            let ds = run(&p, &trace);
            let adm = admitted(&trace, &ds);
            let span = span_ms * NANOS_PER_MS;
            // B + r*T, with r*T = limit * T / window (exact rational, floor is the bound).
            let bound = burst + (limit as u128 * span as u128 / (window_ms * NANOS_PER_MS) as u128) as u64;
            prop_assert!(max_in_closed(&adm, span) <= bound, "{alg}: {} > {bound}", max_in_closed(&adm, span));
        }
    }

    /// The three bucket readings are one policing rule: the same admissions, the same numbers.
    #[test]
    fn token_bucket_gcra_and_leaky_meter_agree(
        limit in 1u64..20, window_ms in 1u64..2_000, burst in 1u64..20, t in trace(4),
    ) {
        let trace: Vec<_> = t.iter().map(|&(at, c)| (at, c.min(burst))).collect();
        let tb = run(&bucket_policy("token-bucket", limit, window_ms, burst), &trace);
        let gc = run(&bucket_policy("gcra", limit, window_ms, burst), &trace);
        let lb = run(&bucket_policy("leaky-bucket", limit, window_ms, burst), &trace);
        prop_assert_eq!(&tb, &gc);
        prop_assert_eq!(&tb, &lb);
    }

    /// The sliding log never admits more than L in any window (t - W, t].
    #[test]
    fn sliding_log_is_exact(limit in 1u64..12, window_ms in 1u64..1_500, t in trace(3)) {
        let p: Policy = format!("sliding-log {limit}/{window_ms}ms").parse().unwrap();
        let trace: Vec<_> = t.iter().map(|&(at, c)| (at, c.min(limit))).collect();
        let adm = admitted(&trace, &run(&p, &trace));
        prop_assert!(max_in_half_open(&adm, window_ms * NANOS_PER_MS) <= limit);
    }

    /// The fixed window admits at most L per clock window and 2L in any span of length W.
    #[test]
    fn fixed_window_bounds(limit in 1u64..12, window_ms in 1u64..1_500, t in trace(3)) {
        let p: Policy = format!("fixed-window {limit}/{window_ms}ms").parse().unwrap();
        let trace: Vec<_> = t.iter().map(|&(at, c)| (at, c.min(limit))).collect();
        let adm = admitted(&trace, &run(&p, &trace));
        let w = window_ms * NANOS_PER_MS;
        let mut per_window: BTreeMap<u64, u64> = BTreeMap::new();
        for (at, c) in &adm {
            *per_window.entry(at / w).or_default() += c;
        }
        prop_assert!(per_window.values().all(|&n| n <= limit));
        prop_assert!(max_in_half_open(&adm, w) <= 2 * limit);
    }

    /// The leaky queue's output (arrival + delay) leaves at most one unit of cost per
    /// interval W/L: consecutive departures are at least cost * W/L apart (up to the 1 ns
    /// rounding of reported delays), and never earlier than one interval after arrival.
    #[test]
    fn leaky_queue_output_is_paced(
        limit in 1u64..20, window_ms in 1u64..2_000, burst in 1u64..20, t in trace(3),
    ) {
        let p = bucket_policy("leaky-queue", limit, window_ms, burst);
        let trace: Vec<_> = t.iter().map(|&(at, c)| (at, c.min(burst))).collect();
        let ds = run(&p, &trace);
        let w = (window_ms * NANOS_PER_MS) as u128;
        let mut last: Option<u128> = None;
        for ((at, c), d) in trace.iter().zip(&ds) {
            if !d.allowed { continue; }
            let departure = (*at + d.delay) as u128;
            // exact: departure*L >= previous*L + c*W, give or take the ceil to whole ns.
            prop_assert!(d.delay as u128 * limit as u128 >= *c as u128 * w);
            if let Some(prev) = last {
                prop_assert!(departure * limit as u128 + limit as u128 > prev * limit as u128 + *c as u128 * w);
            }
            prop_assert!(d.delay as u128 * limit as u128 <= burst as u128 * w + limit as u128);
            last = Some(departure);
        }
    }

    /// A denied request's `retry_after` is exact: retried then (with no other traffic) it is
    /// admitted, and 1 ns earlier it is not.
    #[test]
    fn retry_after_is_exact(
        alg in prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket", "leaky-queue", "sliding-window", "fixed-window", "sliding-log"]),
        limit in 1u64..10, window_ms in 1u64..1_000, burst in 1u64..10, t in trace(3),
    ) {
        let p: Policy = if alg.starts_with("token") || alg.starts_with("gcra") || alg.starts_with("leaky") {
            bucket_policy(alg, limit, window_ms, burst)
        } else {
            format!("{alg} {limit}/{window_ms}ms").parse().unwrap()
        };
        let cap = p.limit();
        let mut state: Option<State> = None;
        for &(at, c) in &t {
            let c = c.min(cap);
            let (d, s) = decide(&p, state.clone(), at, c).unwrap();
            if !d.allowed {
                prop_assert!(d.retry_after > 0, "{p}: denied with retry_after 0");
                let (later, _) = decide(&p, state.clone(), at + d.retry_after, c).unwrap();
                prop_assert!(later.allowed, "{p}: not admitted after retry_after {}", d.retry_after);
                let (early, _) = decide(&p, state.clone(), at + d.retry_after - 1, c).unwrap();
                prop_assert!(!early.allowed, "{p}: admitted before retry_after {}", d.retry_after);
            } else {
                state = s;
            }
        }
    }

    /// When the state comes back `None`, the key is fresh: deciding from `None` gives the
    /// same answer as deciding from any state that reset to fresh.
    #[test]
    fn reset_after_reaches_fresh(
        alg in prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket", "leaky-queue", "sliding-window", "fixed-window", "sliding-log"]),
        limit in 1u64..10, window_ms in 1u64..1_000, t in trace(2),
    ) {
        let p: Policy = format!("{alg} {limit}/{window_ms}ms").parse().unwrap();
        let mut state: Option<State> = None;
        let mut last = (0, Decision::default());
        for &(at, c) in &t {
            let (d, s) = decide(&p, state.take(), at, c.min(limit)).unwrap();
            state = s;
            last = (at, d);
        }
        let (at, d) = last;
        let (_, fresh) = decide(&p, state, at + d.reset_after, 0).unwrap();
        prop_assert_eq!(fresh, None, "{}: not fresh after reset_after {}", p, d.reset_after);
    }

    /// No panic for any input: times in any order up to u64::MAX, any cost, any window; and
    /// `admit` and `decide_in_place` agree with `decide` on all of it.
    #[test]
    fn never_panics(
        alg in prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket", "leaky-queue", "sliding-window", "fixed-window", "sliding-log", "concurrency"]),
        limit in 1u64..=tollgate::MAX_COUNT, window_ms in 1u64..=31_622_400_000, burst in 1u64..=tollgate::MAX_COUNT,
        steps in prop::collection::vec((any::<u64>(), any::<u64>()), 1..40),
    ) {
        let p: Policy = match alg {
            "concurrency" => format!("concurrency {limit}"),
            a if a.contains("window") || a.contains("log") => format!("{a} {limit}/{window_ms}ms"),
            a => format!("{a} {limit}/{window_ms}ms burst {burst}"),
        }.parse().unwrap();
        let mut state: Option<State> = None;
        for (now, cost) in steps {
            let cost = if cost % 3 == 0 { cost } else { cost % (p.limit() + 2) };
            match decide_all_ways(&p, &state, now, cost)? {
                Ok((_, s)) => state = s,
                Err(DecideError::CostExceedsCapacity { cost: c, capacity }) => {
                    prop_assert!(c > capacity)
                }
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
    }

    /// No panic for any stored state either (a store may hand back a corrupted or hostile
    /// one: the worker reads states from storage): every field at any value, and `admit` and
    /// `decide_in_place` still agree with `decide`.
    #[test]
    fn hostile_states_never_panic(
        alg in prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket", "leaky-queue", "sliding-window", "fixed-window", "concurrency"]),
        limit in 1u64..=tollgate::MAX_COUNT, window_ms in 1u64..=31_622_400_000,
        big in edgy_u128(), a in edgy_u64(), b in edgy_u64(), c in edgy_u64(),
        now in edgy_u64(), cost in edgy_u64(),
    ) {
        use tollgate::algorithms::{concurrency::ConcurrencyState, fixed_window::FixedWindowState,
            gcra::GcraState, leaky_bucket::LeakyBucketState, leaky_queue::LeakyQueueState,
            sliding_window::SlidingWindowState, token_bucket::TokenBucketState};
        let (p, state): (Policy, State) = match alg {
            "concurrency" => (format!("concurrency {limit}").parse().unwrap(),
                State::Concurrency(ConcurrencyState { in_flight: a })),
            "gcra" => (format!("gcra {limit}/{window_ms}ms").parse().unwrap(),
                State::Gcra(GcraState { tat: big })),
            "token-bucket" => (format!("token-bucket {limit}/{window_ms}ms").parse().unwrap(),
                State::TokenBucket(TokenBucketState { credit: big, last: a })),
            "leaky-bucket" => (format!("leaky-bucket {limit}/{window_ms}ms").parse().unwrap(),
                State::LeakyBucket(LeakyBucketState { level: big, last: a })),
            "leaky-queue" => (format!("leaky-queue {limit}/{window_ms}ms").parse().unwrap(),
                State::LeakyQueue(LeakyQueueState { last_departure: big })),
            "sliding-window" => (format!("sliding-window {limit}/{window_ms}ms").parse().unwrap(),
                State::SlidingWindow(SlidingWindowState { window: a, prev: b, cur: c })),
            _ => (format!("fixed-window {limit}/{window_ms}ms").parse().unwrap(),
                State::FixedWindow(FixedWindowState { window: a, count: b })),
        };
        for cost in [cost % (limit + 1), 0, 1.min(limit), cost] {
            // Any answer will do (a cost above the capacity is an error); the entry points
            // must agree on it.
            let _answer = decide_all_ways(&p, &Some(state.clone()), now, cost)?;
        }
    }

    /// Time going backwards never admits more than the same requests at the later time.
    #[test]
    fn time_going_back_never_over_admits(
        alg in prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket", "leaky-queue", "sliding-window", "fixed-window", "sliding-log"]),
        limit in 1u64..10, window_ms in 1u64..1_000, t in trace(2), back_ms in 1u64..5_000,
    ) {
        let p: Policy = format!("{alg} {limit}/{window_ms}ms").parse().unwrap();
        let mut state: Option<State> = None;
        let mut now = 0;
        for &(at, c) in &t {
            let (_, s) = decide(&p, state.take(), at, c.min(limit)).unwrap();
            state = s;
            now = at;
        }
        let earlier = now.saturating_sub(back_ms * NANOS_PER_MS);
        let (at_now, _) = decide(&p, state.clone(), now, 0).unwrap();
        let (at_earlier, _) = decide(&p, state, earlier, 0).unwrap();
        prop_assert!(at_earlier.remaining <= at_now.remaining,
            "{p}: {} remaining at an earlier time vs {} now", at_earlier.remaining, at_now.remaining);
    }

    /// The compact grammar round-trips through Display.
    #[test]
    fn policy_display_round_trips(
        alg in prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket", "leaky-queue", "sliding-window", "fixed-window", "sliding-log", "concurrency"]),
        limit in 1u64..1_000_000, window_ms in 1u64..=31_622_400_000, burst in 1u64..1_000_000,
    ) {
        let text = match alg {
            "concurrency" => format!("concurrency {limit}"),
            a if a.contains("window") || a.contains("log") => format!("{a} {limit}/{window_ms}ms"),
            a => format!("{a} {limit}/{window_ms}ms burst {burst}"),
        };
        let p: Policy = text.parse().unwrap();
        let again: Policy = p.to_string().parse().unwrap();
        prop_assert_eq!(p, again);
    }

    /// Parsing arbitrary text never panics, and every error names a field and a rule.
    #[test]
    fn parsing_never_panics(text in ".{0,60}") {
        if let Err(e) = text.parse::<Policy>() {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

/// One trace of plan switches for [`switching_plans_never_admits_more_than_the_largest_plan`]:
/// each step waits `dt` ms, switches plan if asked (carrying the state), and asks for `cost`.
/// Returns the admitted requests as `(t in ms, cost)`.
fn admitted_while_switching(
    plans: [&Policy; 2],
    steps: &[(u64, bool, u64)],
) -> Result<Vec<(u64, u64)>, TestCaseError> {
    let mut on = 0;
    let mut state = None;
    let mut t = 0u64;
    let mut admitted = Vec::new();
    for &(dt, switch, cost) in steps {
        t += dt;
        let now = t * NANOS_PER_MS;
        if switch {
            state = tollgate::carry::carry(plans[on], state, plans[1 - on], now).unwrap();
            on = 1 - on;
        }
        if cost > plans[on].limit() {
            continue;
        }
        let (d, next) = decide(plans[on], state, now, cost).unwrap();
        state = next;
        if d.allowed {
            admitted.push((t, cost));
        }
    }
    Ok(admitted)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Switching a key between a free plan (10/min) and a pro plan (100/min) of the same
    /// algorithm, in any order and as often as it likes, never admits more in any interval
    /// than the pro plan alone allows: a bucket `C + r*T` over `[t_i, t_j]`, a fixed window
    /// its limit within one window (`carry`'s argument, in its module docs).
    #[test]
    fn switching_plans_never_admits_more_than_the_largest_plan(
        alg in prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket", "fixed-window"]),
        steps in prop::collection::vec((0u64..3_000, prop::bool::weighted(0.3), 1u64..=12), 1..120),
    ) {
        let free: Policy = format!("{alg} 10/min").parse().unwrap();
        let pro: Policy = format!("{alg} 100/min").parse().unwrap();
        let admitted = admitted_while_switching([&free, &pro], &steps)?;
        let minute = 60_000u64;
        for (i, &(ti, _)) in admitted.iter().enumerate() {
            for &(tj, _) in &admitted[i..] {
                let total: u64 = admitted.iter().filter(|(t, _)| (ti..=tj).contains(t)).map(|(_, c)| c).sum();
                let bound = if alg == "fixed-window" {
                    if ti / minute != tj / minute { continue }
                    100
                } else {
                    100 + 100 * (tj - ti) / minute
                };
                prop_assert!(total <= bound, "{alg}: {total} admitted in [{ti}, {tj}] ms, bound {bound}");
            }
        }
    }

    /// A carry never lowers what was spent: the spend read back under the new policy is at
    /// least the old one's (rounded up), whatever the two policies.
    #[test]
    fn a_carry_never_lowers_the_spend(
        a in prop::sample::select(vec!["10/min", "gcra 7/s burst 3", "leaky-bucket 50/h", "leaky-queue 5/s", "fixed-window 10/min", "sliding-window 20/10s", "sliding-log 5/s"]),
        b in prop::sample::select(vec!["100/min", "gcra 70/s", "leaky-bucket 5/h", "leaky-queue 50/s burst 9", "fixed-window 3/min", "sliding-window 200/10s", "sliding-log 50/2s"]),
        costs in prop::collection::vec((0u64..5_000, 1u64..=3), 1..30),
        now_ms in 0u64..100_000,
    ) {
        let (a, b): (Policy, Policy) = (a.parse().unwrap(), b.parse().unwrap());
        let mut state = None;
        let mut t = 0;
        for (dt, cost) in costs {
            t += dt;
            state = decide(&a, state, t * NANOS_PER_MS, cost).unwrap().1;
        }
        let now = (t + now_ms) * NANOS_PER_MS;
        let before = tollgate::carry::spent(&a, &state, now).unwrap();
        let carried = tollgate::carry::carry(&a, state, &b, now).unwrap();
        prop_assert!(tollgate::carry::spent(&b, &carried, now).unwrap() >= before);
    }
}
