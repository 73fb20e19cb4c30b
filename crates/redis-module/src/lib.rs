#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
// The glue below runs only inside Redis (tested there, by tests/module.rs); the unit tests
// build without it.
#![cfg_attr(test, allow(dead_code))]

pub mod command;
pub mod info;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

use redis_module::{
    raw, Context, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue, Status,
};
use tollgate::store::fleet;
use tollgate::{millis, Decision, NANOS_PER_MS};

use command::{decode, fixes_slot, parse, parse_keys, run, run_keys, slot_key, KeyWrite, Op, Ttl};
use info::ErrorKind;

static TEST_CLOCK: AtomicBool = AtomicBool::new(false);
static GRACE_MS: AtomicU64 = AtomicU64::new(1_000);
static LEASE_MS: AtomicU64 = AtomicU64::new(60_000);

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    // `INFO tollgate`: replaces the crate's default callback (registered just before this
    // init, with no section of ours).
    #[cfg(not(test))]
    raw::register_info_function(ctx.get_raw(), Some(info::info_callback));
    // Absolute expiry (Redis 6.2.2 and later): see `StateKey::put`.
    let set_abs_expire = unsafe { raw::RedisModule_SetAbsExpire };
    if set_abs_expire.is_none() {
        ctx.log_warning("tollgate needs Redis 6.2.2 or later (RedisModule_SetAbsExpire)");
        return Status::Err;
    }
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

/// The server's clock, in nanoseconds: the wall clock at microsecond precision, the reading
/// `TIME` gives (Redis 7.0's `TIME` is `gettimeofday`), taken here without running a command.
fn server_now() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    since.as_micros() as u64 * 1_000
}

/// One slot's key, opened with the module key API: a lookup in the keyspace, where
/// `RedisModule_Call` ran a whole `GET` or `SET` command (argument objects, command lookup,
/// a reply built and parsed again) for each read and write: `TOLLGATE.CHECK`'s time inside
/// Redis fell by about two fifths (PERF.md, "Fleet on Redis: speed", has the figures and the
/// `redis-benchmark` run).
struct StateKey {
    key: *mut raw::RedisModuleKey,
    name: RedisString,
}

impl StateKey {
    fn open(ctx: &Context, name: &[u8], write: bool) -> StateKey {
        let name = RedisString::create_from_slice(ctx.get_raw(), name);
        let mode = if write {
            raw::KeyMode::READ | raw::KeyMode::WRITE
        } else {
            raw::KeyMode::READ
        };
        StateKey {
            key: raw::open_key(ctx.get_raw(), name.inner, mode),
            name,
        }
    }

    fn kind(&self) -> raw::KeyType {
        if self.key.is_null() {
            return raw::KeyType::Empty;
        }
        unsafe { raw::RedisModule_KeyType.unwrap()(self.key) }.into()
    }

    /// The stored value, `None` when the key does not exist.
    fn read(&self) -> Result<Option<&[u8]>, RedisError> {
        match self.kind() {
            raw::KeyType::Empty => Ok(None),
            raw::KeyType::String => {
                let mut len = 0;
                let p = raw::string_dma(self.key, &mut len, raw::KeyMode::READ);
                if p.is_null() {
                    return Err(self.wrong_type());
                }
                // The bytes stay valid until the key is written or closed; `decode` copies them.
                Ok(Some(unsafe {
                    std::slice::from_raw_parts(p.cast::<u8>(), len)
                }))
            }
            _ => Err(self.wrong_type()),
        }
    }

    fn wrong_type(&self) -> RedisError {
        err(format!(
            "WRONGTYPE key {} holds another type, not a tollgate state",
            String::from_utf8_lossy(self.name.as_slice())
        ))
    }

