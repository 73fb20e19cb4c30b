//! When a store cannot decide: why a call to it failed ([`Why`]) and what its user declared
//! to happen then ([`Behaviour`]), each with the one name every runtime reports it by (the
//! metric model's `reason` and `behaviour` attributes, [`crate::metrics`]). Which failures
//! fall back is the fleet's rule (`store::fleet::handle`, with the `fleet` feature); the
//! behaviours are declared by each store's options (tollgate-redis, tollgate-rls, the npm
//! `RedisLimiter`, the tower layer, the edge's routes).
//!
//! ```
//! use tollgate::store::fallback::{Behaviour, Why};
//! assert_eq!(Why::ALL.map(Why::as_str), ["unreachable", "timeout", "indeterminate"]);
//! assert_eq!(Behaviour::ALL.map(Behaviour::as_str), ["open", "closed", "local"]);
//! ```

/// Why the fallback decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Why {
    /// The store refused the connection, answered that it cannot serve, or failed recently
    /// (the fallback decides until the next probe).
    Unreachable,
    /// A read did not answer within the timeout.
    Timeout,
    /// A write was sent and its answer lost: it may or may not have been applied. It is
    /// never sent again.
    Indeterminate,
}

impl Why {
    /// Every reason, in the order exporters list them.
    pub const ALL: [Why; 3] = [Why::Unreachable, Why::Timeout, Why::Indeterminate];

    /// The attribute value: `unreachable`, `timeout`, `indeterminate`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Why::Unreachable => "unreachable",
            Why::Timeout => "timeout",
            Why::Indeterminate => "indeterminate",
        }
    }
}

/// What a store's user declared to happen when the store fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Behaviour {
    /// Admit everything (availability first).
    Open,
    /// Deny everything (protection first).
    Closed,
    /// Decide on limits kept in this process.
    Local,
}

impl Behaviour {
    /// Every behaviour, in the order exporters list them.
    pub const ALL: [Behaviour; 3] = [Behaviour::Open, Behaviour::Closed, Behaviour::Local];

    /// The attribute value: `open`, `closed`, `local`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Behaviour::Open => "open",
            Behaviour::Closed => "closed",
            Behaviour::Local => "local",
        }
    }
}
