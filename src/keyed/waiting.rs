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
    crate::wait::{wait_in_line, Ask, Lines, Turn},
    alloc::boxed::Box,
    core::future::{ready, Future},
};

use super::KeyedLimiter;
use crate::wait::{step, Step};
use crate::{DecideError, Decision, Nanos, ReservationError};

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
    /// Added to every sleep, at most half the slack before the deadline (see
    /// [`crate::wait`]): a random value the caller draws, to spread waiters of different
    /// processes. 0 for none.
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
    /// A reservation that cannot be made ([`KeyedLimiter::acquire_reserve_with`] on a
    /// leaky queue, which refuses reserves).
    Reservation(ReservationError),
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
            AcquireError::Reservation(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for AcquireError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            AcquireError::Timeout { .. } => None,
            AcquireError::Decide(e) => Some(e),
            AcquireError::Reservation(e) => Some(e),
        }
    }
}

#[cfg(feature = "acquire")]
/// One line of waiters: its key and tenant.
type Line<K> = (K, Option<Box<str>>);

#[cfg(feature = "acquire")]
/// The lines of waiters of one limiter, per key and tenant (the core's line,
/// [`crate::wait::Lines`]).
pub(crate) type Waiters<K> = Lines<Line<K>>;

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
        let go = |d: &Decision| matches!(rule(d), Step::Go { .. });
        let decision = self
            .decide_if(key, wait.tenant, now, wait.cost, &go, false)?
            .decision;
        Ok((decision, rule(&decision)))
    }

    /// [`Self::check_detailed`] keeping the charge of an admitted request only if `keep`
    /// accepts the combined decision; otherwise every key is left as it was. For a store that
    /// decides for waiters (the Redis limiter's local fallback): `keep` is the waiting rule's
    /// [`crate::wait::keeps`] with the waiter's time left.
    pub fn check_if<Q>(
        &self,
        key: &Q,
        tenant: Option<&str>,
        now: Nanos,
        cost: u64,
        keep: impl Fn(&Decision) -> bool,
    ) -> Result<crate::stack::StackDecision, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + alloc::borrow::ToOwned<Owned = K> + ?Sized,
    {
        self.decide_if(key, tenant, now, cost, &keep, true)
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
            .decide_if(key, wait.tenant, now, wait.cost, &|_| false, false)?
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
        self.wait_turn(key, wait, clock, &mut sleep, |decision, _| decision)
            .await
    }

    /// [`Self::acquire_with`] for an estimate: waits, in the same line and by the same rule,
    /// for a turn to charge `wait.cost` as a reserve does ([`Self::reserve`]: all or nothing
    /// over a stack; a fair share's shared window only), and returns the decision and the
    /// [`crate::settle::Reservation`] to settle with the real cost ([`Self::settle`]). A
    /// call that may spend up to 800 tokens waits until 800 fit instead of being denied,
    /// then gives back what it did not use.
    ///
    /// Errors: [`AcquireError::Reservation`] for a leaky queue (nothing waited), and
    /// `acquire_with`'s.
    ///
    /// ```
    /// # use std::cell::Cell;
    /// # use std::num::NonZeroUsize;
    /// # use std::future::{ready, Future};
    /// # use std::task::{Context, Poll, Waker};
    /// use tollgate::keyed::{KeyedLimiter, Wait};
    /// use tollgate::{Overage, NANOS_PER_SEC};
    /// # fn run<T>(f: impl Future<Output = T>) -> T {
    /// #     match std::pin::pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
    /// #         Poll::Ready(r) => r,
    /// #         Poll::Pending => unreachable!(),
    /// #     }
    /// # }
    /// // 1,000 tokens a minute; a clock that only the sleeps advance (a test clock).
    /// let l: KeyedLimiter = KeyedLimiter::new("gcra 1000/min".parse().unwrap(), NonZeroUsize::MIN);
    /// let now = Cell::new(0);
    /// let (clock, sleep) = (|| now.get(), |d| ready(now.set(now.get() + d)));
    /// let wait = Wait::new(800, 60 * NANOS_PER_SEC);
    /// let (_, first) = run(l.acquire_reserve_with("team", wait, clock, sleep)).unwrap();
    /// // The second call of 800 waits until 800 fit: 200 were left, 600 more come back in
    /// // 36 s at 1,000 a minute...
    /// let (_, second) = run(l.acquire_reserve_with("team", wait, clock, sleep)).unwrap();
    /// assert_eq!(now.get(), 36 * NANOS_PER_SEC);
    /// // ...and each gives back what it did not use.
    /// let done = l.settle("team", first, 300, now.get(), Overage::Debt).unwrap();
    /// assert_eq!(done.refunded, 500);
    /// # let _ = second;
    /// ```
    #[cfg(feature = "acquire")]
    pub async fn acquire_reserve_with<Q, C, S, F>(
        &self,
        key: &Q,
        wait: Wait<'_>,
        clock: C,
        mut sleep: S,
    ) -> Result<(Decision, crate::settle::Reservation), AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + alloc::borrow::ToOwned<Owned = K> + ?Sized,
        C: Fn() -> Nanos,
        S: FnMut(Nanos) -> F,
        F: Future<Output = ()>,
    {
        for store in &self.layers {
            crate::settle::check_reservable(&store.policy).map_err(AcquireError::Reservation)?;
        }
        // A reserve charges a fair share's shared window only (as `reserve` does), and
        // the instant of the decision that admits is the reservation's.
        let wait = Wait {
            tenant: None,
            ..wait
        };
        let (decision, at) = self
            .wait_turn(key, wait, clock, &mut sleep, |decision, now| {
                (decision, now)
            })
            .await?;
        let hash = core::hash::BuildHasher::hash_one(&self.layers[0].hasher, key);
        Ok((decision, self.reservations.issue(hash, wait.cost, at)))
    }

    /// The wait of [`Self::acquire_with`] and [`Self::acquire_reserve_with`]: in the line
    /// of `key` (and tenant), each attempt decided at the clock's `now`; `admitted` makes
    /// the answer of the decision that admits, and its `now`.
    #[cfg(feature = "acquire")]
    async fn wait_turn<Q, C, S, F, T>(
        &self,
        key: &Q,
        wait: Wait<'_>,
        clock: C,
        sleep: &mut S,
        admitted: impl Fn(Decision, Nanos) -> T,
    ) -> Result<T, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + alloc::borrow::ToOwned<Owned = K> + ?Sized,
        C: Fn() -> Nanos,
        S: FnMut(Nanos) -> F,
        F: Future<Output = ()>,
    {
        let decide = |ask: Ask| {
            let now = clock();
            let decided = self
                .decide_if(key, wait.tenant, now, wait.cost, &|d| ask.keeps(d), false)
                .map(|d| (d.decision, admitted(d.decision, now)));
            ready(decided)
        };
        let line = (key.to_owned(), wait.tenant.map(Box::from));
        let jitter = || wait.jitter;
        match wait_in_line(
            &self.waiters,
            line,
            wait.max_wait,
            &clock,
            sleep,
            jitter,
            decide,
        )
        .await?
        {
            Turn::Admitted(answer) => Ok(answer),
            Turn::TimedOut {
                waited,
                retry_after,
            } => Err(AcquireError::Timeout {
                waited,
                retry_after,
            }),
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
    crate::clock::Clock::now(&crate::clock::SystemClock)
}
