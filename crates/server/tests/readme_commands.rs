//! Every shell example of the README runs as written: the built `tollgate-rls` on PATH, in a
//! directory holding what the README says exists (`./limits`: the configuration of its
//! "Configuration" section), in a private network namespace where the default ports are
//! free, with a real redis-server on 127.0.0.1:6379 for the command that names it. A server
//! command is started, must print its `listening` line and answer `/healthcheck` with 200,
//! and must exit 0 on SIGTERM. A fence that cannot run here is tagged `sh no-run: <reason>`;
//! the test fails on an untagged fence it did not run, a tag without a reason, or a fence of
//! a kind nothing checks. (The YAML and JSON fences are data: tests/readme.rs reads them.)

#[path = "support/fences.rs"]
mod fences;

use std::path::Path;

use fences::{Fence, Mode, Sandbox};

fn readme() -> Vec<Fence> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    fences::fences(&std::fs::read_to_string(dir.join("README.md")).unwrap())
}

/// Starts redis-server on the README's address (inside the namespace) and waits for it.
const REDIS: &str = "redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no \
    > .redis.log 2>&1 &\nwait_for .redis.log 'Ready to accept connections'\n";

#[test]
fn every_shell_example_runs_as_written_or_says_why_not() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = Path::new(env!("CARGO_BIN_EXE_tollgate-rls"));
    let all = readme();
    // The configuration the first example's `./limits` holds: the "Configuration" section's.
    let config = all
        .iter()
        .find(|f| f.lang() == "yaml" && f.body.starts_with("domain:"))
        .expect("a configuration example");
    let (mut ran, mut tagged) = (0, Vec::new());
    for fence in &all {
        match (fence.lang(), fence.no_run()) {
            ("sh", Some(reason)) => {
                assert!(
                    !reason.is_empty(),
                    "README.md:{}: `no-run` without a reason",
                    fence.line
                );
                tagged.push(format!("README.md:{}: {reason}", fence.line));
            }
            ("sh", None) => {
                let sandbox = Sandbox::new("rls", &repo, &[("tollgate-rls", bin)]);
                sandbox.write("limits/messaging.yaml", &config.body);
                let commands: Vec<(String, Mode)> = fence
                    .sh_commands()
                    .into_iter()
                    .map(|c| {
                        let serves = c.contains("tollgate-rls ") && !c.contains("--check-config");
                        (c, if serves { Mode::Serves } else { Mode::Exits })
                    })
                    .collect();
                let needs_redis = commands.iter().any(|(c, _)| c.contains("127.0.0.1:6379"));
                let prelude = if needs_redis { REDIS } else { "" };
                for done in sandbox.run(prelude, &commands) {
                    println!(
                        "README.md:{}: $ {}\n{}",
                        fence.line, done.command, done.output
                    );
                    assert_eq!(
                        done.status, 0,
                        "README.md:{}: `{}` exited {}: {}",
                        fence.line, done.command, done.status, done.output
                    );
                    if let Some(health) = &done.health {
                        assert!(health.contains(" 200 "), "{}: {health}", done.command);
                    }
                    assert!(
                        done.health.is_some()
                            || !done.output.lines().any(|l| l.starts_with("listening")),
                        "{}: a server that was not asked",
                        done.command
                    );
                }
                ran += 1;
            }
            ("yaml" | "json", None) => {} // data: tests/readme.rs
            (lang, _) => panic!(
                "README.md:{}: a `{lang}` fence this test does not run or check",
                fence.line
            ),
        }
    }
    println!("ran {ran} sh fences; not run:\n{}", tagged.join("\n"));
    assert!(ran > 0, "no shell example ran");
}

/// The rule above, checked on a README of its own: an untagged fence of an unknown kind, or
/// a `no-run` without its reason, is not passed over.
#[test]
fn a_no_run_tag_needs_its_reason_and_unknown_fences_are_named() {
    let text = "```sh no-run: grpcurl is not installed\ngrpcurl\n```\n```sh no-run\nx\n```\n";
    let parsed = fences::fences(text);
    assert_eq!(parsed[0].no_run(), Some("grpcurl is not installed"));
    assert_eq!(parsed[1].no_run(), Some(""));
    assert_eq!(
        fences::fences("```sh\na \\\n  b\n# c\nd # e\n```\n")[0].sh_commands(),
        ["a \\\n  b", "d # e"]
    );
    let expected: Vec<String> = ["a", "...", "d"].map(String::from).to_vec();
    let lines = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(fences::matches(&expected, &lines(&["a", "b", "c", "d"])));
    assert!(fences::matches(&expected, &lines(&["a", "d"])));
    assert!(!fences::matches(&expected, &lines(&["a", "b"])));
    assert_eq!(
        fences::normalise("ttl: 59.962 s, resets in 86399s", &["ttl: ", "resets in "]),
        "ttl: N s, resets in Ns"
    );
}
