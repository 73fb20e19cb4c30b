//! The README's YAML, read as what it claims to be: the rate limit configurations load, and
//! every Envoy part (the bootstrap; the values that Istio's `EnvoyFilter` and Envoy
//! Gateway's `EnvoyPatchPolicy` patch in) parses as the Envoy protos of `envoy-types` (its
//! descriptors, in the proto3 JSON mapping that Envoy reads YAML with: unknown fields are
//! errors, enum values must exist, `@type` is resolved). No Envoy binary runs here; this is
//! what keeps the examples in the protos' field names.

#[path = "support/envoy_protos.rs"]
mod envoy_protos;

use std::path::Path;

#[path = "support/fences.rs"]
mod fences;

use prost_reflect::{DescriptorPool, DynamicMessage};
use serde_json::Value;
use tollgate_rls::config::Config;

/// The descriptors `envoy-types` generated its types from (`src/generated/types.bin` of the
/// package cargo resolved for this crate).
fn envoy_pool() -> DescriptorPool {
    let bin = envoy_protos::descriptors_path();
    DescriptorPool::decode(std::fs::read(&bin).unwrap().as_slice()).expect("a descriptor set")
}

/// Parses `value` as the message `name`, or says where it is not one.
fn parse(pool: &DescriptorPool, name: &str, value: &Value) -> Result<(), String> {
    let desc = pool
        .get_message_by_name(name)
        .ok_or_else(|| format!("no message {name}"))?;
    DynamicMessage::deserialize(desc, value.clone())
        .map(|_| ())
        .map_err(|e| format!("{name}: {e}"))
}

/// What one YAML document holds, checked; returns its kind.
fn check_document(pool: &DescriptorPool, doc: &Value, text: &str) -> Result<&'static str, String> {
    if doc.get("domain").is_some() {
        Config::from_texts([("README.md", text)]).map_err(|e| e.to_string())?;
        return Ok("rate limit configuration");
    }
    if doc.get("static_resources").is_some() {
        parse(pool, "envoy.config.bootstrap.v3.Bootstrap", doc)?;
        return Ok("Envoy bootstrap");
    }
    match doc["kind"].as_str() {
        Some("EnvoyFilter") => {
            for patch in doc["spec"]["configPatches"].as_array().unwrap() {
                let message = match patch["applyTo"].as_str().unwrap() {
                    "HTTP_FILTER" => {
                        "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter"
                    }
                    "VIRTUAL_HOST" => "envoy.config.route.v3.VirtualHost",
                    "CLUSTER" => "envoy.config.cluster.v3.Cluster",
                    other => return Err(format!("applyTo {other}: not known to this test")),
                };
                parse(pool, message, &patch["patch"]["value"])?;
            }
            Ok("Istio EnvoyFilter")
        }
        Some("EnvoyPatchPolicy") => {
            for patch in doc["spec"]["jsonPatches"].as_array().unwrap() {
                let op = &patch["operation"];
                let path = op["path"].as_str().unwrap();
                let value = &op["value"];
                let parent = path.rsplit('/').nth(1).unwrap_or("");
                if parent == "http_filters" {
                    let filter =
                        "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter";
                    parse(pool, filter, value)?;
                } else if path.ends_with("/rate_limits") {
                    for limit in value.as_array().unwrap() {
                        parse(pool, "envoy.config.route.v3.RateLimit", limit)?;
                    }
                } else {
                    return Err(format!("patch path {path}: not known to this test"));
                }
            }
            Ok("Envoy Gateway EnvoyPatchPolicy")
        }
        // Kubernetes objects that carry no Envoy proto.
        Some("Service" | "ConfigMap" | "Deployment") => Ok("Kubernetes object"),
        _ => Err("a YAML block this test does not know how to check".into()),
    }
}

#[test]
fn the_readme_yaml_is_valid_config_and_envoy_protos() {
    let pool = envoy_pool();
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let mut kinds = Vec::new();
    let yaml = fences::fences(&readme)
        .into_iter()
        .filter(|f| f.lang() == "yaml");
    for fences::Fence { line, body, .. } in yaml {
        for doc in serde_norway::Deserializer::from_str(&body) {
            let doc: Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("README.md:{line}: not YAML: {e}"));
            let doc_text = serde_norway::to_string(&doc).unwrap();
            match check_document(&pool, &doc, &doc_text) {
                Ok(kind) => kinds.push(kind),
                Err(e) => panic!("README.md, the YAML block at line {line}: {e}"),
            }
        }
    }
    for want in [
        "rate limit configuration",
        "Envoy bootstrap",
        "Istio EnvoyFilter",
        "Envoy Gateway EnvoyPatchPolicy",
    ] {
        assert!(kinds.contains(&want), "no {want} checked: {kinds:?}");
    }
}

/// The JSON examples are what grpcurl prints for `ShouldRateLimit`: a `RateLimitResponse`
/// in the proto3 JSON mapping (unknown fields and enum values are errors).
#[test]
fn the_readme_json_is_a_rate_limit_response() {
    let pool = envoy_pool();
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let json: Vec<_> = fences::fences(&readme)
        .into_iter()
        .filter(|f| f.lang() == "json")
        .collect();
    assert!(!json.is_empty(), "no JSON example");
    for fence in json {
        let value: Value = serde_json::from_str(&fence.body)
            .unwrap_or_else(|e| panic!("README.md:{}: not JSON: {e}", fence.line));
        let response = "envoy.service.ratelimit.v3.RateLimitResponse";
        parse(&pool, response, &value).unwrap_or_else(|e| panic!("README.md:{}: {e}", fence.line));
        assert!(value["overallCode"].is_string(), "README.md:{}", fence.line);
    }
}

#[test]
fn a_misspelled_field_or_enum_value_is_caught() {
    let pool = envoy_pool();
    let filter = |field: &str, version: &str| {
        serde_json::json!({
            "name": "envoy.filters.http.ratelimit",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
                "domain": "d",
                field: false,
                "rate_limit_service": {
                    "transport_api_version": version,
                    "grpc_service": { "envoy_grpc": { "cluster_name": "tollgate" } }
                }
            }
        })
    };
    let http_filter = "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter";
    parse(&pool, http_filter, &filter("failure_mode_deny", "V3")).unwrap();
    let e = parse(&pool, http_filter, &filter("failure_mode_deny_typo", "V3")).unwrap_err();
    assert!(e.contains("failure_mode_deny_typo"), "{e}");
    assert!(parse(&pool, http_filter, &filter("failure_mode_deny", "V4")).is_err());
}
