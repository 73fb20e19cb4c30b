//! Traces: the requests `simulate` and `compare` feed to a policy, one per line.
//!
//! * **CSV** with a header naming the columns, in any order: `time_ms` and `key` are
//!   required, `cost` (default 1), `duration_ms` (how long a request holds a concurrency
//!   slot, or runs before its actual cost is known) and `actual` (the cost it turned out to
//!   have: `tollgate settle` reserves `cost` and settles `actual`) are optional, other
//!   columns are ignored. Lines starting with `#` are comments;
//!   blank lines are skipped; spaces around fields are trimmed.
//! * **JSON lines**: one object per line with the same fields (`key` a string or a number);
//!   blank lines are skipped.
//!
//! Times are whole milliseconds since any epoch. The reader streams: it holds one line at a
//! time.

use std::io::BufRead;

use serde::Deserialize;

use crate::error::{CliError, Source};
use crate::input::Input;

/// The format of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// One request of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The 1-based line it was read from.
    pub line: u64,
    /// When it arrived, in milliseconds.
    pub time_ms: u64,
    /// The key it is limited under (a client, a user, an API key).
    pub key: String,
    /// The cost units it spends (default 1).
    pub cost: u64,
    /// How long it runs, for concurrency limits (released at `time_ms + duration_ms`).
    pub duration_ms: Option<u64>,
    /// The cost it turned out to have, known when it ends (`cost` is then the estimate).
    pub actual: Option<u64>,
}

/// A streaming reader of trace requests.
pub struct Trace {
    source: Source,
    inner: Inner,
}

enum Inner {
    /// An input without even a header line: a trace of no requests.
    Empty,
    Csv {
        reader: csv::Reader<Box<dyn BufRead>>,
        columns: Columns,
        record: csv::StringRecord,
    },
    Jsonl {
        reader: Box<dyn BufRead>,
        line: u64,
        buf: String,
    },
}

/// Column positions of a CSV trace.
struct Columns {
    time_ms: usize,
    key: usize,
    cost: Option<usize>,
    duration_ms: Option<usize>,
    actual: Option<usize>,
}

#[derive(Deserialize)]
struct JsonRequest {
    time_ms: u64,
    key: JsonKey,
    #[serde(default)]
    cost: Option<u64>,
    #[serde(default)]
    duration_ms: Option<u64>,
    #[serde(default)]
    actual: Option<u64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JsonKey {
    Text(String),
    Number(u64),
}

/// Guesses the format from the first bytes: JSON lines start with `{`.
fn detect(reader: &mut Box<dyn BufRead>) -> TraceFormat {
    match reader.fill_buf() {
        Ok(bytes) => {
            let first = bytes
                .strip_prefix(b"\xEF\xBB\xBF")
                .unwrap_or(bytes)
                .iter()
                .find(|b| !b.is_ascii_whitespace());
            if first == Some(&b'{') {
                TraceFormat::Jsonl
            } else {
                TraceFormat::Csv
            }
        }
        // The read error surfaces again, with its source, on the first record.
        Err(_) => TraceFormat::Csv,
    }
}

impl Trace {
    /// Starts reading `input` as `format` (guessed from the content when `None`). A CSV
    /// header without `time_ms` or `key` is an error naming line 1.
    pub fn new(input: Input, format: Option<TraceFormat>) -> Result<Trace, CliError> {
        let Input {
            source, mut reader, ..
        } = input;
        let format = format.unwrap_or_else(|| detect(&mut reader));
        let inner = match format {
            TraceFormat::Jsonl => Inner::Jsonl {
                reader,
                line: 0,
                buf: String::new(),
            },
            TraceFormat::Csv => {
                let mut reader = csv::ReaderBuilder::new()
                    .has_headers(true)
                    .comment(Some(b'#'))
                    .trim(csv::Trim::All)
                    .from_reader(reader);
                let headers = reader.headers().map_err(|e| csv_error(&source, e))?.clone();
                if headers.is_empty() {
                    return Ok(Trace {
                        source,
                        inner: Inner::Empty,
                    });
                }
                let line = reader.position().line().saturating_sub(1).max(1);
                let find = |name: &str| headers.iter().position(|h| h == name);
                let need = |name: &str| {
                    find(name).ok_or_else(|| CliError::Malformed {
                        source: source.clone(),
                        line,
                        reason: format!(
                            "the CSV header must name a `{name}` column (found: {})",
                            headers.iter().collect::<Vec<_>>().join(",")
                        ),
                    })
                };
                let columns = Columns {
                    time_ms: need("time_ms")?,
                    key: need("key")?,
                    cost: find("cost"),
                    duration_ms: find("duration_ms"),
                    actual: find("actual"),
                };
                Inner::Csv {
                    reader,
                    columns,
                    record: csv::StringRecord::new(),
                }
            }
        };
        Ok(Trace { source, inner })
    }

