//! A stack of any size decides within a small, fixed call stack: the depth of the call stack
//! never depends on how many limits a caller stacks (tollgate-rls takes them from a
//! request's descriptors). Each stack is decided on a thread of 64 KiB, so a rule that
//! recursed once per limit would overflow it (and abort the test binary) at these sizes.

use std::num::NonZeroUsize;

use tollgate::keyed::KeyedLimiter;
use tollgate::stack::decide_all;
use tollgate::store::{Batch, Limits};
use tollgate::{Policy, State};

/// The sizes the tests decide: the small stacks every config has, and one far deeper than
/// any call stack could hold a frame per limit of.
const SIZES: [usize; 4] = [1, 2, 64, 100_000];

/// A stack of `n` limits: `n - 1` roomy sliding logs (a state on the heap: the copies the
/// rule decides on are real allocations), then one fixed window of 2 that binds.
fn stack(n: usize) -> Vec<Policy> {
    let roomy: Policy = "sliding-log 100/min".parse().unwrap();
    let tight: Policy = "fixed-window 2/min".parse().unwrap();
    (0..n)
        .map(|i| if i + 1 == n { tight } else { roomy })
        .collect()
}

/// Runs `f` on a thread whose stack is 64 KiB, and returns what it returns.
fn on_small_stack<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(f)
        .unwrap()
        .join()
        .expect("the decision ran out of stack or panicked")
}

#[test]
fn a_stack_of_any_size_decides_all_or_nothing_on_a_small_stack() {
    for n in SIZES {
        let spent = on_small_stack(move || {
            let policies = stack(n);
            let mut states: Vec<Option<State>> = vec![None; n];
            let decide = |states: &mut Vec<Option<State>>| {
                let mut limits: Vec<(&Policy, &mut Option<State>)> =
                    policies.iter().zip(states.iter_mut()).collect();
                decide_all(&mut limits, 0, 1).unwrap()
            };
            let admitted = (0..2).all(|_| decide(&mut states).decision.allowed);
            let before = states.clone();
            let third = decide(&mut states);
            // Denied by the last limit alone; nothing charged anywhere.
            let denied_by: Vec<usize> = third.denied_by().collect();
            (
                admitted,
                third.decision.allowed,
                denied_by,
                states == before,
            )
        });
        assert_eq!(spent, (true, false, vec![n - 1], true), "a stack of {n}");
    }
}

#[test]
fn a_keyed_stack_of_any_size_decides_on_a_small_stack() {
    for n in SIZES {
        let remaining = on_small_stack(move || {
            let limiter: KeyedLimiter<u32> =
                KeyedLimiter::stack(&stack(n), NonZeroUsize::new(16).unwrap()).unwrap();
            let verdicts: Vec<bool> = (0..3)
                .map(|_| limiter.check(&7, 0, 1).unwrap().allowed)
                .collect();
            let standing = limiter.check_detailed(&7, None, 0, 0).unwrap();
            (verdicts, standing.each[0].remaining, standing.each.len())
        });
        // The first limit (for n > 1 a roomy log) was charged twice: 98 of 100 left.
        let first = if n == 1 { 0 } else { 98 };
        assert_eq!(
            remaining,
            (vec![true, true, false], first, n),
            "a stack of {n}"
        );
    }
}

#[test]
fn a_store_batch_of_any_size_decides_on_a_small_stack() {
    for n in SIZES {
        let outcome = on_small_stack(move || {
            let limits = Limits::stack(&stack(n)).unwrap();
            let slots = limits.slots(None);
            let mut batch = Batch::new(&limits, &slots, vec![None; n], 0);
            let admitted: Vec<bool> = (0..3)
                .map(|_| batch.decide(1).unwrap().decision.allowed)
                .collect();
            (admitted, batch.writes().count())
        });
        assert_eq!(outcome, (vec![true, true, false], n), "a stack of {n}");
    }
}
