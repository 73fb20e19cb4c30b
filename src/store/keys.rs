//! Key names: where each slot of a request lives in a store that names keys (Redis, the
//! Redis module, the npm entry `tollgate/redis`), the same in every runtime so that they
//! share one limit.
//!
//! ```text
//! <prefix>:{<namespace>:<key>}:<i>           the stack's limit i (0 for a single policy)
//! <prefix>:{<namespace>:<key>}:t:<tenant>    a fair share's tenant window
//! <prefix>:{<namespace>:<key>}:o             the key's override of its plan (fleet::plan)
//! ```
//!
//! Every slot of one key shares the hash tag `{<namespace>:<key>}`, so Redis Cluster keeps
//! them on one node and one script or command may touch them together (no CROSSSLOT). The
//! prefix and the namespace may not contain braces (they would move the tag: the brace
//! rule, [`KeyLayout::check_part`]); keys and tenants may be any text, with `%` and `}`
//! percent-encoded ([`key_part`]), so that no two slots share a name.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::fmt::Write as _;

use super::Slot;

/// A key or tenant as it appears in a store's key names: `%` and `}` percent-encoded
/// (`%25`, `%7D`), everything else as it is. A `}` would end a Redis hash tag early, and
/// could make one key's slot name equal to another's (key `a}:t:b` with tenant `c`, and
/// key `a` with tenant `b}:t:c`); encoded, every (key, tenant, slot) has its own name.
///
/// ```
/// use tollgate::store::key_part;
/// assert_eq!(key_part("203.0.113.7"), "203.0.113.7");
/// assert_eq!(key_part("a}:t:b"), "a%7D:t:b");
/// assert_eq!(key_part("100%"), "100%25");
/// ```
pub fn key_part(text: &str) -> Cow<'_, str> {
    if !text.contains(['%', '}']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Why a prefix or namespace cannot be part of key names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutError {
    /// The option: `prefix`, `namespace`, or whatever the caller named it.
    pub field: &'static str,
    /// The value given.
    pub value: String,
    /// Whether it was empty (else: it holds a brace).
    pub empty: bool,
}

impl LayoutError {
    /// The rule broken, as a stable code: `empty` or `brace`.
    pub fn rule(&self) -> &'static str {
        if self.empty {
            "empty"
        } else {
            "brace"
        }
    }

    /// Why, in a sentence without the field's name.
    pub fn reason(&self) -> String {
        if self.empty {
            "must not be empty".into()
        } else {
            // Quoted as it is, not with `{:?}`: its escaping tables would add kilobytes to
            // the npm package's wasm.
            alloc::format!(
                "\"{}\" contains a brace, which would move the hash tag",
                self.value
            )
        }
    }
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid option {}: {}", self.field, self.reason())
    }
}

#[cfg(feature = "std")]
impl std::error::Error for LayoutError {}

/// Names the keys of one limiter: `<prefix>:{<namespace>:<key>}` and a slot suffix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLayout {
    /// `<prefix>:{<namespace>:`, what every base starts with.
    head: String,
}

impl KeyLayout {
    /// A layout under `prefix` (e.g. `tollgate`) for `namespace` (e.g. `whois:com`); both
    /// must pass [`KeyLayout::check_part`].
    ///
    /// ```
    /// use tollgate::store::{KeyLayout, Slot};
    /// let k = KeyLayout::new("tollgate", "whois:com").unwrap();
    /// assert_eq!(k.base("1.2.3.4"), "tollgate:{whois:com:1.2.3.4}");
    /// assert_eq!(k.slot_key("g", Some("acme"), Slot::Tenant), "tollgate:{whois:com:g}:t:acme");
    /// assert_eq!(KeyLayout::new("a{b", "ns").unwrap_err().rule(), "brace");
    /// ```
    pub fn new(prefix: &str, namespace: &str) -> Result<KeyLayout, LayoutError> {
        KeyLayout::check_part("prefix", prefix)?;
        KeyLayout::check_part("namespace", namespace)?;
        Ok(KeyLayout {
            head: alloc::format!("{prefix}:{{{namespace}:"),
        })
    }

    /// The brace rule: a part of every key name fixed by configuration (a prefix, a
    /// namespace, an override's name) must be non-empty and hold no brace, which would
    /// move (or end) the hash tag.
    pub fn check_part(field: &'static str, value: &str) -> Result<(), LayoutError> {
        let empty = value.is_empty();
        if empty || value.contains(['{', '}']) {
            return Err(LayoutError {
                field,
                value: value.into(),
                empty,
            });
        }
        Ok(())
    }

    /// What every base starts with, `<prefix>:{<namespace>:`: a base is this, the key
    /// through [`key_part`], and `}` (for a binding that joins them itself).
    pub fn head(&self) -> &str {
        &self.head
    }

