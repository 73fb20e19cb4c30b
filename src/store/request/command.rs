//! `TOLLGATE.REQUEST`'s arguments, defined once: [`encode`] is what a client sends
//! (`tollgate-redis`), [`parse`] what tollgate's Redis module reads, so the two cannot
//! drift apart.
//!
//! ```text
//! TOLLGATE.REQUEST <base> <n> (<suffix> <policy> <cost> <shadow 0|1>)*n [EACH] [BLOCKED] [NOW <ms>]
//! ```
//!
//! Each limit's key is `<base><suffix>`; `n` is at most the core's bound on a request's
//! limits ([`bounds::MAX_LIMITS`]), a cost at most [`MAX_COUNT`]. `EACH` charges each
//! limit alone ([`Charging::Each`]), `BLOCKED` says the request also carries an enforced
//! limit that always denies, and `NOW` is a test clock (a module loaded with `TESTCLOCK`).
//!
//! ```
//! use tollgate::store::request::command::{encode, parse};
//! use tollgate::store::request::{Charging, Counted};
//! let limit = Counted { policy: "10/s".parse().unwrap(), cost: 2, shadow: true };
//! let args = encode([(&b"k"[..], &limit)], Charging::Each, false);
//! let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
//! assert_eq!(refs, [&b"1"[..], b"k", b"token-bucket 10/s", b"2", b"1", b"EACH"]);
//! let back = parse(&refs, false, |p| core::str::from_utf8(p).unwrap().parse()).unwrap();
//! assert_eq!((back.items, back.charging), (vec![(&b"k"[..], limit)], Charging::Each));
//! ```

use alloc::string::ToString;
use alloc::vec::Vec;
use core::fmt;

use super::{Charging, Counted};
use crate::store::bounds::{self, Bound, OverBound};
use crate::{Policy, MAX_COUNT};

/// The command's name.
pub const COMMAND: &str = "TOLLGATE.REQUEST";

/// The arguments after `<base>`, in order, for `items` (each limit's key suffix and what
/// decides it).
pub fn encode<'a>(
    items: impl IntoIterator<Item = (&'a [u8], &'a Counted), IntoIter: ExactSizeIterator>,
    charging: Charging,
    blocked: bool,
) -> Vec<Vec<u8>> {
    let items = items.into_iter();
    let mut args = Vec::with_capacity(3 + 4 * items.len());
    args.push(items.len().to_string().into_bytes());
    for (suffix, c) in items {
        args.push(suffix.to_vec());
        args.push(c.policy.to_string().into_bytes());
        args.push(c.cost.to_string().into_bytes());
        args.push(if c.shadow {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        });
    }
    if charging == Charging::Each {
        args.push(b"EACH".to_vec());
    }
    if blocked {
        args.push(b"BLOCKED".to_vec());
    }
    args
}

/// The arguments after `<base>`, parsed.
#[derive(Debug, PartialEq, Eq)]
pub struct Args<'a> {
    /// Each limit's key suffix (appended to the base) and what decides it.
    pub items: Vec<(&'a [u8], Counted)>,
    /// All or nothing (the default) or each charged (`EACH`).
    pub charging: Charging,
    /// `BLOCKED`: the request also has an enforced limit that always denies.
    pub blocked: bool,
    /// `NOW <ms>`: the test clock.
    pub now_ms: Option<u64>,
}

/// What is wrong with the arguments (its `Display` is the reply's sentence, without the
/// `ERR ` a Redis reply starts with). `E` is the policy reader's error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgsError<E> {
    /// The number of limits, a cost or `NOW`'s value is missing or not a whole number.
    NotANumber(&'static str),
    /// More limits than the core's bound.
    TooMany(OverBound),
    /// A cost above [`MAX_COUNT`].
    CostTooLarge(u64),
    /// `n` is 0.
    NoLimit,
    /// Fewer arguments than `n` limits take.
    FewerLimits,
    /// A shadow flag other than `0` or `1`.
    Shadow,
    /// A policy the reader refused.
    Policy(E),
    /// `NOW` without a test clock.
    NowWithoutTestClock,
    /// An option that is not one of `EACH`, `BLOCKED`, `NOW`.
    UnknownOption(Vec<u8>),
}

impl<E: fmt::Display> fmt::Display for ArgsError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgsError::NotANumber(what) => write!(f, "{what} must be a whole number"),
            ArgsError::TooMany(over) => write!(f, "the number of limits: {over}"),
            ArgsError::CostTooLarge(n) => {
                write!(f, "a cost {n} is above the largest allowed, {MAX_COUNT}")
            }
            ArgsError::NoLimit => f.write_str("a request needs at least one limit"),
            ArgsError::FewerLimits => {
                f.write_str("fewer limits than their count (each is: suffix policy cost shadow)")
            }
            ArgsError::Shadow => f.write_str("a shadow flag must be 0 or 1"),
            ArgsError::Policy(e) => write!(f, "{e}"),
            ArgsError::NowWithoutTestClock => {
                f.write_str("NOW needs the module loaded with TESTCLOCK")
            }
            ArgsError::UnknownOption(o) => write!(
                f,
                "unknown option {:?} (expected EACH, BLOCKED or NOW)",
                alloc::string::String::from_utf8_lossy(o)
            ),
        }
    }
}

