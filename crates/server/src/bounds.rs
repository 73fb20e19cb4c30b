//! The core's request bounds ([`tollgate::store::bounds`]) on Envoy's requests: where the
//! caller decides how much work a request is, the server refuses a request over a bound
//! before matching it or allocating in proportion to it, with the field's path and the
//! bound (`descriptors: 8000 limits, at most 64`).
//!
//! * the descriptors of a request ([`Bound::Limits`]: each descriptor is at most one limit,
//!   before a fair share's second);
//! * the entries of a descriptor ([`Bound::Entries`]);
//! * the bytes of the domain, and of each entry's key and value ([`Bound::KeyBytes`]);
//! * after matching, the limits counted together ([`Bound::Limits`] again: a fair share
//!   rule counts two, its shared and its tenant window), see [`counted`].
//!
//! The transport limits are sized from the same bounds, so that a request at every bound
//! at once always reaches these checks: [`GRPC_MAX_MESSAGE`] and [`JSON_MAX_BODY`].

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::store::bounds::MAX_LIMITS;
use tollgate::store::bounds::{check, check_key, Bound, OverBound, MAX_ENTRIES, MAX_KEY_BYTES};

fn at(path: impl std::fmt::Display, e: OverBound) -> String {
    format!("{path}: {e}")
}

/// A request's descriptor count (a JSON body's is checked before its descriptors are read).
pub fn descriptors(n: usize) -> Result<(), String> {
    check(Bound::Limits, n).map_err(|e| at("descriptors", e))
}

/// Descriptor `i`'s entry count.
pub fn entries(i: usize, n: usize) -> Result<(), String> {
    check(Bound::Entries, n).map_err(|e| at(format_args!("descriptors[{i}].entries"), e))
}

/// Every size in `request` the caller chose: the descriptors, each descriptor's entries,
/// the domain's and every entry key's and value's bytes. Reads the request once and
/// allocates nothing unless refusing.
pub fn request(request: &RateLimitRequest) -> Result<(), String> {
    check_key(request.domain.as_bytes()).map_err(|e| at("domain", e))?;
    descriptors(request.descriptors.len())?;
    for (i, d) in request.descriptors.iter().enumerate() {
        entries(i, d.entries.len())?;
        for (j, e) in d.entries.iter().enumerate() {
            check_key(e.key.as_bytes())
                .map_err(|b| at(format_args!("descriptors[{i}].entries[{j}].key"), b))?;
            check_key(e.value.as_bytes())
                .map_err(|b| at(format_args!("descriptors[{i}].entries[{j}].value"), b))?;
        }
    }
    Ok(())
}

/// The limits a request's matched rules count together (distinct counters: a fair share
/// rule's shared and tenant windows are two; two descriptors on one counter are one).
pub fn counted(n: usize) -> Result<(), String> {
    check(Bound::Limits, n).map_err(|e| {
        at(
            "descriptors (limits counted after matching, a fair share two)",
            e,
        )
    })
}

/// The size of the largest request within the bounds, written with `entry`, `descriptor`
/// and `request` bytes of framing around each entry's key and value, each descriptor's
/// entries and the request's descriptors.
const fn largest(entry: usize, descriptor: usize, request: usize) -> usize {
    MAX_LIMITS * (MAX_ENTRIES * (2 * MAX_KEY_BYTES + entry) + descriptor) + MAX_KEY_BYTES + request
}

/// The largest gRPC message the server decodes: twice the largest request within the
/// bounds in protobuf (its framing overestimated: tags, lengths, a limit override and a
/// `hits_addend` per descriptor), so a request at every bound at once is decoded and a
/// bigger message is refused by tonic (`OUT_OF_RANGE`) before it is held whole.
pub const GRPC_MAX_MESSAGE: usize = 2 * largest(16, 64, 64);

/// The largest `/json` body the server reads: twice the largest request within the bounds
/// written compactly in proto3 JSON (every optional field present), the rest for
/// whitespace and escapes. A bigger body is answered 413 before it is parsed.
pub const JSON_MAX_BODY: usize = 2 * largest(32, 192, 128);

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

    fn full(key_bytes: usize) -> RateLimitRequest {
        let entry = Entry {
            key: "k".repeat(key_bytes),
            value: "v".repeat(key_bytes),
        };
        RateLimitRequest {
            domain: "d".repeat(key_bytes),
            descriptors: vec![
                RateLimitDescriptor {
                    entries: vec![entry; MAX_ENTRIES],
                    ..Default::default()
                };
                MAX_LIMITS
            ],
            hits_addend: u32::MAX,
        }
    }

    #[test]
    fn a_request_at_every_bound_at_once_fits_the_grpc_message_limit() {
        let r = full(MAX_KEY_BYTES);
        assert_eq!(request(&r), Ok(()));
        let len = prost::Message::encoded_len(&r);
        println!("largest request {len} bytes, gRPC limit {GRPC_MAX_MESSAGE}");
        assert!(len <= GRPC_MAX_MESSAGE / 2, "{len}");
    }

    #[test]
    fn a_request_at_every_bound_at_once_fits_the_json_body_limit() {
        let r = full(MAX_KEY_BYTES);
        let entry = |e: &Entry| serde_json::json!({"key": e.key, "value": e.value});
        let body = serde_json::json!({
            "domain": r.domain,
            "hitsAddend": r.hits_addend,
            "descriptors": r.descriptors.iter().map(|d| serde_json::json!({
                "entries": d.entries.iter().map(entry).collect::<Vec<_>>(),
                "limit": {"requestsPerUnit": u32::MAX, "unit": "SECOND"},
                "hitsAddend": u64::MAX.to_string(),
                "isNegativeHits": false,
            })).collect::<Vec<_>>(),
        });
        let len = body.to_string().len();
        println!("largest request {len} bytes of JSON, body limit {JSON_MAX_BODY}");
        assert!(len <= JSON_MAX_BODY / 2, "{len}");
    }

    #[test]
    fn the_first_size_over_a_bound_is_named_by_its_path() {
        let mut r = full(1);
        r.descriptors[5].entries[3].value = "v".repeat(MAX_KEY_BYTES + 1);
        assert_eq!(
            request(&r).unwrap_err(),
            format!(
                "descriptors[5].entries[3].value: {} bytes, at most {MAX_KEY_BYTES}",
                MAX_KEY_BYTES + 1
            )
        );
        r.descriptors[2].entries.push(Entry::default());
        assert_eq!(
            request(&r).unwrap_err(),
            format!(
                "descriptors[2].entries: {} entries, at most {MAX_ENTRIES}",
                MAX_ENTRIES + 1
            )
        );
        r.domain = "d".repeat(2 * MAX_KEY_BYTES);
        assert_eq!(
            request(&r).unwrap_err(),
            format!(
                "domain: {} bytes, at most {MAX_KEY_BYTES}",
                2 * MAX_KEY_BYTES
            )
        );
        r.domain = "d".into();
        r.descriptors.push(RateLimitDescriptor::default());
        assert_eq!(
            request(&r).unwrap_err(),
            format!(
                "descriptors: {} limits, at most {MAX_LIMITS}",
                MAX_LIMITS + 1
            )
        );
    }
}
