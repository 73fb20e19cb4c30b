//! Waiting for a turn: [`KeyedLimiter::acquire_with`] (any runtime) and, with the `tokio`
//! feature, [`KeyedLimiter::acquire`].
//!
//! Each decision is followed by the core's waiting rule ([`crate::wait::step`]): admitted
//! (after the leaky queue's delay), sleep to the retry time, or give up at once when the
//! retry time is beyond the deadline, with [`AcquireError::Timeout`].
//!
//! How the waiters of one key are served, and what dropping a waiter charges: see
//! [`KeyedLimiter::acquire_with`].

use core::borrow::Borrow;
use core::hash::Hash;
#[cfg(feature = "acquire")]
use {
    alloc::boxed::Box,
    core::future::{poll_fn, Future},
    core::pin::pin,
    core::sync::atomic::{AtomicU64, Ordering},
    core::task::{Poll, Waker},
    hashbrown::HashMap,
    std::collections::VecDeque,
    std::sync::{Mutex, MutexGuard},
};

use super::KeyedLimiter;
use crate::wait::{step, Step};
use crate::{DecideError, Decision, Nanos};

/// What [`KeyedLimiter::acquire_with`] waits for: the cost, the deadline and the options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Wait<'a> {
    /// Units the request spends (1 for most requests).
    pub cost: u64,
    /// The longest the caller waits, from the call until the request may proceed (the
    /// leaky queue's delay included); `u64::MAX` for as long as it takes.
    pub max_wait: Nanos,
    /// The tenant, for a fair-share limiter (ignored by others). Waiters of different
    /// tenants are in different lines.
    pub tenant: Option<&'a str>,
    /// Added to every sleep, never past the deadline (see [`crate::wait`]): a random value
    /// the caller draws, to spread waiters of different processes. 0 for none.
    pub jitter: Nanos,
}

impl Wait<'static> {
    /// A request of `cost`, waiting at most `max_wait`; no tenant, no jitter.
    pub const fn new(cost: u64, max_wait: Nanos) -> Self {
        Wait {
            cost,
            max_wait,
            tenant: None,
            jitter: 0,
        }
    }
}

impl<'a> Wait<'a> {
    /// The same request on behalf of `tenant`.
    pub const fn tenant<'b>(self, tenant: &'b str) -> Wait<'b> {
        Wait {
            cost: self.cost,
            max_wait: self.max_wait,
            tenant: Some(tenant),
            jitter: self.jitter,
        }
    }

    /// The same request with `jitter` added to each sleep.
    pub const fn jitter(self, jitter: Nanos) -> Self {
        Wait { jitter, ..self }
    }
}

/// Why [`KeyedLimiter::acquire_with`] did not admit a request. Nothing was charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcquireError {
    /// The request could not proceed by its deadline. `waited` is how long it waited before
    /// giving up (less than the deadline when the retry time was beyond it: no one sleeps to
    /// a deadline it cannot meet); `retry_after` is the soonest, from now, the key itself
    /// would admit it (0 when no clock can say: a full concurrency limit), not counting the
    /// waiters ahead of it.
    Timeout {
        /// Time spent waiting.
        waited: Nanos,
        /// See [`crate::Decision::retry_after`].
        retry_after: Nanos,
    },
    /// A request that can never be decided as asked (a cost above the capacity).
    Decide(DecideError),
}

impl From<DecideError> for AcquireError {
    fn from(e: DecideError) -> Self {
        AcquireError::Decide(e)
    }
}

impl core::fmt::Display for AcquireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AcquireError::Timeout {
                waited,
                retry_after,
            } => write!(
                f,
                "rate limit wait timed out after {} ms (retry after {} ms)",
                crate::ceil_millis(*waited),
                crate::ceil_millis(*retry_after)
            ),
            AcquireError::Decide(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for AcquireError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            AcquireError::Timeout { .. } => None,
            AcquireError::Decide(e) => Some(e),
        }
    }
}

#[cfg(feature = "acquire")]
/// One line of waiters: its key and tenant.
type Line<K> = (K, Option<Box<str>>);

