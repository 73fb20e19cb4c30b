//! [`FleetLimits`]' share of reserve and settle on Redis (the core's [`tollgate::settle`]
//! rule, run by [`Batch::settle`], and the fleet protocol's settle record), so that a
//! reservation made by a Node process is settled by a Rust one (`tollgate-redis`) or
//! another Node one, and the other way round: the same reservation numbers (the core's
//! [`stable_hash`] and [`fingerprint`]), the same keys, the same record, the same
//! `TOLLGATE.SETTLE` arguments.

use tollgate::settle::{check_reservable, fingerprint, stable_hash};
use tollgate::store::fleet::settle_command::{self, SettleArgs};
use tollgate::store::fleet::{self, TEST_CLOCK_TTL_MS};
use tollgate::store::Batch;
use tollgate::{Identity, Nanos, Overage, ReservationError, MAX_COUNT};
use wasm_bindgen::prelude::*;

use super::{instant, loaded_states, put_writes, FleetLimits};
use crate::limiter::settlement_numbers;
use crate::{cost_units, errors};

fn overage(up_to_limit: bool) -> Overage {
    if up_to_limit {
        Overage::UpToLimit
    } else {
        Overage::Debt
    }
}

#[wasm_bindgen]
impl FleetLimits {
    /// Throws the core's `RangeError` (`field: "policy"`, `rule: "not-settleable"`) when a
    /// limit cannot be reserved (a leaky queue, a shaper); nothing is asked of Redis then.
    #[wasm_bindgen(js_name = checkReservable)]
    pub fn check_reservable(&self) -> Result<(), JsValue> {
        for p in self.limits.policies() {
            check_reservable(&p).map_err(|e| errors::reservation_error(&e))?;
        }
        Ok(())
    }

    /// The reservations' `policies`: the core's [`fingerprint`] of the limits' policies.
    pub fn fingerprint(&self) -> u64 {
        fingerprint(&self.limits.policies())
    }

    /// The core's [`stable_hash`] of `text`'s UTF-8 bytes: a reservation's `keyHash` (of its
    /// key) and `limiter` (of the key layout's base of the empty key), as tollgate-redis
    /// makes them.
    #[wasm_bindgen(js_name = stableHash)]
    pub fn stable_hash(text: &str) -> u64 {
        stable_hash(text.as_bytes())
    }

    /// Redis `TIME` (`secs`, `micros`) in ns: the instant a reserve decided at, as
    /// [`FleetLimits::decide`] reads the clock.
    pub fn instant(secs: f64, micros: f64) -> Nanos {
        instant(secs, micros)
    }

    /// The name of a reservation's settle record under a key's `base` (the core's
    /// [`tollgate::store::settled_name`]: `<base>:s:<id in hex>`).
    #[wasm_bindgen(js_name = settledName)]
    pub fn settled_name(base: &str, id: u64) -> String {
        // The base is a JS string, so UTF-8, and the suffix is ASCII.
        String::from_utf8_lossy(&tollgate::store::settled_name(base.as_bytes(), id)).into_owned()
    }

    /// Throws the core's named error, as tollgate-redis checks a settle before any round
    /// trip: `foreign-policy`, `foreign-limiter` or `foreign-key` (`field: "reservation"`)
    /// when the reservation's numbers are not this limiter's (`issuer`) for `key`, or
    /// `actual-too-large` (`field: "actual"`) above the core's bound.
    #[wasm_bindgen(js_name = checkSettle)]
    pub fn check_settle(
        &self,
        issuer: u64,
        limiter: u64,
        policies: u64,
        key_hash: u64,
        key: &str,
        actual: f64,
    ) -> Result<(), JsValue> {
        let differs = if policies != self.fingerprint() {
            Some(Identity::Policy)
        } else if limiter != issuer {
            Some(Identity::Limiter)
        } else if key_hash != stable_hash(key.as_bytes()) {
            Some(Identity::Key)
        } else {
            None
        };
        let refused = match differs {
            Some(differs) => ReservationError::Foreign { differs },
            None if cost_units(actual) > MAX_COUNT => ReservationError::ActualTooLarge {
                actual: cost_units(actual),
                max: MAX_COUNT,
            },
            None => return Ok(()),
        };
        Err(errors::reservation_error(&refused))
    }

