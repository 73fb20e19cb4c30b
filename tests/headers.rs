//! Response fields: parsed back with a Structured Field parser and checked.

use sfv::{BareItem, ListEntry, Parser};
use tollgate::headers::{
    legacy, rate_limit, rate_limit_policy, response_headers, retry_after, Named,
};
use tollgate::{decide, Decision, Policy, NANOS_PER_SEC};

fn parse_list(value: &str) -> Vec<(String, Vec<(String, i64)>)> {
    Parser::new(value)
        .parse::<sfv::List>()
        .unwrap_or_else(|e| panic!("{value:?} is not an sf-list: {e}"))
        .into_iter()
        .map(|entry| match entry {
            ListEntry::Item(item) => {
                let BareItem::String(name) = item.bare_item else {
                    panic!("name is not a string")
                };
                let params = item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.as_str().to_string(),
                            v.as_integer().map(i64::from).unwrap(),
                        )
                    })
                    .collect();
                (name.as_str().to_string(), params)
            }
            ListEntry::InnerList(_) => panic!("inner list"),
        })
        .collect()
}

fn p(s: &str) -> Policy {
    s.parse().unwrap()
}

#[test]
fn stacked_fields_parse_back() {
    let per_ip = p("sliding-window 100/min");
    let global = p("10/s burst 40");
    let (d1, _) = decide(&per_ip, None, 0, 1).unwrap();
    let (d2, _) = decide(&global, None, 0, 1).unwrap();
    let items = [
        Named {
            name: "per-ip",
            policy: &per_ip,
            decision: &d1,
        },
        Named {
            name: "global",
            policy: &global,
            decision: &d2,
        },
    ];
    assert_eq!(
        parse_list(&rate_limit_policy(&items)),
        vec![
            ("per-ip".into(), vec![("q".into(), 100), ("w".into(), 60)]),
            ("global".into(), vec![("q".into(), 40), ("w".into(), 4)]),
        ]
    );
    assert_eq!(
        parse_list(&rate_limit(&items)),
        vec![
            ("per-ip".into(), vec![("r".into(), 99), ("t".into(), 120)]),
            ("global".into(), vec![("r".into(), 39), ("t".into(), 1)]),
        ]
    );
}

#[test]
fn denied_response_says_when_and_is_not_cached() {
    let policy = p("2/s");
    let mut state = None;
    let mut last = Decision::default();
    for _ in 0..3 {
        let (d, s) = decide(&policy, state.take(), 0, 1).unwrap();
        if d.allowed {
            state = s;
        }
        last = d;
    }
    assert!(!last.allowed);
    assert_eq!(retry_after(&last), Some(1)); // 0.5 s rounds up to 1
    let h = response_headers(
        &[Named {
            name: "api",
            policy: &policy,
            decision: &last,
        }],
        true,
    );
    let get = |k: &str| h.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("Retry-After"), Some("1"));
    assert_eq!(get("Cache-Control"), Some("no-store"));
    assert_eq!(get("X-RateLimit-Limit"), Some("2"));
    assert_eq!(get("X-RateLimit-Remaining"), Some("0"));
    assert_eq!(get("X-RateLimit-Reset"), Some("1"));
    assert_eq!(
        parse_list(get("RateLimit").unwrap())[0].1,
        vec![("r".into(), 0), ("t".into(), 1)]
    );
}

#[test]
fn allowed_response_has_no_retry_after() {
    let policy = p("fixed-window 5/min");
    let (d, _) = decide(&policy, None, 30 * NANOS_PER_SEC, 1).unwrap();
    let h = response_headers(
        &[Named {
            name: "api",
            policy: &policy,
            decision: &d,
        }],
        false,
    );
    let names: Vec<&str> = h.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["RateLimit-Policy", "RateLimit"]);
    assert_eq!(retry_after(&d), None);
    assert_eq!(legacy(&d)[2], ("X-RateLimit-Reset", "30".to_string()));
}

#[test]
fn names_are_made_safe_and_concurrency_has_no_window() {
    let policy = p("concurrency 3");
    let (d, _) = decide(&policy, None, 0, 1).unwrap();
    let items = [Named {
        name: "per \"user\"\\é\n",
        policy: &policy,
        decision: &d,
    }];
    let parsed = parse_list(&rate_limit_policy(&items));
    assert_eq!(
        parsed,
        vec![("per \"user\"\\??".into(), vec![("q".into(), 3)])]
    );
    assert_eq!(parse_list(&rate_limit(&items))[0].1, vec![("r".into(), 2)]);
}
