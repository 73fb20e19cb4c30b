//! The layer's own answers to gRPC calls. A gRPC client reads the status from
//! `grpc-status`, not from the HTTP status (an HTTP 429 would reach it as `UNAVAILABLE`,
//! the gRPC HTTP-to-status mapping: <https://github.com/grpc/grpc/blob/master/doc/http-grpc-status-mapping.md>),
//! so a refused call gets a Trailers-Only response (HTTP 200, `content-type:
//! application/grpc`, `grpc-status` and `grpc-message` in the headers, no body; the
//! gRPC-over-HTTP/2 protocol: <https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md>).

use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};

use crate::body::ResponseBody;

/// What the layer said in its own answer (a problem document's `detail`), kept for
/// `grpc-message`.
#[derive(Clone, Debug)]
pub(crate) struct Message(pub(crate) String);

/// Whether the request is a gRPC call: `content-type` `application/grpc`, with or without
/// a `+format` or `;` parameters, or gRPC-Web's `application/grpc-web...` (which carries
/// Trailers-Only answers the same way).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(v) = headers.get(CONTENT_TYPE) else {
        return false;
    };
    let v = v.as_bytes();
    let prefix = b"application/grpc";
    v.len() >= prefix.len()
        && v[..prefix.len()].eq_ignore_ascii_case(prefix)
        && matches!(v.get(prefix.len()), None | Some(b'+' | b';' | b'-'))
}

/// The gRPC status code of one of the layer's HTTP answers
/// (<https://github.com/grpc/grpc/blob/master/doc/statuscodes.md>): a quota exceeded is
/// `RESOURCE_EXHAUSTED` (8), a refused header or path `INVALID_ARGUMENT` (3), a store that
/// could not decide `UNAVAILABLE` (14).
fn code(status: StatusCode) -> u16 {
    match status.as_u16() {
        429 => 8,
        400 => 3,
        503 => 14,
        _ => 2, // UNKNOWN
    }
}

/// The layer's own HTTP answer rewritten as a Trailers-Only gRPC response. The rate-limit
/// fields stay; the problem document's `detail` becomes `grpc-message`; a `Retry-After`
/// is also given as `grpc-retry-pushback-ms`, the server pushback a gRPC client's retry
/// policy waits for (gRPC proposal A6, "gRPC Retry Design").
pub(crate) fn answer<B>(mut resp: Response<ResponseBody<B>>) -> Response<ResponseBody<B>> {
    let code = code(resp.status());
    let message = resp
        .extensions_mut()
        .remove::<Message>()
        .map(|m| m.0)
        .unwrap_or_default();
    *resp.status_mut() = StatusCode::OK;
    *resp.body_mut() = ResponseBody::own(bytes::Bytes::new());
    let h = resp.headers_mut();
    h.remove(CONTENT_LENGTH);
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert(HeaderName::from_static("grpc-status"), code.into());
    if let Ok(v) = HeaderValue::try_from(percent_encode(&message)) {
        h.insert(HeaderName::from_static("grpc-message"), v);
    }
    let pushback = h
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(secs) = pushback {
        h.insert(
            HeaderName::from_static("grpc-retry-pushback-ms"),
            secs.saturating_mul(1000).into(),
        );
    }
    resp
}

/// `grpc-message`'s encoding: bytes outside visible ASCII and space, and `%`, as `%XX`.
fn percent_encode(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types() {
        let grpc = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_TYPE, HeaderValue::from_static(v));
            is_grpc(&h)
        };
        for yes in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC;charset=utf-8",
            "application/grpc-web+proto",
        ] {
            assert!(grpc(yes), "{yes}");
        }
        for no in ["application/json", "application/grpcx", "application/grp"] {
            assert!(!grpc(no), "{no}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    /// A 503 (the store failed, the layer fails closed) and a 400 as gRPC answers.
    #[test]
    fn answers_become_trailers_only() {
        use http_body::Body;
        for (status, code, pushback) in [(503, "14", Some("7000")), (400, "3", None)] {
            let mut resp: Response<ResponseBody<http_body_util::Empty<bytes::Bytes>>> =
                Response::new(ResponseBody::own(bytes::Bytes::from_static(b"{}")));
            *resp.status_mut() = StatusCode::from_u16(status).unwrap();
            let h = resp.headers_mut();
            h.insert(CONTENT_LENGTH, 2.into());
            if pushback.is_some() {
                h.insert(RETRY_AFTER, 7.into());
            }
            resp.extensions_mut()
                .insert(Message("could not decide: 100%".into()));
            let resp = answer(resp);
            assert_eq!(resp.status(), StatusCode::OK);
            assert!(resp.body().is_end_stream(), "no body");
            let h = resp.headers();
            assert_eq!(h[CONTENT_TYPE], "application/grpc");
            assert_eq!(h.get(CONTENT_LENGTH), None);
            assert_eq!(h["grpc-status"], code);
            assert_eq!(h["grpc-message"], "could not decide: 100%25");
            assert_eq!(
                h.get("grpc-retry-pushback-ms").map(|v| v.to_str().unwrap()),
                pushback
            );
        }
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encode("retry in 3 s."), "retry in 3 s.");
        assert_eq!(percent_encode("100% caf\u{e9}\n"), "100%25 caf%C3%A9%0A");
    }
}
