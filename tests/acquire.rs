//! Waiting for a turn (`KeyedLimiter::acquire_with`) on a virtual clock: exact wake-up times
//! for every algorithm, give-ups that come at once when the deadline cannot be met, nothing
//! charged by a dropped waiter, and many waiters on one key served one decision at a time,
//! in arrival order.
//!
//! The clock here moves only when every task is asleep: then it jumps to the earliest timer
//! and wakes it (a discrete-event simulation), so every time asserted is exact.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use tollgate::fair_share::FairShare;
use tollgate::keyed::{AcquireError, KeyedLimiter, Wait};
use tollgate::{DecideError, Nanos, NANOS_PER_MS};

const fn ms(n: u64) -> Nanos {
    n * NANOS_PER_MS
}

fn limiter(policy: &str) -> KeyedLimiter {
    KeyedLimiter::new(policy.parse().unwrap(), NonZeroUsize::new(1000).unwrap())
}

/// Virtual time: a clock and the timers of the sleeping tasks.
#[derive(Default)]
struct Clock {
    now: Cell<Nanos>,
    /// `(wake at, order of registration, waker)`
    timers: RefCell<Vec<(Nanos, u64, Waker)>>,
    registered: Cell<u64>,
    /// Sleeps asked for, in all.
    sleeps: Cell<u32>,
}

impl Clock {
    fn now(&self) -> Nanos {
        self.now.get()
    }

    /// A future that completes `d` later on this clock.
    fn sleep(&self, d: Nanos) -> Sleep<'_> {
        self.sleeps.set(self.sleeps.get() + 1);
        Sleep {
            clock: self,
            at: self.now().saturating_add(d),
        }
    }

    /// Moves to the earliest timer and wakes the timers due then; false if there is none.
    fn advance(&self) -> bool {
        let mut timers = self.timers.borrow_mut();
        let Some(at) = timers.iter().map(|t| t.0).min() else {
            return false;
        };
        self.now.set(at);
        let mut due: Vec<_> = timers.iter().filter(|t| t.0 == at).cloned().collect();
        timers.retain(|t| t.0 != at);
        drop(timers);
        due.sort_by_key(|t| t.1);
        for (_, _, waker) in due {
            waker.wake();
        }
        true
    }
}

struct Sleep<'a> {
    clock: &'a Clock,
    at: Nanos,
}

impl Future for Sleep<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.clock.now() >= self.at {
            return Poll::Ready(());
        }
        let n = self.clock.registered.get();
        self.clock.registered.set(n + 1);
        self.clock
            .timers
            .borrow_mut()
            .push((self.at, n, cx.waker().clone()));
        Poll::Pending
    }
}

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Runs `tasks` to completion on `clock`, polling them in order (woken tasks only), and
/// moving the clock only when none can make progress. `drop_at` drops task `i` when the
/// clock reaches `t` (before polling anything at `t`).
fn run<'a>(clock: &Clock, tasks: Vec<Task<'a>>, drop_at: &[(usize, Nanos)]) {
    let mut tasks: Vec<Option<(Task<'a>, Arc<Flag>)>> = tasks
        .into_iter()
        .map(|t| Some((t, Arc::new(Flag(AtomicBool::new(true))))))
        .collect();
    loop {
        for &(i, t) in drop_at {
            if clock.now() >= t {
                tasks[i] = None;
            }
        }
        let mut progressed = true;
        while progressed {
            progressed = false;
            for slot in tasks.iter_mut() {
                let Some((task, flag)) = slot else { continue };
                if !flag.0.swap(false, Ordering::SeqCst) {
                    continue;
                }
                progressed = true;
                let waker = Waker::from(flag.clone());
                if task
                    .as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_ready()
                {
                    *slot = None;
                }
            }
        }
        if tasks.iter().all(Option::is_none) || !clock.advance() {
            break;
        }
    }
}

/// What each waiter got: `Ok(time it resolved)` or the error, in task order.
type Outcomes = Rc<RefCell<Vec<Option<Result<Nanos, AcquireError>>>>>;

/// `n` waiters on `key`, all arriving at the clock's current time in task order.
fn waiters<'a>(
    l: &'a KeyedLimiter,
    clock: &'a Clock,
    n: usize,
    wait: Wait<'static>,
    out: &Outcomes,
) -> Vec<Task<'a>> {
    out.borrow_mut().resize(n, None);
    (0..n)
        .map(|i| {
            let out = out.clone();
            Box::pin(async move {
                let r = l
                    .acquire_with("k", wait, || clock.now(), |d| clock.sleep(d))
                    .await;
                out.borrow_mut()[i] = Some(r.map(|_| clock.now()));
            }) as Task<'a>
        })
        .collect()
}