    /// Stores `value` to expire at `expire_at_ms` (Unix ms), and replicates it as
    /// `SET <key> <value> PXAT <expire_at_ms>`: what Redis 7.0 propagates for a `SET ... PX`,
    /// so a replica and the AOF hold the same bytes and the same expiry as this server.
    fn put(&self, ctx: &Context, value: &[u8], expire_at_ms: u64) -> Result<(), RedisError> {
        let at = i64::try_from(expire_at_ms).unwrap_or(i64::MAX);
        let expires = || {
            raw::Status::from(unsafe { raw::RedisModule_SetAbsExpire.unwrap()(self.key, at) })
                == raw::Status::Ok
        };
        if !(self.write_bytes(value) && expires()) {
            return Err(err(format!(
                "ERR key {}: could not be written",
                String::from_utf8_lossy(self.name.as_slice())
            )));
        }
        // Binary-safe strings (`Context::create_string` panics on a NUL byte).
        let string = |b: &[u8]| RedisString::create_from_slice(ctx.get_raw(), b);
        let (value, pxat, at) = (
            string(value),
            string(b"PXAT"),
            string(expire_at_ms.to_string().as_bytes()),
        );
        ctx.replicate("SET", &[&self.name, &value, &pxat, &at]);
        ctx.notify_keyspace_event(NotifyEvent::STRING, "set", &self.name);
        ctx.notify_keyspace_event(NotifyEvent::GENERIC, "expire", &self.name);
        Ok(())
    }

    /// Replaces the string's bytes in place (resized to `value`'s length, which after the
    /// first write it already has; a missing key is created): no new object per write.
    fn write_bytes(&self, value: &[u8]) -> bool {
        if raw::string_truncate(self.key, value.len()) != raw::Status::Ok {
            return false;
        }
        let mut len = 0;
        let p = raw::string_dma(self.key, &mut len, raw::KeyMode::WRITE);
        if p.is_null() || len != value.len() {
            return false;
        }
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), p.cast::<u8>(), len) };
        true
    }

    /// Deletes the key if it exists (replicated as `DEL <key>`); whether it existed.
    fn delete(&self, ctx: &Context) -> bool {
        if self.kind() == raw::KeyType::Empty {
            return false;
        }
        unsafe { raw::RedisModule_DeleteKey.unwrap()(self.key) };
        ctx.replicate("DEL", &[&self.name]);
        ctx.notify_keyspace_event(NotifyEvent::GENERIC, "del", &self.name);
        true
    }
}

impl Drop for StateKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            raw::close_key(self.key);
        }
    }
}

/// A decision's fields in a reply: the fleet protocol's ([`fleet::decision_fields`]).
fn decision_reply(d: &Decision) -> Vec<RedisValue> {
    let int = |v: u64| RedisValue::Integer(i64::try_from(v).unwrap_or(i64::MAX));
    fleet::decision_fields(d).into_iter().map(int).collect()
}

/// Each key's stored state, read and decoded (`None`: fresh). A key of another type, or a
/// value that is not a state, is the command's error, counted by its kind.
fn load_states(keys: &[StateKey]) -> Result<Vec<Option<tollgate::State>>, RedisError> {
    keys.iter()
        .map(|key| {
            let stored = key.read().map_err(counted(ErrorKind::WrongType))?;
            decode(key.name.as_slice(), stored)
                .map_err(err)
                .map_err(counted(ErrorKind::State))
        })
        .collect()
}

/// A command's error, counted in `INFO tollgate` by its kind.
fn counted(kind: ErrorKind) -> impl FnOnce(RedisError) -> RedisError {
    move |e| {
        info::error(kind);
        e
    }
}

/// A keyed command's base key and the arguments after it, checked as every keyed command
/// checks them: at least `min` arguments in all (the command's name first), a non-empty key.
fn keyed_args(args: &[RedisString], min: usize) -> Result<(&[u8], Vec<&[u8]>), RedisError> {
    if args.len() < min {
        return Err(counted(ErrorKind::Arity)(RedisError::WrongArity));
    }
    let base = args[1].as_slice();
    if base.is_empty() {
        let e = RedisError::Str("ERR the key must not be empty");
        return Err(counted(ErrorKind::Argument)(e));
    }
    Ok((base, args[2..].iter().map(|a| a.as_slice()).collect()))
}

