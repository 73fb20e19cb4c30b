//! `tollgate rls check`: one `ShouldRateLimit` call to a running rate limit service
//! (tollgate-rls, envoyproxy/ratelimit or any other `envoy.service.ratelimit.v3` server),
//! printed for a person or as JSON. The server decides and validates; this only asks and
//! shows what it answered.

use std::fmt;
use std::io::Write;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use serde::Serialize;

/// Why `rls check` got no answer to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RlsError {
    /// A `--descriptor` that is not `key=value[,key=value]...`.
    Descriptor {
        /// The text given.
        given: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `--server` is not a URI tonic can connect to.
    ServerUri {
        /// The text given.
        given: String,
        /// The parser's reason.
        reason: String,
    },
    /// Nothing answered at the server's address (refused, unresolvable, timed out).
    Unreachable {
        /// The server.
        server: String,
        /// The transport's reason, with its causes.
        reason: String,
    },
    /// The call got a gRPC error status instead of a decision: `INVALID_ARGUMENT` for a
    /// request the server refuses (the field and reason in its message), `UNAVAILABLE`
    /// when it cannot decide (or the connection dropped during the call).
    Refused {
        /// The server.
        server: String,
        /// The gRPC status code, as the protocol names it (`INVALID_ARGUMENT`).
        code: String,
        /// The server's message.
        message: String,
    },
}

impl fmt::Display for RlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RlsError::Descriptor { given, reason } => write!(
                f,
                "--descriptor {given:?}: {reason} (expected key=value[,key=value]...)"
            ),
            RlsError::ServerUri { given, reason } => write!(f, "--server {given:?}: {reason}"),
            RlsError::Unreachable { server, reason } => {
                write!(
                    f,
                    "cannot reach the rate limit service at {server}: {reason}"
                )
            }
            RlsError::Refused {
                server,
                code,
                message,
            } => write!(f, "{server} refused the request: {code}: {message}"),
        }
    }
}

impl std::error::Error for RlsError {}

/// Parses `key=value[,key=value]...` into a descriptor's entries, in order. A value may hold
/// `=` (the first one splits); neither part may hold `,`. An empty value is kept (a rule
/// may match it); an empty key is refused. Sizes are the server's to judge.
pub fn parse_descriptor(given: &str) -> Result<Vec<(String, String)>, RlsError> {
    let bad = |reason| RlsError::Descriptor {
        given: given.to_string(),
        reason,
    };
    if given.is_empty() {
        return Err(bad("no entries"));
    }
    given
        .split(',')
        .map(|entry| match entry.split_once('=') {
            None if entry.is_empty() => Err(bad("an empty entry (two commas, or one at an end)")),
            None => Err(bad("an entry without '='")),
            Some(("", _)) => Err(bad("an entry with an empty key")),
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
        })
        .collect()
}

/// The request: `descriptors` in `domain`, with `hits` as the request's `hits_addend` (0:
/// the server counts one).
pub fn request(domain: &str, descriptors: &[Vec<(String, String)>], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors: descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(key, value)| Entry {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        hits_addend: hits,
    }
}

/// One `ShouldRateLimit` call to `server` (`http://host:port`), on a runtime of its own.
/// Connecting gives up after 5 s and the call after 10 s: a check is a question from a
/// person or a script, never a wait.
pub fn call(server: &str, request: RateLimitRequest) -> Result<RateLimitResponse, RlsError> {
    let endpoint = tonic::transport::Endpoint::from_shared(server.to_string())
        .map_err(|e| RlsError::ServerUri {
            given: server.to_string(),
            reason: chain(&e),
        })?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RlsError::Unreachable {
            server: server.to_string(),
            reason: format!("no async runtime: {e}"),
        })?;
    runtime.block_on(async {
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| RlsError::Unreachable {
                server: server.to_string(),
                reason: chain(&e),
            })?;
        let answer = RateLimitServiceClient::new(channel)
            .should_rate_limit(request)
            .await;
        answer
            .map(tonic::Response::into_inner)
            .map_err(|status| RlsError::Refused {
                server: server.to_string(),
                code: code_name(status.code()),
                message: status.message().to_string(),
            })
    })
}

/// An error and its causes, one sentence ("transport error: tcp connect error: Connection
/// refused"); a cause that repeats its error's words is said once.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.ends_with(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