fn admitted_at(out: &Outcomes) -> Vec<u64> {
    out.borrow()
        .iter()
        .map(|r| r.unwrap().unwrap() / NANOS_PER_MS)
        .collect()
}

#[test]
fn five_waiters_wake_at_each_algorithms_exact_times() {
    let cases: &[(&str, [Nanos; 5])] = &[
        (
            "token-bucket 10/s burst 2",
            [0, 0, ms(100), ms(200), ms(300)],
        ),
        ("gcra 10/s burst 2", [0, 0, ms(100), ms(200), ms(300)]),
        (
            "leaky-bucket 10/s burst 2",
            [0, 0, ms(100), ms(200), ms(300)],
        ),
        ("fixed-window 2/s", [0, 0, ms(1000), ms(1000), ms(2000)]),
        ("sliding-log 2/s", [0, 0, ms(1000), ms(1000), ms(2000)]),
        // The sliding counter admits when `prev * (W - elapsed) + cur * W < limit * W`: one
        // nanosecond into the next window (prev 2, cur 0), then past its middle (cur 1),
        // then one nanosecond into the window after (prev 2 again).
        (
            "sliding-window 2/s",
            [0, 0, ms(1000) + 1, ms(1500) + 1, ms(2000) + 1],
        ),
        // A shaper: each leaves 100 ms after the one before (the queue holds 2; the third is
        // admitted at 100 ms, when there is room, and leaves at 300 ms).
        (
            "leaky-queue 10/s burst 2",
            [ms(100), ms(200), ms(300), ms(400), ms(500)],
        ),
    ];
    for &(policy, expected) in cases {
        let l = limiter(policy);
        let clock = Clock::default();
        let out = Outcomes::default();
        run(
            &clock,
            waiters(&l, &clock, 5, Wait::new(1, ms(10_000)), &out),
            &[],
        );
        let times: Vec<Nanos> = out.borrow().iter().map(|r| r.unwrap().unwrap()).collect();
        assert_eq!(times, expected, "{policy}");
        // Each waiter slept at most once to its retry time (and once more for the queue's
        // delay): none woke to a denial.
        let bound = if policy.starts_with("leaky-queue") {
            10
        } else {
            5
        };
        assert!(
            clock.sleeps.get() <= bound,
            "{policy}: {} sleeps",
            clock.sleeps.get()
        );
    }
}

#[test]
fn a_hundred_waiters_on_a_10_per_second_key_are_admitted_at_10_per_second_in_order() {
    let l = limiter("gcra 10/s burst 1");
    let clock = Clock::default();
    let out = Outcomes::default();
    run(
        &clock,
        waiters(&l, &clock, 100, Wait::new(1, u64::MAX), &out),
        &[],
    );
    let times = admitted_at(&out);
    // Waiter i (in arrival order) at exactly i x 100 ms: in order, and none early.
    assert_eq!(times, (0..100).map(|i| i * 100).collect::<Vec<_>>());
    // One sleep per waiter after the first (to its retry time, once it is the head), and no
    // more: the line is woken one decision at a time.
    assert_eq!(clock.sleeps.get(), 99);
}