#[cfg(feature = "acquire")]
/// A waiter in a line: its number, and how to wake it when it becomes the head.
struct Entry {
    id: u64,
    waker: Option<Waker>,
}

#[cfg(feature = "acquire")]
/// The lines of waiters of one limiter, per key and tenant: only lines with waiters are kept.
pub(crate) struct Waiters<K> {
    lines: Mutex<HashMap<Line<K>, VecDeque<Entry>>>,
    next: AtomicU64,
}

#[cfg(feature = "acquire")]
impl<K> Default for Waiters<K> {
    fn default() -> Self {
        Waiters {
            lines: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        }
    }
}

#[cfg(feature = "acquire")]
impl<K: Hash + Eq> Waiters<K> {
    /// The lines, locked. No code panics while holding the lock; should one, the lines are
    /// still consistent (each change is one push or remove), so a poisoned lock is used.
    fn lock(&self) -> MutexGuard<'_, HashMap<Line<K>, VecDeque<Entry>>> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(feature = "acquire")]
/// A place in a line; leaving it (dropping the ticket) wakes the next waiter if this one
/// was the head.
struct Ticket<'a, K: Hash + Eq> {
    waiters: &'a Waiters<K>,
    line: Line<K>,
    id: u64,
}

#[cfg(feature = "acquire")]
impl<'a, K: Hash + Eq + Clone> Ticket<'a, K> {
    /// Joins the back of `line`.
    fn join(waiters: &'a Waiters<K>, line: Line<K>) -> Self {
        let id = waiters.next.fetch_add(1, Ordering::Relaxed);
        waiters
            .lock()
            .entry(line.clone())
            .or_default()
            .push_back(Entry { id, waker: None });
        Ticket { waiters, line, id }
    }

