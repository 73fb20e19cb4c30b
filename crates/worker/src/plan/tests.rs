//! The plan: limits, slots, objects and cache keys from a route or a policy.

use super::*;

const CONFIG: &str = r#"
    [settings]
    shards = 4
    [policies.ip]
    limit = ["10/s", "fixed-window 100/h"]
    [policies.org]
    limit = "10/s"
    tenant = "sliding-window 4/s"
    key = "api-key"
    [policies.global]
    limit = "1000/s"
    key = "global"
    [policies.lone]
    limit = "1/s"
    [policies.solo]
    limit = "5/s"
    [[routes]]
    name = "stacked"
    path = "/a"
    policies = ["ip", "org"]
    [[routes]]
    name = "mixed"
    path = "/b"
    policies = ["lone", "global"]
    [[routes]]
    path = "/health"
    exempt = true
"#;

fn config() -> Config {
    Config::parse(CONFIG).unwrap()
}

fn client(tenant: Option<&str>) -> Identity {
    Identity {
        ip: "ip4:192.0.2.1".into(),
        api_key: Some("key:abc".into()),
        tenant: tenant.map(str::to_string),
        plan: None,
    }
}

fn slots(plan: &Plan) -> Vec<&str> {
    plan.limits.iter().map(|l| l.slot.as_str()).collect()
}

#[test]
fn a_route_s_limits_each_under_its_policy_s_key() {
    let c = config();
    let plan = Plan::for_route(&c, &c.routes[0], &client(Some("acme"))).unwrap();
    let names: Vec<&str> = plan.names.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["ip.1", "ip.2", "org", "org.tenant"]);
    assert_eq!(
        slots(&plan),
        [
            "ip|0|ip4:192.0.2.1",
            "ip|1|ip4:192.0.2.1",
            "org|0|key:abc",
            "org|t|key:abc|acme"
        ]
    );
    let policies: Vec<String> = plan.limits.iter().map(|l| l.policy.to_string()).collect();
    let expected: Vec<String> = plan.names.iter().map(|n| n.limit.to_string()).collect();
    assert_eq!(policies, expected);
    // The object: the group of both policies, which count by different keys, so one.
    assert_eq!(plan.object, "ip+org#0");
}

#[test]
fn no_tenant_or_the_default_one_skips_the_tenant_window() {
    let c = config();
    for tenant in [None, Some("default"), Some("")] {
        let plan = Plan::for_route(&c, &c.routes[0], &client(tenant)).unwrap();
        assert_eq!(plan.limits.len(), 3, "{tenant:?}");
        assert!(plan.names.iter().all(|n| !n.tenant));
    }
}

#[test]
fn policies_counting_by_different_keys_share_one_object() {
    let c = config();
    let a = Plan::for_route(&c, &c.routes[1], &client(None)).unwrap();
    let other = Identity {
        ip: "ip4:198.51.100.9".into(),
        ..client(None)
    };
    let b = Plan::for_route(&c, &c.routes[1], &other).unwrap();
    assert_eq!(a.object, "global+lone#0");
    assert_eq!(a.object, b.object);
    assert_eq!(slots(&a), ["lone|0|ip4:192.0.2.1", "global|0|global"]);
    assert_eq!(Plan::for_route(&c, &c.routes[2], &client(None)), None);
}

#[test]
fn the_apis_plan_one_policy_for_a_given_key() {
    let c = config();
    let (k, _) = c.policy("org").unwrap();
    let key = keying::external_key("user-42");
    let plan = Plan::for_policy(&c, k, &key, Some("acme"));
    assert_eq!(
        slots(&plan),
        [format!("org|0|{key}"), format!("org|t|{key}|acme")]
    );
    // A group whose policies share one key is sharded by it.
    let (solo, _) = c.policy("solo").unwrap();
    for ip in ["ip4:192.0.2.1", "ip4:192.0.2.2", "ip4:192.0.2.3"] {
        let shard = keying::shard_of(ip, 4);
        assert_eq!(
            Plan::for_policy(&c, solo, ip, None).object,
            format!("solo#{shard}")
        );
    }
    // Same object as a route's request would use for that key.
    let (ip, _) = c.policy("ip").unwrap();
    let by_ip = Plan::for_policy(&c, ip, "ip4:192.0.2.1", None);
    let by_route = Plan::for_route(&c, &c.routes[0], &client(None)).unwrap();
    assert_eq!(by_ip.object, by_route.object);
}