#[test]
fn the_same_hundred_with_a_deadline_admit_those_that_fit_and_time_the_rest_out() {
    let l = limiter("gcra 10/s burst 1");
    let clock = Clock::default();
    let out = Outcomes::default();
    run(
        &clock,
        waiters(&l, &clock, 100, Wait::new(1, ms(1000)), &out),
        &[],
    );
    let out = out.borrow();
    for (i, r) in out.iter().enumerate() {
        match r.unwrap() {
            Ok(t) => assert_eq!((i, t), (i, ms(i as u64 * 100)), "waiter {i}"),
            Err(AcquireError::Timeout { waited, .. }) => {
                assert!(i > 10, "waiter {i} timed out");
                assert_eq!(waited, ms(1000), "waiter {i} gave up at its deadline");
            }
            Err(e) => panic!("waiter {i}: {e}"),
        }
    }
    assert_eq!(out.iter().filter(|r| r.unwrap().is_ok()).count(), 11);
    // 11 admissions at 0, 100, ..., 1000 ms: the key is charged for those only.
    assert_eq!(l.check("k", ms(1000), 1).unwrap().retry_after, ms(100));
}

#[test]
fn a_deadline_shorter_than_the_retry_time_times_out_at_once_and_charges_nothing() {
    let l = limiter("10/s burst 1");
    let clock = Clock::default();
    l.check("k", 0, 1).unwrap();
    let out = Outcomes::default();
    run(
        &clock,
        waiters(&l, &clock, 1, Wait::new(1, ms(99)), &out),
        &[],
    );
    assert_eq!(
        out.borrow()[0].unwrap(),
        Err(AcquireError::Timeout {
            waited: 0,
            retry_after: ms(100)
        })
    );
    assert_eq!(clock.now(), 0);
    assert_eq!(
        clock.sleeps.get(),
        0,
        "no sleep to a deadline it cannot meet"
    );
    // Nothing charged: the token is back at 100 ms, as before.
    assert!(l.check("k", ms(100), 1).unwrap().allowed);
}

#[test]
fn a_waiter_behind_others_gives_up_at_once_when_the_key_alone_is_too_late() {
    let l = limiter("fixed-window 1/s");
    let clock = Clock::default();
    let out = Outcomes::default();
    // The first is admitted at 0; the second waits (deadline 2 s) for the next window; the
    // third (deadline 500 ms) arrives behind it: the key alone needs 1 s, so it gives up now.
    let mut tasks = waiters(&l, &clock, 2, Wait::new(1, ms(2000)), &out);
    out.borrow_mut().push(None);
    let third = out.clone();
    let (lr, cr) = (&l, &clock);
    tasks.push(Box::pin(async move {
        let r = lr
            .acquire_with("k", Wait::new(1, ms(500)), || cr.now(), |d| cr.sleep(d))
            .await;
        third.borrow_mut()[2] = Some(r.map(|_| cr.now()));
    }));
    run(&clock, tasks, &[]);
    let out = out.borrow();
    assert_eq!(out[0].unwrap(), Ok(0));
    assert_eq!(out[1].unwrap(), Ok(ms(1000)));
    assert_eq!(
        out[2].unwrap(),
        Err(AcquireError::Timeout {
            waited: 0,
            retry_after: ms(1000)
        })
    );
}

#[test]
fn dropping_a_waiter_mid_wait_charges_nothing_and_lets_the_next_one_go() {
    let l = limiter("gcra 10/s burst 1");
    let clock = Clock::default();
    let out = Outcomes::default();
    // Three waiters at 0: the first is admitted, the second (the head) sleeps to 100 ms and
    // is dropped at 50 ms; the third takes its turn at 100 ms.
    run(
        &clock,
        waiters(&l, &clock, 3, Wait::new(1, ms(10_000)), &out),
        &[(1, ms(50))],
    );
    let out = out.borrow();
    assert_eq!(out[0].unwrap(), Ok(0));
    assert_eq!(out[1], None, "dropped");
    assert_eq!(out[2].unwrap(), Ok(ms(100)));
    // Two charges in all: the next token is at 200 ms.
    assert_eq!(l.check("k", ms(100), 1).unwrap().retry_after, ms(100));
}

