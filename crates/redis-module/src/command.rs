//! The commands' arguments and their decision, as plain Rust (tested without a server):
//! parse the limiter and options, then run one [`Batch`] over the loaded values.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex};

use tollgate::fair_share::FairShare;
use tollgate::stack::combine;
use tollgate::store::fleet;
use tollgate::store::fleet::plan::{self, PlanRound, StoredOverride, Written};
use tollgate::store::fleet::plan_command;
use tollgate::store::request::{self, command, Counted};
use tollgate::store::{Batch, Limits, Op as BatchOp, Slot};
use tollgate::{millis, Decision, Nanos, Policy, State, MAX_COUNT};

pub use tollgate::store::fleet::{KeyWrite, Ttl};

/// Arguments after the key, parsed.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// What decides.
    pub limits: Limits,
    /// Cost units (1 unless `COST`).
    pub cost: u64,
    /// Whether `COST` was given (a `PEEK` decides a cost of 0 without it).
    pub cost_given: bool,
    /// The tenant (`TENANT t <policy>`), for a fair share.
    pub tenant: Option<String>,
    /// `NOW <ms>`: the test clock (only when the module was loaded with `TESTCLOCK`).
    pub now_ms: Option<u64>,
    /// `MAXDELAY <ms>`: keep an admission only if its queue delay is at most this (a
    /// waiting caller's remaining time).
    pub max_delay_ms: Option<u64>,
    /// `WITHTIME`: the reply also carries the instant decided at, in ns (a reserve's, which
    /// its settle names).
    pub with_time: bool,
}

/// An argument error: the reply's message.
pub type ArgError = String;

fn text(arg: &[u8], what: &str) -> Result<String, ArgError> {
    String::from_utf8(arg.to_vec()).map_err(|_| format!("ERR {what} is not UTF-8"))
}

/// Parsed policies by their argument bytes: a client sends the same few policies on every
/// command, and parsing one took about a tenth of `TOLLGATE.CHECK`'s own time in Redis (perf,
/// fixed window, 10k keys). Bounded: emptied when it reaches `CACHED_POLICIES`. Commands run
/// on Redis's main thread, so the lock is never contended.
static POLICIES: LazyLock<Mutex<HashMap<Vec<u8>, Policy>>> = LazyLock::new(Default::default);

/// The most parsed policies kept (see `POLICIES`).
const CACHED_POLICIES: usize = 256;

/// Policies found in [`POLICIES`] and policies parsed (for `INFO tollgate`).
static POLICY_CACHE_HITS: AtomicU64 = AtomicU64::new(0);
static POLICY_CACHE_MISSES: AtomicU64 = AtomicU64::new(0);

/// The policy cache's hits, misses (policies parsed, errors included) and size now.
pub fn policy_cache() -> (u64, u64, u64) {
    let size = POLICIES.lock().unwrap_or_else(|e| e.into_inner()).len();
    (
        POLICY_CACHE_HITS.load(Relaxed),
        POLICY_CACHE_MISSES.load(Relaxed),
        size as u64,
    )
}

fn policy(arg: &[u8]) -> Result<Policy, ArgError> {
    let mut cache = POLICIES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = cache.get(arg) {
        POLICY_CACHE_HITS.fetch_add(1, Relaxed);
        return Ok(*p);
    }
    POLICY_CACHE_MISSES.fetch_add(1, Relaxed);
    let p: Policy = text(arg, "the policy")?
        .parse()
        .map_err(|e| format!("ERR {e}"))?;
    if cache.len() >= CACHED_POLICIES {
        cache.clear();
    }
    cache.insert(arg.to_vec(), p);
    Ok(p)
}

fn number(arg: Option<&[u8]>, what: &str, max: u64) -> Result<u64, ArgError> {
    let arg = arg.ok_or_else(|| format!("ERR {what} needs a value"))?;
    let n: u64 = std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("ERR {what} must be a whole number"))?;
    if n > max {
        return Err(format!(
            "ERR {what} {n} is above the largest allowed, {max}"
        ));
    }
    Ok(n)
}

