//! The `INFO tollgate` section: what the module did since it was loaded. Decisions are
//! sorted by the core's metric model ([`tollgate::metrics`]: the [`Outcome`] and
//! [`near_limit`] rules, the outcome names), errors by the stage that refused the command,
//! and the policy cache's hits, misses and size. Counters only grow (until a restart);
//! commands run on Redis's main thread, so relaxed atomics are exact.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tollgate::metrics::{near_limit, Outcome};
use tollgate::Decision;

use crate::command::{policy_cache, Op};

/// Why a command was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Too few arguments.
    Arity,
    /// An argument is invalid (a policy, an option, a number).
    Argument,
    /// A slot's key holds another type than a string.
    WrongType,
    /// A slot's key holds a string that is not a tollgate state.
    State,
    /// The core refused to decide (e.g. a cost above the capacity, a release on a limit
    /// that is not a concurrency limit).
    Decision,
    /// A state could not be written.
    Write,
}

impl ErrorKind {
    /// Every kind, in the order the section lists them.
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::Arity,
        ErrorKind::Argument,
        ErrorKind::WrongType,
        ErrorKind::State,
        ErrorKind::Decision,
        ErrorKind::Write,
    ];

    /// The field's suffix: `arity`, `argument`, `wrongtype`, `state`, `decision`, `write`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Arity => "arity",
            ErrorKind::Argument => "argument",
            ErrorKind::WrongType => "wrongtype",
            ErrorKind::State => "state",
            ErrorKind::Decision => "decision",
            ErrorKind::Write => "write",
        }
    }
}

/// `[check, peek]` by [`Outcome`] (admitted, denied; the module has no shadow mode).
static DECIDED: [[AtomicU64; 2]; 2] = [const { [const { AtomicU64::new(0) }; 2] }; 2];
static NEAR_LIMIT: AtomicU64 = AtomicU64::new(0);
static RELEASED: AtomicU64 = AtomicU64::new(0);
static RESET: AtomicU64 = AtomicU64::new(0);
static ERRORS: [AtomicU64; ErrorKind::ALL.len()] =
    [const { AtomicU64::new(0) }; ErrorKind::ALL.len()];

/// Counts a command's decision (`TOLLGATE.CHECK`, `TOLLGATE.PEEK`) or a release.
pub fn decided(op: Op, decision: Option<&Decision>) {
    let command = match op {
        Op::Check => 0,
        Op::Peek => 1,
        Op::Release => {
            RELEASED.fetch_add(1, Relaxed);
            return;
        }
    };
    let Some(d) = decision else { return };
    let outcome = match Outcome::of(d, false) {
        Outcome::Admitted => 0,
        Outcome::Denied | Outcome::ShadowDenied => 1,
    };
    DECIDED[command][outcome].fetch_add(1, Relaxed);
    if op == Op::Check && near_limit(d) {
        NEAR_LIMIT.fetch_add(1, Relaxed);
    }
}

/// Counts a `TOLLGATE.RESET`.
pub fn reset() {
    RESET.fetch_add(1, Relaxed);
}

/// Counts a refused command.
pub fn error(kind: ErrorKind) {
    ERRORS[kind as usize].fetch_add(1, Relaxed);
}

/// The section's fields, without the `tollgate_` prefix Redis adds.
pub fn fields() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (c, command) in ["check", "peek"].iter().enumerate() {
        for (o, outcome) in [Outcome::Admitted, Outcome::Denied].iter().enumerate() {
            let n = DECIDED[c][o].load(Relaxed);
            out.push((format!("{command}_{}", outcome.as_str()), n));
        }
    }
    out.push(("check_near_limit".into(), NEAR_LIMIT.load(Relaxed)));
    out.push(("release_ok".into(), RELEASED.load(Relaxed)));
    out.push(("reset_ok".into(), RESET.load(Relaxed)));
    for kind in ErrorKind::ALL {
        let n = ERRORS[kind as usize].load(Relaxed);
        out.push((format!("errors_{}", kind.as_str()), n));
    }
    let (hits, misses, size) = policy_cache();
    out.push(("policy_cache_hits".into(), hits));
    out.push(("policy_cache_misses".into(), misses));
    out.push(("policy_cache_size".into(), size));
    out
}

/// The module's info callback (`RedisModule_RegisterInfoFunc`): one section named after
/// the module, so `INFO tollgate` (and `INFO everything`) lists it.
#[cfg(not(test))]
pub extern "C" fn info_callback(
    ctx: *mut redis_module::raw::RedisModuleInfoCtx,
    _for_crash_report: std::os::raw::c_int,
) {
    use redis_module::raw;
    if raw::add_info_section(ctx, None) != raw::Status::Ok {
        return;
    }
    for (name, value) in fields() {
        raw::add_info_field_unsigned_long_long(ctx, &name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_sorted_by_the_core_model() {
        let field = |name: &str| fields().into_iter().find(|(n, _)| n == name).unwrap().1;
        let before = (field("check_admitted"), field("check_near_limit"));
        let d = |allowed, remaining| Decision {
            allowed,
            limit: 10,
            remaining,
            ..Decision::default()
        };
        decided(Op::Check, Some(&d(true, 1)));
        decided(Op::Check, Some(&d(true, 5)));
        decided(Op::Check, Some(&d(false, 0)));
        error(ErrorKind::Decision);
        assert_eq!(field("check_admitted"), before.0 + 2);
        assert_eq!(field("check_near_limit"), before.1 + 1);
        assert!(field("check_denied") >= 1);
        assert!(field("errors_decision") >= 1);
    }
}
