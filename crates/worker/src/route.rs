//! Routing: the first route whose method and path match decides which policies apply.

use crate::config::{Config, PathMatch, Route};

/// The first route matching `method` and `path`, if any. Requests that match no route are
/// forwarded without limiting (add a final `path = "/"` route to limit everything).
pub fn find<'c>(config: &'c Config, method: &str, path: &str) -> Option<&'c Route> {
    config.routes.iter().find(|r| matches(r, method, path))
}

/// Whether `route` applies to this request.
pub fn matches(route: &Route, method: &str, path: &str) -> bool {
    if !route.methods.is_empty() && !route.methods.iter().any(|m| m.eq_ignore_ascii_case(method)) {
        return false;
    }
    match &route.path {
        PathMatch::Prefix(p) => path.starts_with(p.as_str()),
        PathMatch::Pattern(segs) => {
            let mut parts = path.strip_prefix('/').unwrap_or(path).split('/');
            for (i, s) in segs.iter().enumerate() {
                if s == "**" && i == segs.len() - 1 {
                    return true;
                }
                match parts.next() {
                    Some(p) if s == "*" && !p.is_empty() => {}
                    Some(p) if p == s => {}
                    _ => return false,
                }
            }
            parts.next().is_none()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::parse(
            r#"
            [policies.ip]
            limit = "10/s"
            [[routes]]
            name = "csp"
            path = "/csp-report"
            exempt = true
            [[routes]]
            name = "login"
            methods = ["post"]
            path = "/api/login"
            policies = ["ip"]
            cost = 5
            [[routes]]
            name = "avatar"
            path = "/users/*/avatar"
            policies = ["ip"]
            [[routes]]
            name = "files"
            path = "/files/*/**"
            policies = ["ip"]
            [[routes]]
            name = "api"
            path = "/api/"
            policies = ["ip"]
            "#,
        )
        .unwrap()
    }

    fn name(c: &Config, m: &str, p: &str) -> Option<String> {
        find(c, m, p).map(|r| r.name.clone())
    }

    #[test]
    fn first_match_wins() {
        let c = config();
        assert_eq!(name(&c, "POST", "/api/login").as_deref(), Some("login"));
        assert_eq!(name(&c, "GET", "/api/login").as_deref(), Some("api"));
        assert_eq!(name(&c, "POST", "/csp-report").as_deref(), Some("csp"));
        assert!(find(&c, "POST", "/csp-report").unwrap().exempt);
        assert_eq!(name(&c, "GET", "/elsewhere"), None);
    }

    #[test]
    fn patterns_match_segments() {
        let c = config();
        assert_eq!(
            name(&c, "GET", "/users/42/avatar").as_deref(),
            Some("avatar")
        );
        assert_eq!(name(&c, "GET", "/users//avatar"), None);
        assert_eq!(name(&c, "GET", "/users/42/avatar/x"), None);
        assert_eq!(name(&c, "GET", "/files/a/b/c").as_deref(), Some("files"));
        assert_eq!(name(&c, "GET", "/files/a").as_deref(), Some("files"));
    }
}
