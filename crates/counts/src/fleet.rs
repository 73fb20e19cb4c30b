//! The fleet store's hot path for valgrind to count (`scripts/counts.sh`; see PERF.md), in
//! a binary of its own: the release build is one whole-program unit (`lto = true`), so a
//! path added to `tollgate-counts` re-lays out the others (adding this one moved
//! `keyed-stack-1` by 3%); here it cannot.
//!
//! `tollgate-counts-fleet PATH ROUNDS`, as `tollgate-counts`.
//!
//! The Redis module's command body (`module-*`) is compiled here from the module's own
//! source (`crates/redis-module/src/command.rs`, plain Rust over the core): the module
//! crate itself is a `cdylib` whose global allocator is Redis's, so it cannot be linked
//! into a program that runs outside Redis.

use std::hint::black_box;
use std::process::ExitCode;

use tollgate::store::fleet::{self, Commit, KeyWrite, Ttl};
use tollgate::store::{Batch, Limits, Op};
use tollgate::NANOS_PER_MS;

/// The module's command body, from its source (see above); the count uses a few of its
/// functions.
#[path = "../../redis-module/src/command.rs"]
#[allow(dead_code)]
mod command;

/// The paths, by the name the baseline file gives them.
const PATHS: &str = "fleet-round-1, module-check-1";

/// The Rust side of one check on the fleet store (scripts path), Redis's replies canned:
/// the read script's answer (`TIME`, then the stored value) read and decoded, the round
/// decided over a [`Batch`], its key writes encoded and the commit script's arguments
/// built. These core calls are `tollgate-redis`'s cas path and the npm client's (through
/// wasm); the Redis module's command body runs the same minus the reply reading. The
/// network and Redis's own work are not counted. One key, `gcra 1000/s`, 1 ms apart (each
/// check admitted), the value written by one round read back by the next.
fn fleet_round(rounds: u64) {
    let limits = Limits::single("gcra 1000/s".parse().expect("a valid policy"));
    let slots = limits.slots(None);
    let ttl = Some(Ttl {
        grace_ms: 1_000,
        lease_ms: 60_000,
    });
    let mut stored: Vec<u8> = Vec::new();
    let mut write_id = 0u64;
    let mut micros = 0u64;
    for _ in 0..rounds {
        micros += 1_000;
        let reply = vec![
            (micros / 1_000_000).to_string().into_bytes(),
            (micros % 1_000_000).to_string().into_bytes(),
            std::mem::take(&mut stored),
        ];
        let (now, values) = fleet::read_view(black_box(&reply), slots.len()).expect("a read reply");
        let mut versions = Vec::with_capacity(values.len());
        let mut loaded = Vec::with_capacity(values.len());
        for v in values {
            match fleet::decode_value(v).expect("a stored value") {
                Some(s) => {
                    versions.push(s.version.to_vec());
                    loaded.push(Some(s.state));
                }
                None => {
                    versions.push(Vec::new());
                    loaded.push(None);
                }
            }
        }
        let mut batch = Batch::new(&limits, &slots, loaded, now);
        let decided = batch.apply(Op::Check(1)).expect("a decision");
        black_box(decided.map(|d| d.decision.allowed));
        let writes = fleet::key_writes(&batch, ttl, || {
            write_id += 1;
            write_id
        });
        if let Some((_, KeyWrite::Put { value, .. })) = writes.first() {
            stored = value.clone();
        }
        black_box(fleet::commit_args(Commit::Cas, &versions, writes));
    }
}

/// The Redis module's `TOLLGATE.CHECK <key> gcra 1000/s` body as `decide` in
/// `crates/redis-module/src/lib.rs` runs it, Redis's side canned: the arguments parsed
/// (the policy from the module's cache), the slots' key names, their stored values
/// decoded, the round decided over a `Batch` and its key writes encoded. Not counted:
/// Redis's own work (the command's dispatch, opening and writing the keys, `TIME`) and the
/// reply built from the decision (`decisions_reply`, on Redis's API). One key, 1 ms apart
/// (each check admitted), the value written by one command read back by the next.
fn module_check(rounds: u64) {
    let base: &[u8] = b"tollgate:{api:203.0.113.7}";
    let args: [&[u8]; 1] = [b"gcra 1000/s"];
    let ttl = Some(Ttl {
        grace_ms: 1_000,
        lease_ms: 60_000,
    });
    let mut stored: Option<Vec<u8>> = None;
    let mut now = 0u64;
    for _ in 0..rounds {
        now += NANOS_PER_MS;
        let rest: Vec<&[u8]> = black_box(&args).to_vec();
        let req = command::parse(&rest, false).expect("valid arguments");
        let slots = req.limits.slots(req.tenant.as_deref());
        let names: Vec<Vec<u8>> = slots
            .iter()
            .map(|s| command::slot_key(base, req.tenant.as_deref(), *s))
            .collect();
        let loaded = names
            .iter()
            .map(|name| command::decode(name, black_box(stored.as_deref())))
            .collect::<Result<Vec<_>, _>>()
            .expect("a stored value");
        let outcome =
            command::run(&req, &slots, loaded, now, command::Op::Check, ttl).expect("a decision");
        black_box(outcome.decided.as_ref().map(|(d, _)| d.allowed));
        if let Some((_, KeyWrite::Put { value, .. })) = outcome.writes.first() {
            stored = Some(value.clone());
        }
        black_box(outcome.writes);
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds = args.get(1).and_then(|r| r.parse::<u64>().ok());
    match (args.first().map(String::as_str), rounds) {
        (Some("fleet-round-1"), Some(rounds)) => {
            fleet_round(rounds);
            ExitCode::SUCCESS
        }
        (Some("module-check-1"), Some(rounds)) => {
            module_check(rounds);
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: tollgate-counts-fleet PATH ROUNDS; PATH is one of: {PATHS}");
            ExitCode::from(2)
        }
    }
}
