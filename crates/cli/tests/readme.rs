//! Every example of the README runs as written, with the server README's runner
//! (crates/server/tests/support/fences.rs): the built `tollgate` and `tollgate-rls` on PATH,
//! in a directory laid out as a clone's root holding `trace.csv` (the README's CSV example),
//! inside a private network namespace where the README's addresses are free. Around a fence
//! that calls `rls check`, a `tollgate-rls` on its default ports (127.0.0.1:8081) with a
//! `messaging` domain of 2 per day for `message_type=marketing,to_number`; around `redis
//! inspect`, a redis-server on 127.0.0.1:6379 with tollgate's module (built by the suite)
//! and the keys the example shows, written by the module's own commands.
//!
//! `sh` fences must exit 0; `console` fences must print what they show, line by line, where
//! `...` stands for any lines and the figures that depend on the clock (a TTL, a window
//! number, the seconds until a reset) are compared as `N`. A fence that cannot run here is
//! tagged `no-run: <reason>`; an untagged fence of a kind nothing checks fails the test.

#[path = "../../server/tests/support/fences.rs"]
mod fences;

use std::path::{Path, PathBuf};

use fences::{Mode, Sandbox};

/// The figures compared as `N` (they depend on when the test runs).
const CLOCK: &[&str] = &[
    "ttl: ",
    "window number ",
    "resets in ",
    "resets in: ",
    ";t=",
    "Retry-After: ",
];

const RLS_CONFIG: &str = "domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: { unit: day, requests_per_unit: 2 }
";

/// target/<profile>, where cargo put this test.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The `tollgate-rls` binary, built here if needed (its library is already built: the
/// CLI's `rls check` tests use it).
fn rls_binary() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--locked",
            "-p",
            "tollgate-rls",
            "--bin",
            "tollgate-rls",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(status.success(), "cargo build -p tollgate-rls failed");
    target_dir().join("tollgate-rls")
}

/// What a fence needs started, by what it calls.
fn prelude(sandbox: &Sandbox, body: &str) -> String {
    let mut prelude = String::new();
    if body.contains("rls check") {
        sandbox.write(".rls/messaging.yaml", RLS_CONFIG);
        prelude.push_str("tollgate-rls --config-dir .rls > .rls.log 2>&1 &\n");
        prelude.push_str("wait_for .rls.log '^listening'\n");
    }
    if body.contains("redis inspect") {
        let module = target_dir().join("libtollgate_redis_module.so");
        assert!(
            module.exists(),
            "{} is not built (cargo build -p tollgate-redis-module)",
            module.display()
        );
        prelude.push_str(&format!(
            "redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no \
             --loadmodule '{}' > .redis.log 2>&1 &\n\
             wait_for .redis.log 'Ready to accept connections'\n{INSPECTED}",
            module.display()
        ));
    }
    prelude
}

/// The keys `redis inspect`'s example reads: a fixed window with 3 admitted, a fair share
/// (the group's window and tenant acme's, 2 each), a concurrency limit with 2 held, and a
/// tollgate-rls counter (sliding window, 3), each written as its writer writes it.
const INSPECTED: &str = "set -e
for i in 1 2 3; do redis-cli TOLLGATE.CHECK 'tollgate:{api:1.2.3.4}' 'fixed-window 10/h'; done
for i in 1 2; do redis-cli TOLLGATE.CHECK 'tollgate:{api:group}' 'fixed-window 50/h' TENANT acme 'fixed-window 5/h'; done
for i in 1 2; do redis-cli TOLLGATE.CHECK 'tollgate:{api:conc}' 'concurrency 4'; done
for i in 1 2 3; do redis-cli TOLLGATE.REQUEST 'tollgate:{api}' 1 api_remote_address_1.2.3.4_ 'sliding-window 100/min' 1 0; done
set +e
";

fn lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(|l| fences::normalise(l, CLOCK)).collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

#[test]
fn every_example_runs_as_written_or_says_why_not() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let all = fences::fences(&readme);
    let trace = all
        .iter()
        .find(|f| f.lang() == "csv")
        .expect("the trace.csv example");
    let tollgate = PathBuf::from(env!("CARGO_BIN_EXE_tollgate"));
    let rls = rls_binary();
    let (mut ran, mut tagged) = (Vec::new(), Vec::new());
    for fence in &all {
        let at = format!("README.md:{}", fence.line);
        if let Some(reason) = fence.no_run() {
            assert!(!reason.is_empty(), "{at}: `no-run` without a reason");
            tagged.push(format!("{at}: {reason}"));
            continue;
        }
        let bins = [
            ("tollgate", tollgate.as_path()),
            ("tollgate-rls", rls.as_path()),
        ];
        let sandbox = Sandbox::new("cli", &dir.join("../.."), &bins);
        sandbox.write("trace.csv", &trace.body);
        let prelude = prelude(&sandbox, &fence.body);
        match fence.lang() {
            "sh" => {
                let commands: Vec<_> = fence
                    .sh_commands()
                    .into_iter()
                    .map(|c| (c, Mode::Exits))
                    .collect();
                for done in sandbox.run(&prelude, &commands) {
                    println!("{at}: $ {}\n{}", done.command, done.output);
                    assert_eq!(done.status, 0, "{at}: `{}`: {}", done.command, done.output);
                }
            }
            "console" => {
                let shown = fence.console_commands();
                let commands: Vec<_> = shown
                    .iter()
                    .map(|(c, _)| (c.clone(), Mode::Exits))
                    .collect();
                for (done, (_, expected)) in sandbox.run(&prelude, &commands).iter().zip(&shown) {
                    println!("{at}: $ {}\n{}", done.command, done.output);
                    let expected: Vec<String> = lines(&expected.join("\n"));
                    assert!(
                        fences::matches(&expected, &lines(&done.output)),
                        "{at}: `{}` printed\n{}\nnot what the README shows:\n{}",
                        done.command,
                        lines(&done.output).join("\n"),
                        expected.join("\n")
                    );
                }
            }
            "csv" => {} // data: `trace.csv`, read by the fences that name it
            lang => panic!("{at}: a `{lang}` fence this test does not run or check"),
        }
        ran.push(at);
    }
    println!("ran: {}\nnot run:\n{}", ran.join(", "), tagged.join("\n"));
    assert!(ran.len() > 1, "no example ran");
}
