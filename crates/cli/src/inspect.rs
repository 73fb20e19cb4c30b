//! `tollgate redis inspect`: a key's stored state in words and numbers. The bytes are the
//! fleet protocol's stored values ([`tollgate::store::fleet::decode_value`]), which every
//! tollgate writer in Redis shares; the names are of two layouts:
//!
//! * [`tollgate::store::KeyLayout`]'s, `<prefix>:{<namespace>:<key>}:<i>` for limit `i` of
//!   a stack and `...:t:<tenant>` for a fair share's tenant window: the Lua scripts of
//!   `tollgate-redis` / `tollgate/redis` and the Redis module's `TOLLGATE.CHECK`;
//! * tollgate-rls's (its Redis store, and the module's `TOLLGATE.REQUEST` it sends),
//!   `<prefix>{<domain>}<counter key>`, the counter key being envoyproxy/ratelimit's
//!   `<domain>_<key>_<value>_...`: one counter, one limit.
//!
//! With the policies given, the core decides a cost of 0 at the server's time to say what
//! remains and when it resets; nothing is written.

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
    /// A tollgate-rls counter: `counter` (`<domain>_<key>_<value>_...`) of `domain`.
    Counter {
        /// The descriptor's domain (the key's hash tag).
        domain: String,
        /// The counter key after the hash tag.
        counter: String,
    },
    /// A name that does not end like a tollgate slot.
    Unknown,
}

/// The slot of `key`, read around its hash tag (the first `{` and the first `}` after it,
/// as Redis Cluster reads it; both layouts escape or refuse braces inside the tag).
pub fn slot_of(key: &str) -> SlotName {
    let Some(open) = key.find('{') else {
        return SlotName::Unknown;
    };
    let Some(len) = key[open + 1..].find('}') else {
        return SlotName::Unknown;
    };
    let tag = &key[open + 1..open + 1 + len];
    let rest = &key[open + 2 + len..];
    if !tag.is_empty()
        && rest.len() > tag.len() + 1
        && rest.starts_with(tag)
        && rest[tag.len()..].starts_with('_')
    {
        return SlotName::Counter {
            domain: tag.to_string(),
            counter: rest.to_string(),
        };
    }
    if let Some(tenant) = rest.strip_prefix(":t:") {
        return SlotName::Tenant(tenant.to_string());
    }
    match rest.strip_prefix(':').and_then(|i| i.parse().ok()) {
        Some(i) => SlotName::Limit(i),
        None => SlotName::Unknown,
    }
}

/// What to decide a key's numbers with: the stack's policies, in order, and the fair
/// share's tenant policy. A tollgate-rls counter is one limit: the first policy.
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
            SlotName::Counter { .. } => self.stack.first(),
            SlotName::Tenant(_) => self.tenant.as_ref(),
            SlotName::Unknown => None,
        }
    }
}

fn seconds(nanos: Nanos) -> String {
    let ms = nanos.div_ceil(NANOS_PER_MS);
    format!("{}.{:03} s", ms / 1000, ms % 1000)
}

/// How long before `now` the instant `at` (both on the server's clock) was.
fn ago(now: Nanos, at: Nanos) -> String {
    format!("{} ago", seconds(now.saturating_sub(at)))
}

/// The state in words and numbers, without a policy: what the bytes say (the stored
/// counts and instants; amounts the policy scales, such as a bucket's tokens, are left to
/// the core's decision below).
fn state_words(state: &State, now: Nanos) -> String {
    let name = state.algorithm().name();
    let words = match state {
        State::TokenBucket(s) => format!("last refilled {}", ago(now, s.last)),
        State::LeakyBucket(s) => format!("last leaked {}", ago(now, s.last)),
        State::Gcra(_) => "one theoretical arrival time".to_string(),
        State::LeakyQueue(_) => "the last queued request's departure time".to_string(),
        State::FixedWindow(s) => format!("window number {}, {} admitted in it", s.window, s.count),
        State::SlidingWindow(s) => format!(
            "window number {}, {} admitted in it and {} in the one before",
            s.window, s.cur, s.prev
        ),
        State::SlidingLog(s) => match s.entries.front() {
            Some(oldest) => format!(
                "{} admissions logged, cost {} in all, the oldest {}",
                s.entries.len(),
                s.entries.iter().map(|e| e.cost).sum::<u64>(),
                ago(now, oldest.at)
            ),
            None => "an empty log".to_string(),
        },
        State::Concurrency(c) => format!("{} in use", c.in_flight),
    };
    format!("{name}: {words}")
}

