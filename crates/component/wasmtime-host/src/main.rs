//! Calls the tollgate component from Rust with wasmtime.
//!
//! ```text
//! cargo run --release -- <tollgate.component.wasm> [<vectors dir>] [--bench]
//! ```
//!
//! Loads the import-free component (an empty linker: it needs no WASI), makes a keyed
//! limiter from a policy string, checks a few requests, shows a typed policy error, then
//! replays every `*.json` file of the vectors folder (default `tests/vectors`) and fails on
//! any decision that differs from the file, then drives the adaptive limiter and the native
//! core side by side (`adaptive.rs`). With `--bench`, also prints checks per second.

mod adaptive;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};
use wasmtime::component::{Component, Linker, ResourceAny};
use wasmtime::{Config, Engine, Result, Store};

wasmtime::component::bindgen!({
    world: "limiter",
    path: "../../../wit",
});

use exports::tollgate::limiter::types::{DecideError, Decision, Field, PolicyError, Rule};

/// The vectors' JSON shape of a decision (`MillisDecision`'s camelCase names).
fn decision_json(d: &Decision) -> Value {
    json!({
        "allowed": d.allowed, "limit": d.limit, "remaining": d.remaining,
        "resetAfter": d.reset_after_ms, "retryAfter": d.retry_after_ms, "delay": d.delay_ms,
    })
}

/// The stable code of a decide error (the WIT case name).
fn decide_code(e: &DecideError) -> &'static str {
    match e {
        DecideError::CostExceedsCapacity(_) => "cost-exceeds-capacity",
        DecideError::StateMismatch(_) => "state-mismatch",
        DecideError::NotConcurrency(_) => "not-concurrency",
        DecideError::SlidingLogNeedsAlloc => "sliding-log-needs-alloc",
    }
}

/// The WIT `field` as the core's `Field::name()` spells it (what the vectors say).
fn field_name(f: &Field) -> &'static str {
    match f {
        Field::Policy => "policy",
        Field::Algorithm => "algorithm",
        Field::Limit => "limit",
        Field::Window => "window",
        Field::Burst => "burst",
        Field::MaxInFlight => "max_in_flight",
        Field::Tenant => "tenant",
        Field::Policies => "policies",
        Field::MaxKeys => "max-keys",
    }
}

/// The WIT `rule` case name (the core's `Rule::code()`).
fn rule_code(r: &Rule) -> &'static str {
    match r {
        Rule::Missing => "missing",
        Rule::UnknownAlgorithm => "unknown-algorithm",
        Rule::NotANumber => "not-a-number",
        Rule::Zero => "zero",
        Rule::TooLarge(_) => "too-large",
        Rule::TooSmall(_) => "too-small",
        Rule::UnknownUnit => "unknown-unit",
        Rule::Unexpected => "unexpected",
        Rule::BurstNotApplicable => "burst-not-applicable",
        Rule::TenantAboveShared => "tenant-above-shared",
        Rule::EmptyStack => "empty-stack",
        Rule::NotWholeMilliseconds => "not-whole-milliseconds",
    }
}

fn fail(msg: String) -> wasmtime::Error {
    wasmtime::Error::msg(msg)
}

struct Host {
    store: Store<()>,
    limiter: Limiter,
}

impl Host {
    fn load(path: &Path) -> Result<Host> {
        let engine = Engine::new(&Config::new())?;
        let component = Component::from_file(&engine, path)?;
        // The `limiter` world imports nothing, so the linker stays empty.
        let linker = Linker::new(&engine);
        let mut store = Store::new(&engine, ());
        let limiter = Limiter::instantiate(&mut store, &component, &linker)?;
        Ok(Host { store, limiter })
    }

    /// `keyed-limiter` for a vector's `limiter` spec.
    fn make(&mut self, spec: &Value) -> Result<std::result::Result<ResourceAny, PolicyError>> {
        let max = 10_000;
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let api = self.limiter.tollgate_limiter_keyed().keyed_limiter();
        if let Some(p) = spec.get("policy") {
            api.call_create(&mut self.store, &s(p), max)
        } else if let Some(list) = spec.get("stack").and_then(Value::as_array) {
            let list: Vec<String> = list.iter().map(s).collect();
            api.call_create_stack(&mut self.store, &list, max)
        } else if let Some(f) = spec.get("fairShare") {
            api.call_create_fair_share(&mut self.store, &s(&f["shared"]), &s(&f["tenant"]), max)
        } else {
            Err(fail(format!(
                "limiter spec needs policy, stack or fairShare: {spec}"
            )))
        }
    }