/// The most policies one stack may have.
pub const MAX_STACK: u64 = 16;

/// Parses `<policy> | STACK <n> <policy>...` and the options `COST n`, `TENANT t <policy>`,
/// `NOW ms`, `MAXDELAY ms`, `WITHTIME` (`args` excludes the command and the key).
pub fn parse(args: &[&[u8]], test_clock: bool) -> Result<Request, ArgError> {
    let mut rest = args;
    let mut layers = Vec::new();
    match rest {
        [] => return Err("ERR wrong number of arguments: a policy is required".into()),
        [kw, tail @ ..] if kw.eq_ignore_ascii_case(b"STACK") => {
            let n = number(tail.first().copied(), "STACK", MAX_STACK)? as usize;
            if n == 0 {
                return Err("ERR STACK needs at least one policy".into());
            }
            let given = tail
                .get(1..1 + n)
                .ok_or("ERR STACK: fewer policies than its count")?;
            for p in given {
                layers.push(policy(p)?);
            }
            rest = &tail[1 + n..];
        }
        [p, tail @ ..] => {
            layers.push(policy(p)?);
            rest = tail;
        }
    }
    let mut req = Request {
        limits: Limits::stack(&layers).map_err(|e| format!("ERR {e}"))?,
        cost: 1,
        cost_given: false,
        tenant: None,
        now_ms: None,
        max_delay_ms: None,
        with_time: false,
    };
    let mut tenant_policy = None;
    while let [option, tail @ ..] = rest {
        let upper = option.to_ascii_uppercase();
        rest = tail;
        match upper.as_slice() {
            b"COST" => {
                req.cost = number(rest.first().copied(), "COST", MAX_COUNT)?;
                req.cost_given = true;
                rest = &rest[1..];
            }
            b"NOW" if test_clock => {
                req.now_ms = Some(number(rest.first().copied(), "NOW", u64::MAX)?);
                rest = &rest[1..];
            }
            b"NOW" => return Err("ERR NOW needs the module loaded with TESTCLOCK".into()),
            b"MAXDELAY" => {
                req.max_delay_ms = Some(number(rest.first().copied(), "MAXDELAY", u64::MAX)?);
                rest = &rest[1..];
            }
            b"WITHTIME" => req.with_time = true,
            b"TENANT" => {
                let [t, p, tail @ ..] = rest else {
                    return Err("ERR TENANT needs a tenant and its policy".into());
                };
                req.tenant = Some(text(t, "the tenant")?);
                tenant_policy = Some(policy(p)?);
                rest = tail;
            }
            _ => {
                return Err(format!(
                    "ERR unknown option {:?} (expected COST, TENANT, MAXDELAY, WITHTIME or NOW)",
                    String::from_utf8_lossy(option)
                ))
            }
        }
    }
    if let Some(tp) = tenant_policy {
        if layers.len() != 1 {
            return Err("ERR TENANT applies to a single shared policy, not a stack".into());
        }
        let fair = FairShare::new(layers[0], tp).map_err(|e| format!("ERR {e}"))?;
        req.limits = Limits::fair_share(fair);
    }
    Ok(req)
}

/// The Redis key of `slot` under `base` (`<prefix>:{<namespace>:<key>}`, the key already
/// encoded by the client), as the fleet store names it (the core's key layout).
pub fn slot_key(base: &[u8], tenant: Option<&str>, slot: Slot) -> Vec<u8> {
    tollgate::store::slot_name(base, tenant, slot)
}

/// The operation of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Decide and charge.
    Check,
    /// Decide for a cost of 0, write nothing.
    Peek,
    /// Release the cost from every concurrency limit.
    Release,
}

/// One command's result: the decision (none for a release) and the writes.
pub struct Outcome {
    /// The combined decision and each limit's.
    pub decided: Option<(Decision, Vec<Decision>)>,
    /// `(slot index, write)`.
    pub writes: Vec<(usize, KeyWrite)>,
}