    /// Settles a reservation (`estimate` charged at `at`, ns) with `actual` on the states
    /// read from Redis (the input as for [`FleetLimits::decide`]: each slot's value length,
    /// the values at [`FleetLimits::states_ptr`]), at Redis's clock (`secs`, `micros`); an
    /// overage up to the limit only when `up_to_limit`. Returns how many numbers it wrote at
    /// [`FleetLimits::out_ptr`]: `k`, then the settlement's `k` numbers (`refunded,
    /// charged, unpaid`, then each limit's three for a stack), then each slot's write as
    /// `decide` gives them. The settle record goes to [`FleetLimits::settled_record`].
    /// Throws the core's error (nothing settled) or `corrupt-state` as `decide` does.
    pub fn settle(
        &self,
        secs: f64,
        micros: f64,
        estimate: f64,
        at: Nanos,
        actual: f64,
        up_to_limit: bool,
    ) -> Result<usize, JsValue> {
        let slots = self.limits.slots(None);
        let io = &mut *self.io.borrow_mut();
        let n = slots.len().min(io.numbers.len());
        let loaded = loaded_states(&io.states, &io.numbers[..n], slots.len())?;
        let mut batch = Batch::new(&self.limits, &slots, loaded, instant(secs, micros));
        let charge = SettleArgs {
            id: 0,
            at,
            estimate: cost_units(estimate),
            actual: cost_units(actual),
            overage: overage(up_to_limit),
        };
        let settlement = batch
            .settle(charge.charge(), charge.actual, charge.overage)
            .map_err(|e| errors::reservation_error(&e))?;
        let numbers = settlement_numbers(&settlement);
        io.out.clear();
        io.out.push(numbers.len() as f64);
        io.out.extend(numbers);
        io.record = fleet::settled_record(&settlement);
        let ids = &mut *self.ids.borrow_mut();
        put_writes(
            &mut io.out,
            &mut io.bytes,
            &batch,
            slots.len(),
            self.ttl.get(),
            ids,
        );
        Ok(io.out.len())
    }

    /// The last [`FleetLimits::settle`]'s settle record, as the settle script stores it.
    #[wasm_bindgen(js_name = settledRecord)]
    pub fn settled_record(&self) -> Vec<u8> {
        self.io.borrow().record.clone()
    }

    /// How long the settle record is kept, in ms (the core's [`fleet::settled_ttl_ms`] with
    /// the `grace`; a day under a test clock, whose time is not Redis's).
    #[wasm_bindgen(js_name = settledTtl)]
    pub fn settled_ttl(&self) -> f64 {
        match self.ttl.get() {
            Some(ttl) => fleet::settled_ttl_ms(&self.limits, ttl.grace_ms) as f64,
            None => TEST_CLOCK_TTL_MS as f64,
        }
    }

    /// A settle record read back (a settle answered by an earlier one, or the module's
    /// reply) as the settlement's numbers (as [`FleetLimits::settle`] gives them, without
    /// the count); `undefined` for bytes that are not a record.
    #[wasm_bindgen(js_name = readRecord)]
    pub fn read_record(record: &[u8]) -> Option<Vec<f64>> {
        fleet::read_settled_record(record).map(|s| settlement_numbers(&s))
    }

    /// `TOLLGATE.SETTLE`'s five arguments after the base (the core's [`settle_command`]).
    #[wasm_bindgen(js_name = settleArgs)]
    pub fn settle_args(
        id: u64,
        at: Nanos,
        estimate: f64,
        actual: f64,
        up_to_limit: bool,
    ) -> Vec<String> {
        settle_command::encode(&SettleArgs {
            id,
            at,
            estimate: cost_units(estimate),
            actual: cost_units(actual),
            overage: overage(up_to_limit),
        })
        .into_iter()
        .map(|a| String::from_utf8_lossy(&a).into_owned())
        .collect()
    }
}