    /// One step, answered as a vector file would say it (`None` for steps that answer
    /// nothing); a check of a stack or fair share (`stacked`) with each limit's decision.
    fn step(&mut self, l: ResourceAny, stacked: bool, step: &Value) -> Result<Option<Value>> {
        let key = step["key"]
            .as_str()
            .ok_or_else(|| fail(format!("no key: {step}")))?;
        let now = step["t"].as_u64().unwrap_or(0);
        let cost = step["cost"].as_u64().unwrap_or(1);
        let tenant = step.get("tenant").and_then(Value::as_str);
        let api = self.limiter.tollgate_limiter_keyed().keyed_limiter();
        let decided = |r: std::result::Result<Decision, DecideError>| match r {
            Ok(d) => decision_json(&d),
            Err(e) => json!({ "error": decide_code(&e) }),
        };
        Ok(match step["op"].as_str().unwrap_or("check") {
            "check" if stacked => Some(
                match api.call_check_detailed(&mut self.store, l, key, tenant, now, cost)? {
                    Ok(d) => {
                        let mut v = decision_json(&d.decision);
                        v["each"] = d.each.iter().map(decision_json).collect();
                        v
                    }
                    Err(e) => json!({ "error": decide_code(&e) }),
                },
            ),
            "check" => Some(decided(api.call_check_tenant(
                &mut self.store,
                l,
                key,
                tenant,
                now,
                cost,
            )?)),
            "peek" => Some(decided(api.call_peek(&mut self.store, l, key, now)?)),
            "release" => api
                .call_release(&mut self.store, l, key, cost)?
                .err()
                .map(|e| json!({ "error": decide_code(&e) })),
            "reset" => {
                api.call_reset(&mut self.store, l, key)?;
                None
            }
            other => return Err(fail(format!("unknown op {other}"))),
        })
    }
}

fn replay(host: &mut Host, dir: &Path) -> Result<usize> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "json"));
    files.sort();
    let mut checked = 0;
    for file in &files {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(file)?)
            .map_err(|e| fail(format!("{}: {e}", file.display())))?;
        if let Some(steps) = v.get("steps").and_then(Value::as_array) {
            let l = host
                .make(&v["limiter"])?
                .map_err(|e| fail(format!("{}: {}", file.display(), e.message)))?;
            for (i, step) in steps.iter().enumerate() {
                let got = host.step(l, v["limiter"].get("policy").is_none(), step)?;
                if got.as_ref() != step.get("expect") {
                    return Err(fail(format!(
                        "{} step {i}: {step}\n  got {}",
                        file.display(),
                        got.unwrap_or(Value::Null)
                    )));
                }
                checked += 1;
            }
            l.resource_drop(&mut host.store)?;
        }
        for case in v
            .get("cases")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = case["policy"].as_str().unwrap_or_default();
            let api = host.limiter.tollgate_limiter_keyed().keyed_limiter();
            let err = match api.call_create(&mut host.store, text, 10)? {
                Ok(l) => return Err(fail(format!("{text:?} was accepted (leaked {l:?})"))),
                Err(e) => e,
            };
            let got = json!({
                "field": field_name(&err.field), "rule": rule_code(&err.rule), "message": err.message,
            });
            let want =
                json!({"field": case["field"], "rule": case["rule"], "message": case["message"]});
            if got != want {
                return Err(fail(format!("{text:?}: got {got}, want {want}")));
            }
            checked += 1;
        }
    }
    if checked == 0 {
        return Err(fail(format!("no vectors in {}", dir.display())));
    }
    Ok(checked)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let mut paths = args.iter().filter(|a| !a.starts_with("--"));
    let component = paths.next().ok_or_else(|| {
        fail("usage: tollgate-wasmtime-host <component.wasm> [vectors dir] [--bench]".into())
    })?;
    let vectors = paths
        .next()
        .map_or_else(|| PathBuf::from("tests/vectors"), PathBuf::from);
    let mut host = Host::load(Path::new(component))?;

    // The example: 2 requests per second per key.
    let api = host.limiter.tollgate_limiter_keyed().keyed_limiter();
    let l = api
        .call_create(&mut host.store, "2/s", 1000)?
        .map_err(|e| fail(e.message))?;
    for t in [0, 0, 0, 500] {
        let d = api.call_check(&mut host.store, l, "alice", t, 1)?;
        match d {
            Ok(d) => println!(
                "t={t}ms alice: allowed={} remaining={} retry-after={}ms",
                d.allowed, d.remaining, d.retry_after_ms
            ),
            Err(e) => println!("t={t}ms alice: error {e:?}"),
        }
    }
    match api.call_create(&mut host.store, "10/fortnight", 1000)? {
        Ok(_) => return Err(fail("a bad policy was accepted".into())),
        Err(e) => println!(
            "bad policy: field={} rule={}: {}",
            field_name(&e.field),
            rule_code(&e.rule),
            e.message
        ),
    }
    l.resource_drop(&mut host.store)?;

    let checked = replay(&mut host, &vectors)?;
    println!(
        "vectors: {checked} steps and cases in {} agree with the core",
        vectors.display()
    );

    let (steps, probing) = adaptive::compare(&mut host)?;
    println!(
        "adaptive: {steps} acquires and releases agree with the core ({probing} rounds re-measuring)"
    );

    if bench {
        let api = host.limiter.tollgate_limiter_keyed().keyed_limiter();
        let l = api
            .call_create(&mut host.store, "token-bucket 100000000/s", 100_000)?
            .map_err(|e| fail(e.message))?;
        for (name, keys) in [("1 key", 1usize), ("10k keys", 10_000)] {
            let names: Vec<String> = (0..keys).map(|i| format!("user-{i}")).collect();
            let n = 2_000_000u64;
            let start = Instant::now();
            let mut allowed = 0u64;
            for i in 0..n {
                let d =
                    api.call_check(&mut host.store, l, &names[i as usize % keys], i / 1000, 1)?;
                allowed += d.map_or(0, |d| d.allowed as u64);
            }
            let secs = start.elapsed().as_secs_f64();
            assert_eq!(allowed, n);
            println!(
                "token-bucket, {name}: {:.2} M checks/s",
                n as f64 / secs / 1e6
            );
        }
    }
    Ok(())
}