    /// The input, as named in messages.
    pub fn source(&self) -> &Source {
        &self.source
    }

    fn malformed(&self, line: u64, reason: String) -> CliError {
        CliError::Malformed {
            source: self.source.clone(),
            line,
            reason,
        }
    }

    fn next_csv(&mut self) -> Option<Result<Request, CliError>> {
        let Inner::Csv {
            reader,
            columns,
            record,
        } = &mut self.inner
        else {
            return None;
        };
        match reader.read_record(record) {
            Ok(false) => None,
            Err(e) => Some(Err(csv_error(&self.source, e))),
            Ok(true) => {
                let line = record.position().map_or(0, |p| p.line());
                let field = |i: usize| record.get(i).unwrap_or("");
                let time = field(columns.time_ms);
                let key = field(columns.key).to_owned();
                let cost = columns.cost.map(field).unwrap_or("");
                let duration = columns.duration_ms.map(field).unwrap_or("");
                let actual = columns.actual.map(field).unwrap_or("");
                let fields = Fields {
                    time,
                    cost,
                    duration,
                    actual,
                };
                Some(build(&self.source, line, key, fields))
            }
        }
    }

    fn next_jsonl(&mut self) -> Option<Result<Request, CliError>> {
        let Inner::Jsonl { reader, line, buf } = &mut self.inner else {
            return None;
        };
        loop {
            buf.clear();
            *line += 1;
            match reader.read_line(buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(error) => {
                    let at = *line;
                    return Some(Err(match error.kind() {
                        std::io::ErrorKind::InvalidData => {
                            self.malformed(at, "not valid UTF-8".into())
                        }
                        _ => CliError::Read {
                            source: self.source.clone(),
                            error,
                        },
                    }));
                }
            }
            let text = buf.trim();
            if text.is_empty() {
                continue;
            }
            let at = *line;
            if !text.starts_with('{') {
                return Some(Err(malformed(
                    &self.source,
                    at,
                    "not a JSON object (for a CSV trace, pass --format csv)".into(),
                )));
            }
            return Some(match serde_json::from_str::<JsonRequest>(text) {
                Ok(r) => {
                    let key = match r.key {
                        JsonKey::Text(s) => s,
                        JsonKey::Number(n) => n.to_string(),
                    };
                    if key.is_empty() {
                        Err(self.malformed(at, "the key is empty".into()))
                    } else {
                        Ok(Request {
                            line: at,
                            time_ms: r.time_ms,
                            key,
                            cost: r.cost.unwrap_or(1),
                            duration_ms: r.duration_ms,
                            actual: r.actual,
                        })
                    }
                }
                Err(e) => {
                    Err(self.malformed(at, format!("not a trace record: {}", json_reason(&e))))
                }
            });
        }
    }
}

/// A CSV line's fields as written (an absent column: empty).
struct Fields<'a> {
    time: &'a str,
    cost: &'a str,
    duration: &'a str,
    actual: &'a str,
}