/// The policy's window in words and numbers: what `remaining` and `resets in` count over.
fn window_words(policy: &Policy) -> String {
    if let Some(b) = policy.bucket() {
        let rate = b.rate();
        let verb = if matches!(policy, Policy::LeakyBucket(_) | Policy::LeakyQueue(_)) {
            "drains"
        } else {
            "refills"
        };
        return format!(
            "{verb} {} per {} (one every {}), holds {}",
            rate.limit(),
            seconds(rate.window()),
            seconds(rate.window().div_ceil(rate.limit())),
            b.capacity()
        );
    }
    match (policy, policy.quota()) {
        (Policy::FixedWindow(_), Some(q)) => {
            format!("{} fixed, aligned to the clock", seconds(q.window()))
        }
        (Policy::SlidingWindow(_), Some(q)) => format!(
            "{} sliding (this window's count and the one before's, weighted)",
            seconds(q.window())
        ),
        (_, Some(q)) => format!("{} sliding (every admission logged)", seconds(q.window())),
        (_, None) => "none (a slot frees when its holder releases it)".to_string(),
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
        SlotName::Counter { domain, counter } => {
            write!(out, "tollgate-rls counter {counter} of domain {domain}")
        }
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
    let _ = write!(out, "\n  state: {}", state_words(&state, now));
    match policies.of(&slot) {
        None => out.push_str("\n  (give its policy for remaining and reset)\n"),
        Some(policy) => match decide(policy, Some(state.clone()), now, 0) {
            Ok((d, _)) => {
                let _ = write!(
                    out,
                    "\n  policy: {policy}\n  window: {}\n  remaining: {} of {}\n  resets in: {}",
                    window_words(policy),
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
        // tollgate-rls's: `<prefix>{<domain>}<domain>_<key>_<value>_`.
        assert_eq!(
            slot_of("tollgate:{api}api_remote_address_1.2.3.4_"),
            SlotName::Counter {
                domain: "api".into(),
                counter: "api_remote_address_1.2.3.4_".into()
            }
        );
        assert_eq!(slot_of("tollgate:{api}other"), SlotName::Unknown);
    }

    /// Every algorithm's state, a few checks in, described with and without its policy.
    fn described(policy: &str, with_policy: bool) -> String {
        let policy: Policy = policy.parse().unwrap();
        let mut state = None;
        for t in 0..3 {
            state = decide(&policy, state, t * 100 * NANOS_PER_MS, 1).unwrap().1;
        }
        let value = encode_value(7, &state.unwrap());
        let p = Policies {
            stack: if with_policy { vec![policy] } else { vec![] },
            tenant: None,
        };
        describe("t:{d}d_k_v_", Some(&value), 1000, &p, 500 * NANOS_PER_MS)
    }

    #[test]
    fn every_algorithm_reads_in_words_and_numbers_never_as_rust_debug() {
        let cases = [
            (
                "token-bucket 10/s burst 20",
                "token-bucket: last refilled 0.300 s ago",
                "refills 10 per 1.000 s (one every 0.100 s), holds 20",
                "remaining: 20 of 20",
            ),
            (
                "gcra 10/s burst 20",
                "gcra: one theoretical arrival time",
                "refills 10 per 1.000 s",
                "remaining: 20 of 20",
            ),
            (
                "leaky-bucket 10/s burst 20",
                "leaky-bucket: last leaked 0.300 s ago",
                "drains 10 per 1.000 s",
                "remaining: 20 of 20",
            ),
            (
                "leaky-queue 10/s burst 20",
                "leaky-queue: the last queued request's departure time",
                "drains 10 per 1.000 s",
                "remaining: 20 of 20",
            ),
            (
                "fixed-window 5/s",
                "fixed-window: window number 0, 3 admitted in it",
                "window: 1.000 s fixed, aligned to the clock",
                "remaining: 2 of 5",
            ),
            (
                "sliding-window 5/s",
                "sliding-window: window number 0, 3 admitted in it and 0 in the one before",
                "1.000 s sliding (this window's",
                "remaining: 2 of 5",
            ),
            (
                "sliding-log 5/s",
                "sliding-log: 3 admissions logged, cost 3 in all, the oldest 0.500 s ago",
                "1.000 s sliding (every admission logged)",
                "remaining: 2 of 5",
            ),
            (
                "concurrency 4",
                "concurrency: 3 in use",
                "window: none (a slot frees when its holder releases it)",
                "remaining: 1 of 4",
            ),
        ];
        for (policy, state, window, remaining) in cases {
            let bare = described(policy, false);
            let full = described(policy, true);
            for text in [&bare, &full] {
                assert!(
                    text.contains("slot: tollgate-rls counter d_k_v_ of domain d"),
                    "{text}"
                );
                assert!(text.contains(&format!("state: {state}")), "{text}");
                assert!(
                    !text.contains("State") && !text.contains(" {"),
                    "Rust debug output: {text}"
                );
            }
            assert!(
                bare.contains("(give its policy for remaining and reset)"),
                "{bare}"
            );
            assert!(full.contains(window), "{full}");
            assert!(full.contains(remaining), "{full}");
            assert!(full.contains("resets in: "), "{full}");
        }
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
