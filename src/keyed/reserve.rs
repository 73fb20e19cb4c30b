//! [`KeyedLimiter::reserve`] and [`KeyedLimiter::settle`]: reserve an estimate, settle the
//! real cost (the rule is [`crate::settle`]'s; this file only reads and writes the keys).
//!
//! A reserve decides as [`KeyedLimiter::check`] does (all or nothing over a stack; a fair
//! share's shared window only, as a check without a tenant) and records, when admitted, its
//! instant. A settle checks the reservation is this limiter's
//! and this key's, then settles every limit under their locks, all or nothing: an error
//! leaves every key as it was.

use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::sync::atomic::{AtomicU64, Ordering};

use alloc::borrow::ToOwned;
use alloc::vec::Vec;

use super::{Held, HeldStack, KeyedLimiter};
use crate::decide::decide_at;
use crate::settle::{
    check_reservable, fingerprint, settle, Overage, Refused, Reservation, Settled, Settlement,
};
use crate::stack::{decide_each, per_limit};
use crate::{Decision, Identity, Nanos, Policy, ReservationError, MAX_COUNT};

/// The numbers that tell one limiter's reservations from another's.
pub(super) struct Issuer {
    /// This limiter's number, unique in the process.
    limiter: u64,
    /// The fingerprint of its policies.
    policies: u64,
    /// The next reservation's id.
    next: AtomicU64,
}

/// Numbers the limiters of this process (every limiter its own, so that a reservation of
/// one is refused by another of the same policies).
static LIMITERS: AtomicU64 = AtomicU64::new(1);

impl Issuer {
    pub(super) fn new(policies: &[Policy]) -> Issuer {
        Issuer {
            limiter: LIMITERS.fetch_add(1, Ordering::Relaxed),
            policies: fingerprint(policies),
            next: AtomicU64::new(1),
        }
    }

