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

/// A stack of two limits with the same quota (10 per second, 10 per minute): when the
/// minute window denies, `RateLimit` names the minute window (chosen by index, not by the
/// quota number), `RateLimit-Policy` still describes both, and the 429 body names it too.
#[test]
fn a_stack_names_the_limit_that_denied_even_with_equal_quotas() {
    use tollgate::headers::problem;
    use tollgate::stack::decide_all;
    let (second, minute) = (p("10/s"), p("fixed-window 10/min"));
    let (mut a, mut b) = (None, None);
    for _ in 0..10 {
        assert!(
            decide_all(&mut [(&second, &mut a), (&minute, &mut b)], 0, 1)
                .unwrap()
                .decision
                .allowed
        );
    }
    let d = decide_all(
        &mut [(&second, &mut a), (&minute, &mut b)],
        NANOS_PER_SEC,
        1,
    )
    .unwrap();
    assert_eq!(d.binding(), [1]);
    let items = [
        Named {
            name: "per-second",
            policy: &second,
            decision: &d.each[0],
        },
        Named {
            name: "per-minute",
            policy: &minute,
            decision: &d.each[1],
        },
    ];
    let fields = response_headers(&items, true);
    let field = |k: &str| fields.iter().find(|(n, _)| *n == k).unwrap().1.clone();
    let policies: Vec<String> = parse_list(&field("RateLimit-Policy"))
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(policies, ["per-second", "per-minute"]);
    assert_eq!(
        parse_list(&field("RateLimit")),
        vec![("per-minute".into(), vec![("r".into(), 0), ("t".into(), 59)])]
    );
    assert_eq!(field("Retry-After"), "59");
    assert_eq!(field("X-RateLimit-Limit"), "10");
    assert_eq!(
        problem(&items).unwrap(),
        r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit exceeded; retry in 59 s.","violated-policies":["per-minute"]}"#
    );
    // Allowed, every limit with the least remaining binds: after 4 requests both have 6
    // left, and both are named.
    let (mut a, mut b) = (None, None);
    let mut last = None;
    for _ in 0..4 {
        last = Some(decide_all(&mut [(&second, &mut a), (&minute, &mut b)], 0, 1).unwrap());
    }
    assert_eq!(last.unwrap().binding(), [0, 1]);
}

/// The 429 body escapes what JSON requires in a limit's name.
#[test]
fn the_problem_body_is_json_for_any_name() {
    let body = tollgate::headers::quota_exceeded(&["a\"b\\c\n", "é"], 1);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["violated-policies"][0], "a\"b\\c\n");
    assert_eq!(v["violated-policies"][1], "é");
    assert_eq!(v["status"], 429);
    assert_eq!(v["detail"], "Rate limit exceeded; retry in 1 s.");
}
