//! Named budgets with overrides: one default limit per namespace (say `whois`) and, from a
//! JSON map, an override per name (say a top-level domain), each its own namespace
//! (`whois:com`) with its own shared bucket and a per-tenant window on top.
//!
//! The map is `{ "<name>": <policy>, ... }`, each policy in tollgate's grammar or as a table:
//!
//! ```
//! use tollgate_redis::namespaces::parse_overrides;
//! let map = parse_overrides(r#"{ "com": "gcra 1/2000ms", "de": { "algorithm": "gcra", "limit": 1, "window": "5s" } }"#)
//!     .unwrap();
//! assert_eq!(map["com"].limit(), 1);
//! assert_eq!(map["de"].quota().unwrap().window_ms(), 5_000);
//! // An invalid entry is an error that names it; nothing is silently dropped.
//! let e = parse_overrides(r#"{ "com": "1/2000ms", "io": "1/fortnight" }"#).unwrap_err();
//! assert!(e.to_string().contains(r#"entry "io": "#), "{e}");
//! assert!(e.to_string().contains("fortnight"), "{e}");
//! ```

use std::collections::BTreeMap;

use tollgate::store::KeyLayout;
use tollgate::Policy;

use crate::Error;

/// Parses an override map (see the module docs). Errors name the entry and its problem:
/// invalid JSON, a value that is not a policy, an empty or brace-carrying name (it becomes
/// part of a Redis key's hash tag).
pub fn parse_overrides(json: &str) -> Result<BTreeMap<String, Policy>, Error> {
    let map: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(json).map_err(|e| Error::Config {
            field: "overrides",
            reason: format!("not a JSON object of policies: {e}"),
        })?;
    map.into_iter()
        .map(|(name, value)| {
            let problem = |reason: String| Error::Config {
                field: "overrides",
                reason: format!("entry {name:?}: {reason}"),
            };
            // The name becomes part of a Redis key's hash tag: the core's brace rule.
            if let Err(e) = KeyLayout::check_part("overrides", &name) {
                return Err(problem(e.reason()));
            }
            serde_json::from_value::<Policy>(value)
                .map(|policy| (name.clone(), policy))
                .map_err(|e| problem(e.to_string()))
        })
        .collect()
}