#[test]
fn dropping_a_waiter_in_line_charges_nothing() {
    let l = limiter("gcra 10/s burst 1");
    let clock = Clock::default();
    let out = Outcomes::default();
    // The third (in line behind the sleeping head) is dropped at 50 ms.
    run(
        &clock,
        waiters(&l, &clock, 4, Wait::new(1, ms(10_000)), &out),
        &[(2, ms(50))],
    );
    let out = out.borrow();
    assert_eq!(out[0].unwrap(), Ok(0));
    assert_eq!(out[1].unwrap(), Ok(ms(100)));
    assert_eq!(out[2], None);
    assert_eq!(out[3].unwrap(), Ok(ms(200)));
}

#[test]
fn dropping_every_waiter_leaves_the_key_as_it_was() {
    let l = limiter("gcra 10/s burst 1");
    l.check("k", 0, 1).unwrap();
    let clock = Clock::default();
    let out = Outcomes::default();
    let drop_all: Vec<_> = (0..5).map(|i| (i, ms(60))).collect();
    run(
        &clock,
        waiters(&l, &clock, 5, Wait::new(1, ms(10_000)), &out),
        &drop_all,
    );
    assert!(out.borrow().iter().all(Option::is_none));
    // No charge, and the line is empty: a new waiter is the head and is admitted at 100 ms.
    assert_eq!(l.check("k", ms(60), 0).unwrap().retry_after, 0);
    let out = Outcomes::default();
    run(
        &clock,
        waiters(&l, &clock, 1, Wait::new(1, ms(10_000)), &out),
        &[],
    );
    assert_eq!(out.borrow()[0].unwrap(), Ok(ms(100)));
}

#[test]
fn the_leaky_queue_delay_counts_against_the_deadline_and_is_not_charged_when_it_misses() {
    let l = limiter("leaky-queue 10/s burst 5");
    let clock = Clock::default();
    let out = Outcomes::default();
    run(
        &clock,
        waiters(&l, &clock, 4, Wait::new(1, ms(250)), &out),
        &[],
    );
    let out = out.borrow();
    assert_eq!(out[0].unwrap(), Ok(ms(100)));
    assert_eq!(out[1].unwrap(), Ok(ms(200)));
    // The third would leave at 300 ms: past its deadline, given up at once, not queued.
    let missed = Err(AcquireError::Timeout {
        waited: 0,
        retry_after: ms(300),
    });
    assert_eq!(out[2].unwrap(), missed);
    assert_eq!(out[3].unwrap(), missed);
    // Two in the queue: at 0 three slots of five were still free.
    assert_eq!(l.check("k", 0, 0).unwrap().remaining, 3);
}

#[test]
fn jitter_lengthens_each_sleep_but_spends_at_most_half_the_slack() {
    let l = limiter("gcra 10/s burst 1");
    l.check("k", 0, 1).unwrap();
    let clock = Clock::default();
    let out = Outcomes::default();
    run(
        &clock,
        waiters(&l, &clock, 1, Wait::new(1, ms(500)).jitter(ms(7)), &out),
        &[],
    );
    assert_eq!(out.borrow()[0].unwrap(), Ok(ms(107)));
    let out = Outcomes::default();
    // The next token at 207 ms (100 ms from now), the deadline 120 ms from now, 50 ms of
    // jitter drawn: it sleeps 110 ms (half the 20 ms of slack is jitter, half left for a
    // late timer), not 150, nor 120 onto the deadline.
    run(
        &clock,
        waiters(&l, &clock, 1, Wait::new(1, ms(120)).jitter(ms(50)), &out),
        &[],
    );
    assert_eq!(out.borrow()[0].unwrap(), Ok(ms(217)));
}

