//! The config's validation: every rule names its field.

use super::*;
use tollgate_http::jwt::Alg;

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

/// A config with a policy of plans `plans` (TOML lines under `[policies.api]`), the key
/// table `keys` (the value of `settings.api_keys`) and one route on it.
fn plans_config(plans: &str, keys: &str) -> Result<Config, ConfigError> {
    Config::parse(&format!(
        "[settings]\napi_keys = {keys}\n[policies.api]\nkey = \"api-key\"\n{plans}\n\
         [[routes]]\npath = \"/api/\"\npolicies = [\"api\"]\n"
    ))
}

const FREE_PRO: &str = "default = \"free\"\nplans = [{ name = \"free\", limit = \"100/min\" }, \
                        { name = \"pro\", limit = [\"1000/min\", \"50/s\"] }]";

#[test]
fn plans_are_read_with_a_key_table_of_plans_and_plain_hashes() {
    let (a, b) = ("ab".repeat(32), "CD".repeat(32));
    let c = plans_config(
        FREE_PRO,
        &format!("[{{ sha256 = \"{a}\", plan = \"pro\" }}, \"{b}\"]"),
    )
    .unwrap();
    let entry = &c.policy("api").unwrap().1;
    let plans = entry.plans.as_ref().unwrap();
    assert_eq!(plans.default, "free");
    assert_eq!(
        entry.limits,
        ["100/min".parse().unwrap()],
        "the default plan's limits"
    );
    assert_eq!(entry.limits_of(Some("pro")).len(), 2);
    assert_eq!(entry.limits_of(Some("gold")), &entry.limits[..]);
    assert_eq!(
        c.settings.key_plans.get(&a).map(String::as_str),
        Some("pro")
    );
    let lower = "cd".repeat(32);
    assert!(
        c.settings.api_keys.contains(&lower),
        "listed, plan-less, lower-cased"
    );
    assert!(!c.settings.key_plans.contains_key(&lower));
    // The same document in JSON.
    let json = format!(
        r#"{{"settings": {{"api_keys": [{{"sha256": "{a}", "plan": "pro"}}, "{b}"]}},
            "policies": {{"api": {{"key": "api-key", "default": "free",
              "plans": [{{"name": "free", "limit": "100/min"}}, {{"name": "pro", "limit": ["1000/min", "50/s"]}}]}}}},
            "routes": [{{"path": "/api/", "policies": ["api"]}}]}}"#
    );
    assert_eq!(Config::parse(&json).unwrap(), c);
}

#[test]
fn plan_errors_name_the_field_and_reason() {
    let hash = "ab".repeat(32);
    let key = |plan: &str| format!("[{{ sha256 = \"{hash}\", plan = \"{plan}\" }}]");
    let e = plans_config(FREE_PRO, &key("gold")).unwrap_err();
    assert_eq!(e.field, "settings.api_keys[0].plan");
    assert!(
        e.reason
            .contains("no plan named \"gold\" in policies.api.plans"),
        "{e}"
    );
    let e = plans_config(
        FREE_PRO,
        &format!("[\"{hash}\", \"{}\"]", hash.to_uppercase()),
    )
    .unwrap_err();
    assert_eq!(e.field, "settings.api_keys[1]");
    assert!(e.reason.contains("listed twice"), "{e}");
    let e = plans_config(FREE_PRO, "[{ sha256 = \"nope\", plan = \"pro\" }]").unwrap_err();
    assert_eq!(e.field, "settings.api_keys[0].sha256");
    let e = plans_config(
        &FREE_PRO.replace("default = \"free\"", "default = \"gold\""),
        "[]",
    )
    .unwrap_err();
    assert_eq!(e.field, "policies.api.default");
    let e = plans_config(&FREE_PRO.replace("\"pro\"", "\"free\""), "[]").unwrap_err();
    assert_eq!(e.field, "policies.api.plans[1].name");
    assert!(e.reason.contains("already defined"), "{e}");
    let e = plans_config(&FREE_PRO.replace("\"50/s\"", "\"50/fortnight\""), "[]").unwrap_err();
    assert_eq!(e.field, "policies.api.plans[1].limit[1]");
    let e = plans_config(&format!("{FREE_PRO}\nlimit = \"1/s\""), "[]").unwrap_err();
    assert_eq!(e.field, "policies.api.plans");
    let e = plans_config(&FREE_PRO.replace("default = \"free\"", ""), "[]").unwrap_err();
    assert_eq!(e.field, "policies.api.default");
    let e = Config::parse(&format!("[settings]\napi_keys = {}\n", key("pro"))).unwrap_err();
    assert_eq!(e.field, "settings.api_keys[0].plan");
    assert!(e.reason.contains("no policy has plans"), "{e}");
    let by_ip = Config::parse(&format!("[policies.api]\n{FREE_PRO}\n")).unwrap_err();
    assert_eq!(by_ip.field, "policies.api.key");
    let two = Config::parse(&format!(
        "[settings]\napi_keys = [\"{hash}\"]\n[policies.a]\nkey = \"api-key\"\n{FREE_PRO}\n\
         [policies.b]\nkey = \"api-key\"\n{FREE_PRO}\n\
         [[routes]]\npath = \"/\"\npolicies = [\"a\", \"b\"]\n"
    ))
    .unwrap_err();
    assert_eq!(two.field, "routes[0].policies[1]");
    assert!(two.reason.contains("at most one policy of plans"), "{two}");
}

