//! `TOLLGATE.PLAN`'s arguments, defined once: [`encode`] is what a client sends
//! (`tollgate-redis`'s `RedisPlans`, and the npm entry to come), [`parse`] what tollgate's
//! Redis module reads, so the two cannot drift apart.
//!
//! ```text
//! TOLLGATE.PLAN <base> <slots> <cost> <n> <policy>*n [NOW <ms>]
//! ```
//!
//! A check of one caller (`<base>`, [`crate::store::KeyLayout::base`]) under the limits its
//! call names (a plan's `n` policies, a stack when more than one), unless the caller has an
//! override at `<base>:o` ([`crate::store::override_name`]): then under the override's
//! limits, read in the same command. `<slots>` is how many slots the caller has (the
//! longest plan's stack, [`super::plan::longest`]), so the module carries and deletes the
//! states a longer stack left ([`super::plan::PlanRound`]). `NOW` is a test clock (a module
//! loaded with `TESTCLOCK`).
//!
//! The reply is a decision's ([`super::decision_fields`], then each limit's), then 1 when
//! the caller's override decided, 0 when the plan named did.
//!
//! ```
//! use tollgate::store::fleet::plan_command::{encode, parse, PlanArgs};
//! use tollgate::store::Limits;
//! let limits = Limits::stack(&["10/s".parse().unwrap(), "100/min".parse().unwrap()]).unwrap();
//! let args = encode(2, 3, &limits);
//! let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
//! assert_eq!(refs, [&b"2"[..], b"3", b"2", b"token-bucket 10/s", b"token-bucket 100/min"]);
//! let back = parse(&refs, false, |p| core::str::from_utf8(p).unwrap().parse()).unwrap();
//! assert_eq!(back, PlanArgs { slots: 2, cost: 3, limits, now_ms: None });
//! ```

use alloc::string::ToString;
use alloc::vec::Vec;
use core::fmt;

use super::plan::MAX_LAYERS;
use crate::store::Limits;
use crate::{Policy, MAX_COUNT};

/// The command's name.
pub const COMMAND: &str = "TOLLGATE.PLAN";

/// The arguments after `<base>` for a check of `cost` under `limits`, for a caller with
/// `slots` slots.
pub fn encode(slots: usize, cost: u64, limits: &Limits) -> Vec<Vec<u8>> {
    let layers = limits.layers();
    let mut args = Vec::with_capacity(3 + layers.len());
    args.push(slots.to_string().into_bytes());
    args.push(cost.to_string().into_bytes());
    args.push(layers.len().to_string().into_bytes());
    args.extend(layers.iter().map(|p| p.to_string().into_bytes()));
    args
}

/// The arguments after `<base>`, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanArgs {
    /// How many slots the caller has.
    pub slots: usize,
    /// The request's cost.
    pub cost: u64,
    /// The limits the call names (a plan's).
    pub limits: Limits,
    /// `NOW <ms>`: the test clock.
    pub now_ms: Option<u64>,
}

/// What is wrong with the arguments (its `Display` is the reply's sentence, without the
/// `ERR ` a Redis reply starts with). `E` is the policy reader's error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanArgsError<E> {
    /// Fewer arguments than `slots cost n` and `n` policies.
    Missing,
    /// `slots`, the cost, `n` or `NOW`'s value is not a whole number (the field named).
    NotANumber(&'static str),
    /// `slots` or `n` is 0 or above [`MAX_LAYERS`] (the field named).
    Layers(&'static str),
    /// A cost above [`MAX_COUNT`].
    CostTooLarge(u64),
    /// A policy the reader refused.
    Policy(E),
    /// `NOW` without a test clock.
    NowWithoutTestClock,
    /// An option that is not `NOW`.
    UnknownOption(Vec<u8>),
}

impl<E: fmt::Display> fmt::Display for PlanArgsError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanArgsError::Missing => {
                f.write_str("a plan check needs: slots cost n and n policies")
            }
            PlanArgsError::NotANumber(what) => write!(f, "{what} must be a whole number"),
            PlanArgsError::Layers(what) => {
                write!(f, "{what} must be 1 to {MAX_LAYERS}")
            }
            PlanArgsError::CostTooLarge(n) => {
                write!(f, "a cost {n} is above the largest allowed, {MAX_COUNT}")
            }
            PlanArgsError::Policy(e) => write!(f, "{e}"),
            PlanArgsError::NowWithoutTestClock => {
                f.write_str("NOW needs the module loaded with TESTCLOCK")
            }
            PlanArgsError::UnknownOption(o) => write!(
                f,
                "unknown option {:?} (expected NOW)",
                alloc::string::String::from_utf8_lossy(o)
            ),
        }
    }
}