fn decide(ctx: &Context, args: Vec<RedisString>, op: Op) -> RedisResult {
    let (base, rest) = keyed_args(&args, 3)?;
    let test_clock = TEST_CLOCK.load(Relaxed);
    let req = parse(&rest, test_clock)
        .map_err(err)
        .map_err(counted(ErrorKind::Argument))?;
    let slots = req.limits.slots(req.tenant.as_deref());
    let keys: Vec<StateKey> = slots
        .iter()
        .map(|s| {
            let name = slot_key(base, req.tenant.as_deref(), *s);
            StateKey::open(ctx, &name, op != Op::Peek)
        })
        .collect();
    let loaded = load_states(&keys)?;
    let wall = server_now();
    let now = match req.now_ms {
        Some(ms) => millis(ms),
        None => wall,
    };
    let ttl = (!test_clock || req.now_ms.is_none()).then(|| Ttl {
        grace_ms: GRACE_MS.load(Relaxed),
        lease_ms: LEASE_MS.load(Relaxed),
    });
    let outcome = run(&req, &slots, loaded, now, op, ttl)
        .map_err(err)
        .map_err(counted(ErrorKind::Decision))?;
    apply_writes(ctx, &keys, &outcome.writes, wall)?;
    info::decided(op, outcome.decided.as_ref().map(|(d, _)| d));
    Ok(match outcome.decided {
        Some((decision, each)) => {
            let mut reply = decisions_reply(&decision, &each);
            if let (true, RedisValue::Array(fields)) = (req.with_time, &mut reply) {
                fields.push(RedisValue::Integer(i64::try_from(now).unwrap_or(i64::MAX)));
            }
            reply
        }
        None => RedisValue::SimpleStringStatic("OK"),
    })
}

/// Writes `writes` (by key index) to `keys`, at the server's wall clock `wall` (ns).
fn apply_writes(
    ctx: &Context,
    keys: &[StateKey],
    writes: &[(usize, KeyWrite)],
    wall: u64,
) -> Result<(), RedisError> {
    let wall_ms = wall / NANOS_PER_MS;
    for (i, w) in writes {
        match w {
            KeyWrite::Put { value, ttl_ms } => keys[*i]
                .put(ctx, value, wall_ms.saturating_add(*ttl_ms))
                .map_err(counted(ErrorKind::Write))?,
            KeyWrite::Delete => {
                keys[*i].delete(ctx);
            }
        }
    }
    Ok(())
}

/// A combined decision and each limit's, as a reply (six fields, then an array of six for
/// each limit).
fn decisions_reply(decision: &Decision, each: &[Decision]) -> RedisValue {
    let mut reply = decision_reply(decision);
    reply.push(RedisValue::Array(
        each.iter()
            .map(|d| RedisValue::Array(decision_reply(d)))
            .collect(),
    ));
    RedisValue::Array(reply)
}

/// `TOLLGATE.REQUEST <base> <n> (<suffix> <policy> <cost> <shadow>)*n [EACH] [BLOCKED]`:
/// limits on the separate keys `<base><suffix>`, decided together by the core's
/// [`tollgate::store::request`] (an Envoy request's descriptors, as tollgate-rls decides
/// them).
fn keys_request(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() < 3 {
        return Err(counted(ErrorKind::Arity)(RedisError::WrongArity));
    }
    let base = args[1].as_slice();
    if !fixes_slot(base) {
        let e = RedisError::Str(
            "ERR the base must hold a hash tag ({...}) so that every key shares its slot",
        );
        return Err(counted(ErrorKind::Argument)(e));
    }
    let rest: Vec<&[u8]> = args[2..].iter().map(|a| a.as_slice()).collect();
    let test_clock = TEST_CLOCK.load(Relaxed);
    let req = parse_keys(&rest, test_clock)
        .map_err(err)
        .map_err(counted(ErrorKind::Argument))?;
    let keys: Vec<StateKey> = req
        .items
        .iter()
        .map(|(suffix, _)| StateKey::open(ctx, &[base, suffix].concat(), true))
        .collect();
    let loaded = load_states(&keys)?;
    let wall = server_now();
    let now = req.now_ms.map_or(wall, millis);
    let ttl = req.now_ms.is_none().then(|| Ttl {
        grace_ms: GRACE_MS.load(Relaxed),
        lease_ms: LEASE_MS.load(Relaxed),
    });
    let outcome = run_keys(&req, &loaded, now, ttl)
        .map_err(err)
        .map_err(counted(ErrorKind::Decision))?;
    apply_writes(ctx, &keys, &outcome.writes, wall)?;
    let (decision, each) = &outcome.decided;
    info::decided(Op::Check, Some(decision));
    Ok(decisions_reply(decision, each))
}

