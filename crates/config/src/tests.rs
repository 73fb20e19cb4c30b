//! The config's validation: every rule names its field.

use super::*;

#[test]
fn errors_name_the_field() {
    let e = Config::parse("[policies.a]\nlimit = \"10/fortnight\"\n").unwrap_err();
    assert_eq!(e.field, "policies.a.limit");
    assert!(e.reason.contains("unknown unit"), "{e}");
    let e = Config::parse(
        "[policies.a]\nlimit = \"10/s\"\n[[routes]]\npath = \"/\"\npolicies = [\"b\"]\n",
    )
    .unwrap_err();
    assert_eq!(e.field, "routes[0].policies[0]");
    let e = Config::parse("[settings]\nipv6_prefix = 200\n").unwrap_err();
    assert_eq!(e.field, "settings.ipv6_prefix");
    let e = Config::parse("[settings]\nnope = 1\n").unwrap_err();
    assert!(e.field.starts_with("settings"), "{e}");
    assert!(e.reason.contains("nope"), "{e}");
    let e = Config::parse("[policies.a]\nlimit = \"1/s\"\nkey = \"cookie\"\n").unwrap_err();
    assert_eq!(e.field, "policies.a.key", "{e}");
    let e = Config::parse(r#"{"routes": [{"path": "/", "cost": "two"}]}"#).unwrap_err();
    assert_eq!(e.field, "routes[0].cost", "{e}");
    let e = Config::parse("[settings\n").unwrap_err();
    assert_eq!(e.field, "(toml)", "{e}");
    let e = Config::parse(r#"{"routes": [{"path": "api"}]}"#).unwrap_err();
    assert_eq!(e.field, "routes[0].path");
    let e = Config::parse("[policies.a]\nlimit = \"10/s\"\ntenant = \"20/s\"\n").unwrap_err();
    assert_eq!(e.field, "policies.a.tenant");
    let e = Config::parse(
        "[policies.a]\nlimit = \"10/s\"\n[[routes]]\npath = \"/\"\npolicies = [\"a\"]\ncost = 11\n",
    )
    .unwrap_err();
    assert_eq!(e.field, "routes[0].cost");
    let e = Config::parse(
        "[policies.a]\nlimit = \"10/s\"\n[[routes]]\npath = \"/x\"\nexempt = true\npolicies = [\"a\"]\n",
    )
    .unwrap_err();
    assert_eq!(e.field, "routes[0].policies");
}

#[test]
fn api_key_routes_need_an_ip_policy_or_listed_keys() {
    let base = "[policies.key]\nlimit = \"10/s\"\nkey = \"api-key\"\n\
                [policies.ip]\nlimit = \"100/s\"\n";
    let e = Config::parse(&format!(
        "{base}[[routes]]\npath = \"/k\"\npolicies = [\"key\"]\n"
    ))
    .unwrap_err();
    assert_eq!(e.field, "routes[0].policies");
    assert!(e.reason.contains("invented keys"), "{e}");
    assert!(Config::parse(&format!(
        "{base}[[routes]]\npath = \"/k\"\npolicies = [\"key\", \"ip\"]\n"
    ))
    .is_ok());
    let listed = format!("[settings]\napi_keys = [\"{}\"]\n", "ab".repeat(32));
    assert!(Config::parse(&format!(
        "{listed}{base}[[routes]]\npath = \"/k\"\npolicies = [\"key\"]\n"
    ))
    .is_ok());
    let e = Config::parse("[settings]\napi_keys = [\"nope\"]\n").unwrap_err();
    assert_eq!(e.field, "settings.api_keys[0]");
}

#[test]
fn leaky_queues_must_fit_the_delay_bound() {
    let q = |limit: &str, max: u64| {
        Config::parse(&format!(
            "[settings]\nmax_delay_ms = {max}\n[policies.q]\nlimit = \"{limit}\"\n\
             [[routes]]\npath = \"/q\"\npolicies = [\"q\"]\n"
        ))
    };
    // 4 slots at 2/s: the fourth leaves after 2 s.
    assert!(q("leaky-queue 2/1s burst 4", 2000).is_ok());
    let e = q("leaky-queue 2/1s burst 4", 1999).unwrap_err();
    assert_eq!(e.field, "policies.q.limit");
    assert!(e.reason.contains("2000 ms"), "{e}");
    assert!(
        q("token-bucket 2/1s burst 400", 0).is_ok(),
        "only queues delay"
    );
}

#[test]
fn groups_follow_stacks() {
    let c = Config::parse(
        r#"
        [policies.ip]
        limit = "10/s"
        shards = 4
        [policies.ip-hour]
        limit = "fixed-window 100/h"
        [policies.key]
        limit = "100/s"
        key = "api-key"
        [policies.global]
        limit = "1000/s"
        key = "global"
        [policies.lone]
        limit = "1/s"
        [[routes]]
        path = "/a"
        policies = ["ip", "ip-hour"]
        [[routes]]
        path = "/b"
        policies = ["key", "global"]
        "#,
    )
    .unwrap();
    let g = |n: &str| &c.groups[c.policy(n).unwrap().1.group];
    assert_eq!(g("ip"), g("ip-hour"));
    assert_eq!(g("ip").shards, 4);
    assert_eq!(g("key"), g("global"));
    assert_eq!(g("key").shards, 1, "mixed keys: one object");
    assert_eq!(g("lone").shards, 8);
    assert_ne!(g("lone").name, g("ip").name);
}

#[test]
fn object_per_key_is_the_bench_s_not_the_config_s() {
    let text = r#"
        [policies.ip]
        limit = "10/s"
        [policies.global]
        limit = "1000/s"
        key = "global"
        [policies.lone]
        limit = "1/s"
        [[routes]]
        path = "/a"
        policies = ["ip", "global"]
        "#;
    let e = Config::parse(&format!(
        "{text}[policies.b]\nlimit = \"1/s\"\nobject_per_key = true\n"
    ))
    .unwrap_err();
    assert_eq!(e.field, "policies.b.object_per_key", "{e}");
    let mut c = Config::parse(text).unwrap();
    assert!(c.groups.iter().all(|g| !g.object_per_key));
    c.objects_per_key(" lone ,").unwrap();
    assert!(c.groups[c.policy("lone").unwrap().1.group].object_per_key);
    let e = c.objects_per_key("ip").unwrap_err();
    assert_eq!(e.field, OBJECT_PER_KEY_VAR);
    assert!(e.reason.contains("same key"), "{e}");
    let e = c.objects_per_key("nope").unwrap_err();
    assert!(e.reason.contains("no policy named"), "{e}");
}

/// A config with one route on policy `limit`, whose `[routes.settle]` table is `settle`.
fn settle_config(limit: &str, settle: &str) -> Result<Config, ConfigError> {
    Config::parse(&format!(
        "[policies.a]\nlimit = \"{limit}\"\n[[routes]]\npath = \"/login\"\npolicies = [\"a\"]\n\
         [routes.settle]\n{settle}\n"
    ))
}

#[test]
fn settle_rules_are_read_with_the_header_lower_cased() {
    let c = settle_config(
        "100/min",
        "cost_header = \"X-Tokens\"\nrefund_statuses = [500, 503]",
    )
    .unwrap();
    let rule = c.routes[0].settle.as_ref().unwrap();
    assert_eq!(rule.cost_header.as_deref(), Some("x-tokens"));
    assert_eq!(rule.refund_statuses, [500, 503]);
    let c = settle_config("5/min", "count_statuses = [401]").unwrap();
    assert_eq!(c.routes[0].settle.as_ref().unwrap().count_statuses, [401]);
}

#[test]
fn settle_errors_name_the_field_and_reason() {
    let e = settle_config("5/min", "count_statuses = [401]\nrefund_statuses = [500]").unwrap_err();
    assert_eq!(e.field, "routes[0].settle.refund_statuses");
    assert!(e.reason.contains("not both"), "{e}");
    let e = settle_config("5/min", "count_statuses = [200, 99]").unwrap_err();
    assert_eq!(e.field, "routes[0].settle.count_statuses[1]");
    let e = settle_config("5/min", "cost_header = \"x cost\"").unwrap_err();
    assert_eq!(e.field, "routes[0].settle.cost_header");
    let e = settle_config("5/min", "").unwrap_err();
    assert_eq!(e.field, "routes[0].settle");
    assert!(e.reason.contains("settles by nothing"), "{e}");
    let e = settle_config("5/min", "cost_headr = \"x\"").unwrap_err();
    assert!(e.field.starts_with("routes[0].settle"), "{e}");
    let e = settle_config("concurrency 5", "count_statuses = [401]").unwrap_err();
    assert_eq!(e.field, "routes[0].settle");
    assert!(e.reason.contains("concurrency"), "{e}");
    let e = settle_config("leaky-queue 5/s", "count_statuses = [401]").unwrap_err();
    assert_eq!(e.field, "routes[0].settle");
}