/// The repro on the keyed limiter: a retry time of 2 s fits a 2.5 s deadline, the
/// caller draws 60 s of jitter, and every timer fires 45 ms late. The jittered sleep was
/// clamped onto the deadline, so the late wake missed it and the wait gave up.
#[test]
fn a_wait_that_fits_with_heavy_jitter_and_late_timers_is_admitted() {
    let l = limiter("gcra 1/2s burst 1");
    l.check("k", 0, 1).unwrap();
    let clock = Clock::default();
    let late = ms(45);
    let result = Rc::new(Cell::new(None));
    let wait = Wait::new(1, ms(2_500)).jitter(ms(60_000));
    let task = {
        let (l, clock, result) = (&l, &clock, result.clone());
        Box::pin(async move {
            let r = l
                .acquire_with("k", wait, || clock.now(), |d| clock.sleep(d + late))
                .await;
            result.set(Some(r.map(|_| clock.now())));
        }) as Task<'_>
    };
    run(&clock, vec![task], &[]);
    // Slept 2,000 + 250 (half the slack), woke 45 ms late: 2,295 ms, admitted.
    assert_eq!(result.get(), Some(Ok(ms(2_295))));
    assert_eq!(l.check("k", ms(2_295), 0).unwrap().remaining, 0);
}

#[test]
fn a_cost_above_the_capacity_is_an_error_at_once_never_a_wait() {
    let l = limiter("10/s");
    let clock = Clock::default();
    let out = Outcomes::default();
    run(
        &clock,
        waiters(&l, &clock, 1, Wait::new(11, u64::MAX), &out),
        &[],
    );
    assert_eq!(
        out.borrow()[0].unwrap(),
        Err(AcquireError::Decide(DecideError::CostExceedsCapacity {
            cost: 11,
            capacity: 10
        }))
    );
    assert_eq!(clock.sleeps.get(), 0);
}

#[test]
fn a_full_concurrency_limit_gives_up_at_once_no_clock_can_say_when_a_slot_frees() {
    let l = limiter("concurrency 2");
    let clock = Clock::default();
    let out = Outcomes::default();
    run(
        &clock,
        waiters(&l, &clock, 3, Wait::new(1, ms(1000)), &out),
        &[],
    );
    let out = out.borrow();
    assert_eq!(out[0].unwrap(), Ok(0));
    assert_eq!(out[1].unwrap(), Ok(0));
    assert_eq!(
        out[2].unwrap(),
        Err(AcquireError::Timeout {
            waited: 0,
            retry_after: 0
        })
    );
}

#[test]
fn tenants_wait_in_their_own_lines() {
    let l: KeyedLimiter = KeyedLimiter::fair_share(
        FairShare::new("10/s".parse().unwrap(), "gcra 1/s burst 1".parse().unwrap()).unwrap(),
        NonZeroUsize::new(100).unwrap(),
    );
    let clock = Clock::default();
    let got: Rc<RefCell<Vec<(&str, Nanos)>>> = Rc::default();
    let tasks: Vec<Task<'_>> = ["acme", "acme", "globex"]
        .into_iter()
        .map(|tenant| {
            let (l, clock, got) = (&l, &clock, got.clone());
            Box::pin(async move {
                l.acquire_with(
                    "dns",
                    Wait::new(1, ms(5000)).tenant(tenant),
                    || clock.now(),
                    |d| clock.sleep(d),
                )
                .await
                .unwrap();
                got.borrow_mut().push((tenant, clock.now()));
            }) as Task<'_>
        })
        .collect();
    run(&clock, tasks, &[]);
    // globex does not wait behind acme's second request.
    assert_eq!(
        *got.borrow(),
        [("acme", 0), ("globex", 0), ("acme", ms(1000))]
    );
}

#[cfg(feature = "tokio")]
#[test]
fn the_tokio_version_paces_real_waiters_in_arrival_order_none_early() {
    // Real time: only the order and "none early" are asserted (no upper bound, the machine
    // may be slow).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let l = Arc::new(limiter("gcra 50/s burst 1")); // one every 20 ms
    let start = tollgate::keyed::unix_now();
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    rt.block_on(async {
        let mut handles = Vec::new();
        for i in 0..5u64 {
            let (l, got) = (l.clone(), got.clone());
            handles.push(tokio::spawn(async move {
                l.acquire("k", 1, ms(10_000)).await.unwrap();
                got.lock()
                    .unwrap()
                    .push((i, tollgate::keyed::unix_now() - start));
            }));
            // Arrivals in a known order: each spawned task joins the line before the next.
            tokio::task::yield_now().await;
        }
        for h in handles {
            h.await.unwrap();
        }
    });
    let got = got.lock().unwrap();
    for (n, &(i, t)) in got.iter().enumerate() {
        assert_eq!(i, n as u64, "arrival order");
        assert!(
            t >= ms(20 * i),
            "waiter {i} admitted at {t} ns, before {} ms",
            20 * i
        );
    }
}