    /// Whether this waiter is the head of its line (registering to be woken when it
    /// becomes it).
    fn poll_head(&self, waker: Option<&Waker>) -> bool {
        let mut lines = self.waiters.lock();
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

#[cfg(feature = "acquire")]
impl<K: Hash + Eq> Drop for Ticket<'_, K> {
    fn drop(&mut self) {
        let next = {
            let mut lines = self.waiters.lock();
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

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// One step of waiting, without sleeping: decides the request at `now`, having waited
    /// `waited`, and applies the waiting rule ([`crate::wait::step`]) before the charge is
    /// kept: the request is charged only when the answer is [`Step::Go`]. For callers with
    /// their own timers and line of waiters (the npm package); [`Self::acquire_with`] is this
    /// step in a loop.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::keyed::{KeyedLimiter, Wait};
    /// use tollgate::wait::Step;
    /// use tollgate::NANOS_PER_MS;
    /// let ms = |n| n * NANOS_PER_MS;
    /// let limiter = KeyedLimiter::new("leaky-queue 10/s burst 5".parse().unwrap(), NonZeroUsize::MIN);
    /// let wait = Wait::new(1, ms(250));
    /// assert_eq!(limiter.try_acquire("k", &wait, 0, 0).unwrap().1, Step::Go { delay: ms(100) });
    /// assert_eq!(limiter.try_acquire("k", &wait, 0, 0).unwrap().1, Step::Go { delay: ms(200) });
    /// // The third would leave the queue after 300 ms, past the deadline: not charged.
    /// assert_eq!(limiter.try_acquire("k", &wait, 0, 0).unwrap().1, Step::GiveUp { retry_after: ms(300) });
    /// assert_eq!(limiter.peek("k", 0).unwrap().remaining, 3);
    /// ```
    pub fn try_acquire<Q>(
        &self,
        key: &Q,
        wait: &Wait<'_>,
        now: Nanos,
        waited: Nanos,
    ) -> Result<(Decision, Step), DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + alloc::borrow::ToOwned<Owned = K> + ?Sized,
    {
        let rule = |d: &Decision| step(d, waited, wait.max_wait, wait.jitter);
        let decision = self
            .decide_if(key, wait.tenant, now, wait.cost, &|d| {
                matches!(rule(d), Step::Go { .. })
            })?
            .decision;
        Ok((decision, rule(&decision)))
    }

    /// [`Self::try_acquire`] without the charge: what the waiting rule would answer now,
    /// with nothing stored. For a waiter behind others, to learn whether the key alone
    /// already makes it miss its deadline.
    pub fn would_acquire<Q>(
        &self,
        key: &Q,
        wait: &Wait<'_>,
        now: Nanos,
        waited: Nanos,
    ) -> Result<(Decision, Step), DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + alloc::borrow::ToOwned<Owned = K> + ?Sized,
    {
        let decision = self
            .decide_if(key, wait.tenant, now, wait.cost, &|_| false)?
            .decision;
        Ok((
            decision,
            step(&decision, waited, wait.max_wait, wait.jitter),
        ))
    }

    /// Waits until the request is admitted, or gives up by its deadline: `clock` reads the
    /// limiter's clock (the one every caller of this limiter uses, in nanoseconds) and
    /// `sleep(d)` is a future that completes `d` nanoseconds later, on any runtime. Resolves
    /// to the admitting decision (after its leaky-queue `delay`, if any).
    ///
    /// **One decision at a time per key.** Waiters on one key (and tenant) form a line, served
    /// in arrival order. Only the head of the line decides; the others sleep until it has been
    /// admitted or has given up (or its future was dropped), and only then is the next one woken.
    /// So a hundred waiters on a key cost one decision per turn, not a hundred (no thundering
    /// herd), and none is woken to a denial it could have known about. A waiter behind others
    /// gives up at its deadline, or at once when the key alone would already make it miss the
    /// deadline (the line ahead can only make it later).
    ///
    /// **Nothing is charged until the request is admitted**, and the admission and its charge are
    /// one step under the key's lock: dropping the future at any point before it returns charges
    /// nothing, except while it sleeps a leaky queue's `delay` (the request already holds its
    /// place in the queue, which has no release).
    ///
    /// The line orders `acquire` callers among themselves; a [`KeyedLimiter::check`] on the same
    /// key does not queue, and may take a turn first (the head then sees a denial and waits
    /// again: nothing is charged twice).
    ///
    /// Errors:
    /// [`AcquireError::Timeout`] when the request cannot proceed by `wait.max_wait`, at once
    /// when its retry time is already beyond it; [`AcquireError::Decide`] for a cost above
    /// the capacity, at once.
    ///
    /// ```
    /// # use std::cell::Cell;
    /// # use std::num::NonZeroUsize;
    /// # use std::future::{ready, Future};
    /// # use std::task::{Context, Poll, Waker};
    /// use tollgate::keyed::{AcquireError, KeyedLimiter, Wait};
    /// use tollgate::NANOS_PER_MS;
    /// let ms = |n| n * NANOS_PER_MS;
    /// let limiter = KeyedLimiter::new("gcra 10/s burst 1".parse().unwrap(), NonZeroUsize::MIN);
    /// // A clock that only the sleeps advance (a test clock; use the runtime's own).
    /// let now = Cell::new(0);
    /// let clock = || now.get();
    /// let sleep = |d| ready(now.set(now.get() + d));
    /// // Its sleeps complete at once, so one poll runs a call to its end.
    /// fn run<T>(f: impl Future<Output = T>) -> T {
    ///     match std::pin::pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
    ///         Poll::Ready(r) => r,
    ///         Poll::Pending => unreachable!(),
    ///     }
    /// }
    /// assert!(run(limiter.acquire_with("k", Wait::new(1, ms(500)), clock, sleep)).is_ok());
    /// assert_eq!(now.get(), 0);
    /// assert!(run(limiter.acquire_with("k", Wait::new(1, ms(500)), clock, sleep)).is_ok());
    /// assert_eq!(now.get(), ms(100)); // slept to the retry time, and was admitted
    /// // A deadline shorter than the retry time: a timeout at once, nothing slept.
    /// let err = run(limiter.acquire_with("k", Wait::new(1, ms(50)), clock, sleep));
    /// assert_eq!(err, Err(AcquireError::Timeout { waited: 0, retry_after: ms(100) }));
    /// assert_eq!(now.get(), ms(100));
    /// ```
    #[cfg(feature = "acquire")]
    pub async fn acquire_with<Q, C, S, F>(
        &self,
        key: &Q,
        wait: Wait<'_>,
        clock: C,
        mut sleep: S,
    ) -> Result<Decision, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + alloc::borrow::ToOwned<Owned = K> + ?Sized,
        C: Fn() -> Nanos,
        S: FnMut(Nanos) -> F,
        F: Future<Output = ()>,
    {
        let start = clock();
        let ticket = Ticket::join(&self.waiters, (key.to_owned(), wait.tenant.map(Box::from)));
        if !ticket.poll_head(None) {
            // Behind others. If the key alone already makes this request miss its deadline,
            // the line ahead can only make it later: give up now (nothing charged).
            let now = clock();
            let waited = now.saturating_sub(start);
            if let (_, Step::GiveUp { retry_after }) =
                self.would_acquire(key, &Wait { jitter: 0, ..wait }, now, waited)?
            {
                return Err(AcquireError::Timeout {
                    waited,
                    retry_after,
                });
            }
            // Sleep until this waiter is the head, or its deadline.
            let left = wait.max_wait.saturating_sub(waited);
            let mut deadline = pin!(async {
                if left < Nanos::MAX {
                    sleep(left).await
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
                let now = clock();
                let waited = now.saturating_sub(start);
                // The key's own retry time for this request (a passed deadline always gives
                // up, and reports it).
                let late = Wait {
                    max_wait: 0,
                    ..wait
                };
                let retry_after = match self.would_acquire(key, &late, now, Nanos::MAX)?.1 {
                    Step::GiveUp { retry_after } => retry_after,
                    _ => 0,
                };
                return Err(AcquireError::Timeout {
                    waited,
                    retry_after,
                });
            }
        }
        // The head: decide, sleep to the retry time, decide again, ...
        loop {
            let now = clock();
            let waited = now.saturating_sub(start);
            let (decision, next) = self.try_acquire(key, &wait, now, waited)?;
            match next {
                Step::Go { delay } => {
                    // Admitted and charged: the next waiter may decide now (a leaky queue
                    // places it behind this request).
                    drop(ticket);
                    if delay > 0 {
                        sleep(delay).await;
                    }
                    return Ok(decision);
                }
                Step::Wait(d) => sleep(d).await,
                Step::GiveUp { retry_after } => {
                    return Err(AcquireError::Timeout {
                        waited,
                        retry_after,
                    })
                }
            }
        }
    }

    /// [`Self::acquire_with`] on tokio's timer and the clock [`unix_now`]: waits up to
    /// `max_wait` nanoseconds for a request of `cost` for `key`. For a limiter whose other
    /// callers check with another clock (the clock of one key must be one), or under tokio's
    /// paused test time (which [`unix_now`] does not follow), use [`Self::acquire_with`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::num::NonZeroUsize;
    /// use tollgate::keyed::{unix_now, KeyedLimiter};
    /// use tollgate::NANOS_PER_MS;
    /// let limiter = KeyedLimiter::new("gcra 50/s burst 1".parse().unwrap(), NonZeroUsize::MIN);
    /// let start = unix_now();
    /// limiter.acquire("api", 1, 100 * NANOS_PER_MS).await.unwrap();
    /// limiter.acquire("api", 1, 100 * NANOS_PER_MS).await.unwrap();
    /// assert!(unix_now() - start >= 20 * NANOS_PER_MS); // one every 20 ms
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn acquire<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Nanos,
    ) -> Result<Decision, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + alloc::borrow::ToOwned<Owned = K> + ?Sized,
    {
        self.acquire_with(key, Wait::new(cost, max_wait), unix_now, |d| {
            tokio::time::sleep(core::time::Duration::from_nanos(d))
        })
        .await
    }
}

/// The system clock as the limiter's time: nanoseconds since the Unix epoch (0 before it).
/// The clock of [`KeyedLimiter::acquire`].
#[cfg(feature = "tokio")]
pub fn unix_now() -> Nanos {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