/// `TOLLGATE.SETTLE <base> <id> <at> <estimate> <actual> <DEBT|UPTOLIMIT> <limits...>
/// [NOW ms]` (the layout is the core's, [`fleet::settle_command`]): settles a reservation
/// with the core's rule ([`tollgate::store::Batch::settle`]) and keeps its record under
/// [`tollgate::store::settled_name`] (for [`fleet::settled_ttl_ms`]) in the same command,
/// so that the reservation settles once: a second settle of it answers the record and
/// charges nothing. Replies `[record, 1]`, or `[record, 0]` when settled before.
fn settle(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let (base, rest) = keyed_args(&args, 8)?;
    let (s, limiter) = fleet::settle_command::parse(&rest)
        .map_err(|e| err(format!("ERR {e}")))
        .map_err(counted(ErrorKind::Argument))?;
    let test_clock = TEST_CLOCK.load(Relaxed);
    let req = parse(limiter, test_clock)
        .map_err(err)
        .map_err(counted(ErrorKind::Argument))?;
    let record = StateKey::open(ctx, &tollgate::store::settled_name(base, s.id), true);
    if let Some(before) = record.read().map_err(counted(ErrorKind::WrongType))? {
        let before = RedisValue::StringBuffer(before.to_vec());
        return Ok(RedisValue::Array(vec![before, RedisValue::Integer(0)]));
    }
    let slots = req.limits.slots(req.tenant.as_deref());
    let keys: Vec<StateKey> = slots
        .iter()
        .map(|slot| StateKey::open(ctx, &slot_key(base, req.tenant.as_deref(), *slot), true))
        .collect();
    let loaded = load_states(&keys)?;
    let wall = server_now();
    let now = req.now_ms.map_or(wall, millis);
    let mut batch = tollgate::store::Batch::new(&req.limits, &slots, loaded, now);
    let settled = batch
        .settle(s.charge(), s.actual, s.overage)
        .map_err(|e| err(format!("ERR {}: {e}", e.code())))
        .map_err(counted(ErrorKind::Decision))?;
    let grace_ms = GRACE_MS.load(Relaxed);
    let (ttl, kept_ms) = match req.now_ms {
        Some(_) => (None, fleet::TEST_CLOCK_TTL_MS),
        None => (
            Some(Ttl {
                grace_ms,
                lease_ms: LEASE_MS.load(Relaxed),
            }),
            fleet::settled_ttl_ms(&req.limits, grace_ms),
        ),
    };
    let writes = fleet::key_writes(&batch, ttl, || fastrand::u64(..));
    apply_writes(ctx, &keys, &writes, wall)?;
    let bytes = fleet::settled_record(&settled);
    record
        .put(ctx, &bytes, (wall / NANOS_PER_MS).saturating_add(kept_ms))
        .map_err(counted(ErrorKind::Write))?;
    Ok(RedisValue::Array(vec![
        RedisValue::StringBuffer(bytes),
        RedisValue::Integer(1),
    ]))
}