#[test]
fn cache_keys_name_the_kind_and_every_slot() {
    let c = config();
    let plan = Plan::for_route(&c, &c.routes[1], &client(None)).unwrap();
    assert_eq!(
        plan.cache_key("mixed"),
        "mixed\nlone|0|ip4:192.0.2.1\nglobal|0|global"
    );
    let other = Plan::for_route(
        &c,
        &c.routes[1],
        &Identity {
            ip: "ip4:192.0.2.2".into(),
            ..client(None)
        },
    )
    .unwrap();
    assert_ne!(plan.cache_key("mixed"), other.cache_key("mixed"));
}

#[test]
fn the_load_test_can_ask_for_one_object_per_key() {
    let mut c = Config::parse("[policies.p]\nlimit = \"1/s\"\nshards = 8\n").unwrap();
    assert!(Plan::for_policy(&c, 0, "ip4:192.0.2.1", None)
        .object
        .starts_with("p#"));
    c.objects_per_key("p").unwrap();
    assert_eq!(
        Plan::for_policy(&c, 0, "ip4:192.0.2.1", None).object,
        "p#k:ip4:192.0.2.1"
    );
}

#[test]
fn admin_keys_are_the_keys_requests_count_under() {
    let c = config();
    let (_, ip) = c.policy("ip").unwrap();
    let (_, org) = c.policy("org").unwrap();
    assert_eq!(
        admin_key(&c, ip, None, Some("192.0.2.1"), None, None).unwrap(),
        "ip4:192.0.2.1"
    );
    assert_eq!(
        admin_key(&c, org, None, None, Some("secret"), None).unwrap(),
        format!("key:{}", keying::sha256_hex(b"secret"))
    );
    assert_eq!(
        admin_key(&c, org, Some("user-42"), None, None, None).unwrap(),
        keying::external_key("user-42")
    );
    assert!(admin_key(&c, ip, None, None, None, None)
        .unwrap_err()
        .contains("counts by IP"));
    assert!(admin_key(&c, ip, Some("k"), Some("192.0.2.1"), None, None).is_err());
    assert_eq!(
        admin_key(&c, org, None, None, None, Some("alice")).unwrap(),
        "sub:alice",
        "a verified JWT's subject, as its requests count"
    );
    assert!(admin_key(&c, org, None, None, Some("secret"), Some("alice")).is_err());
    assert!(admin_key(&c, org, Some("k"), None, None, Some("alice")).is_err());
    assert!(admin_key(&c, ip, None, Some("nope"), None, None)
        .unwrap_err()
        .contains("not an IP"));
}

#[test]
fn the_bearer_must_match_exactly() {
    assert!(bearer_ok(Some("Bearer s3cret"), "s3cret"));
    assert!(!bearer_ok(Some("Bearer s3cre"), "s3cret"));
    assert!(!bearer_ok(Some("Bearer s3cret2"), "s3cret"));
    assert!(!bearer_ok(Some("Bearer S3cret"), "s3cret"));
    assert!(!bearer_ok(Some("s3cret"), "s3cret"));
    assert!(!bearer_ok(None, "s3cret"));
}

#[test]
fn a_key_s_plan_chooses_its_limits_and_names_the_longer_plans_slots_spare() {
    let pro_hash = "ab".repeat(32);
    let c = Config::parse(&format!(
        r#"
        [settings]
        api_keys = [{{ sha256 = "{pro_hash}", plan = "pro" }}]
        [policies.api]
        key = "api-key"
        default = "free"
        plans = [{{ name = "free", limit = "100/min" }}, {{ name = "pro", limit = ["1000/min", "50/s"] }}]
        [[routes]]
        path = "/api/"
        policies = ["api"]
        "#
    ))
    .unwrap();
    let id = |plan: Option<&str>| Identity {
        ip: "ip4:192.0.2.1".into(),
        api_key: Some("key:k".into()),
        tenant: None,
        plan: plan.map(str::to_string),
    };
    let pro = Plan::for_route(&c, &c.routes[0], &id(Some("pro"))).unwrap();
    let slots: Vec<&str> = pro.limits.iter().map(|l| l.slot.as_str()).collect();
    assert_eq!(slots, ["api|0|key:k", "api|1|key:k"]);
    assert_eq!(pro.limits[1].policy, "50/s".parse().unwrap());
    assert!(pro.spare.is_empty());
    let free = Plan::for_route(&c, &c.routes[0], &id(None)).unwrap();
    assert_eq!(free.limits.len(), 1);
    assert_eq!(free.limits[0].policy, "100/min".parse().unwrap());
    assert_eq!(free.spare, ["api|1|key:k"]);
    assert_eq!(
        free.object, pro.object,
        "the key's object, whatever its plan"
    );
}
