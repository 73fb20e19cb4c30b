//! The edge limiter's configuration: the document and its validation are
//! [`tollgate_config`] (shared with the CLI's `check-config`, so a config it accepts is one
//! the worker runs). A bad config is never replaced by a default: every request answers
//! 500 naming the field.

pub use tollgate_config::*;

/// The config the worker bundles (`config/tollgate.toml`, the documented format), used
/// when the `TOLLGATE_CONFIG` var is not set.
pub const BUNDLED: &str = include_str!("../config/tollgate.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_config_is_valid() {
        let c = Config::parse(BUNDLED).unwrap();
        assert!(!c.routes.is_empty());
    }
}
