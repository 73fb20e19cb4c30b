//! The line of waiters and the whole wait, for any way of deciding: [`wait_in_line`].
//!
//! The keyed limiter ([`crate::keyed::KeyedLimiter::acquire_with`]) and the Redis limiter
//! (`tollgate_redis::RedisLimiter::acquire`) both wait through it, so they serve a key's
//! waiters, sleep, give up and keep charges by one rule: the [module's](super).

use alloc::collections::VecDeque;
use core::future::{poll_fn, Future};
use core::hash::Hash;
use core::pin::pin;
use core::sync::atomic::{AtomicU64, Ordering};
use core::task::{Poll, Waker};
use hashbrown::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::{keeps, left, retry_time, step, Step};
use crate::{Decision, Nanos};

/// What [`wait_in_line`] asks of its `decide` function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ask {
    /// Decide the request, and keep its charge only if [`keeps`] accepts the decision with
    /// `left` (the time the waiter has before its deadline, as it was asked).
    Charge {
        /// The time left before the deadline.
        left: Nanos,
    },
    /// Decide the request without keeping anything: what the key alone answers now (for a
    /// waiter behind others, or one whose deadline has passed).
    Look,
}

impl Ask {
    /// Whether a decision asked this way may be committed (see [`keeps`]; a look never is).
    pub const fn keeps(self, decision: &Decision) -> bool {
        match self {
            Ask::Charge { left } => keeps(decision, Some(left)),
            Ask::Look => false,
        }
    }
}

/// How [`wait_in_line`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Turn<T> {
    /// Admitted and charged: what `decide` returned with the admitting decision (after its
    /// queue delay was slept).
    Admitted(T),
    /// The request could not proceed by its deadline; nothing was charged. `waited` is how
    /// long it waited (less than the deadline when the key's retry time was beyond it);
    /// `retry_after` the key's own retry time, from now (0 for a full concurrency limit).
    TimedOut {
        /// Time spent waiting.
        waited: Nanos,
        /// See [`retry_time`].
        retry_after: Nanos,
    },
}

/// A waiter in a line: its number, and how to wake it when it becomes the head.
struct Entry {
    id: u64,
    waker: Option<Waker>,
}

/// Lines of waiters, one per `L` (a key, or a key and tenant): only lines with waiters are
/// kept. Waiters of one line are served in arrival order, one decision at a time.
pub struct Lines<L> {
    lines: Mutex<HashMap<L, VecDeque<Entry>>>,
    next: AtomicU64,
}

impl<L> Default for Lines<L> {
    fn default() -> Self {
        Lines {
            lines: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        }
    }
}

impl<L: Hash + Eq> Lines<L> {
    /// The lines, locked. No code panics while holding the lock; should one, the lines are
    /// still consistent (each change is one push or remove), so a poisoned lock is used.
    fn lock(&self) -> MutexGuard<'_, HashMap<L, VecDeque<Entry>>> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of lines with waiters.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no one is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A place in a line; leaving it (dropping the ticket) wakes the next waiter if this one
/// was the head.
struct Ticket<'a, L: Hash + Eq> {
    lines: &'a Lines<L>,
    line: L,
    id: u64,
}

impl<'a, L: Hash + Eq + Clone> Ticket<'a, L> {
    /// Joins the back of `line`.
    fn join(lines: &'a Lines<L>, line: L) -> Self {
        let id = lines.next.fetch_add(1, Ordering::Relaxed);
        lines
            .lock()
            .entry(line.clone())
            .or_default()
            .push_back(Entry { id, waker: None });
        Ticket { lines, line, id }
    }

    /// Whether this waiter is the head of its line (registering to be woken when it
    /// becomes it).
    fn poll_head(&self, waker: Option<&Waker>) -> bool {
        let mut lines = self.lines.lock();
        let Some(line) = lines.get_mut(&self.line) else {
            return false; // cannot happen: the line holds this ticket until it is dropped
        };
        if line.front().map(|e| e.id) == Some(self.id) {
            return true;
        }
        if let (Some(waker), Some(entry)) = (waker, line.iter_mut().find(|e| e.id == self.id)) {
            entry.waker = Some(waker.clone());
        }
        false
    }
}

impl<L: Hash + Eq> Drop for Ticket<'_, L> {
    fn drop(&mut self) {
        let next = {
            let mut lines = self.lines.lock();
            let Some(line) = lines.get_mut(&self.line) else {
                return;
            };
            let at = line.iter().position(|e| e.id == self.id);
            if let Some(at) = at {
                line.remove(at);
            }
            if line.is_empty() {
                lines.remove(&self.line);
                None
            } else if at == Some(0) {
                line.front_mut().and_then(|e| e.waker.take())
            } else {
                None
            }
        };
        // Woken outside the lock: the next head takes it at once.
        if let Some(waker) = next {
            waker.wake();
        }
    }
}

