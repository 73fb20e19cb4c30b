//! `tollgate replay`: what a policy would have done to real traffic, from an access log.
//!
//! Each line is keyed as a limiter at the edge would key it ([`crate::key`]) and decided by
//! the core's bounded [`KeyedLimiter`], so memory for the limiter stays bounded
//! (`--max-keys`; an evicted key starts fresh, i.e. the replay errs toward leniency, never
//! toward over-counting). The log streams: one line is held at a time. What grows is the
//! per-key tally (requests, denied, first denial), one small entry per distinct key.
//!
//! Times that go backwards (access logs are written when a request *ends*, so they are
//! seldom perfectly ordered) are passed to the core, which counts them as no time passing;
//! the report says how many there were.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::num::NonZeroUsize;

use serde::Serialize;
use tollgate::keyed::KeyedLimiter;
use tollgate::{millis, Algorithm, Decision, Policy};

use crate::accesslog::{self, format_time};
use crate::error::{CliError, Source};
use crate::input::Input;
use crate::key::{client_key, KeySpec};
use crate::limiter::Releases;
use crate::progress::Progress;
use crate::trace::csv_error;

/// The format of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// nginx/Apache combined (or common) log format.
    Nginx,
    /// CSV with a header: `time_ms`, the key's column (`ip` for the ip keys), optional
    /// `cost` and `duration_ms`.
    Csv,
}

/// What `replay` was asked.
pub struct Options {
    /// The policy every key is limited by.
    pub policy: Policy,
    /// How lines become keys.
    pub key: KeySpec,
    /// The most keys the limiter keeps (an idle key evicted first).
    pub max_keys: NonZeroUsize,
    /// How many of the most-denied keys to list (0: all keys with a denial).
    pub top: usize,
}

/// One key's tally.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct KeyStats {
    /// The key.
    pub key: String,
    /// Its requests.
    pub requests: u64,
    /// How many were denied.
    pub denied: u64,
    /// When it was first denied (ms; Unix time for nginx logs).
    pub first_denied_ms: Option<u64>,
}

/// One key's tally while replaying (the key is the map's).
#[derive(Default)]
struct Tally {
    requests: u64,
    denied: u64,
    first_denied_ms: Option<u64>,
}

/// The first denial in the log.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FirstDenial {
    /// When (ms; Unix time for nginx logs).
    pub time_ms: u64,
    /// The line.
    pub line: u64,
    /// The key denied.
    pub key: String,
}

/// The replay's results.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The policy, in canonical form.
    pub policy: String,
    /// The key spec.
    pub key: String,
    /// The log format.
    pub format: &'static str,
    /// Requests (log lines).
    pub requests: u64,
    /// Requests the policy would have denied.
    pub denied: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Keys with at least one denial.
    pub keys_denied: u64,
    /// The first denial, if any.
    pub first_denial: Option<FirstDenial>,
    /// The largest queue delay (leaky-queue policies), in ms.
    pub max_delay_ms: u64,
    /// Lines whose time was earlier than the line before.
    pub time_went_back: u64,
    /// The most-denied keys, most denied first.
    pub top_denied: Vec<KeyStats>,
}

/// Where one line's key and time come from.
enum Reader {
    Nginx {
        reader: Box<dyn BufRead>,
        buf: Vec<u8>,
        line: u64,
        bytes: u64,
    },
    Csv {
        reader: csv::Reader<Box<dyn BufRead>>,
        record: csv::StringRecord,
        time: usize,
        key: usize,
        cost: Option<usize>,
        duration: Option<usize>,
    },
}

/// One request read from the log.
struct Entry {
    line: u64,
    time_ms: u64,
    key: String,
    cost: u64,
    duration_ms: Option<u64>,
}

struct Replay {
    source: Source,
    spec: KeySpec,
    reader: Reader,
}

