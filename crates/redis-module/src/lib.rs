//! # tollgate-redis-module
//!
//! tollgate's core inside Redis: every algorithm, stacks and fair share decided in one round
//! trip, atomically, at the server's clock, on the same keys and bytes as the fleet store
//! (`tollgate-redis`), so module clients and compare-and-set clients share one limit.
//!
//! ```text
//! redis-server --loadmodule target/release/libtollgate_redis_module.so
//! TOLLGATE.CHECK   <base> <policy> | STACK <n> <policy>... [COST n] [TENANT t <policy>] [MAXDELAY ms]
//! TOLLGATE.PEEK    <base> <policy> | STACK <n> <policy>... [TENANT t <policy>]
//! TOLLGATE.RELEASE <base> <policy> | STACK <n> <policy>... [COST n]
//! TOLLGATE.RESET   <base> [LIMITS n]
//! ```
//!
//! `<base>` is the key's name without its slot, `<prefix>:{<namespace>:<key>}` (see
//! `tollgate_redis::keys`); the command reads and writes `<base>:<i>` per limit and
//! `<base>:t:<tenant>` for a fair share's tenant window, all in the base's hash slot.
//!
//! The reply of CHECK and PEEK is an array: `allowed` (1 or 0), `limit`, `remaining`,
//! `reset-after` (ms), `retry-after` (ms), `delay` (ms), then an array with the same six
//! fields for each limit. The writes are replicated (to replicas and the AOF) as the
//! `SET ... PX` / `DEL` commands they are, never the command itself, so a replica stores the
//! same bytes whatever its clock. Load arguments: `GRACE <ms>` (added to every TTL, default
//! 1000), `LEASE <ms>` (a concurrency count's lifetime, default 60000), `TESTCLOCK` (accept
//! `NOW <ms>` for tests; never in production).

#![warn(missing_docs)]
// The glue below runs only inside Redis (tested there, by tests/module.rs); the unit tests
// build without it.
#![cfg_attr(test, allow(dead_code))]

pub mod command;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use redis_module::{
    CallOptionsBuilder, CallResult, Context, RedisError, RedisResult, RedisString, RedisValue,
    Status,
};
use tollgate::{millis, Decision, NANOS_PER_SEC};

use command::{decode, parse, run, slot_key, KeyWrite, Op, Ttl};

static TEST_CLOCK: AtomicBool = AtomicBool::new(false);
static GRACE_MS: AtomicU64 = AtomicU64::new(1_000);
static LEASE_MS: AtomicU64 = AtomicU64::new(60_000);

fn init(_ctx: &Context, args: &[RedisString]) -> Status {
    let mut args = args
        .iter()
        .map(|a| a.to_string_lossy().to_ascii_uppercase());
    while let Some(a) = args.next() {
        let value = |v: Option<String>| v.and_then(|v| v.parse::<u64>().ok()).filter(|v| *v > 0);
        match a.as_str() {
            "TESTCLOCK" => TEST_CLOCK.store(true, Relaxed),
            "GRACE" => match value(args.next()) {
                Some(v) => GRACE_MS.store(v, Relaxed),
                None => return Status::Err,
            },
            "LEASE" => match value(args.next()) {
                Some(v) => LEASE_MS.store(v, Relaxed),
                None => return Status::Err,
            },
            _ => return Status::Err,
        }
    }
    Status::Ok
}

fn err(message: String) -> RedisError {
    RedisError::String(message)
}

