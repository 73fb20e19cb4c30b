//! The key layout: where each slot of a request lives in Redis, the core's
//! ([`tollgate::store::KeyLayout`]), shared with the Redis module and the npm entry.
//!
//! ```text
//! <prefix>:{<namespace>:<key>}:<i>           the stack's limit i (0 for a single policy)
//! <prefix>:{<namespace>:<key>}:t:<tenant>    a fair share's tenant window
//! ```
//!
//! Every slot of one key shares the hash tag `{<namespace>:<key>}`, so Redis Cluster keeps
//! them on one node and a script may touch them together (no CROSSSLOT). The prefix and
//! the namespace may not contain braces (they would move the tag); keys and tenants may be
//! any text, with `%` and `}` percent-encoded ([`tollgate::store::key_part`]), so that no two
//! slots share a name. Each value is an 8-byte write id (its version) followed by the state's
//! bytes ([`tollgate::store::fleet::encode_value`]).

pub use tollgate::store::{KeyLayout, LayoutError};

use crate::Error;

impl From<LayoutError> for Error {
    fn from(e: LayoutError) -> Error {
        Error::Config {
            field: e.field,
            reason: e.reason(),
        }
    }
}