    /// A reservation of `estimate` for the key of `hash`, charged at `at`.
    #[inline(always)]
    pub(super) fn issue(&self, key: u64, estimate: u64, at: Nanos) -> Reservation {
        Reservation {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            limiter: self.limiter,
            policies: self.policies,
            key,
            estimate,
            at,
        }
    }
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// Reserves `estimate` for `key` at `now`: a decision that charges it (as
    /// [`Self::check`] does) and, when admitted, the [`Reservation`] to settle with the real
    /// cost ([`Self::settle`]). A denial is the decision and no reservation.
    ///
    /// Errors: [`ReservationError::Decide`] as [`Self::check`]'s (an estimate above a
    /// capacity), [`ReservationError::NotSettleable`] for a leaky queue (a shaper; see
    /// [`crate::algorithms::leaky_queue`]). A concurrency limit reserves as it acquires.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::Overage;
    /// let l: KeyedLimiter = KeyedLimiter::new("gcra 1000/min".parse().unwrap(), NonZeroUsize::new(100).unwrap());
    /// // An LLM call estimated at 800 tokens...
    /// let (d, r) = l.reserve("alice", 0, 800).unwrap();
    /// assert_eq!(d.remaining, 200);
    /// // ...used 300: 500 come back.
    /// let done = l.settle("alice", r.unwrap(), 300, 0, Overage::Debt).unwrap();
    /// assert_eq!(done.refunded, 500);
    /// assert_eq!(l.peek("alice", 0).unwrap().remaining, 700);
    /// // A second call of 800 is denied while 700 remain: a denial, no reservation.
    /// let (d, r) = l.reserve("alice", 0, 800).unwrap();
    /// assert!(!d.allowed && r.is_none());
    /// ```
    pub fn reserve<Q>(
        &self,
        key: &Q,
        now: Nanos,
        estimate: u64,
    ) -> Result<(Decision, Option<Reservation>), ReservationError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let store = &self.layers[0];
        let hash = store.hasher.hash_one(key);
        if self.layers.len() == 1 {
            check_reservable(&store.policy)?;
            // The closure of `check`, the same code: the reserve adds only its reservation
            // (built in the arm that returns it, which spares the decision two copies).
            return match store.apply_hashed(hash, key, |p, s| decide_at(p, s, now, estimate)) {
                Ok(decision) => {
                    let issued = if decision.allowed {
                        Some(self.reservations.issue(hash, estimate, now))
                    } else {
                        None
                    };
                    Ok((decision, issued))
                }
                Err(e) => Err(ReservationError::Decide(e)),
            };
        }
        self.reserve_stack(key, hash, now, estimate)
    }

    /// [`Self::reserve`] over several layers, out of line: inlined, its frame (a `Vec` of
    /// locked entries, the stack's scratch) was the one-policy path's too, and a reserve
    /// counted nearly a third more instructions than a check (PERF.md, "Reserve and settle").
    #[inline(never)]
    fn reserve_stack<Q>(
        &self,
        key: &Q,
        hash: u64,
        now: Nanos,
        estimate: u64,
    ) -> Result<(Decision, Option<Reservation>), ReservationError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        for store in &self.layers {
            check_reservable(&store.policy)?;
        }
        // Every layer's shard locked, in layer order; decided all or nothing.
        let mut held: Vec<Held<'_, K>> = self.layers.iter().map(|s| Held::get(s, key)).collect();
        let mut stack = HeldStack {
            layers: &mut held,
            tenant: None,
        };
        let decision = per_limit(self.layers.len(), |each| {
            decide_each(&mut stack, now, &|_| estimate, each)
        })?;
        let issued = decision
            .allowed
            .then(|| self.reservations.issue(hash, estimate, now));
        for h in held {
            h.finish(decision.allowed, || key.to_owned());
        }
        Ok((decision, issued))
    }

    /// Settles `reservation` (made by [`Self::reserve`] for `key`) with the `actual` cost at
    /// `now`: each limit gives back `estimate - actual` or charges `actual - estimate` by its
    /// algorithm's rule ([`crate::settle`]), all or nothing. Consumes the reservation: a
    /// reservation settles once.
    ///
    /// Errors, as [`Refused`] with the reservation given back (nothing settled; it stays
    /// charged at its estimate until settled): [`ReservationError::Foreign`] for a
    /// reservation of another key, policies or limiter; [`ReservationError::ActualTooLarge`]
    /// above [`crate::MAX_COUNT`]; [`ReservationError::NotSettleable`] when a limit is a
    /// concurrency limit (release its slots instead).
    pub fn settle<Q>(
        &self,
        key: &Q,
        reservation: Reservation,
        actual: u64,
        now: Nanos,
        overage: Overage,
    ) -> Result<Settlement, Refused>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.settle_held(key, &reservation, actual, now, overage)
            .map_err(|error| Refused { error, reservation })
    }

    /// [`Self::settle`]'s work, on the reservation it consumes only if this succeeds.
    fn settle_held<Q>(
        &self,
        key: &Q,
        reservation: &Reservation,
        actual: u64,
        now: Nanos,
        overage: Overage,
    ) -> Result<Settlement, ReservationError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let issuer = &self.reservations;
        let foreign = |differs| Err(ReservationError::Foreign { differs });
        if reservation.policies != issuer.policies {
            return foreign(Identity::Policy);
        }
        if reservation.limiter != issuer.limiter {
            return foreign(Identity::Limiter);
        }
        if reservation.key != self.layers[0].hasher.hash_one(key) {
            return foreign(Identity::Key);
        }
        if actual > MAX_COUNT {
            return Err(ReservationError::ActualTooLarge {
                actual,
                max: MAX_COUNT,
            });
        }
        if let Some(s) = self.layers.iter().find(|s| s.policy.holds_slots()) {
            return Err(ReservationError::NotSettleable {
                policy: s.policy.algorithm(),
            });
        }
        let charge = reservation.charge();
        if let [store] = &*self.layers {
            let settled = store
                .apply(key, |p, s| Ok(settle(p, s, charge, actual, now, overage)))
                .map_err(ReservationError::Decide)??;
            return Ok(Settlement::of(&[settled]));
        }
        let mut held: Vec<Held<'_, K>> = self.layers.iter().map(|s| Held::get(s, key)).collect();
        let each = per_limit(held.len(), |each: &mut [Settled]| {
            for (h, done) in held.iter_mut().zip(each.iter_mut()) {
                *done = settle(&h.store.policy, &mut h.state, charge, actual, now, overage)?;
            }
            Ok::<_, ReservationError>(Settlement::of(each))
        })?;
        for h in held {
            h.put(|| key.to_owned());
        }
        Ok(each)
    }
}
