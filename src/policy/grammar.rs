//! The compact policy grammar: `"100/min"`, `"10/s burst 40"`, `"sliding-window 600/10min"`,
//! `"concurrency 8"`. Parsing (`FromStr`) and writing (`Display`) are inverse: a policy
//! written and read back is the same policy.

use core::fmt;
use core::str::FromStr;

use super::*;

fn parse_count(field: Field, text: &str) -> Result<u64, PolicyError> {
    if text.is_empty() {
        return Err(PolicyError::new(field, text, Rule::Missing));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PolicyError::new(field, text, Rule::NotANumber));
    }
    let n: u64 = text
        .parse()
        .map_err(|_| PolicyError::new(field, text, Rule::TooLarge { max: MAX_COUNT }))?;
    if n == 0 {
        return Err(PolicyError::new(field, text, Rule::Zero));
    }
    if n > MAX_COUNT {
        return Err(PolicyError::new(
            field,
            text,
            Rule::TooLarge { max: MAX_COUNT },
        ));
    }
    Ok(n)
}

/// The window units of the grammar (any case) and their length in milliseconds.
const UNITS: [(&str, u64); 9] = [
    ("ms", 1),
    ("s", MS_PER_SEC),
    ("sec", MS_PER_SEC),
    ("m", MS_PER_MIN),
    ("min", MS_PER_MIN),
    ("h", MS_PER_HOUR),
    ("hour", MS_PER_HOUR),
    ("d", MS_PER_DAY),
    ("day", MS_PER_DAY),
];

/// Parses a window (`<n><unit>` or a bare unit) into milliseconds.
pub(super) fn parse_window(text: &str) -> Result<u64, PolicyError> {
    if text.is_empty() {
        return Err(PolicyError::new(Field::Window, text, Rule::Missing));
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    // `split` is always a char boundary (the first non-digit); the checked form keeps the
    // panic path's char formatting (about 4 KB of the npm package's wasm) out of the build.
    let (digits, unit) = text.split_at_checked(split).unwrap_or((text, ""));
    if unit.is_empty() {
        return Err(PolicyError::new(Field::Window, text, Rule::UnknownUnit));
    }
    let unit_ms = UNITS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(unit))
        .map(|&(_, ms)| ms)
        .ok_or_else(|| PolicyError::new(Field::Window, unit, Rule::UnknownUnit))?;
    let n = if digits.is_empty() {
        1
    } else {
        let n: u64 = digits.parse().map_err(|_| {
            PolicyError::new(
                Field::Window,
                text,
                Rule::TooLarge {
                    max: MAX_WINDOW.as_millis() as u64,
                },
            )
        })?;
        if n == 0 {
            return Err(PolicyError::new(Field::Window, text, Rule::Zero));
        }
        n
    };
    let max_ms = MAX_WINDOW.as_millis() as u64;
    match n.checked_mul(unit_ms) {
        Some(ms) if ms <= max_ms => Ok(ms),
        _ => Err(PolicyError::new(
            Field::Window,
            text,
            Rule::TooLarge { max: max_ms },
        )),
    }
}

impl FromStr for Policy {
    type Err = PolicyError;

    /// Parses the compact grammar:
    /// `[<algorithm>] <limit>/<window> [burst <n>]` or `concurrency <n>`.
    fn from_str(text: &str) -> Result<Policy, PolicyError> {
        let mut words = text.split_ascii_whitespace();
        let first = words
            .next()
            .ok_or(PolicyError::new(Field::Policy, text, Rule::Missing))?;
        let (algorithm, rate) = if first.contains('/') {
            (Algorithm::TokenBucket, first)
        } else if let Some(a) = Algorithm::from_name(first) {
            let next = words.next().ok_or(PolicyError::new(
                if a == Algorithm::Concurrency {
                    Field::MaxInFlight
                } else {
                    Field::Limit
                },
                "",
                Rule::Missing,
            ))?;
            (a, next)
        } else if first.bytes().all(|b| b.is_ascii_digit()) {
            // "10" with no window: say what is missing.
            return Err(PolicyError::new(Field::Window, "", Rule::Missing));
        } else {
            return Err(PolicyError::new(
                Field::Algorithm,
                first,
                Rule::UnknownAlgorithm,
            ));
        };
        let policy = if algorithm == Algorithm::Concurrency {
            let n = parse_count(Field::MaxInFlight, rate)?;
            Policy::from_parts(algorithm, n, None, None)?
        } else {
            let (limit, window) =
                rate.split_once('/')
                    .ok_or(PolicyError::new(Field::Window, "", Rule::Missing))?;
            let limit = parse_count(Field::Limit, limit)?;
            let burst = match words.next() {
                None => None,
                Some(w) if w.eq_ignore_ascii_case("burst") => {
                    let n =
                        words
                            .next()
                            .ok_or(PolicyError::new(Field::Burst, "", Rule::Missing))?;
                    if !algorithm.is_bucket() {
                        return Err(PolicyError::new(Field::Burst, n, Rule::BurstNotApplicable));
                    }
                    Some(parse_count(Field::Burst, n)?)
                }
                Some(w) => return Err(PolicyError::new(Field::Policy, w, Rule::Unexpected)),
            };
            Policy::from_parts(algorithm, limit, Some(window), burst)?
        };
        match words.next() {
            None => Ok(policy),
            Some(w) => Err(PolicyError::new(Field::Policy, w, Rule::Unexpected)),
        }
    }
}

/// Writes a window in the grammar's shortest exact form (`s`, `10min`, `500ms`).
fn fmt_window(f: &mut fmt::Formatter<'_>, ms: u64) -> fmt::Result {
    let (n, unit) = [
        (MS_PER_DAY, "d"),
        (MS_PER_HOUR, "h"),
        (MS_PER_MIN, "min"),
        (MS_PER_SEC, "s"),
    ]
    .into_iter()
    .find(|(u, _)| ms % u == 0)
    .map(|(u, name)| (ms / u, name))
    .unwrap_or((ms, "ms"));
    if n == 1 {
        f.write_str(unit)
    } else {
        write!(f, "{n}{unit}")
    }
}

impl fmt::Display for Policy {
    /// The canonical compact form; parsing it gives back the same policy.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Concurrency(n) => write!(f, "concurrency {n}"),
            _ => {
                let q = self.quota().unwrap_or(Quota::per_second(NonZeroU32::MIN));
                write!(f, "{} {}/", self.algorithm(), q.limit())?;
                fmt_window(f, q.window_ms())?;
                if let Some(b) = self.bucket() {
                    if b.capacity() != q.limit() {
                        write!(f, " burst {}", b.capacity())?;
                    }
                }
                Ok(())
            }
        }
    }
}