/// Reads the arguments after `<base>` (see the module docs); `policy` reads one policy's
/// bytes (a reader with a cache, say). `NOW` is refused unless `test_clock`.
pub fn parse<E>(
    args: &[&[u8]],
    test_clock: bool,
    mut policy: impl FnMut(&[u8]) -> Result<Policy, E>,
) -> Result<PlanArgs, PlanArgsError<E>> {
    let number = |arg: Option<&&[u8]>, what: &'static str| {
        let arg = arg.ok_or(PlanArgsError::Missing)?;
        core::str::from_utf8(arg)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(PlanArgsError::NotANumber(what))
    };
    let layers = |n: u64, what: &'static str| match usize::try_from(n) {
        Ok(n) if (1..=MAX_LAYERS).contains(&n) => Ok(n),
        _ => Err(PlanArgsError::Layers(what)),
    };
    let slots = layers(number(args.first(), "slots")?, "slots")?;
    let cost = number(args.get(1), "the cost")?;
    if cost > MAX_COUNT {
        return Err(PlanArgsError::CostTooLarge(cost));
    }
    let n = layers(number(args.get(2), "n")?, "n")?;
    let given = args.get(3..3 + n).ok_or(PlanArgsError::Missing)?;
    let policies = given
        .iter()
        .map(|p| policy(p).map_err(PlanArgsError::Policy))
        .collect::<Result<Vec<Policy>, _>>()?;
    // Non-empty (n >= 1): a stack of them cannot fail.
    let limits = Limits::stack(&policies).map_err(|_| PlanArgsError::Layers("n"))?;
    let mut now_ms = None;
    let mut rest = &args[3 + n..];
    while let [option, tail @ ..] = rest {
        match option.to_ascii_uppercase().as_slice() {
            b"NOW" if test_clock => {
                now_ms = Some(number(tail.first(), "NOW")?);
                rest = &tail[1..];
            }
            b"NOW" => return Err(PlanArgsError::NowWithoutTestClock),
            _ => return Err(PlanArgsError::UnknownOption(option.to_vec())),
        }
    }
    Ok(PlanArgs {
        slots,
        cost,
        limits,
        now_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    fn e(s: &str, test_clock: bool) -> String {
        let a: Vec<&[u8]> = s.split('|').map(str::as_bytes).collect();
        parse(&a, test_clock, |p| {
            core::str::from_utf8(p)
                .unwrap()
                .parse::<Policy>()
                .map_err(|e| e.to_string())
        })
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn bad_plan_arguments_are_named() {
        assert!(e("1|1", false).contains("slots cost n"));
        assert!(e("0|1|1|10/s", false).contains("slots must be 1 to 16"));
        assert!(e("1|x|1|10/s", false).contains("the cost must be"));
        assert!(e("1|1|17|10/s", false).contains("n must be 1 to 16"));
        assert!(e("1|1|2|10/s", false).contains("slots cost n"));
        assert!(e("1|1|1|10/fortnight", false).contains("invalid policy"));
        assert!(e("1|1|1|10/s|NOW|5", false).contains("TESTCLOCK"));
        assert!(e("1|1|1|10/s|LATER", true).contains("unknown option \"LATER\""));
        assert!(e("1|2000000000000|1|10/s", false).contains("above the largest"));
    }

    #[test]
    fn now_is_read_under_a_test_clock() {
        let a: Vec<&[u8]> = "1|1|1|10/s|now|5".split('|').map(str::as_bytes).collect();
        let back = parse(&a, true, |p| {
            core::str::from_utf8(p).unwrap().parse::<Policy>()
        })
        .unwrap();
        assert_eq!(back.now_ms, Some(5));
    }
}
