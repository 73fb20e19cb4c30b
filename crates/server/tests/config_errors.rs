//! envoyproxy/ratelimit's validation rules, and the extension's, as errors that name the
//! file, the path in it and the reason.

use tollgate_rls::config::{Config, ConfigError};

fn error(yaml: &str) -> ConfigError {
    Config::from_texts([("limits.yaml", yaml)]).unwrap_err()
}

fn check(yaml: &str, path: &str, reason: &str) {
    let e = error(yaml);
    assert_eq!(e.file, "limits.yaml");
    assert_eq!(e.path, path, "{e}");
    assert!(e.reason.contains(reason), "{e}");
}

#[test]
fn bad_yaml() {
    let e = error("domain: [unclosed");
    assert_eq!(e.path, "");
    assert!(e.reason.starts_with("error loading config file"), "{e}");
    assert!(e
        .to_string()
        .starts_with("limits.yaml: error loading config file"));
}

#[test]
fn empty_domain() {
    check(
        "descriptors: []",
        "domain",
        "config file cannot have empty domain",
    );
}

#[test]
fn duplicate_domain_across_files() {
    let e = Config::from_texts([("a.yaml", "domain: d"), ("b.yaml", "domain: d")]).unwrap_err();
    assert_eq!((e.file.as_str(), e.path.as_str()), ("b.yaml", "domain"));
    assert!(e.reason.contains("duplicate domain 'd'"), "{e}");
}

#[test]
fn empty_key() {
    check(
        "domain: d\ndescriptors:\n  - value: v\n",
        "descriptors[0].key",
        "descriptor has empty key",
    );
}

#[test]
fn duplicate_key() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: a\n        value: b\n      - key: a\n        value: b\n";
    check(
        yaml,
        "descriptors[0].descriptors[1]",
        "duplicate descriptor composite key 'd.k.a_b'",
    );
}

#[test]
fn bad_unit() {
    check(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
        "descriptors[0].rate_limit.unit",
        "invalid rate limit unit 'fortnight'",
    );
    check(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n",
        "descriptors[0].rate_limit.unit",
        "invalid rate limit unit ''",
    );
}

#[test]
fn unlimited_with_a_unit() {
    check(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n",
        "descriptors[0].rate_limit.unit",
        "should not specify rate limit unit when unlimited",
    );
}

#[test]
fn replaces_naming_itself_or_nothing() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: n\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: n\n";
    check(
        yaml,
        "descriptors[0].rate_limit.replaces[0]",
        "replaces should not contain name of same descriptor",
    );
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n";
    check(
        yaml,
        "descriptors[0].rate_limit.replaces[0]",
        "should not have an empty replaces entry",
    );
}

#[test]
fn unknown_keys() {
    check(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: second\n",
        "descriptors[0].rate_limt",
        "unknown key 'rate_limt'",
    );
}

#[test]
fn share_threshold_without_a_wildcard() {
    check(
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
        "descriptors[0].share_threshold",
        "share_threshold can only be used with wildcard values",
    );
}

#[test]
fn negative_or_huge_requests_per_unit() {
    for n in ["-1", "4294967296", "many"] {
        let yaml = format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: {n}\n");
        let e = error(&yaml);
        assert_eq!(e.path, "descriptors[0].rate_limit.requests_per_unit", "{e}");
    }
}

#[test]
fn policy_extension_errors() {
    check(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      policy: \"sliding-window 0/min\"\n",
        "descriptors[0].rate_limit.policy",
        "limit",
    );
    check(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      policy: \"10/s\"\n      unit: second\n",
        "descriptors[0].rate_limit.policy",
        "give one or the other",
    );
    check(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      policy: \"concurrency 5\"\n",
        "descriptors[0].rate_limit.policy",
        "no release",
    );
}

#[test]
fn quota_mode_is_refused_not_ignored() {
    check(
        "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n",
        "descriptors[0].quota_mode",
        "not supported",
    );
}

#[test]
fn a_valid_file_loads() {
    let c = Config::from_texts([(
        "ok.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    value: 50\n    rate_limit:\n      unit: Minute\n      requests_per_unit: 5\n",
    )])
    .unwrap();
    let m = c.find("d", &[("k", "50")]).unwrap();
    assert_eq!(m.rule.full_key, "d.k_50");
    assert_eq!(m.key, "d_k_50_");
}

#[test]
fn fair_share_errors() {
    let rule = |extra: &str| {
        format!("domain: d\ndescriptors:\n  - key: org\n    rate_limit:\n      {extra}\n")
    };
    let path = "descriptors[0].rate_limit.tenant_policy";
    // The core's rule: a tenant may not have more than the shared limit.
    check(
        &rule("policy: \"10/min\"\n      tenant_policy: \"20/min\""),
        path,
        "20/min",
    );
    check(
        &rule("unlimited: true\n      tenant_policy: \"2/min\""),
        path,
        "a fair share needs a counted limit",
    );
    check(
        &rule("policy: \"10/min\"\n      tenant_policy: \"concurrency 2\""),
        path,
        "no release",
    );
    check(
        &rule("policy: \"10/min\"\n      tenant_policy: \"2 per fortnight\""),
        path,
        "",
    );
    check(
        &rule("policy: \"10/min\"\n      tenant_key: org"),
        "descriptors[0].rate_limit.tenant_key",
        "a tenant_key needs a tenant_policy",
    );
    // A shared unit limit is fine too.
    Config::from_texts([(
        "ok.yaml",
        rule("unit: minute\n      requests_per_unit: 10\n      tenant_policy: \"fixed-window 4/min\"")
            .as_str(),
    )])
    .unwrap();
}
