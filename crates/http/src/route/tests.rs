//! Route matching and path normalisation, by example.

use super::*;

#[test]
fn normalized_borrows_only_what_normalize_leaves_as_is() {
    for p in [
        "/",
        "/a",
        "/a/",
        "/a/b/c",
        "/a/b/",
        "/é/x",
        "//",
        "/a//b",
        "/a/./b",
        "/a/../b",
        "/.",
        "/..",
        "/a/.",
        "/a/..",
        "/%41",
        "/a%2fb",
        "/%zz",
        "a",
        "",
        "/a.b/.c/..d",
    ] {
        let (n, m) = (normalize(p), normalized(p));
        assert_eq!(n.as_deref().ok(), m.as_deref().ok(), "{p:?}");
        assert_eq!(n.is_err(), m.is_err(), "{p:?}");
        if let Ok(Cow::Borrowed(b)) = m {
            assert_eq!(b, p, "{p:?}");
        }
    }
    assert!(matches!(normalized("/api/v1/"), Ok(Cow::Borrowed(_))));
    assert!(matches!(normalized("/api//v1"), Ok(Cow::Owned(_))));
}

struct R(&'static str, Vec<String>, PathMatch);
impl Routed for R {
    fn methods(&self) -> &[String] {
        &self.1
    }
    fn path(&self) -> &PathMatch {
        &self.2
    }
}

fn routes() -> Vec<R> {
    let r = |n, m: &[&str], p| {
        R(
            n,
            m.iter().map(|s| s.to_string()).collect(),
            PathMatch::parse(p).unwrap(),
        )
    };
    vec![
        r("csp", &[], "/csp-report"),
        r("health", &[], "/health"),
        r("login", &["POST"], "/api/login"),
        r("avatar", &[], "/users/*/avatar"),
        r("files", &[], "/files/*/**"),
        r("v1", &[], "/v1*"),
        r("api", &[], "/api/"),
    ]
}

fn name(m: &str, raw: &str) -> Option<&'static str> {
    let p = normalize(raw).unwrap();
    find(&routes(), m, &p).map(|r| r.0)
}

#[test]
fn normalises_like_origins() {
    let n = |p| normalize(p).unwrap();
    assert_eq!(n("/"), "/");
    assert_eq!(n("//api/x"), "/api/x");
    assert_eq!(n("/api//x///"), "/api/x/");
    assert_eq!(n("/%61pi/x"), "/api/x");
    assert_eq!(n("/%7euser/%2d"), "/~user/-");
    assert_eq!(n("/a%20b/%e2%82%ac"), "/a%20b/%E2%82%AC");
    assert_eq!(n("/a/./b/../c"), "/a/c");
    assert_eq!(n("/a/%2e%2E/api/x"), "/api/x");
    assert_eq!(n("/../../api"), "/api");
    assert_eq!(n("/api/x/.."), "/api/");
    assert_eq!(n("/api/."), "/api/");
    assert_eq!(n("/API/X"), "/API/X", "case is kept; matching ignores it");
}

#[test]
fn refuses_what_origins_disagree_on() {
    assert!(matches!(normalize("/api%2Fx"), Err(PathError::EscapedSeparator(e)) if e == "%2F"));
    assert!(matches!(
        normalize("/api%2fx"),
        Err(PathError::EscapedSeparator(_))
    ));
    assert!(matches!(
        normalize("/api%5Cx"),
        Err(PathError::EscapedSeparator(_))
    ));
    assert!(matches!(
        normalize("/api%00"),
        Err(PathError::EscapedSeparator(_))
    ));
    assert_eq!(normalize("/api%zz"), Err(PathError::BadEscape));
    assert_eq!(normalize("/api%4"), Err(PathError::BadEscape));
    assert_eq!(normalize("api"), Err(PathError::NotAbsolute));
}

#[test]
fn spellings_of_a_path_reach_its_route() {
    for p in [
        "/api/x",
        "//api/x",
        "/%61pi/x",
        "/API/x",
        "/a/../api/x",
        "/./api/x",
        "/%2e/api/x",
    ] {
        assert_eq!(name("GET", p), Some("api"), "{p}");
    }
    assert_eq!(name("post", "/api//login"), Some("login"));
    assert_eq!(name("GET", "/api/login"), Some("api"));
    assert_eq!(name("GET", "/elsewhere"), None);
}

#[test]
fn head_is_matched_by_a_get_route() {
    let methods = |ms: &[&str]| ms.iter().map(|m| m.to_string()).collect::<Vec<_>>();
    assert!(method_matches(&methods(&["GET"]), "HEAD"));
    assert!(method_matches(&methods(&["GET"]), "head"));
    assert!(method_matches(&methods(&["POST", "GET"]), "HEAD"));
    assert!(method_matches(&methods(&["HEAD"]), "HEAD"));
    assert!(
        !method_matches(&methods(&["HEAD"]), "GET"),
        "not the reverse"
    );
    assert!(!method_matches(&methods(&["POST"]), "HEAD"));
    assert!(method_matches(&[], "HEAD"));
    let r = |m: &[&str]| R("read", methods(m), PathMatch::parse("/read").unwrap());
    let routes = [r(&["GET"]), r(&[])];
    assert!(std::ptr::eq(
        find(&routes, "HEAD", "/read").unwrap(),
        &routes[0]
    ));
}

#[test]
fn prefixes_match_whole_segments() {
    assert_eq!(name("GET", "/health"), Some("health"));
    assert_eq!(name("GET", "/health/"), Some("health"));
    assert_eq!(name("GET", "/health/deep"), Some("health"));
    assert_eq!(name("GET", "/healthz"), None);
    assert_eq!(name("GET", "/health-admin/x"), None);
    assert_eq!(name("GET", "/csp-reports"), None);
    // `/api/` is the segment `api`: `/api` itself too, not `/apix`.
    assert_eq!(name("GET", "/api"), Some("api"));
    assert_eq!(name("GET", "/apix"), None);
    // `name*` opts into a string prefix of the segment.
    assert_eq!(name("GET", "/v1"), Some("v1"));
    assert_eq!(name("GET", "/v1beta/x"), Some("v1"));
    assert_eq!(name("GET", "/v2"), None);
    let all = PathMatch::parse("/").unwrap();
    assert!(all.matches("/") && all.matches("/x/y"));
}

#[test]
fn patterns_match_segments() {
    assert_eq!(name("GET", "/users/42/avatar"), Some("avatar"));
    assert_eq!(name("GET", "/Users/42/AVATAR/"), Some("avatar"));
    assert_eq!(
        name("GET", "/users//avatar"),
        None,
        "merged to /users/avatar"
    );
    assert_eq!(name("GET", "/users/42/avatar/x"), None);
    assert_eq!(name("GET", "/files/a/b/c"), Some("files"));
    assert_eq!(name("GET", "/files/a"), Some("files"));
}

#[test]
fn bad_patterns_are_refused() {
    assert!(PathMatch::parse("api").is_err());
    assert!(PathMatch::parse("/a/**/b").is_err());
    assert!(PathMatch::parse("/a*b").is_err());
    assert!(PathMatch::parse("/a*/b").is_err());
    assert!(PathMatch::parse("/a%2Fb").is_err());
    assert_eq!(
        PathMatch::parse("/Health/").unwrap(),
        PathMatch::Prefix("/health".into())
    );
}
