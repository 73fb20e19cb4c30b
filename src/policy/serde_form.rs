//! Policies in JSON and TOML (with the `serde` feature): the compact string, or a table of
//! its parts, both validated as the grammar validates them.

use super::*;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

impl Serialize for Policy {
    /// Serialises as the canonical compact string.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Policy {
    /// Accepts the compact string, or a table
    /// `{ algorithm = "gcra", limit = 10, window = "1s", burst = 20 }`
    /// (`algorithm` defaults to `token-bucket`; `window` may also be a number of ms).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Policy, D::Error> {
        d.deserialize_any(PolicyVisitor)
    }
}

struct PolicyVisitor;

impl<'de> Visitor<'de> for PolicyVisitor {
    type Value = Policy;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a policy string like \"10/s burst 20\" or a table with algorithm, limit, window, burst")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Policy, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Policy, A::Error> {
        let mut algorithm = Algorithm::TokenBucket;
        let mut limit: Option<u64> = None;
        let mut window: Option<WindowValue> = None;
        let mut burst: Option<u64> = None;
        while let Some(key) = map.next_key::<KeyName>()? {
            match key.0 {
                Key::Algorithm => {
                    let name: StrBuf = map.next_value()?;
                    algorithm = Algorithm::from_name(name.as_str()).ok_or_else(|| {
                        de::Error::custom(PolicyError::new(
                            Field::Algorithm,
                            name.as_str(),
                            Rule::UnknownAlgorithm,
                        ))
                    })?;
                }
                Key::Limit => limit = Some(map.next_value()?),
                Key::Window => window = Some(map.next_value()?),
                Key::Burst => burst = Some(map.next_value()?),
            }
        }
        let limit = limit
            .ok_or_else(|| de::Error::custom(PolicyError::new(Field::Limit, "", Rule::Missing)))?;
        let mut ms_buf = [0u8; 24];
        let window_text = match &window {
            None => None,
            Some(WindowValue::Text(t)) => Some(t.as_str()),
            Some(WindowValue::Millis(ms)) => Some(write_ms(&mut ms_buf, *ms)),
        };
        Policy::from_parts(algorithm, limit, window_text, burst).map_err(de::Error::custom)
    }
}

enum Key {
    Algorithm,
    Limit,
    Window,
    Burst,
}
struct KeyName(Key);

impl<'de> Deserialize<'de> for KeyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyName, D::Error> {
        let s = StrBuf::deserialize(d)?;
        Ok(KeyName(match s.as_str() {
            "algorithm" => Key::Algorithm,
            "limit" | "max_in_flight" => Key::Limit,
            "window" | "window_ms" => Key::Window,
            "burst" => Key::Burst,
            other => {
                return Err(de::Error::custom(format_args!(
                    "invalid policy: unknown field \"{other}\" (expected algorithm, limit, window, burst)"
                )))
            }
        }))
    }
}

/// A short owned string, so that deserialising works without `alloc` and from readers.
struct StrBuf(crate::Snippet);
impl StrBuf {
    fn as_str(&self) -> &str {
        self.0.as_str()
    }
}
impl<'de> Deserialize<'de> for StrBuf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StrBuf, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StrBuf;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StrBuf, E> {
                Ok(StrBuf(crate::Snippet::new(v)))
            }
        }
        d.deserialize_str(V)
    }
}

enum WindowValue {
    Text(crate::Snippet),
    Millis(u64),
}
impl<'de> Deserialize<'de> for WindowValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WindowValue, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = WindowValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a window like \"10s\" or a number of milliseconds")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<WindowValue, E> {
                let s = crate::Snippet::new(v);
                if s.is_cut() {
                    return Err(E::custom(PolicyError::new(
                        Field::Window,
                        v,
                        Rule::UnknownUnit,
                    )));
                }
                Ok(WindowValue::Text(s))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<WindowValue, E> {
                Ok(WindowValue::Millis(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<WindowValue, E> {
                u64::try_from(v).map(WindowValue::Millis).map_err(|_| {
                    E::custom(PolicyError::new(
                        Field::Window,
                        "negative",
                        Rule::NotANumber,
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}