fn build(source: &Source, line: u64, key: String, fields: Fields<'_>) -> Result<Request, CliError> {
    let Fields {
        time,
        cost,
        duration,
        actual,
    } = fields;
    let number = |name: &str, text: &str| {
        text.parse::<u64>().map_err(|_| {
            malformed(
                source,
                line,
                format!("{name} \"{text}\" is not a whole number of milliseconds"),
            )
        })
    };
    let time_ms = number("time_ms", time)?;
    if key.is_empty() {
        return Err(malformed(source, line, "the key is empty".into()));
    }
    let cost = if cost.is_empty() {
        1
    } else {
        cost.parse::<u64>().map_err(|_| {
            malformed(
                source,
                line,
                format!("cost \"{cost}\" is not a whole number"),
            )
        })?
    };
    let duration_ms = if duration.is_empty() {
        None
    } else {
        Some(number("duration_ms", duration)?)
    };
    let actual = if actual.is_empty() {
        None
    } else {
        Some(actual.parse::<u64>().map_err(|_| {
            malformed(
                source,
                line,
                format!("actual \"{actual}\" is not a whole number"),
            )
        })?)
    };
    Ok(Request {
        line,
        time_ms,
        key,
        cost,
        duration_ms,
        actual,
    })
}

fn malformed(source: &Source, line: u64, reason: String) -> CliError {
    CliError::Malformed {
        source: source.clone(),
        line,
        reason,
    }
}

impl Iterator for Trace {
    type Item = Result<Request, CliError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.inner {
            Inner::Empty => None,
            Inner::Csv { .. } => self.next_csv(),
            Inner::Jsonl { .. } => self.next_jsonl(),
        }
    }
}

/// serde_json's message without its "at line 1 column 9" (the line is ours to name).
pub(crate) fn json_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&suffix).unwrap_or(&text).to_owned()
}

/// Maps a csv error to a read error or a malformed line.
pub(crate) fn csv_error(source: &Source, e: csv::Error) -> CliError {
    let line = e.position().map_or(1, |p| p.line().max(1));
    match e.into_kind() {
        csv::ErrorKind::Io(error) => CliError::Read {
            source: source.clone(),
            error,
        },
        csv::ErrorKind::Utf8 { .. } => CliError::Malformed {
            source: source.clone(),
            line,
            reason: "not valid UTF-8".into(),
        },
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => CliError::Malformed {
            source: source.clone(),
            line,
            reason: format!("{len} fields, but the header has {expected_len}"),
        },
        other => CliError::Malformed {
            source: source.clone(),
            line,
            reason: format!("{other:?}"),
        },
    }
}

/// Reads a whole trace in input order. Unless `sort` is set, time going backwards is an
/// error naming the line; with `sort`, [`time_order`] gives the order to decide in.
pub fn read_all(mut trace: Trace, sort: bool) -> Result<(Source, Vec<Request>), CliError> {
    let mut requests = Vec::new();
    let mut order = Order::default();
    let source = trace.source().clone();
    for request in trace.by_ref() {
        let request = request?;
        if !sort {
            order.check(&source, &request)?;
        }
        requests.push(request);
    }
    Ok((source, requests))
}

/// The indices of `requests` sorted by time; stable, so requests at the same millisecond
/// keep their input order.
pub fn time_order(requests: &[Request]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| requests[i].time_ms);
    order
}

/// Checks that a stream of requests never goes back in time.
#[derive(Default)]
pub struct Order {
    previous_ms: Option<u64>,
}

impl Order {
    /// An error naming the line when `request` is earlier than the one before it.
    pub fn check(&mut self, source: &Source, request: &Request) -> Result<(), CliError> {
        if let Some(previous_ms) = self.previous_ms {
            if request.time_ms < previous_ms {
                return Err(CliError::OutOfOrder {
                    source: source.clone(),
                    line: request.line,
                    time_ms: request.time_ms,
                    previous_ms,
                });
            }
        }
        self.previous_ms = Some(request.time_ms);
        Ok(())
    }
}
