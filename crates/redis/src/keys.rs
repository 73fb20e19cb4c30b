//! The key layout: where each slot of a request lives in Redis.
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
//! slots share a name. Each value is an 8-byte write id (its version) followed by the state's bytes
//! ([`tollgate::State::to_bytes`]).

use tollgate::store::{key_part, Slot};

use crate::Error;

/// Names the Redis keys of one limiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
    namespace: String,
}

impl KeyLayout {
    /// A layout under `prefix` (e.g. `tollgate`) for `namespace` (e.g. `whois:com`).
    pub fn new(prefix: &str, namespace: &str) -> Result<KeyLayout, Error> {
        for (field, value) in [("prefix", prefix), ("namespace", namespace)] {
            if value.is_empty() {
                return Err(Error::Config {
                    field,
                    reason: "must not be empty".into(),
                });
            }
            if value.contains(['{', '}']) {
                return Err(Error::Config {
                    field,
                    reason: format!("{value:?} contains a brace, which would move the hash tag"),
                });
            }
        }
        Ok(KeyLayout {
            prefix: prefix.into(),
            namespace: namespace.into(),
        })
    }

    /// The name every slot of `key` starts with, `<prefix>:{<namespace>:<key>}` (what the
    /// Redis module's commands take).
    pub fn base(&self, key: &str) -> String {
        format!("{}:{{{}:{}}}", self.prefix, self.namespace, key_part(key))
    }

    /// The Redis key of `slot` for `key` (and `tenant`, for the tenant slot).
    pub fn slot_key(&self, key: &str, tenant: Option<&str>, slot: Slot) -> String {
        format!("{}:{}", self.base(key), slot.suffix(tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_hash_tag() {
        let k = KeyLayout::new("tollgate", "whois:com").unwrap();
        assert_eq!(
            k.slot_key("1.2.3.4", None, Slot::Layer(0)),
            "tollgate:{whois:com:1.2.3.4}:0"
        );
        assert_eq!(
            k.slot_key("global", Some("acme"), Slot::Tenant),
            "tollgate:{whois:com:global}:t:acme"
        );
    }

    #[test]
    fn no_two_slots_share_a_name() {
        let k = KeyLayout::new("tollgate", "n").unwrap();
        let a = k.slot_key("a}:t:b", Some("c"), Slot::Tenant);
        let b = k.slot_key("a", Some("b}:t:c"), Slot::Tenant);
        assert_ne!(a, b);
        assert_eq!(a, "tollgate:{n:a%7D:t:b}:t:c");
        assert_ne!(
            k.slot_key("a}:t:x", None, Slot::Layer(0)),
            k.slot_key("a", Some("x}:0"), Slot::Tenant)
        );
    }

    #[test]
    fn braces_in_the_prefix_or_namespace_are_refused() {
        let e = KeyLayout::new("a{b", "ns").unwrap_err();
        assert!(e.to_string().contains("prefix"), "{e}");
        let e = KeyLayout::new("tollgate", "").unwrap_err();
        assert!(e.to_string().contains("namespace"), "{e}");
    }
}