    /// The name every slot of `key` starts with, `<prefix>:{<namespace>:<key>}` (what the
    /// Redis module's commands take).
    pub fn base(&self, key: &str) -> String {
        let part = key_part(key);
        let mut base = String::with_capacity(self.head.len() + part.len() + 1);
        base.push_str(&self.head);
        base.push_str(&part);
        base.push('}');
        base
    }

    /// The key of the record of the reservation `id` settled for `key`
    /// ([`super::fleet::settled_record`]): `<base>:s:<id in hex>`, in the key's hash tag, so
    /// that it is written in the same script (on the same node) as the key's states.
    ///
    /// ```
    /// use tollgate::store::KeyLayout;
    /// let layout = KeyLayout::new("tollgate", "api").unwrap();
    /// assert_eq!(layout.settled_key("alice", 255), "tollgate:{api:alice}:s:ff");
    /// // The module names it from the base it is sent.
    /// let base = layout.base("alice");
    /// assert_eq!(tollgate::store::settled_name(base.as_bytes(), 255), b"tollgate:{api:alice}:s:ff");
    /// ```
    pub fn settled_key(&self, key: &str, id: u64) -> String {
        let mut name = self.base(key);
        let _ = write!(name, ":s:{id:x}");
        name
    }

    /// The key of `key`'s override of its plan ([`super::fleet::plan`]): `<base>:o`, in the
    /// key's hash tag, so that it is read in the same script (on the same node) as the
    /// key's states.
    ///
    /// ```
    /// use tollgate::store::KeyLayout;
    /// let layout = KeyLayout::new("tollgate", "api").unwrap();
    /// assert_eq!(layout.override_key("alice"), "tollgate:{api:alice}:o");
    /// let base = layout.base("alice");
    /// assert_eq!(tollgate::store::override_name(base.as_bytes()), b"tollgate:{api:alice}:o");
    /// ```
    pub fn override_key(&self, key: &str) -> String {
        let mut name = self.base(key);
        name.push_str(OVERRIDE_SUFFIX);
        name
    }

    /// The key of `slot` for `key` (and `tenant`, for the tenant slot).
    pub fn slot_key(&self, key: &str, tenant: Option<&str>, slot: Slot) -> String {
        let mut name = self.base(key);
        name.push(':');
        slot.push_suffix(tenant, &mut name);
        name
    }
}

/// The key of the settle record of reservation `id` under `base` (a name made by
/// [`KeyLayout::base`], as bytes: the Redis module takes it from its arguments); the same
/// name as [`KeyLayout::settled_key`].
pub fn settled_name(base: &[u8], id: u64) -> Vec<u8> {
    let mut name = base.to_vec();
    name.extend_from_slice(alloc::format!(":s:{id:x}").as_bytes());
    name
}

/// What a key's override's name adds to its base.
const OVERRIDE_SUFFIX: &str = ":o";

/// The key of the override under `base` (a name made by [`KeyLayout::base`], as bytes: the
/// Redis module takes it from its arguments); the same name as [`KeyLayout::override_key`].
pub fn override_name(base: &[u8]) -> Vec<u8> {
    [base, OVERRIDE_SUFFIX.as_bytes()].concat()
}

/// The key of `slot` under `base` (a name made by [`KeyLayout::base`], as bytes: the Redis
/// module takes it from its arguments).
pub fn slot_name(base: &[u8], tenant: Option<&str>, slot: Slot) -> Vec<u8> {
    let suffix = slot.key_suffix(tenant);
    let mut name = Vec::with_capacity(base.len() + suffix.len());
    name.extend_from_slice(base);
    name.extend_from_slice(suffix.as_bytes());
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

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
        assert_eq!(k.head(), "tollgate:{whois:com:");
        assert_eq!(
            slot_name(b"tollgate:{api:k}", None, Slot::Layer(1)),
            b"tollgate:{api:k}:1"
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
        // The encoding itself cannot collide: `%` is encoded too.
        assert_ne!(k.base("%7D"), k.base("}"));
    }

    #[test]
    fn the_brace_rule() {
        for (prefix, ns, field, rule) in [
            ("a{b", "ns", "prefix", "brace"),
            ("tollgate", "n}s", "namespace", "brace"),
            ("", "ns", "prefix", "empty"),
            ("tollgate", "", "namespace", "empty"),
        ] {
            let e = KeyLayout::new(prefix, ns).unwrap_err();
            assert_eq!((e.field, e.rule()), (field, rule), "{prefix:?} {ns:?}");
            assert!(e.to_string().contains(field), "{e}");
        }
        let e = KeyLayout::check_part("overrides", "c{o}m").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid option overrides: \"c{o}m\" contains a brace, which would move the hash tag"
        );
        assert!(KeyLayout::check_part("overrides", "com").is_ok());
    }
}