// ---------------------------------------------------------------- waiting for an estimate

#[test]
fn waiters_for_an_estimate_are_served_in_order_and_each_settles_its_own() {
    // 1,000 a minute (GCRA, burst 1,000); three calls estimated at 600, in one line.
    let l = limiter("gcra 1000/min");
    let clock = Clock::default();
    let got: Rc<RefCell<Vec<(Nanos, tollgate::settle::Reservation)>>> = Rc::default();
    let tasks = (0..3)
        .map(|_| {
            let (l, clock, got) = (&l, &clock, got.clone());
            Box::pin(async move {
                let (d, r) = l
                    .acquire_reserve_with(
                        "k",
                        Wait::new(600, ms(120_000)),
                        || clock.now(),
                        |d| clock.sleep(d),
                    )
                    .await
                    .unwrap();
                assert!(d.allowed);
                got.borrow_mut().push((clock.now(), r));
            }) as Task<'_>
        })
        .collect();
    run(&clock, tasks, &[]);
    let got = got.take();
    // At 0 the first; 400 left, the second waits for 200 more (12 s), the third for 600
    // more after it (36 s later).
    let times: Vec<Nanos> = got.iter().map(|g| g.0 / NANOS_PER_MS).collect();
    assert_eq!(times, [0, 12_000, 48_000]);
    // Each reservation is its own: settling one to 0 gives back its 600.
    let (at, r) = got.into_iter().nth(2).unwrap();
    assert_eq!(r.at, at);
    let done = l.settle("k", r, 0, at, tollgate::Overage::Debt).unwrap();
    assert_eq!(done.refunded, 600);
    assert_eq!(l.peek("k", at).unwrap().remaining, 600);
}

#[test]
fn an_estimate_that_cannot_fit_by_the_deadline_gives_up_at_once_charging_nothing() {
    let l = limiter("fixed-window 100/min");
    let r = block_on_clock(&l, 80, ms(1_000));
    assert!(r.is_ok());
    // 20 left; 80 more fit only in the next minute, past a 1 s deadline.
    let err = block_on_clock(&l, 80, ms(1_000)).unwrap_err();
    assert!(
        matches!(err, AcquireError::Timeout { waited: 0, .. }),
        "{err:?}"
    );
    assert_eq!(l.peek("k", 0).unwrap().remaining, 20);
}

#[test]
fn a_leaky_queue_refuses_to_wait_for_an_estimate() {
    let l = limiter("leaky-queue 10/s burst 5");
    let err = block_on_clock(&l, 1, ms(1_000)).unwrap_err();
    assert_eq!(
        err,
        AcquireError::Reservation(tollgate::ReservationError::NotSettleable {
            policy: tollgate::Algorithm::LeakyQueue
        })
    );
}

/// One `acquire_reserve_with` of `cost` on key `k` at time 0, on a clock of its own.
fn block_on_clock(
    l: &KeyedLimiter,
    cost: u64,
    max_wait: Nanos,
) -> Result<tollgate::settle::Reservation, AcquireError> {
    let clock = Clock::default();
    let out: Rc<RefCell<Option<Result<tollgate::settle::Reservation, AcquireError>>>> =
        Rc::default();
    let task = {
        let (clock, out) = (&clock, out.clone());
        Box::pin(async move {
            let r = l
                .acquire_reserve_with(
                    "k",
                    Wait::new(cost, max_wait),
                    || clock.now(),
                    |d| clock.sleep(d),
                )
                .await;
            *out.borrow_mut() = Some(r.map(|(_, r)| r));
        }) as Task<'_>
    };
    run(&clock, vec![task], &[]);
    out.take().unwrap()
}
