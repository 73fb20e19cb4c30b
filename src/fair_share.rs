//! Per-tenant fair share: a shared bucket protects the upstream, and
//! on top of it every tenant has its own window, so that one tenant cannot starve the
//! others. A request passes only when both have room (all or nothing, as in
//! [`crate::stack`]). The `default` tenant, an empty tenant and requests without a tenant
//! skip the tenant window.
//!
//! A per-tenant limit above the shared one is a policy error: the tenant window would never
//! bind, which is never what the operator meant.
//!
//! ```
//! use tollgate::fair_share::FairShare;
//! let fs = FairShare::new("10/s".parse().unwrap(), "sliding-window 4/s".parse().unwrap()).unwrap();
//! let mut shared = None;
//! let (mut a, mut b) = (None, None);
//! let mut admitted_a = 0;
//! for _ in 0..10 {
//!     admitted_a += fs.decide(&mut shared, Some(&mut a), 0, 1).unwrap().decision.allowed as u32;
//! }
//! assert_eq!(admitted_a, 4);               // tenant A gets its share...
//! assert!(fs.decide(&mut shared, Some(&mut b), 0, 1).unwrap().decision.allowed); // ...B still gets in
//! ```

use crate::stack::{decide_all, StackDecision};
use crate::{DecideError, Field, Nanos, Policy, PolicyError, Rule, State};

/// The shared policy and the per-tenant policy on top of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FairShare {
    shared: Policy,
    tenant: Policy,
}

/// Whether a request from `tenant` skips the tenant window: no tenant, an empty one, or
/// `default`.
pub fn skips_tenant_window(tenant: Option<&str>) -> bool {
    match tenant {
        None => true,
        Some(t) => t.is_empty() || t == "default",
    }
}

impl FairShare {
    /// Validates that the tenant policy does not allow more than the shared one (neither a
    /// higher sustained rate nor a larger capacity).
    pub fn new(shared: Policy, tenant: Policy) -> Result<FairShare, PolicyError> {
        if tenant.rate_exceeds(&shared) || tenant.limit() > shared.limit() {
            let mut buf = [0u8; 64];
            let text = crate::text::display_into(&mut buf, &tenant);
            return Err(PolicyError::new(
                Field::TenantPolicy,
                text,
                Rule::TenantAboveShared,
            ));
        }
        Ok(FairShare { shared, tenant })
    }

    /// The shared policy.
    pub const fn shared(&self) -> &Policy {
        &self.shared
    }

    /// The per-tenant policy.
    pub const fn tenant(&self) -> &Policy {
        &self.tenant
    }

    /// Decides one request. Pass `tenant_state: None` for requests that skip the tenant window
    /// (see [`skips_tenant_window`]); then only the shared policy decides.
    pub fn decide(
        &self,
        shared_state: &mut Option<State>,
        tenant_state: Option<&mut Option<State>>,
        now: Nanos,
        cost: u64,
    ) -> Result<StackDecision, DecideError> {
        match tenant_state {
            None => decide_all(&mut [(&self.shared, shared_state)], now, cost),
            Some(t) => decide_all(
                &mut [(&self.shared, shared_state), (&self.tenant, t)],
                now,
                cost,
            ),
        }
    }
}
