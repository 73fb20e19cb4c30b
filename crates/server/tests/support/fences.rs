//! The README examples as tests: the one fence parser of the server's and the CLI's README
//! tests (tests/readme.rs, tests/readme_commands.rs and crates/cli/tests/readme.rs), and the
//! runner of their shell examples.
//!
//! A command runs as written, in a temporary directory laid out as a clone's root (every
//! top-level entry of the repository linked in, so `crates/cli/examples/burst80.csv` is
//! there) with the built binaries first on PATH, inside a private network namespace
//! (`unshare --net`, with a pid namespace so that everything started in it dies with it): the
//! README's default ports (8081, 8080, Redis's 6379) are free there whatever else runs on
//! the machine, so no command needs rewriting to another port.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One fenced block of a Markdown file.
#[derive(Debug)]
pub struct Fence {
    /// The line of its opening fence (1-based).
    pub line: usize,
    /// The info string: the language, then flags (`no-run: <reason>`).
    pub info: String,
    pub body: String,
}

impl Fence {
    /// The language: the info string's first word.
    pub fn lang(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }

    /// `Some(reason)` when tagged `no-run` (the reason is what follows it, `""` when none).
    pub fn no_run(&self) -> Option<&str> {
        let rest = self.info.strip_prefix(self.lang())?.trim_start();
        let reason = rest.strip_prefix("no-run")?;
        Some(reason.trim_start_matches(':').trim())
    }

    /// The commands of an `sh` fence: continued lines (`\`) joined, blank and comment-only
    /// lines left out.
    pub fn sh_commands(&self) -> Vec<String> {
        let mut commands = Vec::new();
        let mut current = String::new();
        for line in self.body.lines() {
            if current.is_empty() && (line.trim().is_empty() || line.trim_start().starts_with('#'))
            {
                continue;
            }
            current.push_str(line);
            if line.ends_with('\\') {
                current.push('\n');
            } else {
                commands.push(std::mem::take(&mut current));
            }
        }
        commands
    }

    /// The `$ command` lines of a `console` fence, each with the output shown after it.
    pub fn console_commands(&self) -> Vec<(String, Vec<String>)> {
        let mut commands: Vec<(String, Vec<String>)> = Vec::new();
        for line in self.body.lines() {
            match line.strip_prefix("$ ") {
                Some(command) => commands.push((command.to_string(), Vec::new())),
                None => commands
                    .last_mut()
                    .unwrap_or_else(|| panic!("line {}: output before any `$ `", self.line))
                    .1
                    .push(line.to_string()),
            }
        }
        commands
    }
}

