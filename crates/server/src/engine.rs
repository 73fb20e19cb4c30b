//! One request's counted limits decided together, over states a store has loaded and
//! locked: which states to write back, and each limit's decision. Every store (memory,
//! Redis's scripts, and Redis's module, inside Redis) decides with the core's rule for a
//! request of limits on separate keys ([`tollgate::store::request`]):
//!
//! * **All or nothing** (the default): the request is one stack. When a limit that
//!   enforces denies, nothing is charged anywhere. A limit in shadow mode that denies does
//!   not stop the others: it is left out and the rest are decided again (they all have room:
//!   each admitted alone at the same time and cost), and charged.
//! * **Charge each** (`--charge-every-descriptor`, envoyproxy/ratelimit's behaviour): every
//!   limit is decided alone; each one with room is charged, whatever the others said.

use tollgate::store::request::{self, Counted};
use tollgate::{DecideError, Nanos, Policy, State};

pub use tollgate::store::request::{Charging, Outcome};

/// One counted limit of a request.
#[derive(Clone, Debug)]
pub struct Item {
    /// The store key.
    pub key: String,
    /// The policy that decides it.
    pub policy: Policy,
    /// What the request costs it (`hits_addend`; 0 checks without charging).
    pub cost: u64,
    /// Whether its denial is only reported (shadow mode), not enforced.
    pub shadow: bool,
}

impl Item {
    /// The limit without its key, as the core decides it.
    pub fn counted(&self) -> Counted {
        Counted {
            policy: self.policy,
            cost: self.cost,
            shadow: self.shadow,
        }
    }
}

/// Decides `items` (with their `loaded` states, in the same order) at `now`
/// ([`tollgate::store::request::decide`]). `blocked`: the request also carries an enforced
/// limit that always denies (`requests_per_unit: 0`), so in all-or-nothing mode nothing may
/// be charged.
pub fn decide(
    items: &[Item],
    loaded: &[Option<State>],
    now: Nanos,
    charging: Charging,
    blocked: bool,
) -> Result<Outcome, DecideError> {
    let counted: Vec<Counted> = items.iter().map(Item::counted).collect();
    request::decide(&counted, loaded, now, charging, blocked)
}
