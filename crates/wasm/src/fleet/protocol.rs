//! [`FleetLimits`]' share of the fleet protocol's rules (the core's
//! [`tollgate::store::fleet`] and [`KeyLayout`]) for JavaScript: key names, times to live,
//! the handling of failed calls and the fallback's decisions.

use tollgate::store::bounds::{self, MAX_KEY_BYTES};
use tollgate::store::fallback::Why;
use tollgate::store::fleet::{self, Call, CallError, Handling, Ttl};
use tollgate::store::KeyLayout;
use wasm_bindgen::prelude::*;

use super::{answer, FleetLimits};
use crate::{errors, now_ns};

/// [`FleetLimits::handle`]'s answers: the caller gets the error.
pub const FATAL: u32 = 0;
/// [`FleetLimits::handle`]: send the script's body (NOSCRIPT).
pub const SEND_BODY: u32 = 1;
/// [`FleetLimits::handle`]: the fallback decides, Redis unreachable.
pub const UNREACHABLE: u32 = 2;
/// [`FleetLimits::handle`]: the fallback decides, a read timed out.
pub const TIMEOUT: u32 = 3;
/// [`FleetLimits::handle`]: the fallback decides, a write's answer was lost.
pub const INDETERMINATE: u32 = 4;

#[wasm_bindgen]
impl FleetLimits {
    /// A key as it appears in key names (`%` and `}` percent-encoded: the core's
    /// `store::key_part`); throws the key's `RangeError` (`rule: "too-long"`) when it is
    /// over the core's bound on a key's bytes ([`bounds::check_key`]).
    #[wasm_bindgen(js_name = keyPart)]
    pub fn key_part(key: &str) -> Result<String, JsValue> {
        bounds::check_key(key.as_bytes()).map_err(|e| errors::key_error("key", &e))?;
        Ok(tollgate::store::key_part(key).into_owned())
    }

    /// The longest key, in UTF-16 units, that is within the bound on a key's bytes whatever
    /// its characters (UTF-8 takes at most 3 bytes a unit): JS passes longer keys through
    /// [`FleetLimits::key_part`], which checks them, and uses shorter plain ones as they are.
    #[wasm_bindgen(js_name = surelyShortKey)]
    pub fn surely_short_key() -> usize {
        MAX_KEY_BYTES / 3
    }

    /// What every key's base starts with, `<prefix>:{<namespace>:` (the core's
    /// [`KeyLayout`]: a base is this, the key through `keyPart`, and `}`). Throws the
    /// brace rule's error (`field` the option, `rule` `empty` (a `RangeError`) or `brace`).
    #[wasm_bindgen(js_name = keyHead)]
    pub fn key_head(prefix: &str, namespace: &str) -> Result<String, JsValue> {
        match KeyLayout::new(prefix, namespace) {
            Ok(layout) => Ok(layout.head().to_string()),
            Err(e) => Err(errors::option_error(
                e.field,
                &JsValue::from_str(&e.value),
                e.rule(),
                &e.reason(),
                e.empty,
            )),
        }
    }

    /// How many bytes of a stored value are its version (the commit script compares them).
    #[wasm_bindgen(js_name = versionBytes)]
    pub fn version_bytes() -> usize {
        fleet::VERSION_BYTES
    }

    /// The key suffixes of a request's slots, in decision order (the core's layout:
    /// `":<i>"` for the stack's limit i, `":t:<tenant>"` for a fair share's tenant window,
    /// which requests without a tenant, or with `""` or `"default"`, skip), each appended to
    /// the key's base.
    /// Throws the tenant's `RangeError` (`field: "tenant"`, `rule: "too-long"`) when it is
    /// over the core's bound on a key part's bytes.
    pub fn slots(&self, tenant: Option<String>) -> Result<Vec<String>, JsValue> {
        if let Some(t) = &tenant {
            bounds::check_key(t.as_bytes()).map_err(|e| errors::key_error("tenant", &e))?;
        }
        Ok(self
            .limits
            .slots(tenant.as_deref())
            .into_iter()
            .map(|s| s.key_suffix(tenant.as_deref()))
            .collect())
    }

    /// The keys' times to live (the core's rule, [`Ttl`]): `grace` ms added to the time a
    /// state needs to be fresh, `lease` ms for a concurrency count (each rounded up); under
    /// a `testClock` (whose time is not Redis's), a day.
    #[wasm_bindgen(js_name = timesToLive)]
    pub fn times_to_live(&self, grace: f64, lease: f64, test_clock: bool) {
        self.ttl.set((!test_clock).then(|| Ttl {
            grace_ms: grace.ceil() as u64,
            lease_ms: lease.ceil() as u64,
        }));
    }

    /// What to do about a failed call (the core's rule, [`fleet::handle`]): `write` whether
    /// the call may have written (a commit, a module command); `timeout` whether it had no
    /// answer in time, else `reply` the error reply's message (`undefined`: the connection
    /// failed). Returns `FATAL`, `SEND_BODY`, `UNREACHABLE`, `TIMEOUT` or
    /// `INDETERMINATE`.
    pub fn handle(write: bool, timeout: bool, reply: Option<String>) -> u32 {
        let call = if write { Call::Write } else { Call::Read };
        let error = match (timeout, reply.as_deref()) {
            (true, _) => CallError::Timeout,
            (false, Some(message)) => CallError::Reply(message),
            (false, None) => CallError::Connection,
        };
        match fleet::handle(call, error) {
            Handling::Fatal => FATAL,
            Handling::SendBody => SEND_BODY,
            Handling::FallBack(Why::Unreachable) => UNREACHABLE,
            Handling::FallBack(Why::Timeout) => TIMEOUT,
            Handling::FallBack(Why::Indeterminate) => INDETERMINATE,
        }
    }

    /// The fallback `open`: the output of one request of [`FleetLimits::decide`] admitting
    /// it in every limit (the core's [`fleet::fail_open`]).
    #[wasm_bindgen(js_name = failOpen)]
    pub fn fail_open(&self) -> Vec<f64> {
        let mut out = Vec::new();
        answer(&mut out, &fleet::fail_open(&self.limits));
        out
    }

    /// The fallback `closed`: every limit denies, retry after `retry_ms` (the next probe).
    #[wasm_bindgen(js_name = failClosed)]
    pub fn fail_closed(&self, retry_ms: f64) -> Vec<f64> {
        let mut out = Vec::new();
        answer(
            &mut out,
            &fleet::fail_closed(&self.limits, now_ns(retry_ms)),
        );
        out
    }
}
