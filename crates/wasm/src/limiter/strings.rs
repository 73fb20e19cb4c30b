//! [`Core`]'s calls with Rust strings, through the key buffer as JS does (for Rust callers
//! and the wasm-bindgen tests; not exported).

use super::Core;
use crate::{cost_units, now_ns};

impl Core {
    /// Writes `key` then `tenant` into the key buffer as JS does (as much as fits: a part
    /// over the bound is refused by its length); their lengths in bytes.
    fn put(&self, key: &str, tenant: &str) -> (usize, usize) {
        let (k, t) = (key.len(), tenant.len());
        let room = self.key_buffer(k + t);
        let mut buffer = self.key.borrow_mut();
        let both = key.bytes().chain(tenant.bytes()).take(room);
        for (at, byte) in buffer.iter_mut().zip(both) {
            *at = byte;
        }
        (k, t)
    }

    /// Decides a request of `cost` for `key` at `now` (ms): [`Core::check_buf`].
    pub fn check(&self, key: &str, now: f64, cost: f64) -> u32 {
        let (k, _) = self.put(key, "");
        self.check_buf(k, now, cost)
    }

    /// [`Core::check_buf`] on behalf of a tenant (fair-share limiters; JS calls
    /// [`Core::check_detailed_buf`], this is for Rust callers and the tests): the key is the key
    /// buffer's first `key_len` bytes, the tenant the `tenant_len` bytes after them.
    pub fn check_tenant_buf(&self, key_len: usize, tenant_len: usize, now: f64, cost: f64) -> u32 {
        let cost = cost_units(cost);
        self.keys(key_len, tenant_len, |key, tenant| {
            let result = self
                .limiter
                .check_detailed(key, Some(tenant), now_ns(now), cost)
                .map(|d| d.decision);
            if let Ok(d) = &result {
                self.count(0, d, cost);
            }
            self.emit(result)
        })
        .unwrap_or_else(|e| self.fail(e))
    }

    /// [`Core::check_tenant_buf`] for `key` and `tenant`.
    pub fn check_tenant(&self, key: &str, tenant: &str, now: f64, cost: f64) -> u32 {
        let (k, t) = self.put(key, tenant);
        self.check_tenant_buf(k, t, now, cost)
    }

    /// [`Core::allow_buf`] for `key`.
    pub fn allow(&self, key: &str, now: f64, cost: f64) -> u32 {
        let (k, _) = self.put(key, "");
        self.allow_buf(k, now, cost)
    }

    /// [`Core::peek_buf`] for `key`.
    pub fn peek(&self, key: &str, now: f64) -> u32 {
        let (k, _) = self.put(key, "");
        self.peek_buf(k, now)
    }

    /// [`Core::release_buf`] for `key`.
    pub fn release(&self, key: &str, cost: f64) -> u32 {
        let (k, _) = self.put(key, "");
        self.release_buf(k, cost)
    }

    /// [`Core::reset_buf`] for `key`.
    pub fn reset(&self, key: &str) -> bool {
        let (k, _) = self.put(key, "");
        self.reset_buf(k)
    }
}