/// Decodes a stored value (the fleet's codec: [`fleet::decode_value`]); `key` names it in
/// errors. An absent key, or an empty value (what the read script answers for one), is no
/// state.
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<State>, ArgError> {
    let Some(v) = value else { return Ok(None) };
    match fleet::decode_value(v) {
        Ok(stored) => Ok(stored.map(|s| s.state)),
        Err(e) => Err(format!("ERR key {}: {e}", String::from_utf8_lossy(key))),
    }
}

/// A decision error's reply: its stable code, then the sentence.
fn decide_error(e: tollgate::DecideError) -> ArgError {
    format!("ERR {}: {e}", e.code())
}

/// Runs `op` over the loaded states at `now`. Errors (a cost above the capacity, a
/// release without a concurrency limit) write nothing.
pub fn run(
    req: &Request,
    slots: &[Slot],
    loaded: Vec<Option<State>>,
    now: Nanos,
    op: Op,
    ttl: Option<Ttl>,
) -> Result<Outcome, ArgError> {
    let mut batch = Batch::new(&req.limits, slots, loaded, now);
    let op = match op {
        // A waiter's remaining time (`MAXDELAY`): kept only as the core's waiting rule says.
        Op::Check => match req.max_delay_ms {
            Some(ms) => BatchOp::Acquire {
                cost: req.cost,
                left: Some(millis(ms)),
            },
            None => BatchOp::Check(req.cost),
        },
        // With COST: what a request of that cost would get (a waiter's look), nothing
        // written.
        Op::Peek => BatchOp::Peek(if req.cost_given { req.cost } else { 0 }),
        Op::Release => BatchOp::Release(req.cost),
    };
    let decided = batch
        .apply(op)
        .map_err(decide_error)?
        .map(|d| (d.decision, d.each));
    let writes = match op {
        BatchOp::Peek(_) => Vec::new(),
        _ => fleet::key_writes(&batch, ttl, || fastrand::u64(..)),
    };
    Ok(Outcome { decided, writes })
}

/// `TOLLGATE.REQUEST`'s arguments after the base, parsed: limits on separate keys (an Envoy
/// request's descriptors), decided by the core's [`tollgate::store::request`]. The layout is
/// the core's ([`tollgate::store::request::command`]), the one tollgate-redis sends.
pub type KeysRequest<'a> = command::Args<'a>;

/// Parses `<n> (<suffix> <policy> <cost> <shadow 0|1>)*n [EACH] [BLOCKED] [NOW ms]` (`args`
/// excludes the command and the base) by the core's layout, with the policy cache.
pub fn parse_keys<'a>(args: &[&'a [u8]], test_clock: bool) -> Result<KeysRequest<'a>, ArgError> {
    command::parse(args, test_clock, |p| {
        // The cache's errors already read "ERR ...".
        policy(p).map_err(|e| e.trim_start_matches("ERR ").to_string())
    })
    .map_err(|e| format!("ERR {e}"))
}

/// Whether `base` fixes the hash slot of every key made by appending to it: it holds a
/// non-empty hash tag (`{...}`), so that on a Redis Cluster all of a request's keys live
/// in the base's slot, on the node the command was sent to.
pub fn fixes_slot(base: &[u8]) -> bool {
    let Some(open) = base.iter().position(|&b| b == b'{') else {
        return false;
    };
    matches!(base[open + 1..].iter().position(|&b| b == b'}'), Some(len) if len > 0)
}

/// `TOLLGATE.REQUEST`'s result: the request's decision, each limit's, and the writes.
pub struct KeysOutcome {
    /// The request's decision: its enforced limits' combined ([`tollgate::stack::combine`];
    /// allowed when only shadow limits denied), then each limit's, in order.
    pub decided: (Decision, Vec<Decision>),
    /// `(limit index, write)`.
    pub writes: Vec<(usize, KeyWrite)>,
}