/// Waits in `line` of `lines` until the request is admitted, or gives up by `max_wait`
/// (`u64::MAX`: as long as it takes), by the waiting rule of the [module](super):
///
/// * `clock()` reads the caller's clock in nanoseconds (only differences are used: how long
///   the request has waited);
/// * `sleep(d)` is a future that completes `d` nanoseconds later, on any runtime;
/// * `jitter()` draws the jitter added to each sleep (0 for none; see [`step`]);
/// * `decide(ask)` decides the request: with [`Ask::Charge`] it keeps the charge only if
///   [`Ask::keeps`] accepts the decision, with [`Ask::Look`] never. It returns the decision
///   and what the caller wants back on admission (`T`).
///
/// Only the head of a line decides; a waiter behind others first looks at the key, gives up
/// at once if the key alone makes it miss its deadline, and otherwise sleeps until it is the
/// head (woken when the one before it is admitted, gives up, or is dropped) or its deadline.
/// A wake after the deadline charges nothing ([`Ask::Look`]). Dropping the future charges
/// nothing, except while it sleeps an admitted request's queue delay. Errors of `decide`
/// end the wait at once.
pub async fn wait_in_line<L, T, E, C, S, SF, J, D, DF>(
    lines: &Lines<L>,
    line: L,
    max_wait: Nanos,
    clock: C,
    mut sleep: S,
    mut jitter: J,
    mut decide: D,
) -> Result<Turn<T>, E>
where
    L: Hash + Eq + Clone,
    C: Fn() -> Nanos,
    S: FnMut(Nanos) -> SF,
    SF: Future<Output = ()>,
    J: FnMut() -> Nanos,
    D: FnMut(Ask) -> DF,
    DF: Future<Output = Result<(Decision, T), E>>,
{
    let start = clock();
    let waited = || clock().saturating_sub(start);
    let ticket = Ticket::join(lines, line);
    // Whether the request has waited yet: until it has, its first decision is the call's
    // own, made at the call (a `max_wait` of 0 asks "admitted now?", whatever the time the
    // call itself takes, a Redis round trip included).
    let mut slept = false;
    if !ticket.poll_head(None) {
        slept = true;
        // Behind others. If the key alone already makes this request miss its deadline,
        // the line ahead can only make it later: give up now (nothing charged).
        let (decision, _) = decide(Ask::Look).await?;
        let now = waited();
        if let Step::GiveUp { retry_after } = step(&decision, now, max_wait, 0) {
            return Ok(Turn::TimedOut {
                waited: now,
                retry_after,
            });
        }
        // Sleep until this waiter is the head, or its deadline.
        let rest = max_wait.saturating_sub(now);
        let mut deadline = pin!(async {
            if rest < Nanos::MAX {
                sleep(rest).await
            } else {
                core::future::pending().await
            }
        });
        let head = poll_fn(|cx| {
            if ticket.poll_head(Some(cx.waker())) {
                Poll::Ready(true)
            } else if deadline.as_mut().poll(cx).is_ready() {
                Poll::Ready(false)
            } else {
                Poll::Pending
            }
        })
        .await;
        if !head {
            // The key's own retry time for this request.
            let (decision, _) = decide(Ask::Look).await?;
            return Ok(Turn::TimedOut {
                waited: waited(),
                retry_after: retry_time(&decision),
            });
        }
    }
    // The head: decide, sleep to the retry time, decide again, ...
    loop {
        let now = if slept { waited() } else { 0 };
        slept = true;
        let ask = match left(now, max_wait) {
            Some(left) => Ask::Charge { left },
            // A late wake: nothing may be kept; the key's retry time is reported.
            None => Ask::Look,
        };
        let (decision, answer) = decide(ask).await?;
        match step(&decision, now, max_wait, jitter()) {
            Step::Go { delay } => {
                // Admitted and charged: the next waiter may decide now (a leaky queue
                // places it behind this request).
                drop(ticket);
                if delay > 0 {
                    sleep(delay).await;
                }
                return Ok(Turn::Admitted(answer));
            }
            Step::Wait(d) => sleep(d).await,
            Step::GiveUp { retry_after } => {
                return Ok(Turn::TimedOut {
                    waited: now,
                    retry_after,
                })
            }
        }
    }
}