#[test]
fn a_route_s_cost_fits_every_plan() {
    let e = Config::parse(&format!(
        "[settings]\napi_keys = [\"{}\"]\n[policies.api]\nkey = \"api-key\"\n{FREE_PRO}\n\
         [[routes]]\npath = \"/api/\"\npolicies = [\"api\"]\ncost = 60\n",
        "ab".repeat(32)
    ))
    .unwrap_err();
    assert_eq!(e.field, "routes[0].cost");
    assert!(e.reason.contains("capacity 50"), "the pro plan's 50/s: {e}");
}

/// `[settings.jwt]` with `body`.
fn jwt(body: &str) -> Result<Config, ConfigError> {
    Config::parse(&format!("[settings.jwt]\n{body}\n"))
}

#[test]
fn a_bad_jwt_section_names_the_field_and_reason() {
    let cases = [
        ("plan_claim = \"plan\"", "settings.jwt", "no keys"),
        ("jwks_url = \"ftp://x\"", "settings.jwt.jwks_url", "not an https://"),
        (
            "keys = [{ alg = \"HS256\", secret = \"s3cr3t value!\" }]",
            "settings.jwt.keys[0].secret",
            "not a binding name",
        ),
        (
            "keys = [{ secret = \"JWT_SECRET\" }]",
            "settings.jwt.keys[0].alg",
            "HS256",
        ),
        (
            "keys = [{ alg = \"none\", secret = \"JWT_SECRET\" }]",
            "settings.jwt.keys[0].alg",
            "\"none\" is not",
        ),
        (
            "keys = [{ alg = \"HS256\", pem = \"x\" }]",
            "settings.jwt.keys[0].alg",
            "RS256, ES256 or EdDSA",
        ),
        (
            "keys = [{ alg = \"RS256\", pem = \"-----BEGIN PUBLIC KEY-----\\n!!\\n-----END PUBLIC KEY-----\" }]",
            "settings.jwt.keys[0].pem",
            "not base64",
        ),
        (
            "keys = [{ alg = \"RS256\", pem = \"ssh-rsa AAAA\" }]",
            "settings.jwt.keys[0].pem",
            "not a PEM public key",
        ),
        (
            "keys = [{ jwk = { kty = \"oct\", k = \"c2VjcmV0\" } }]",
            "settings.jwt.keys[0].jwk",
            "symmetric",
        ),
        (
            "keys = [{ jwk = { kty = \"EC\", crv = \"P-256\", x = \"AA\" } }]",
            "settings.jwt.keys[0].jwk",
            "needs y",
        ),
        (
            "keys = [{ jwk = { kty = \"OKP\", crv = \"Ed25519\", x = \"AA\", d = \"AA\" } }]",
            "settings.jwt.keys[0].jwk",
            "private key",
        ),
        (
            "keys = [{ jwk = { kty = \"RSA\", n = \"AQAB\", e = \"AQAB\", alg = \"RS512\" } }]",
            "settings.jwt.keys[0].jwk",
            "\"RS512\" is not accepted",
        ),
        (
            "keys = [{ alg = \"ES256\", jwk = { kty = \"RSA\", n = \"AQAB\", e = \"AQAB\" } }]",
            "settings.jwt.keys[0].alg",
            "RS256 key",
        ),
        (
            "keys = [{ alg = \"HS256\", secret = \"A\", jwk = { kty = \"RSA\", n = \"AQAB\", e = \"AQAB\" } }]",
            "settings.jwt.keys[0]",
            "give one of",
        ),
        (
            "keys = [{ kid = \"a\", alg = \"HS256\", secret = \"A\" }, { kid = \"a\", alg = \"HS256\", secret = \"B\" }]",
            "settings.jwt.keys[1].kid",
            "listed twice",
        ),
        (
            "jwks_url = \"https://id.example/jwks\"\non_invalid = \"ignore\"",
            "settings.jwt.on_invalid",
            "\"anonymous\" or \"reject\"",
        ),
        (
            "jwks_url = \"https://id.example/jwks\"\nleeway_secs = 7200",
            "settings.jwt.leeway_secs",
            "between 0 and 3600",
        ),
        (
            "jwks_url = \"https://id.example/jwks\"\nmax_bytes = 10",
            "settings.jwt.max_bytes",
            "between 256",
        ),
        (
            "jwks_url = \"https://id.example/jwks\"\njwks_min_refetch_secs = 0",
            "settings.jwt.jwks_min_refetch_secs",
            "between 1",
        ),
        (
            "jwks_url = \"https://id.example/jwks\"\nplan_claim = \"\"",
            "settings.jwt.plan_claim",
            "1 to 64",
        ),
        (
            "jwks_url = \"https://id.example/jwks\"\nsecret = \"x\"",
            "settings.jwt.secret",
            "unknown field",
        ),
    ];
    for (body, field, reason) in cases {
        let e = jwt(body).unwrap_err();
        assert_eq!(e.field, field, "{body}: {e}");
        assert!(e.reason.contains(reason), "{body}: {e}");
    }
}

