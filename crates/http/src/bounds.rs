//! The core's request bounds ([`tollgate::store::bounds`]) as HTTP answers: a key a caller
//! gives (the edge's check API body, the tower layer's key function) over its bound is
//! refused with a 400 problem document naming the field and the bound. The numbers and the
//! rule are the core's; this module only names the field and writes the answer, once for
//! every HTTP front end.
//!
//! Keys the front ends hash before they name anything (API keys: `key:<sha-256 hex>`, and
//! the check API's keys: `ext:<sha-256 hex>`, [`crate::key`]) are stored at a fixed size
//! whatever their length; their length is still checked, as work the request asks for.
//!
//! ```
//! use tollgate_http::bounds::check_key;
//! assert!(check_key("key", "tenant-7").is_ok());
//! let e = check_key("key", &"k".repeat(2000)).unwrap_err();
//! assert_eq!(e.to_string(), "key: 2000 bytes, at most 1024");
//! let v: serde_json::Value = serde_json::from_str(&e.problem()).unwrap();
//! assert_eq!((v["status"].as_u64(), v["error"].as_str()), (Some(400), Some("over-bound")));
//! assert_eq!((v["field"].as_str(), v["max"].as_u64()), (Some("key"), Some(1024)));
//! ```

use std::fmt;

use serde_json::json;
use tollgate::store::bounds::{self, OverBound};

/// The problem document's `error` (the kind a client matches on) for a field over a bound.
pub const KIND: &str = "over-bound";

/// A request's field over one of the core's bounds: which field, and the core's
/// [`OverBound`] (which bound, the size it had). Answer it with [`FieldOverBound::problem`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldOverBound {
    /// The field at fault, as the request names it (`key`, `tenant`).
    pub field: String,
    /// The bound passed and the size the field had.
    pub over: OverBound,
}

impl FieldOverBound {
    /// The 400 problem document (RFC 9457, [`crate::problem`]): `error` [`KIND`], `detail`
    /// this error's text, and the members `field`, `size`, `max` and `unit` (`bytes`,
    /// `limits`, `entries`).
    pub fn problem(&self) -> String {
        crate::problem::problem(
            400,
            KIND,
            &self.to_string(),
            json!({
                "field": self.field,
                "size": self.over.size,
                "max": self.over.bound.max(),
                "unit": self.over.bound.unit(),
            }),
        )
    }
}

impl fmt::Display for FieldOverBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.over)
    }
}

impl std::error::Error for FieldOverBound {}

/// The core's [`bounds::check_key`] of the key part `key` the request gave as `field`.
pub fn check_key(field: &str, key: &str) -> Result<(), FieldOverBound> {
    bounds::check_key(key.as_bytes()).map_err(|over| FieldOverBound {
        field: field.to_string(),
        over,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::store::bounds::{Bound, MAX_KEY_BYTES};

    #[test]
    fn a_key_at_the_bound_passes_and_one_byte_more_is_a_400_naming_field_and_bound() {
        assert_eq!(check_key("tenant", &"t".repeat(MAX_KEY_BYTES)), Ok(()));
        let e = check_key("tenant", &"t".repeat(MAX_KEY_BYTES + 1)).unwrap_err();
        assert_eq!(e.field, "tenant");
        assert_eq!(e.over.bound, Bound::KeyBytes);
        let v: serde_json::Value = serde_json::from_str(&e.problem()).unwrap();
        assert_eq!(v["status"], 400);
        assert_eq!(v["title"], "Bad Request");
        assert_eq!(v["error"], KIND);
        assert_eq!(v["field"], "tenant");
        assert_eq!(v["size"], MAX_KEY_BYTES + 1);
        assert_eq!(v["max"], MAX_KEY_BYTES);
        assert_eq!(v["unit"], "bytes");
        assert_eq!(
            v["detail"],
            format!(
                "tenant: {} bytes, at most {MAX_KEY_BYTES}",
                MAX_KEY_BYTES + 1
            )
        );
    }

    #[test]
    fn bytes_are_counted_not_characters() {
        // 512 two-byte characters: 1024 bytes, at the bound; one more is over it.
        assert!(check_key("key", &"é".repeat(MAX_KEY_BYTES / 2)).is_ok());
        let e = check_key("key", &"é".repeat(MAX_KEY_BYTES / 2 + 1)).unwrap_err();
        assert_eq!(e.over.size, MAX_KEY_BYTES + 2);
    }
}
