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

    /// The README's plans example, as written: valid, and its key table gives `pro_key_1`
    /// the pro plan.
    #[test]
    fn the_readme_s_plans_config_is_valid() {
        let readme = include_str!("../README.md");
        let section = &readme[readme.find("## Plans").unwrap()..];
        let start = section.find("```toml\n").unwrap() + "```toml\n".len();
        let toml = &section[start..start + section[start..].find("```").unwrap()];
        let c = Config::parse(toml).unwrap();
        let hash = tollgate_http::client::sha256_hex(b"pro_key_1");
        assert_eq!(
            c.settings.key_plans.get(&hash).map(String::as_str),
            Some("pro")
        );
        assert!(c
            .settings
            .api_keys
            .contains(&tollgate_http::client::sha256_hex(b"test")));
        let (_, api) = c.policy("api").unwrap();
        assert_eq!(api.limits_of(Some("pro")).len(), 2);
    }

    /// The README's JWT example, as written: valid, its keys pinned, its secret by name.
    #[test]
    fn the_readme_s_jwt_config_is_valid() {
        let readme = include_str!("../README.md");
        let section = &readme[readme.find("### Plans by a verified JWT").unwrap()..];
        let start = section.find("```toml\n").unwrap() + "```toml\n".len();
        let toml = &section[start..start + section[start..].find("```").unwrap()];
        let jwt = Config::parse(toml).unwrap().settings.jwt.unwrap();
        let pinned: Vec<_> = jwt.keys.iter().map(|k| (k.kid.as_deref(), k.alg)).collect();
        use tollgate_http::jwt::Alg;
        assert_eq!(
            pinned,
            [(Some("ed-2026"), Alg::EdDsa), (Some("hs-1"), Alg::Hs256)]
        );
        assert_eq!(
            jwt.keys[1].data,
            JwtKeyData::SecretBinding("JWT_SECRET".into())
        );
        assert_eq!(jwt.rules.plan_claim.as_deref(), Some("plan"));
        assert_eq!(jwt.on_invalid, InvalidToken::Anonymous);
    }

    /// The bundled file's commented `[settings.jwt]`, uncommented: valid, its defaults the
    /// validation's.
    #[test]
    fn the_bundled_jwt_section_uncommented_is_valid() {
        let start = BUNDLED.find("# [settings.jwt]\n").unwrap();
        let block: String = BUNDLED[start..]
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{}\n", l.trim_start_matches("# ")))
            .collect();
        let jwt = Config::parse(&block).unwrap().settings.jwt.unwrap();
        let defaults = tollgate_http::jwt::Rules::default();
        assert_eq!(
            (jwt.jwks_max_age_secs, jwt.jwks_min_refetch_secs),
            (300, 30)
        );
        assert_eq!(jwt.rules.leeway_secs, defaults.leeway_secs);
        assert_eq!(jwt.rules.max_bytes, defaults.max_bytes);
        assert_eq!(jwt.on_invalid, InvalidToken::Anonymous);
    }

    #[test]
    fn bundled_config_is_valid() {
        let c = Config::parse(BUNDLED).unwrap();
        assert!(!c.routes.is_empty());
    }
}
