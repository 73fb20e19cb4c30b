//! The front ends' own header fields, besides the draft's `RateLimit` fields (the core's
//! `tollgate::headers`): the values are written here once, so the edge worker and the
//! tower layer say the same thing.
//!
//! * `Tollgate-Degraded` ([`DEGRADED`]): the limiter could not decide, and the request was
//!   let through (`fail-open; reason=<why>`, on the request the origin or handler gets)
//!   or refused with a 503 (`fail-closed; reason=<why>`, on the response).
//! * `Tollgate-Shadow` ([`SHADOW`]): a route in shadow mode decided but does not enforce:
//!   `allowed`, or `denied; policies="<the limits that denied>"`.

/// The name of the field marking a request or response the limiter could not decide.
pub const DEGRADED: &str = "Tollgate-Degraded";

/// The name of the field carrying a shadow-mode decision to the origin or handler.
pub const SHADOW: &str = "Tollgate-Shadow";

/// What a front end did when its store or coordinator could not decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Degraded {
    /// Let the request through.
    FailOpen,
    /// Refused it (503).
    FailClosed,
}

impl Degraded {
    /// The `Tollgate-Degraded` value: `fail-open; reason=<reason>` or
    /// `fail-closed; reason=<reason>` (`reason` a token such as `store-error`,
    /// `coordinator-timeout`).
    pub fn value(self, reason: &str) -> String {
        let what = match self {
            Degraded::FailOpen => "fail-open",
            Degraded::FailClosed => "fail-closed",
        };
        format!("{what}; reason={reason}")
    }
}

/// The `Tollgate-Shadow` value of an admitted request.
pub const SHADOW_ALLOWED: &str = "allowed";

/// The `Tollgate-Shadow` value of a request the limits named in `violated` denied (and
/// shadow mode let through): `denied; policies="a,b"`.
pub fn shadow_denied(violated: &[&str]) -> String {
    format!("denied; policies=\"{}\"", violated.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(
            Degraded::FailOpen.value("store-error"),
            "fail-open; reason=store-error"
        );
        assert_eq!(
            Degraded::FailClosed.value("coordinator-timeout"),
            "fail-closed; reason=coordinator-timeout"
        );
        assert_eq!(
            shadow_denied(&["api.1", "api.2"]),
            "denied; policies=\"api.1,api.2\""
        );
    }
}