/// The server's clock (`TIME`), in nanoseconds.
fn server_now(ctx: &Context) -> Result<u64, RedisError> {
    match ctx.call("TIME", &[] as &[&str])? {
        RedisValue::Array(v) if v.len() == 2 => {
            let n = |x: &RedisValue| -> Option<u64> {
                match x {
                    RedisValue::SimpleString(s) | RedisValue::BulkString(s) => s.parse().ok(),
                    RedisValue::StringBuffer(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                    RedisValue::Integer(i) => u64::try_from(*i).ok(),
                    _ => None,
                }
            };
            let (s, us) = (n(&v[0]), n(&v[1]));
            match (s, us) {
                (Some(s), Some(us)) => Ok(s * NANOS_PER_SEC + us * 1_000),
                _ => Err(RedisError::Str("ERR unexpected TIME reply")),
            }
        }
        _ => Err(RedisError::Str("ERR unexpected TIME reply")),
    }
}

fn get(ctx: &Context, key: &[u8]) -> Result<Option<Vec<u8>>, RedisError> {
    match ctx.call("GET", &[key])? {
        RedisValue::Null => Ok(None),
        RedisValue::StringBuffer(b) => Ok(Some(b)),
        RedisValue::BulkString(s) | RedisValue::SimpleString(s) => Ok(Some(s.into_bytes())),
        _ => Err(err(format!(
            "ERR key {} is not a tollgate state",
            String::from_utf8_lossy(key)
        ))),
    }
}

/// Runs a write as the command it is, replicated (to replicas and the AOF) as such.
fn write(ctx: &Context, args: &[&[u8]], command: &str) -> Result<(), RedisError> {
    let options = CallOptionsBuilder::new()
        .replicate()
        .errors_as_replies()
        .build();
    let reply: CallResult = ctx.call_ext(command, &options, args);
    match reply {
        Ok(_) => Ok(()),
        Err(e) => Err(err(e.to_utf8_string().unwrap_or_default())),
    }
}

fn decision_reply(d: &Decision) -> Vec<RedisValue> {
    let int = |v: u64| RedisValue::Integer(i64::try_from(v).unwrap_or(i64::MAX));
    vec![
        RedisValue::Integer(d.allowed as i64),
        int(d.limit),
        int(d.remaining),
        int(d.reset_after_ms()),
        int(d.retry_after_ms()),
        int(d.delay_ms()),
    ]
}

fn decide(ctx: &Context, args: Vec<RedisString>, op: Op) -> RedisResult {
    if args.len() < 3 {
        return Err(RedisError::WrongArity);
    }
    let base = args[1].as_slice();
    if base.is_empty() {
        return Err(RedisError::Str("ERR the key must not be empty"));
    }
    let rest: Vec<&[u8]> = args[2..].iter().map(|a| a.as_slice()).collect();
    let test_clock = TEST_CLOCK.load(Relaxed);
    let req = parse(&rest, test_clock).map_err(err)?;
    if op == Op::Peek && req.cost != 1 {
        return Err(RedisError::Str("ERR PEEK takes no COST"));
    }
    let slots = req.limits.slots(req.tenant.as_deref());
    let keys: Vec<Vec<u8>> = slots
        .iter()
        .map(|s| slot_key(base, req.tenant.as_deref(), *s))
        .collect();
    let mut loaded = Vec::with_capacity(keys.len());
    for k in &keys {
        loaded.push(decode(k, get(ctx, k)?.as_deref()).map_err(err)?);
    }
    let now = match req.now_ms {
        Some(ms) => millis(ms),
        None => server_now(ctx)?,
    };
    let ttl = (!test_clock || req.now_ms.is_none()).then(|| Ttl {
        grace_ms: GRACE_MS.load(Relaxed),
        lease_ms: LEASE_MS.load(Relaxed),
    });
    let outcome = run(&req, &slots, loaded, now, op, ttl).map_err(err)?;
    for (i, w) in &outcome.writes {
        match w {
            KeyWrite::Put { value, ttl_ms } => {
                let ttl = ttl_ms.to_string();
                write(ctx, &[&keys[*i], value, b"PX", ttl.as_bytes()], "SET")?
            }
            KeyWrite::Delete => write(ctx, &[&keys[*i]], "DEL")?,
        }
    }
    Ok(match outcome.decided {
        Some((decision, each)) => {
            let mut reply = decision_reply(&decision);
            reply.push(RedisValue::Array(
                each.iter()
                    .map(|d| RedisValue::Array(decision_reply(d)))
                    .collect(),
            ));
            RedisValue::Array(reply)
        }
        None => RedisValue::SimpleStringStatic("OK"),
    })
}

fn check(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    decide(ctx, args, Op::Check)
}

fn peek(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    decide(ctx, args, Op::Peek)
}

fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    decide(ctx, args, Op::Release)
}

fn reset(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let (base, n) = match args.as_slice() {
        [_, base] => (base.as_slice(), 1),
        [_, base, kw, n] if kw.as_slice().eq_ignore_ascii_case(b"LIMITS") => {
            let n = n
                .parse_integer()
                .ok()
                .filter(|n| (1..=command::MAX_STACK as i64).contains(n))
                .ok_or(RedisError::Str("ERR LIMITS must be 1 to 16"))?;
            (base.as_slice(), n as usize)
        }
        _ => return Err(RedisError::WrongArity),
    };
    let mut found = 0;
    for i in 0..n {
        let key = slot_key(base, None, tollgate::store::Slot::Layer(i));
        if get(ctx, &key)?.is_some() {
            write(ctx, &[&key], "DEL")?;
            found += 1;
        }
    }
    Ok(RedisValue::Integer(found))
}

/// The module's registration (its `RedisModule_OnLoad`), with Redis's allocator as the
/// global one; left out of the unit tests, which run without a server.
#[cfg(not(test))]
#[allow(missing_docs)]
mod registration {
    use super::{check, init, peek, release, reset};
    use redis_module::redis_module;

    redis_module! {
        name: "tollgate",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [],
        init: init,
        commands: [
            ["tollgate.check", check, "write deny-oom", 1, 1, 1, ""],
            ["tollgate.peek", peek, "readonly", 1, 1, 1, ""],
            ["tollgate.release", release, "write", 1, 1, 1, ""],
            ["tollgate.reset", reset, "write", 1, 1, 1, ""],
        ],
    }
}
