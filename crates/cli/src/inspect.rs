//! `tollgate redis inspect`: a key's stored state in words and numbers. The bytes are the
//! fleet protocol's stored values ([`tollgate::store::fleet::decode_value`]), the names
//! those of [`tollgate::store::KeyLayout`] (`<prefix>:{<namespace>:<key>}:<i>` for limit
//! `i` of a stack, `...:t:<tenant>` for a fair share's tenant window): the same for the
//! Lua scripts of `tollgate-redis` / `tollgate/redis` and for the Redis module. With the
//! policies given, the core decides a cost of 0 at the server's time to say what remains
//! and when it resets; nothing is written.

use std::fmt::Write as _;

use tollgate::store::fleet::decode_value;
use tollgate::{decide, Nanos, Policy, State, NANOS_PER_MS};

/// Which slot a key is, read from its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotName {
    /// Limit `i` of the key's stack (0 for a single policy).
    Limit(usize),
    /// The tenant window of a fair share.
    Tenant(String),
    /// A name that does not end like a tollgate slot.
    Unknown,
}

/// The slot of `key`: what follows the hash tag's closing `}`.
pub fn slot_of(key: &str) -> SlotName {
    let Some(close) = key.rfind('}') else {
        return SlotName::Unknown;
    };
    let rest = &key[close + 1..];
    if let Some(tenant) = rest.strip_prefix(":t:") {
        return SlotName::Tenant(tenant.to_string());
    }
    match rest.strip_prefix(':').and_then(|i| i.parse().ok()) {
        Some(i) => SlotName::Limit(i),
        None => SlotName::Unknown,
    }
}

/// What to decide a key's numbers with: the stack's policies, in order, and the fair
/// share's tenant policy.
#[derive(Clone, Debug, Default)]
pub struct Policies {
    /// Limit `i`'s policy.
    pub stack: Vec<Policy>,
    /// The tenant windows' policy.
    pub tenant: Option<Policy>,
}

impl Policies {
    fn of(&self, slot: &SlotName) -> Option<&Policy> {
        match slot {
            SlotName::Limit(i) => self.stack.get(*i),
            SlotName::Tenant(_) => self.tenant.as_ref(),
            SlotName::Unknown => None,
        }
    }
}

fn seconds(nanos: Nanos) -> String {
    let ms = nanos.div_ceil(NANOS_PER_MS);
    format!("{}.{:03} s", ms / 1000, ms % 1000)
}

/// The state in words, without a policy: what the bytes say.
fn state_words(state: &State) -> String {
    match state {
        State::Concurrency(c) => format!("concurrency: {} in use", c.in_flight),
        other => format!("{}: {other:?}", other.algorithm()),
    }
}

/// One key's report: its name, slot, TTL (`pttl_ms`: Redis's `PTTL`, negative for none),
/// the state in words and, with its policy, the numbers the core decides at `now`.
pub fn describe(
    key: &str,
    value: Option<&[u8]>,
    pttl_ms: i64,
    policies: &Policies,
    now: Nanos,
) -> String {
    let slot = slot_of(key);
    let mut out = String::new();
    let _ = write!(out, "{key}\n  slot: ");
    let _ = match &slot {
        SlotName::Limit(i) => write!(out, "limit {i} of the stack"),
        SlotName::Tenant(t) => write!(out, "tenant window of {t:?}"),
        SlotName::Unknown => write!(out, "not a tollgate slot name"),
    };
    let _ = match pttl_ms {
        ms if ms >= 0 => write!(out, "\n  ttl: {}", seconds(ms as u64 * NANOS_PER_MS)),
        -1 => write!(out, "\n  ttl: none"),
        _ => write!(out, "\n  ttl: gone (expired or deleted)"),
    };
    let Some(value) = value else {
        out.push_str("\n  state: absent (fresh)\n");
        return out;
    };
    let state = match decode_value(value) {
        Ok(Some(stored)) => stored.state,
        Ok(None) => {
            out.push_str("\n  state: empty value (fresh)\n");
            return out;
        }
        Err(e) => {
            let _ = writeln!(out, "\n  state: not a tollgate state ({e})");
            return out;
        }
    };
    let _ = write!(out, "\n  state: {}", state_words(&state));
    match policies.of(&slot) {
        None => out.push_str("\n  (give its policy for remaining and reset)\n"),
        Some(policy) => match decide(policy, Some(state.clone()), now, 0) {
            Ok((d, _)) => {
                let _ = write!(
                    out,
                    "\n  policy: {policy}\n  remaining: {} of {}\n  resets in: {}",
                    d.remaining,
                    d.limit,
                    seconds(d.reset_after)
                );
                if let State::Concurrency(c) = &state {
                    let _ = write!(out, "\n  in use: {} of {}", c.in_flight, d.limit);
                }
                out.push('\n');
            }
            Err(e) => {
                let _ = writeln!(out, "\n  policy {policy}: does not fit this state ({e})");
            }
        },
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::store::fleet::encode_value;

    #[test]
    fn slots_are_read_from_the_layout() {
        assert_eq!(slot_of("tollgate:{api:1.2.3.4}:0"), SlotName::Limit(0));
        assert_eq!(slot_of("tollgate:{api:a}:2"), SlotName::Limit(2));
        assert_eq!(
            slot_of("tollgate:{api:g}:t:acme"),
            SlotName::Tenant("acme".into())
        );
        assert_eq!(slot_of("other"), SlotName::Unknown);
    }

    #[test]
    fn a_fixed_window_in_words_and_numbers() {
        let policy: Policy = "fixed-window 5/s".parse().unwrap();
        let mut state = None;
        for _ in 0..3 {
            state = decide(&policy, state, 0, 1).unwrap().1;
        }
        let value = encode_value(7, &state.unwrap());
        let p = Policies {
            stack: vec![policy],
            tenant: None,
        };
        let text = describe("t:{n:k}:0", Some(&value), 900, &p, 100 * NANOS_PER_MS);
        assert!(text.contains("remaining: 2 of 5"), "{text}");
        assert!(text.contains("resets in: 0.900 s"), "{text}");
        assert!(text.contains("ttl: 0.900 s"), "{text}");
        let text = describe("t:{n:k}:0", Some(b"junk"), 10, &p, 0);
        assert!(text.contains("not a tollgate state"), "{text}");
    }
}
