//! Which failed calls to Redis the fallback decides: one table of Redis error replies
//! ([`reply_class`]) and one rule ([`handle`]), for every client (Rust, npm).

use crate::store::fallback::Why;

/// What an error reply from Redis means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyClass {
    /// The server cannot serve now (and did not run the command): the fallback decides.
    Unavailable,
    /// The script is not in the server's cache (it did not run): send its body.
    NoScript,
    /// Anything else (a wrong type, a permission, a script error): the caller's error.
    Fatal,
}

/// Error reply codes (the reply's first word) that say the server cannot serve now. Each
/// is sent instead of running the command, so a request that got one was not applied:
///
/// * `LOADING`: loading its dataset after a restart.
/// * `TRYAGAIN`: a cluster slot is being migrated.
/// * `CLUSTERDOWN`: the cluster cannot serve the slot.
/// * `MASTERDOWN`: a replica that lost its master (`replica-serve-stale-data no`).
/// * `READONLY`: a replica (after a failover, the old master's clients write to it).
/// * `BUSY`: a script or function has run past the busy threshold; every other command
///   is refused until it ends or is killed. Redis is as unable to serve as while loading,
///   and the refusal is transient: the fallback decides, as for the others. (Reported to
///   the caller instead, every request would fail for as long as the script runs, which
///   is what a declared fallback exists to prevent.)
pub const UNAVAILABLE_REPLIES: [&str; 6] = [
    "LOADING",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "READONLY",
    "BUSY",
];

/// Sorts an error reply by its code, the first word of its message (`BUSYKEY` is not
/// `BUSY`).
///
/// ```
/// use tollgate::store::fleet::{reply_class, ReplyClass};
/// assert_eq!(reply_class("BUSY Redis is busy running a script."), ReplyClass::Unavailable);
/// assert_eq!(reply_class("LOADING Redis is loading the dataset in memory"), ReplyClass::Unavailable);
/// assert_eq!(reply_class("NOSCRIPT No matching script."), ReplyClass::NoScript);
/// assert_eq!(reply_class("BUSYKEY Target key name already exists."), ReplyClass::Fatal);
/// assert_eq!(reply_class("WRONGTYPE Operation against a key"), ReplyClass::Fatal);
/// ```
pub fn reply_class(message: &str) -> ReplyClass {
    let code = message.split([' ', '\t', '\r', '\n']).next().unwrap_or("");
    if code == "NOSCRIPT" {
        ReplyClass::NoScript
    } else if UNAVAILABLE_REPLIES.contains(&code) {
        ReplyClass::Unavailable
    } else {
        ReplyClass::Fatal
    }
}

/// What went wrong with a call to Redis, as the I/O layer saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallError<'a> {
    /// No answer within the timeout.
    Timeout,
    /// The connection failed (refused, dropped, broken): the call may or may not have
    /// reached the server.
    Connection,
    /// Redis answered with this error reply.
    Reply(&'a str),
}

/// Which call failed: one that only reads, or one that may have written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// The read script (nothing to lose: it wrote nothing).
    Read,
    /// A commit, or a module command (which decides and writes in one).
    Write,
}

/// What a store does about a failed call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handling {
    /// The fallback decides (and Redis is tried again after the probe interval).
    FallBack(Why),
    /// Send the script's body (`NOSCRIPT`: it did not run, so nothing is charged twice).
    SendBody,
    /// The caller gets the error.
    Fatal,
}

/// The one rule for failed calls.
///
/// ```
/// use tollgate::store::fallback::Why;
/// use tollgate::store::fleet::{handle, Call, CallError, Handling};
/// assert_eq!(handle(Call::Read, CallError::Timeout), Handling::FallBack(Why::Timeout));
/// assert_eq!(handle(Call::Write, CallError::Timeout), Handling::FallBack(Why::Indeterminate));
/// assert_eq!(handle(Call::Read, CallError::Reply("BUSY ...")), Handling::FallBack(Why::Unreachable));
/// assert_eq!(handle(Call::Write, CallError::Reply("WRONGTYPE ...")), Handling::Fatal);
/// ```
pub fn handle(call: Call, error: CallError<'_>) -> Handling {
    match (error, call) {
        (CallError::Reply(message), _) => match reply_class(message) {
            ReplyClass::NoScript => Handling::SendBody,
            ReplyClass::Fatal => Handling::Fatal,
            // Refused before it ran: known not applied, whatever the call.
            ReplyClass::Unavailable if call == Call::Read => Handling::FallBack(Why::Unreachable),
            // A write refused this way was not applied either, but the stores count every
            // write that fell back as indeterminate (it is never sent again either way).
            ReplyClass::Unavailable => Handling::FallBack(Why::Indeterminate),
        },
        (_, Call::Write) => Handling::FallBack(Why::Indeterminate),
        (CallError::Timeout, Call::Read) => Handling::FallBack(Why::Timeout),
        (CallError::Connection, Call::Read) => Handling::FallBack(Why::Unreachable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_table() {
        for code in UNAVAILABLE_REPLIES {
            let message = alloc::format!("{code} the server cannot serve now");
            assert_eq!(reply_class(&message), ReplyClass::Unavailable, "{code}");
            assert_eq!(reply_class(code), ReplyClass::Unavailable, "{code} alone");
            assert_eq!(
                handle(Call::Read, CallError::Reply(&message)),
                Handling::FallBack(Why::Unreachable)
            );
        }
        for fatal in [
            "ERR unknown command",
            "BUSYKEY Target key name already exists.",
            "BUSYGROUP Consumer Group name already exists",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "NOPERM this user has no permissions",
            "ERR Error running script: LOADING",
            "",
        ] {
            assert_eq!(reply_class(fatal), ReplyClass::Fatal, "{fatal:?}");
            assert_eq!(
                handle(Call::Write, CallError::Reply(fatal)),
                Handling::Fatal
            );
        }
        assert_eq!(
            handle(Call::Write, CallError::Reply("NOSCRIPT No matching script")),
            Handling::SendBody
        );
        assert_eq!(
            handle(Call::Write, CallError::Connection),
            Handling::FallBack(Why::Indeterminate)
        );
        assert_eq!(
            handle(Call::Read, CallError::Connection),
            Handling::FallBack(Why::Unreachable)
        );
    }
}