impl Replay {
    fn new(
        input: Input,
        format: LogFormat,
        spec: KeySpec,
        concurrency: bool,
    ) -> Result<Replay, CliError> {
        let Input { source, reader, .. } = input;
        let reader = match format {
            LogFormat::Nginx => {
                if concurrency {
                    return Err(CliError::Usage(
                        "access logs carry no request durations, so a concurrency policy cannot \
                         be replayed from them (use --format csv with a duration_ms column)"
                            .into(),
                    ));
                }
                if let KeySpec::Field(name) = &spec {
                    let probe = accesslog::LogLine {
                        remote_addr: "",
                        remote_user: "",
                        time_ms: 0,
                        request: "",
                        status: "",
                        body_bytes_sent: "",
                        referer: "",
                        user_agent: "",
                    };
                    if probe.field(name).is_none() {
                        return Err(CliError::Usage(format!(
                            "--key field:{name}: an access log has no field \"{name}\" (fields: {})",
                            accesslog::FIELDS
                        )));
                    }
                }
                Reader::Nginx {
                    reader,
                    buf: Vec::new(),
                    line: 0,
                    bytes: 0,
                }
            }
            LogFormat::Csv => {
                let mut reader = csv::ReaderBuilder::new()
                    .comment(Some(b'#'))
                    .trim(csv::Trim::All)
                    .from_reader(reader);
                let headers = reader.headers().map_err(|e| csv_error(&source, e))?.clone();
                let find = |name: &str| headers.iter().position(|h| h == name);
                let header_line = reader.position().line().saturating_sub(1).max(1);
                let missing = |what: String| CliError::Malformed {
                    source: source.clone(),
                    line: header_line,
                    reason: format!(
                        "the CSV header must name {what} (found: {})",
                        headers.iter().collect::<Vec<_>>().join(",")
                    ),
                };
                let time = find("time_ms").ok_or_else(|| missing("a `time_ms` column".into()))?;
                let key = match &spec {
                    KeySpec::Ip { .. } => find("ip")
                        .or_else(|| find("remote_addr"))
                        .ok_or_else(|| missing("an `ip` (or `remote_addr`) column".into()))?,
                    KeySpec::Field(name) => {
                        find(name).ok_or_else(|| missing(format!("a `{name}` column")))?
                    }
                };
                let duration = find("duration_ms");
                if concurrency && duration.is_none() {
                    return Err(missing(
                        "a `duration_ms` column for a concurrency policy".into(),
                    ));
                }
                Reader::Csv {
                    reader,
                    record: csv::StringRecord::new(),
                    time,
                    key,
                    cost: find("cost"),
                    duration,
                }
            }
        };
        Ok(Replay {
            source,
            spec,
            reader,
        })
    }

    fn malformed(&self, line: u64, reason: String) -> CliError {
        CliError::Malformed {
            source: self.source.clone(),
            line,
            reason,
        }
    }

    /// Bytes and lines read so far, for the progress line.
    fn position(&self) -> (u64, u64) {
        match &self.reader {
            Reader::Nginx { line, bytes, .. } => (*bytes, *line),
            Reader::Csv { reader, .. } => (reader.position().byte(), reader.position().line()),
        }
    }

    fn key_of(&self, addr_or_field: &str) -> String {
        match self.spec {
            KeySpec::Ip { v6_prefix } => client_key(addr_or_field, v6_prefix),
            KeySpec::Field(_) => addr_or_field.to_owned(),
        }
    }

    fn next(&mut self) -> Result<Option<Entry>, CliError> {
        match &mut self.reader {
            Reader::Nginx {
                reader,
                buf,
                line,
                bytes,
            } => loop {
                buf.clear();
                let n = reader
                    .read_until(b'\n', buf)
                    .map_err(|error| CliError::Read {
                        source: self.source.clone(),
                        error,
                    })?;
                if n == 0 {
                    return Ok(None);
                }
                *line += 1;
                *bytes += n as u64;
                let at = *line;
                let text = String::from_utf8_lossy(buf);
                let text = text.trim_end_matches(['\n', '\r']);
                if text.trim().is_empty() {
                    continue;
                }
                let parsed = accesslog::parse(text).map_err(|reason| CliError::Malformed {
                    source: self.source.clone(),
                    line: at,
                    reason: format!("not an access-log line: {reason}"),
                })?;
                let key = match &self.spec {
                    KeySpec::Ip { v6_prefix } => client_key(parsed.remote_addr, *v6_prefix),
                    KeySpec::Field(name) => parsed.field(name).unwrap_or("").to_owned(),
                };
                return Ok(Some(Entry {
                    line: at,
                    time_ms: parsed.time_ms,
                    key,
                    cost: 1,
                    duration_ms: None,
                }));
            },
            Reader::Csv {
                reader,
                record,
                time,
                key,
                cost,
                duration,
            } => {
                let (time, key, cost, duration) = (*time, *key, *cost, *duration);
                if !reader
                    .read_record(record)
                    .map_err(|e| csv_error(&self.source, e))?
                {
                    return Ok(None);
                }
                let record = record.clone();
                let line = record.position().map_or(0, |p| p.line());
                let field = |i: usize| record.get(i).unwrap_or("");
                let number = |name: &str, text: &str| {
                    text.parse::<u64>().map_err(|_| {
                        self.malformed(line, format!("{name} \"{text}\" is not a whole number"))
                    })
                };
                let time_ms = number("time_ms", field(time))?;
                let cost = match cost.map(field) {
                    None | Some("") => 1,
                    Some(c) => number("cost", c)?,
                };
                let duration_ms = match duration.map(field) {
                    None | Some("") => None,
                    Some(d) => Some(number("duration_ms", d)?),
                };
                Ok(Some(Entry {
                    line,
                    time_ms,
                    key: self.key_of(field(key)),
                    cost,
                    duration_ms,
                }))
            }
        }
    }
}

