//! A refused configuration: the field at fault and the reason, one shape for every front
//! end. The edge's config document (`tollgate-config`, read by the worker and checked by
//! the CLI) and the tower layer's builder both answer with [`ConfigError`], so the same
//! mistake reads the same wherever it is made.
//!
//! It lives here, not in `tollgate-config`, because this is the crate both front ends
//! already share: the tower layer is configured in Rust, not from a document, and should
//! not take the document parser (serde, TOML) to name a field.

use std::fmt;

/// An invalid configuration: the path of the field at fault (`settings.ipv6_prefix`,
/// `policies.per-ip.limit`, `routes[2].policies[1]`, `trusted_proxies[0]`) and what rule
/// its value broke.
///
/// ```
/// use tollgate_http::config::ConfigError;
/// let e = ConfigError::new("routes[0].cost", "0 must be between 1 and 100");
/// assert_eq!(e.to_string(), "invalid config: routes[0].cost: 0 must be between 1 and 100");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field at fault.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ConfigError {
    /// The error of `field`, for `reason`.
    pub fn new(field: impl Into<String>, reason: impl fmt::Display) -> ConfigError {
        ConfigError {
            field: field.into(),
            reason: reason.to_string(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config: {}: {}", self.field, self.reason)
    }
}

impl std::error::Error for ConfigError {}