/// Runs a [`KeysRequest`] over the loaded states at `now`.
pub fn run_keys(
    req: &KeysRequest,
    loaded: &[Option<State>],
    now: Nanos,
    ttl: Option<Ttl>,
) -> Result<KeysOutcome, ArgError> {
    let counted: Vec<Counted> = req.items.iter().map(|(_, c)| *c).collect();
    let outcome =
        request::decide(&counted, loaded, now, req.charging, req.blocked).map_err(decide_error)?;
    let enforced: Vec<Decision> = counted
        .iter()
        .zip(&outcome.each)
        .filter(|(c, _)| !c.shadow)
        .map(|(_, d)| *d)
        .collect();
    let mut decision = combine(&enforced);
    if req.blocked {
        decision.allowed = false;
    }
    let writes = outcome
        .writes
        .into_iter()
        .map(|(i, w)| (i, fleet::key_write(w, ttl, || fastrand::u64(..))))
        .collect();
    Ok(KeysOutcome {
        decided: (decision, outcome.each),
        writes,
    })
}

/// `TOLLGATE.PLAN`'s arguments after the base, parsed by the core's layout
/// ([`tollgate::store::fleet::plan_command`]), with the policy cache.
pub fn parse_plan(args: &[&[u8]], test_clock: bool) -> Result<plan_command::PlanArgs, ArgError> {
    plan_command::parse(args, test_clock, |p| {
        // The cache's errors already read "ERR ...".
        policy(p).map_err(|e| e.trim_start_matches("ERR ").to_string())
    })
    .map_err(|e| format!("ERR {e}"))
}