fn number<E>(arg: Option<&[u8]>, what: &'static str) -> Result<u64, ArgsError<E>> {
    arg.and_then(|a| core::str::from_utf8(a).ok())
        .and_then(|s| s.parse().ok())
        .ok_or(ArgsError::NotANumber(what))
}

/// Reads the arguments after `<base>` (see the module docs); `policy` reads one policy's
/// bytes (a reader with a cache, say). `NOW` is refused unless `test_clock`.
pub fn parse<'a, E>(
    args: &[&'a [u8]],
    test_clock: bool,
    mut policy: impl FnMut(&[u8]) -> Result<Policy, E>,
) -> Result<Args<'a>, ArgsError<E>> {
    let n = number(args.first().copied(), "the number of limits")?;
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    bounds::check(Bound::Limits, n).map_err(ArgsError::TooMany)?;
    if n == 0 {
        return Err(ArgsError::NoLimit);
    }
    let given = args.get(1..1 + 4 * n).ok_or(ArgsError::FewerLimits)?;
    let mut items = Vec::with_capacity(n);
    for limit in given.chunks_exact(4) {
        let cost = number(Some(limit[2]), "a cost")?;
        if cost > MAX_COUNT {
            return Err(ArgsError::CostTooLarge(cost));
        }
        let shadow = match limit[3] {
            b"0" => false,
            b"1" => true,
            _ => return Err(ArgsError::Shadow),
        };
        let policy = policy(limit[1]).map_err(ArgsError::Policy)?;
        let counted = Counted {
            policy,
            cost,
            shadow,
        };
        items.push((limit[0], counted));
    }
    let mut req = Args {
        items,
        charging: Charging::AllOrNothing,
        blocked: false,
        now_ms: None,
    };
    let mut rest = &args[1 + 4 * n..];
    while let [option, tail @ ..] = rest {
        rest = tail;
        match option.to_ascii_uppercase().as_slice() {
            b"EACH" => req.charging = Charging::Each,
            b"BLOCKED" => req.blocked = true,
            b"NOW" if test_clock => {
                req.now_ms = Some(number(rest.first().copied(), "NOW")?);
                rest = &rest[1..];
            }
            b"NOW" => return Err(ArgsError::NowWithoutTestClock),
            _ => return Err(ArgsError::UnknownOption(option.to_vec())),
        }
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use alloc::vec;

    fn read(p: &[u8]) -> Result<Policy, String> {
        core::str::from_utf8(p)
            .map_err(|_| String::from("not UTF-8"))?
            .parse()
            .map_err(|e: crate::PolicyError| e.to_string())
    }

    fn limit(policy: &str, cost: u64, shadow: bool) -> Counted {
        Counted {
            policy: policy.parse().unwrap(),
            cost,
            shadow,
        }
    }

    #[test]
    fn what_is_encoded_parses_back_to_the_same_request() {
        let items = [
            (&b"a"[..], limit("fixed-window 100/min", 0, false)),
            (&b":b c"[..], limit("gcra 5/s burst 9", 7, true)),
        ];
        for (charging, blocked) in [
            (Charging::AllOrNothing, false),
            (Charging::Each, true),
            (Charging::AllOrNothing, true),
        ] {
            let args = encode(items.iter().map(|(s, c)| (*s, c)), charging, blocked);
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let back = parse(&refs, false, read).unwrap();
            assert_eq!(back.items, items);
            assert_eq!(
                (back.charging, back.blocked, back.now_ms),
                (charging, blocked, None)
            );
        }
    }

    #[test]
    fn bad_arguments_are_named() {
        let e = |s: &str| {
            let a: Vec<&[u8]> = s.split('|').map(str::as_bytes).collect();
            parse(&a, false, read).unwrap_err().to_string()
        };
        assert_eq!(e("0"), "a request needs at least one limit");
        assert_eq!(e("65"), "the number of limits: 65 limits, at most 64");
        assert!(e("2|a|10/s|1|0").contains("fewer limits"));
        assert!(e("1|a|10/s|1|yes").contains("0 or 1"));
        assert!(e("1|a|10/s|x|0").contains("a cost must be a whole number"));
        assert!(e("1|a|10/s|2000000000000|0").contains("above the largest"));
        assert!(e("1|a|10/fortnight|1|0").contains("fortnight"));
        assert!(e("1|a|10/s|1|0|NOW|5").contains("TESTCLOCK"));
        assert!(e("1|a|10/s|1|0|FOO").contains("unknown option \"FOO\""));
        let a: Vec<&[u8]> = vec![b"1", b"a", b"10/s", b"1", b"0", b"now", b"5"];
        assert_eq!(parse(&a, true, read).unwrap().now_ms, Some(5));
    }
}