/// `TOLLGATE.PLAN <base> <slots> <cost> <n> <policy>*n [NOW ms]` (the layout is the core's,
/// [`fleet::plan_command`]): a check of one caller under the limits its call names, or its
/// override's (`<base>:o`, read here), its states carried to them first by the core's
/// round ([`fleet::plan::PlanRound`]). Replies a decision, then 1 when the override decided.
fn plan_check(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let (base, rest) = keyed_args(&args, 6)?;
    let req = command::parse_plan(&rest, TEST_CLOCK.load(Relaxed))
        .map_err(err)
        .map_err(counted(ErrorKind::Argument))?;
    let over_key = StateKey::open(ctx, &tollgate::store::override_name(base), false);
    let stored = over_key.read().map_err(counted(ErrorKind::WrongType))?;
    let over = command::decode_override(over_key.name.as_slice(), stored)
        .map_err(err)
        .map_err(counted(ErrorKind::State))?;
    let limits = fleet::plan::limits_for(&req.limits, over.as_ref());
    let n = req.slots.max(limits.layers().len());
    let keys: Vec<StateKey> = (0..n)
        .map(|i| {
            let name = slot_key(base, None, tollgate::store::Slot::Layer(i));
            StateKey::open(ctx, &name, true)
        })
        .collect();
    let written = keys
        .iter()
        .map(|key| {
            let stored = key.read().map_err(counted(ErrorKind::WrongType))?;
            command::decode_under(key.name.as_slice(), stored)
                .map_err(err)
                .map_err(counted(ErrorKind::State))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let wall = server_now();
    let now = req.now_ms.map_or(wall, millis);
    let ttl = req.now_ms.is_none().then(|| Ttl {
        grace_ms: GRACE_MS.load(Relaxed),
        lease_ms: LEASE_MS.load(Relaxed),
    });
    let outcome = command::run_plan(limits, &written, req.cost, now, ttl)
        .map_err(err)
        .map_err(counted(ErrorKind::Decision))?;
    apply_writes(ctx, &keys, &outcome.writes, wall)?;
    info::decided(Op::Check, outcome.decided.as_ref().map(|(d, _)| d));
    let (decision, each) = outcome.decided.unwrap_or_default();
    let mut reply = decisions_reply(&decision, &each);
    if let RedisValue::Array(fields) = &mut reply {
        fields.push(RedisValue::Integer(over.is_some() as i64));
    }
    Ok(reply)
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
    let found = reset_keys(ctx, args)?;
    info::reset();
    Ok(found)
}

fn reset_keys(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let (base, n) = match args.as_slice() {
        [_, base] => (base.as_slice(), 1),
        [_, base, kw, n] if kw.as_slice().eq_ignore_ascii_case(b"LIMITS") => {
            let n = n
                .parse_integer()
                .ok()
                .filter(|n| (1..=command::MAX_STACK as i64).contains(n))
                .ok_or(RedisError::Str("ERR LIMITS must be 1 to 16"))
                .map_err(counted(ErrorKind::Argument))?;
            (base.as_slice(), n as usize)
        }
        _ => return Err(counted(ErrorKind::Arity)(RedisError::WrongArity)),
    };
    let mut found = 0;
    for i in 0..n {
        let key = slot_key(base, None, tollgate::store::Slot::Layer(i));
        let key = StateKey::open(ctx, &key, true);
        // Only a tollgate state is ours to delete (another type is an error, as for a check).
        key.read().map_err(counted(ErrorKind::WrongType))?;
        found += key.delete(ctx) as i64;
    }
    Ok(RedisValue::Integer(found))
}

/// The module's registration (its `RedisModule_OnLoad`), with Redis's allocator as the
/// global one; left out of the unit tests, which run without a server.
#[cfg(not(test))]
#[allow(missing_docs)]
mod registration {
    use super::{check, init, keys_request, peek, plan_check, release, reset, settle};
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
            ["tollgate.request", keys_request, "write deny-oom", 1, 1, 1, ""],
            ["tollgate.settle", settle, "write deny-oom", 1, 1, 1, ""],
            ["tollgate.plan", plan_check, "write deny-oom", 1, 1, 1, ""],
        ],
    }
}