/// A caller's stored override (`None`: it has none); `key` names it in errors.
pub fn decode_override(
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<Option<StoredOverride>, ArgError> {
    plan::decode_override(value.unwrap_or_default())
        .map_err(|e| format!("ERR key {}: {e}", String::from_utf8_lossy(key)))
}

/// A caller's stored slot value, of either layout ([`plan::decode_value_under`]); `key`
/// names it in errors.
pub fn decode_under(key: &[u8], value: Option<&[u8]>) -> Result<Option<Written>, ArgError> {
    plan::decode_value_under(value.unwrap_or_default())
        .map_err(|e| format!("ERR key {}: {e}", String::from_utf8_lossy(key)))
}

/// Runs one plan check of `cost` under `limits` (the override's or the plan's) over a
/// caller's stored slots, by the core's round ([`PlanRound`]: the states carried first).
/// Errors (a cost above the capacity) write nothing.
pub fn run_plan(
    limits: &Limits,
    stored: &[Option<Written>],
    cost: u64,
    now: Nanos,
    ttl: Option<Ttl>,
) -> Result<Outcome, ArgError> {
    let mut round = PlanRound::new(limits, stored, now).map_err(decide_error)?;
    let d = round.batch().decide(cost).map_err(decide_error)?;
    Ok(Outcome {
        decided: Some((d.decision, d.each)),
        writes: round.key_writes(ttl, || fastrand::u64(..)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments separated by `|` (a policy has spaces).
    fn args(s: &str) -> Vec<Vec<u8>> {
        s.split('|').map(|a| a.as_bytes().to_vec()).collect()
    }

    fn parse_str(s: &str, test_clock: bool) -> Result<Request, ArgError> {
        let a = args(s);
        let refs: Vec<&[u8]> = a.iter().map(Vec::as_slice).collect();
        parse(&refs, test_clock)
    }

    #[test]
    fn forms() {
        let r = parse_str("10/s|COST|3", false).unwrap();
        assert_eq!((r.limits.layers().len(), r.cost), (1, 3));
        let r = parse_str("STACK|2|10/s|100/min|cost|2", false).unwrap();
        assert_eq!((r.limits.layers().len(), r.cost), (2, 2));
        let r = parse_str("gcra 2/2000ms|TENANT|acme|gcra 1/2000ms", false).unwrap();
        assert_eq!(r.tenant.as_deref(), Some("acme"));
        assert_eq!(r.limits.tenant().unwrap().limit(), 1);
    }

    #[test]
    fn cached_policies_are_the_parsed_ones_and_the_cache_stays_bounded() {
        for round in 0..2 {
            for i in 1..=600 {
                let p = format!("{i}/s burst {}", i + round);
                assert_eq!(policy(p.as_bytes()), Ok(p.parse().unwrap()), "{p}");
                assert_eq!(policy(p.as_bytes()), Ok(p.parse().unwrap()), "{p}");
            }
        }
        assert!(POLICIES.lock().unwrap().len() <= CACHED_POLICIES);
        // Errors are not cached: each bad policy is named again.
        for _ in 0..2 {
            assert!(policy(b"10/fortnight").unwrap_err().contains("fortnight"));
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let e = |s: &str| parse_str(s, false).unwrap_err();
        assert!(e("10/fortnight").contains("ERR invalid policy: window \"fortnight\""));
        assert!(e("10/s|COST").contains("COST needs a value"));
        assert!(e("10/s|COST|-1").contains("whole number"));
        assert!(e("10/s|COST|99999999999999999999").contains("whole number"));
        assert!(e("10/s|COST|2000000000000").contains("above the largest"));
        assert!(e("10/s|NOW|5").contains("TESTCLOCK"));
        assert!(e("10/s|FOO").contains("unknown option"));
        assert!(e("STACK|3|10/s|1/min").contains("fewer policies"));
        assert!(e("STACK|99|10/s").contains("above the largest"));
        assert!(e("STACK|0").contains("at least one"));
        assert!(e("gcra 1/s|TENANT|a|gcra 5/s").contains("tenant"));
        assert!(parse_str("10/s|NOW|5", true).is_ok());
    }

    fn parse_keys_err(s: &str) -> ArgError {
        let a = args(s);
        let refs: Vec<&[u8]> = a.iter().map(Vec::as_slice).collect();
        parse_keys(&refs, false).unwrap_err()
    }

    #[test]
    fn request_forms_and_errors() {
        use tollgate::store::request::Charging;
        let a = args("2|a|10/s|1|0|b|100/min|0|1|EACH|blocked");
        let refs: Vec<&[u8]> = a.iter().map(Vec::as_slice).collect();
        let r = parse_keys(&refs, false).unwrap();
        assert_eq!(r.items.len(), 2);
        assert_eq!((r.items[0].0, r.items[0].1.cost), (&b"a"[..], 1));
        assert!(r.items[1].1.shadow && r.items[1].1.cost == 0);
        assert_eq!((r.charging, r.blocked), (Charging::Each, true));
        let e = parse_keys_err;
        assert!(e("0").contains("at least one"));
        assert!(e("65").contains("65 limits, at most 64"));
        assert!(e("2|a|10/s|1|0").contains("fewer limits"));
        assert!(e("1|a|10/s|1|yes").contains("0 or 1"));
        assert!(e("1|a|10/s|x|0").contains("whole number"));
        assert!(e("1|a|10/fortnight|1|0").contains("fortnight"));
        assert!(e("1|a|10/s|1|0|NOW|5").contains("TESTCLOCK"));
        assert!(e("1|a|10/s|1|0|FOO").contains("unknown option"));
    }

    #[test]
    fn a_base_fixes_the_slot_only_with_a_hash_tag() {
        assert!(fixes_slot(b"tollgate:{api}"));
        assert!(fixes_slot(b"a{b{c}"));
        assert!(!fixes_slot(b"tollgate:{}"));
        assert!(!fixes_slot(b"tollgate:{api"));
        assert!(!fixes_slot(b"tollgate:"));
    }

    #[test]
    fn slot_keys_match_the_fleet_store() {
        assert_eq!(
            slot_key(b"tollgate:{api:k}", None, Slot::Layer(1)),
            b"tollgate:{api:k}:1"
        );
        assert_eq!(
            slot_key(b"tollgate:{api:k}", Some("acme"), Slot::Tenant),
            b"tollgate:{api:k}:t:acme"
        );
    }
}