/// Every fenced block of `markdown`.
pub fn fences(markdown: &str) -> Vec<Fence> {
    let mut blocks = Vec::new();
    let mut current: Option<Fence> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(info)) => {
                let info = info.trim().to_string();
                current = Some(Fence {
                    line: n + 1,
                    info,
                    body: String::new(),
                });
            }
            (Some(_), Some(rest)) if rest.trim().is_empty() => blocks.push(current.take().unwrap()),
            (Some(block), _) => {
                block.body.push_str(line);
                block.body.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// What one command did.
#[derive(Debug)]
pub struct Ran {
    pub command: String,
    /// Its exit status (for a server: after it answered and was sent SIGTERM).
    pub status: i32,
    /// Its standard output and error, together.
    pub output: String,
    /// A server's `GET /healthcheck` status line, on the HTTP address it printed.
    pub health: Option<String>,
}

/// How a command is run.
pub enum Mode {
    /// Run to its end.
    Exits,
    /// A server: started, its `listening` line awaited, `/healthcheck` asked, then SIGTERM.
    Serves,
}

/// A temporary directory laid out as a clone's root, with the binaries on PATH.
pub struct Sandbox {
    pub dir: PathBuf,
    bin: PathBuf,
}

impl Sandbox {
    /// `binaries`: (name on PATH, built file).
    pub fn new(tag: &str, repo: &Path, binaries: &[(&str, &Path)]) -> Sandbox {
        let root = std::env::temp_dir().join(format!(
            "tollgate-readme-{tag}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let dir = root.join("clone");
        let bin = root.join("bin");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        for entry in std::fs::read_dir(repo).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if name != "target" && name != ".git" {
                std::os::unix::fs::symlink(entry.path(), dir.join(&name)).unwrap();
            }
        }
        for (name, file) in binaries {
            assert!(file.exists(), "{} is not built", file.display());
            std::os::unix::fs::symlink(file, bin.join(name)).unwrap();
        }
        Sandbox { dir, bin }
    }

    /// Writes `text` to `path` (relative to the sandbox), creating its directory.
    pub fn write(&self, path: &str, text: &str) {
        let path = self.dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Runs `prelude` (what the commands need started: bash, failing with a message), then
    /// each command, in one private network and pid namespace.
    pub fn run(&self, prelude: &str, commands: &[(String, Mode)]) -> Vec<Ran> {
        let out = self.dir.join(".out");
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        let mut script = format!(
            "set -u\nip link set lo up\ncd '{}'\nexport PATH='{}':\"$PATH\"\n{SERVE}\n{prelude}\n",
            self.dir.display(),
            self.bin.display()
        );
        for (n, (command, mode)) in commands.iter().enumerate() {
            match mode {
                Mode::Exits => script.push_str(&format!(
                    "{{ {command}\n}} > .out/{n} 2>&1 < /dev/null; echo $? > .out/{n}.status\n"
                )),
                // `exec` (after any leading assignments), so that the job is the server.
                Mode::Serves => script.push_str(&format!(
                    "{{ {}\n}} > .out/{n} 2>&1 < /dev/null &\nserve {n} $!\n",
                    with_exec(command)
                )),
            }
        }
        let done = Command::new("unshare")
            .args([
                "--user",
                "--map-root-user",
                "--net",
                "--pid",
                "--fork",
                "--kill-child",
            ])
            .args(["bash", "-c", &script])
            .stdin(Stdio::null())
            .output()
            .expect("unshare (util-linux) runs");
        assert!(
            done.status.success(),
            "the script failed: {}\n{}{}",
            script,
            String::from_utf8_lossy(&done.stdout),
            String::from_utf8_lossy(&done.stderr)
        );
        let read = |name: String| std::fs::read_to_string(out.join(name)).ok();
        commands
            .iter()
            .enumerate()
            .map(|(n, (command, _))| Ran {
                command: command.clone(),
                status: read(format!("{n}.status"))
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(-1),
                output: read(n.to_string()).unwrap_or_default(),
                health: read(format!("{n}.health")).map(|h| h.trim().to_string()),
            })
            .collect()
    }
}

/// `A=1 B=2 cmd args` -> `A=1 B=2 exec cmd args`.
fn with_exec(command: &str) -> String {
    let words: Vec<&str> = command.split(' ').collect();
    let assignments = words
        .iter()
        .take_while(|w| w.contains('=') && !w.starts_with('-'))
        .count();
    let (head, tail) = words.split_at(assignments);
    [head, &["exec"], tail].concat().join(" ")
}

/// The shell function behind [`Mode::Serves`]: waits for the server's `listening` line (or
/// its exit), asks `GET /healthcheck` on the HTTP address it printed, sends SIGTERM and
/// records the exit status. Bounded: a server not listening within 60 s is stopped.
const SERVE: &str = r#"
serve() {
  local n=$1 pid=$2 i=0
  until grep -q '^listening' .out/$n; do
    if ! kill -0 $pid 2>/dev/null || [ $i -ge 1200 ]; then
      kill -KILL $pid 2>/dev/null; wait $pid; echo $? > .out/$n.status; return
    fi
    i=$((i+1)); sleep 0.05
  done
  local http
  http=$(sed -n 's/^listening.* http=\([^ ]*\).*/\1/p' .out/$n | head -1)
  http=${http/0.0.0.0/127.0.0.1}
  if exec 3<>/dev/tcp/${http%:*}/${http##*:}; then
    printf 'GET /healthcheck HTTP/1.0\r\n\r\n' >&3
    head -1 <&3 | tr -d '\r' > .out/$n.health
    exec 3<&-
  fi
  kill -TERM $pid; wait $pid; echo $? > .out/$n.status
}
# Waits for a service's line in a log, or fails the script naming it.
wait_for() {
  local file=$1 pattern=$2 i=0
  until grep -q "$pattern" "$file" 2>/dev/null; do
    if [ $i -ge 1200 ]; then echo "no '$pattern' in $file:"; cat "$file"; exit 1; fi
    i=$((i+1)); sleep 0.05
  done
}
"#;

/// Whether `actual` is what a console fence shows as `expected`: line by line, after
/// `normalise`, where an expected `...` line stands for any number of lines.
pub fn matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual.first() == Some(first) && matches(rest, &actual[1..]),
    }
}

/// `line` with the number after each of `prefixes` replaced by `N` (figures that depend
/// on the clock: a TTL, a window number, seconds until a reset).
pub fn normalise(line: &str, prefixes: &[&str]) -> String {
    let mut out = line.to_string();
    for prefix in prefixes {
        let mut from = 0;
        while let Some(at) = out[from..].find(prefix) {
            let start = from + at + prefix.len();
            let len = out[start..]
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(out.len() - start);
            if len > 0 {
                out.replace_range(start..start + len, "N");
            }
            from = start;
        }
    }
    out
}