#[test]
fn a_jwt_section_keeps_each_key_pinned_to_its_algorithm_and_public_members() {
    // Any DER will do for the file's check: the worker's import checks the key itself.
    let pem = "-----BEGIN PUBLIC KEY-----\\nAQID\\n-----END PUBLIC KEY-----";
    let c = jwt(&format!(
        "keys = [\n\
         {{ kid = \"rsa-1\", alg = \"RS256\", pem = \"{pem}\" }},\n\
         {{ kid = \"ed-1\", jwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = \"AAEC\", use = \"sig\" }} }},\n\
         {{ alg = \"HS256\", secret = \"JWT_SECRET\" }},\n\
         ]\nissuer = \"https://id.example\"\nleeway_secs = 5\non_invalid = \"anonymous\""
    ))
    .unwrap();
    let j = c.settings.jwt.unwrap();
    let algs: Vec<_> = j.keys.iter().map(|k| (k.kid.as_deref(), k.alg)).collect();
    assert_eq!(
        algs,
        [
            (Some("rsa-1"), Alg::Rs256),
            (Some("ed-1"), Alg::EdDsa),
            (None, Alg::Hs256)
        ]
    );
    assert_eq!(j.keys[0].data, JwtKeyData::Spki(vec![1, 2, 3]));
    let JwtKeyData::Jwk(ed) = &j.keys[1].data else {
        panic!("{:?}", j.keys[1].data)
    };
    assert_eq!(
        ed.get("use"),
        None,
        "only the key's public members are kept"
    );
    assert_eq!(ed.get("x").and_then(|x| x.as_str()), Some("AAEC"));
    assert_eq!(j.rules.issuer.as_deref(), Some("https://id.example"));
    assert_eq!(
        (j.rules.leeway_secs, j.jwks_url, j.on_invalid),
        (5, None, InvalidToken::Anonymous)
    );
    // Without the section, no token is read.
    assert_eq!(Config::parse("").unwrap().settings.jwt, None);
}

#[test]
fn a_route_may_answer_refused_tokens_its_own_way_when_tokens_are_read() {
    let routes = "[policies.a]\nlimit = \"10/s\"\n\
                  [[routes]]\npath = \"/strict/\"\npolicies = [\"a\"]\non_invalid_token = \"reject\"\n\
                  [[routes]]\npath = \"/\"\npolicies = [\"a\"]\n";
    let c = Config::parse(&format!(
        "[settings.jwt]\njwks_url = \"https://id.example/jwks\"\n{routes}"
    ))
    .unwrap();
    assert_eq!(c.routes[0].on_invalid_token, Some(InvalidToken::Reject));
    assert_eq!(c.routes[1].on_invalid_token, None);
    let e = Config::parse(routes).unwrap_err();
    assert_eq!(e.field, "routes[0].on_invalid_token");
    assert!(e.reason.contains("no [settings.jwt]"), "{e}");
    let e = Config::parse(&format!(
        "[settings.jwt]\njwks_url = \"https://id.example/jwks\"\n{}",
        routes.replace("\"reject\"", "\"ignore\"")
    ))
    .unwrap_err();
    assert_eq!(e.field, "routes[0].on_invalid_token", "{e}");
}