/// Replays `input` under `options`.
pub fn replay(options: &Options, input: Input, format: LogFormat) -> Result<Report, CliError> {
    let policy = options.policy;
    let concurrency = policy.algorithm() == Algorithm::Concurrency;
    let mut progress = Progress::new(input.len);
    let mut replay = Replay::new(input, format, options.key.clone(), concurrency)?;
    let limiter: KeyedLimiter<String> = KeyedLimiter::new(policy, options.max_keys);
    let mut releases = Releases::default();
    let mut stats: HashMap<String, Tally> = HashMap::new();
    let (mut requests, mut denied, mut max_delay, mut went_back) = (0u64, 0u64, 0u64, 0u64);
    let mut first_denial = None;
    let mut previous_ms = 0;
    while let Some(entry) = replay.next()? {
        let fail = |error| CliError::Decide {
            source: replay.source.clone(),
            line: entry.line,
            error,
        };
        requests += 1;
        if entry.time_ms < previous_ms {
            went_back += 1;
        }
        previous_ms = entry.time_ms;
        if concurrency {
            if entry.duration_ms.is_none() {
                return Err(replay.malformed(
                    entry.line,
                    "a concurrency policy needs a duration_ms on every line".into(),
                ));
            }
            while let Some((key, cost)) = releases.pop_due(entry.time_ms) {
                limiter.release(key.as_str(), cost).map_err(fail)?;
            }
        }
        let decision: Decision = limiter
            .check(entry.key.as_str(), millis(entry.time_ms), entry.cost)
            .map_err(fail)?;
        if let (true, true, Some(duration)) = (concurrency, decision.allowed, entry.duration_ms) {
            releases.schedule(
                entry.time_ms.saturating_add(duration),
                &entry.key,
                entry.cost,
            );
        }
        max_delay = max_delay.max(decision.delay);
        let tally = match stats.get_mut(entry.key.as_str()) {
            Some(t) => t,
            None => stats.entry(entry.key.clone()).or_default(),
        };
        tally.requests += 1;
        if !decision.allowed {
            denied += 1;
            tally.denied += 1;
            tally.first_denied_ms.get_or_insert(entry.time_ms);
            if first_denial.is_none() {
                first_denial = Some(FirstDenial {
                    time_ms: entry.time_ms,
                    line: entry.line,
                    key: entry.key.clone(),
                });
            }
        }
        let (bytes, lines) = replay.position();
        progress.tick(bytes, lines);
    }
    progress.finish();
    let keys = stats.len() as u64;
    let mut top: Vec<KeyStats> = stats
        .into_iter()
        .filter(|(_, t)| t.denied > 0)
        .map(|(key, t)| KeyStats {
            key,
            requests: t.requests,
            denied: t.denied,
            first_denied_ms: t.first_denied_ms,
        })
        .collect();
    let keys_denied = top.len() as u64;
    top.sort_by(|a, b| {
        b.denied
            .cmp(&a.denied)
            .then(b.requests.cmp(&a.requests))
            .then_with(|| a.key.cmp(&b.key))
    });
    if options.top > 0 {
        top.truncate(options.top);
    }
    Ok(Report {
        policy: policy.to_string(),
        key: options.key.to_string(),
        format: match format {
            LogFormat::Nginx => "nginx",
            LogFormat::Csv => "csv",
        },
        requests,
        denied,
        keys,
        keys_denied,
        first_denial,
        max_delay_ms: tollgate::ceil_millis(max_delay),
        time_went_back: went_back,
        top_denied: top,
    })
}

/// Prints the report for people.
pub fn write_text(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let time = |ms: u64| match report.format {
        "nginx" => format_time(ms),
        _ => format!("{ms} ms"),
    };
    let pct = if report.requests == 0 {
        0.0
    } else {
        report.denied as f64 * 100.0 / report.requests as f64
    };
    writeln!(out, "policy        {}", report.policy)?;
    writeln!(out, "key           {}", report.key)?;
    writeln!(out, "requests      {}", report.requests)?;
    writeln!(out, "denied        {} ({pct:.1}%)", report.denied)?;
    writeln!(
        out,
        "keys          {} ({} with denials)",
        report.keys, report.keys_denied
    )?;
    match &report.first_denial {
        Some(f) => writeln!(
            out,
            "first denial  {} (line {}, key {})",
            time(f.time_ms),
            f.line,
            f.key
        )?,
        None => writeln!(out, "first denial  none")?,
    }
    if report.max_delay_ms > 0 {
        writeln!(out, "max delay     {} ms", report.max_delay_ms)?;
    }
    if report.time_went_back > 0 {
        writeln!(
            out,
            "out of order  {} line{} earlier than the line before (counted as no time passing)",
            report.time_went_back,
            if report.time_went_back == 1 { "" } else { "s" }
        )?;
    }
    if !report.top_denied.is_empty() {
        let width = report
            .top_denied
            .iter()
            .map(|s| s.key.len())
            .max()
            .unwrap_or(0)
            .max(3);
        writeln!(out)?;
        writeln!(out, "top denied keys")?;
        writeln!(
            out,
            "{:<width$}  {:>8}  {:>8}  first denial",
            "key", "requests", "denied"
        )?;
        for s in &report.top_denied {
            writeln!(
                out,
                "{:<width$}  {:>8}  {:>8}  {}",
                s.key,
                s.requests,
                s.denied,
                s.first_denied_ms.map(time).unwrap_or_default()
            )?;
        }
    }
    Ok(())
}
