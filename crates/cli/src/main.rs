//! `tollgate`: simulate, compare and replay rate-limit policies. See the crate's README.
#![forbid(unsafe_code)]

use std::io::{self, BufWriter, Write};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tollgate::Policy;
use tollgate_cli::adapt::{plot, scenario};
use tollgate_cli::compare::{self, write_table};
use tollgate_cli::key::KeySpec;
use tollgate_cli::replay::{self, LogFormat};
use tollgate_cli::trace::{Trace, TraceFormat};
use tollgate_cli::{input, inspect, rls, settle, simulate, CliError};

/// What would a rate-limit policy have done to my traffic? Every decision is made by the
/// tollgate core.
#[derive(Parser)]
#[command(name = "tollgate", version, about, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decide every request of a trace; print one JSON object per request, in input order.
    Simulate {
        /// The policy, in the core's grammar: "sliding-window 10/s", "token-bucket 10/s burst
        /// 20", "leaky-queue 5/s burst 10", "concurrency 5".
        #[arg(long, short)]
        policy: String,
        /// The trace (CSV with header time_ms,key[,cost][,duration_ms], or JSON lines);
        /// standard input when absent or "-".
        #[arg(long, short)]
        trace: Option<PathBuf>,
        /// The trace's format (guessed from the first character when absent).
        #[arg(long, value_enum)]
        format: Option<TraceFormat>,
        /// Sort the trace by time (stable) instead of rejecting time going backwards.
        #[arg(long)]
        sort: bool,
    },
    /// Run every algorithm on the same trace and print, for each, the admitted, the rejected
    /// and the largest number admitted in any window.
    Compare {
        /// The limit, <limit>/<window>: "10/s", "600/10min".
        #[arg(long, short)]
        limit: String,
        /// Bucket and queue capacity (default: the limit). Window algorithms have none.
        #[arg(long, short)]
        burst: Option<u64>,
        /// The trace (CSV or JSON lines; standard input when absent or "-").
        #[arg(long, short)]
        trace: Option<PathBuf>,
        /// The trace's format (guessed when absent).
        #[arg(long, value_enum)]
        format: Option<TraceFormat>,
        /// The interval the largest admitted count is measured over, in ms.
        #[arg(long, default_value_t = 1000)]
        window_ms: u64,
        /// Sort the trace by time instead of rejecting time going backwards.
        #[arg(long)]
        sort: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Compare reserve-then-settle with charge-after on a trace of costs known only after
    /// the response (LLM tokens): each line's `cost` is the estimate, `actual` what it cost,
    /// known `duration_ms` after it started. Prints, for each way, the admitted, the spent
    /// and the most spent for one key in any window, beside the policy's bound.
    Settle {
        /// The policy, in the core's grammar: "fixed-window 10000/min", "token-bucket
        /// 100/s burst 1000".
        #[arg(long, short)]
        policy: String,
        /// The trace (CSV with header time_ms,key,cost,actual[,duration_ms], or JSON
        /// lines); standard input when absent or "-".
        #[arg(long, short)]
        trace: Option<PathBuf>,
        /// The trace's format (guessed when absent).
        #[arg(long, value_enum)]
        format: Option<TraceFormat>,
        /// Sort the trace by time instead of rejecting time going backwards.
        #[arg(long)]
        sort: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Replay an access log under a policy, keyed as the edge would key it; print per-key
    /// results.
    Replay {
        /// The policy, in the core's grammar.
        #[arg(long, short)]
        policy: String,
        /// The log (standard input when absent or "-").
        #[arg(long)]
        log: Option<PathBuf>,
        /// nginx/Apache combined log format, or CSV (time_ms, ip or the key's column, cost,
        /// duration_ms).
        #[arg(long, value_enum, default_value_t = LogFormat::Nginx)]
        format: LogFormat,
        /// How a line becomes a key: ip (the address), ip/<n> (IPv6 grouped by /n prefix;
        /// IPv4 whole; IPv4-mapped IPv6 as IPv4), or field:<name>.
        #[arg(long, short, default_value = "ip/64")]
        key: KeySpec,
        /// The most keys the limiter keeps in memory (an idle key evicted first).
        #[arg(long, default_value_t = NonZeroUsize::new(1_000_000).unwrap())]
        max_keys: NonZeroUsize,
        /// How many of the most-denied keys to list (0: all).
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Validate an edge worker config (crates/worker/config/tollgate.toml, or the TOML/JSON
    /// given in TOLLGATE_CONFIG) with the worker's own validation; print the same error the
    /// worker would answer, naming the field.
    CheckConfig {
        /// The config (TOML, or JSON when it starts with `{`); standard input when absent
        /// or "-".
        file: Option<PathBuf>,
    },
    /// Read tollgate's state in Redis (read-only).
    Redis {
        #[command(subcommand)]
        command: RedisCommand,
    },
    /// Adaptive concurrency (a limit that follows the server's latency).
    Adapt {
        #[command(subcommand)]
        command: AdaptCommand,
    },
    /// Ask a running Envoy rate limit service (tollgate-rls, envoyproxy/ratelimit).
    Rls {
        #[command(subcommand)]
        command: RlsCommand,
    },
}

#[derive(Subcommand)]
enum AdaptCommand {
    /// Run the simulated server (100 workers, 10 ms, virtual time) under tollgate's gradient
    /// controller, a static limit, Netflix's Gradient2 and Vegas and Envoy's gradient
    /// controller; print one table per scenario: goodput, p50/p99 latency of the answers,
    /// time to converge, shed rate, and the scenario's bounds.
    Simulate {
        /// The scenario: 1 (2x load from a limit of 20), 1x (the same, exponential service),
        /// 2 (capacity halves at 60 s, back at 90 s), 3 (1.2x for 10 minutes), 4 (half load,
        /// noisy), 5 (the server hangs). All when absent.
        #[arg(long, short)]
        scenario: Option<String>,
        /// The seed of every random draw (arrivals, service times, jitter).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Write an SVG of the limit and the p99 latency over time (with several scenarios,
        /// one file each, the scenario's name added before the extension).
        #[arg(long)]
        svg: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum RlsCommand {
    /// Send one ShouldRateLimit request, as Envoy would, and print the decision: the
    /// overall code, each descriptor's code, limit, remaining and reset, and the headers.
    /// The call counts like any other. Exit 0 whatever the decision (OVER_LIMIT is an
    /// answer), 2 when there is none.
    Check {
        /// The service's gRPC address (plain HTTP/2).
        #[arg(long, short, default_value = "http://127.0.0.1:8081")]
        server: String,
        /// The domain.
        #[arg(long, short)]
        domain: String,
        /// A descriptor, key=value[,key=value]... (repeat for several, in order).
        #[arg(long = "descriptor", short = 'D', required = true)]
        descriptors: Vec<String>,
        /// The request's hits_addend: how many hits to count (0: one).
        #[arg(long, default_value_t = 0)]
        hits: u32,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RedisCommand {
    /// Print each matching key's state in words and numbers (slot, TTL, state; with the
    /// policies, remaining, reset and concurrency in use), decoded by the core. Only SCAN,
    /// TYPE, GET, PTTL and TIME are sent: nothing is written.
    Inspect {
        /// The server: redis://host:port/db.
        url: String,
        /// A namespace or a tollgate-rls domain (every key under it, any prefix) or a key
        /// glob ("tollgate:{api:*", "tollgate:{api}*").
        pattern: String,
        /// The policy of limit i of the stack, in order (repeat for a stack); a
        /// tollgate-rls counter is one limit, decided by the first.
        #[arg(long, short)]
        policy: Vec<String>,
        /// The fair share's tenant-window policy.
        #[arg(long)]
        tenant_policy: Option<String>,
    },
}

fn policy(text: &str) -> Result<Policy, CliError> {
    Ok(text.parse::<Policy>()?)
}

fn run(cli: Cli) -> Result<(), CliError> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match cli.command {
        Command::Simulate {
            policy: text,
            trace,
            format,
            sort,
        } => {
            let policy = policy(&text)?;
            let trace = Trace::new(input::open(trace.as_deref())?, format)?;
            simulate::run(policy, trace, sort, &mut out)?;
        }
        Command::Compare {
            limit,
            burst,
            trace,
            format,
            window_ms,
            sort,
            json,
        } => {
            let options = compare::Options {
                limit,
                burst,
                window_ms,
                sort,
            };
            let trace = Trace::new(input::open(trace.as_deref())?, format)?;
            let report = compare::compare(&options, trace)?;
            if json {
                serde_json::to_writer_pretty(&mut out, &report)
                    .map_err(|e| CliError::Write(e.into()))?;
                writeln!(out)?;
            } else {
                write_table(&report, &mut out)?;
            }
        }
        Command::Settle {
            policy: text,
            trace,
            format,
            sort,
            json,
        } => {
            let policy = policy(&text)?;
            let trace = Trace::new(input::open(trace.as_deref())?, format)?;
            let report = settle::compare(policy, trace, sort)?;
            if json {
                serde_json::to_writer_pretty(&mut out, &report)
                    .map_err(|e| CliError::Write(e.into()))?;
                writeln!(out)?;
            } else {
                settle::write_table(&report, &mut out)?;
            }
        }
        Command::Replay {
            policy: text,
            log,
            format,
            key,
            max_keys,
            top,
            json,
        } => {
            let options = replay::Options {
                policy: policy(&text)?,
                key,
                max_keys,
                top,
            };
            let report = replay::replay(&options, input::open(log.as_deref())?, format)?;
            if json {
                serde_json::to_writer_pretty(&mut out, &report)
                    .map_err(|e| CliError::Write(e.into()))?;
                writeln!(out)?;
            } else {
                replay::write_text(&report, &mut out)?;
            }
        }
        Command::CheckConfig { file } => check_config(file, &mut out)?,
        Command::Redis {
            command:
                RedisCommand::Inspect {
                    url,
                    pattern,
                    policy: texts,
                    tenant_policy,
                },
        } => {
            let policies = inspect::Policies {
                stack: texts.iter().map(|t| policy(t)).collect::<Result<_, _>>()?,
                tenant: tenant_policy.as_deref().map(policy).transpose()?,
            };
            redis_inspect(&url, &pattern, &policies, &mut out)?;
        }
        Command::Adapt {
            command:
                AdaptCommand::Simulate {
                    scenario,
                    seed,
                    svg,
                },
        } => adapt_simulate(scenario.as_deref(), seed, svg, &mut out)?,
        Command::Rls {
            command:
                RlsCommand::Check {
                    server,
                    domain,
                    descriptors,
                    hits,
                    json,
                },
        } => {
            let descriptors = descriptors
                .iter()
                .map(|d| rls::parse_descriptor(d))
                .collect::<Result<Vec<_>, _>>()?;
            let response = rls::call(&server, rls::request(&domain, &descriptors, hits))?;
            let report = rls::report(&descriptors, &response);
            if json {
                serde_json::to_writer_pretty(&mut out, &report)
                    .map_err(|e| CliError::Write(e.into()))?;
                writeln!(out)?;
            } else {
                rls::write_text(&report, &mut out)?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// `tollgate adapt simulate`: the chosen scenarios' tables, and their plots.
fn adapt_simulate(
    scenario: Option<&str>,
    seed: u64,
    svg: Option<PathBuf>,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let all = scenario::scenarios();
    let chosen: Vec<_> = match scenario {
        None => all,
        Some(id) => {
            let found: Vec<_> = all.into_iter().filter(|s| s.id == id).collect();
            if found.is_empty() {
                return Err(CliError::Usage(format!(
                    "unknown scenario {id:?} (expected 1, 1x, 2, 3, 4 or 5)"
                )));
            }
            found
        }
    };
    let several = chosen.len() > 1;
    for s in &chosen {
        let report = scenario::run_scenario(s, seed).map_err(|e| CliError::Usage(e.to_string()))?;
        writeln!(out, "{}", scenario::table(&report))?;
        out.flush()?;
        if let Some(path) = &svg {
            let path = if several {
                let stem = path.file_stem().unwrap_or_default().to_string_lossy();
                let ext = path
                    .extension()
                    .map_or(String::new(), |e| format!(".{}", e.to_string_lossy()));
                path.with_file_name(format!("{stem}-{}{ext}", s.id))
            } else {
                path.clone()
            };
            std::fs::write(&path, plot::svg(&report)).map_err(|error| {
                CliError::Usage(format!("cannot write {}: {error}", path.display()))
            })?;
        }
    }
    Ok(())
}

fn check_config(file: Option<PathBuf>, out: &mut impl Write) -> Result<(), CliError> {
    let mut input = input::open(file.as_deref())?;
    let mut text = String::new();
    io::Read::read_to_string(&mut input.reader, &mut text).map_err(|error| CliError::Read {
        source: input.source.clone(),
        error,
    })?;
    let config = tollgate_config::Config::parse(&text).map_err(CliError::Config)?;
    writeln!(
        out,
        "{}: valid ({} policies, {} routes)",
        input.source,
        config.policies.len(),
        config.routes.len()
    )?;
    Ok(())
}

/// The glob `inspect` scans: a pattern with a glob character as it is, otherwise a
/// namespace or a tollgate-rls domain: every slot of every key under it, whatever the
/// prefix (`<prefix>:{<namespace>:<key>}...` and the server's `<prefix>{<domain>}...`).
fn inspect_glob(pattern: &str) -> String {
    if pattern.contains(['*', '?', '[']) {
        pattern.to_string()
    } else {
        format!("*{{{pattern}[:}}]*")
    }
}

/// `tollgate redis inspect`: SCAN, then GET and PTTL per key (read-only), decoded and
/// described by [`inspect::describe`] at the server's `TIME`.
fn redis_inspect(
    url: &str,
    pattern: &str,
    policies: &inspect::Policies,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let fail = |e: redis::RedisError| CliError::Usage(format!("redis {url}: {e}"));
    let client = redis::Client::open(url).map_err(fail)?;
    let mut con = client.get_connection().map_err(fail)?;
    let glob = inspect_glob(pattern);
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&glob)
            .arg("COUNT")
            .arg(1000)
            .query(&mut con)
            .map_err(fail)?;
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    keys.sort();
    keys.dedup();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).map_err(fail)?;
    let now = secs * tollgate::NANOS_PER_SEC + micros * 1_000;
    for key in &keys {
        let kind: String = redis::cmd("TYPE").arg(key).query(&mut con).map_err(fail)?;
        if kind != "string" && kind != "none" {
            writeln!(out, "{key}\n  a {kind}, not a tollgate state")?;
            continue;
        }
        let value: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(&mut con).map_err(fail)?;
        let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).map_err(fail)?;
        let text = inspect::describe(key, value.as_deref(), pttl, policies, now);
        write!(out, "{text}")?;
    }
    writeln!(out, "{} keys matching {glob}", keys.len())?;
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`tollgate simulate ... | head`) is not a failure.
        Err(CliError::Write(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate: {e}");
            ExitCode::from(2)
        }
    }
}