/// A gRPC status code as the protocol spells it (`INVALID_ARGUMENT`).
fn code_name(code: tonic::Code) -> String {
    let mut out = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// What the server answered, in the protocol's names: the JSON of `--json`, and what the
/// text is written from.
#[derive(Debug, Serialize)]
pub struct Report {
    /// `OK`, `OVER_LIMIT` or `UNKNOWN`.
    pub overall_code: String,
    /// One per descriptor sent, in order.
    pub statuses: Vec<Status>,
    /// The headers the server asks the proxy to add to the response to the client.
    pub response_headers: Vec<Header>,
    /// The headers the server asks the proxy to add to the request sent upstream.
    pub request_headers: Vec<Header>,
}

/// A header, in the server's order (a name may repeat).
#[derive(Debug, Serialize)]
pub struct Header {
    /// Its name, as the server spelt it.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// One descriptor's status.
#[derive(Debug, Serialize)]
pub struct Status {
    /// The descriptor as given (`key=value,...`).
    pub descriptor: String,
    /// `OK`, `OVER_LIMIT` or `UNKNOWN`.
    pub code: String,
    /// The limit that decided it (absent when no rule matched).
    pub limit: Option<Limit>,
    /// What is left of the limit in its current unit.
    pub remaining: u32,
    /// Seconds until the limit's unit ends (absent when the server gave none).
    pub reset_seconds: Option<f64>,
}

/// A limit: `requests_per_unit` per `unit`.
#[derive(Debug, Serialize)]
pub struct Limit {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// `SECOND`, `MINUTE`, `HOUR`, `DAY`, `WEEK`, `MONTH`, `YEAR` or `UNKNOWN`.
    pub unit: String,
}

/// The report of `response` to a request of `descriptors`.
pub fn report(descriptors: &[Vec<(String, String)>], response: &RateLimitResponse) -> Report {
    let code = |c: i32| {
        Code::try_from(c)
            .unwrap_or(Code::Unknown)
            .as_str_name()
            .to_string()
    };
    let headers = |h: &[envoy_types::pb::envoy::config::core::v3::HeaderValue]| {
        h.iter()
            .map(|h| Header {
                key: h.key.clone(),
                value: h.value.clone(),
            })
            .collect()
    };
    let statuses = response.statuses.iter().enumerate().map(|(i, s)| Status {
        descriptor: descriptors.get(i).map_or_else(String::new, |entries| {
            let parts: Vec<String> = entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
            parts.join(",")
        }),
        code: code(s.code),
        limit: s.current_limit.as_ref().map(|l| Limit {
            requests_per_unit: l.requests_per_unit,
            unit: Unit::try_from(l.unit)
                .unwrap_or(Unit::Unknown)
                .as_str_name()
                .to_string(),
        }),
        remaining: s.limit_remaining,
        reset_seconds: s
            .duration_until_reset
            .as_ref()
            .map(|d| d.seconds as f64 + f64::from(d.nanos) / 1e9),
    });
    Report {
        overall_code: code(response.overall_code),
        statuses: statuses.collect(),
        response_headers: headers(&response.response_headers_to_add),
        request_headers: headers(&response.request_headers_to_add),
    }
}

/// `report` for a person: the overall code, a line per descriptor, then the headers.
pub fn write_text(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "{}", report.overall_code)?;
    for s in &report.statuses {
        write!(out, "  {}: {}", s.descriptor, s.code)?;
        match &s.limit {
            Some(l) => write!(
                out,
                ", limit {}/{}, remaining {}",
                l.requests_per_unit,
                l.unit.to_lowercase(),
                s.remaining
            )?,
            None => write!(out, ", no limit applies")?,
        }
        if let Some(r) = s.reset_seconds {
            write!(out, ", resets in {r}s")?;
        }
        writeln!(out)?;
    }
    for (title, headers) in [
        ("response headers", &report.response_headers),
        ("request headers", &report.request_headers),
    ] {
        if !headers.is_empty() {
            writeln!(out, "{title}:")?;
            for h in headers {
                writeln!(out, "  {}: {}", h.key, h.value)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_is_key_value_pairs_in_order_and_a_value_may_hold_equals() {
        let d = parse_descriptor("message_type=marketing,to_number=2061111111,q=a=b,e=").unwrap();
        let keys: Vec<&str> = d.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["message_type", "to_number", "q", "e"]);
        assert_eq!(d[2].1, "a=b");
        assert_eq!(d[3].1, "");
    }

    #[test]
    fn bad_descriptor_syntax_is_named() {
        for (given, reason) in [
            ("", "no entries"),
            ("a", "without '='"),
            ("a=1,,b=2", "empty entry"),
            ("a=1,", "empty entry"),
            ("=v", "empty key"),
        ] {
            let e = parse_descriptor(given).unwrap_err().to_string();
            assert!(
                e.contains(reason) && e.contains("--descriptor"),
                "{given:?}: {e}"
            );
        }
    }

    #[test]
    fn grpc_codes_are_spelt_as_the_protocol_spells_them() {
        assert_eq!(code_name(tonic::Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(tonic::Code::Unavailable), "UNAVAILABLE");
        assert_eq!(code_name(tonic::Code::Ok), "OK");
    }
}
