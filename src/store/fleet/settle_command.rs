//! `TOLLGATE.SETTLE`'s arguments, defined once: [`encode`] is what a client sends
//! (`tollgate-redis`), [`parse`] what tollgate's Redis module reads, so the two cannot
//! drift apart.
//!
//! ```text
//! TOLLGATE.SETTLE <base> <id> <at> <estimate> <actual> <DEBT|UPTOLIMIT> <limits...> [NOW <ms>]
//! ```
//!
//! `<id>` is the reservation's id in hex (its settle record is
//! [`crate::store::settled_name`]`(base, id)`), `<at>` the reserve's instant in ns, the
//! numbers whole and at most [`MAX_COUNT`]; `<limits...>` is the limiter as
//! `TOLLGATE.CHECK` takes it (a policy, or `STACK n` and its policies). The reply is the
//! [`super::settled_record`] and 1 when this command settled, 0 when the reservation was
//! settled before (then nothing was charged).
//!
//! ```
//! use tollgate::store::fleet::settle_command::{encode, parse, SettleArgs};
//! use tollgate::Overage;
//! let a = SettleArgs { id: 255, at: 7, estimate: 800, actual: 300, overage: Overage::Debt };
//! let args = encode(&a);
//! let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
//! assert_eq!(refs, [&b"ff"[..], b"7", b"800", b"300", b"DEBT"]);
//! let mut with_limits = refs.clone();
//! with_limits.push(b"10/s");
//! let (back, rest) = parse(&with_limits).unwrap();
//! assert_eq!((back, rest), (a, &[&b"10/s"[..]][..]));
//! ```

use alloc::string::ToString;
use alloc::vec::Vec;
use core::fmt;

use crate::charge::Overage;
use crate::settle::Charge;
use crate::{Nanos, MAX_COUNT};

/// The command's name.
pub const COMMAND: &str = "TOLLGATE.SETTLE";

/// What one settle sends besides the key and the limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettleArgs {
    /// The reservation's id.
    pub id: u64,
    /// The reserve's instant.
    pub at: Nanos,
    /// What the reservation charged.
    pub estimate: u64,
    /// The real cost.
    pub actual: u64,
    /// What to do with an actual above the estimate.
    pub overage: Overage,
}

impl SettleArgs {
    /// What the reservation charged each limit, and when.
    pub const fn charge(&self) -> Charge {
        Charge {
            cost: self.estimate,
            at: self.at,
        }
    }
}

/// The five arguments after `<base>` (the limiter's follow).
pub fn encode(a: &SettleArgs) -> Vec<Vec<u8>> {
    let overage: &[u8] = match a.overage {
        Overage::Debt => b"DEBT",
        Overage::UpToLimit => b"UPTOLIMIT",
    };
    alloc::vec![
        alloc::format!("{:x}", a.id).into_bytes(),
        a.at.to_string().into_bytes(),
        a.estimate.to_string().into_bytes(),
        a.actual.to_string().into_bytes(),
        overage.to_vec(),
    ]
}

/// What is wrong with the arguments (its `Display` is the reply's sentence, without the
/// `ERR ` a Redis reply starts with).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettleArgsError {
    /// Fewer than the five arguments and a limiter.
    Missing,
    /// The id is not hex of at most 16 digits.
    Id,
    /// `at`, the estimate or the actual is not a whole number (the field named).
    NotANumber(&'static str),
    /// The estimate or the actual is above [`MAX_COUNT`] (the field named).
    TooLarge(&'static str, u64),
    /// The overage is not `DEBT` or `UPTOLIMIT`.
    Overage,
}

impl fmt::Display for SettleArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettleArgsError::Missing => {
                f.write_str("a settle needs: id at estimate actual DEBT|UPTOLIMIT and its limits")
            }
            SettleArgsError::Id => f.write_str("the id must be hex, at most 16 digits"),
            SettleArgsError::NotANumber(what) => write!(f, "{what} must be a whole number"),
            SettleArgsError::TooLarge(what, n) => {
                write!(f, "{what} {n} is above the largest allowed, {MAX_COUNT}")
            }
            SettleArgsError::Overage => f.write_str("the overage must be DEBT or UPTOLIMIT"),
        }
    }
}

/// Reads the five arguments after `<base>`; returns them and the rest (the limiter's).
pub fn parse<'a, 'b>(
    args: &'b [&'a [u8]],
) -> Result<(SettleArgs, &'b [&'a [u8]]), SettleArgsError> {
    let [id, at, estimate, actual, overage, rest @ ..] = args else {
        return Err(SettleArgsError::Missing);
    };
    if rest.is_empty() {
        return Err(SettleArgsError::Missing);
    }
    let id = core::str::from_utf8(id)
        .ok()
        .filter(|s| !s.is_empty() && s.len() <= 16)
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or(SettleArgsError::Id)?;
    let number = |arg: &[u8], what: &'static str| {
        core::str::from_utf8(arg)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(SettleArgsError::NotANumber(what))
    };
    let bounded = |arg: &[u8], what: &'static str| {
        let n = number(arg, what)?;
        if n > MAX_COUNT {
            return Err(SettleArgsError::TooLarge(what, n));
        }
        Ok(n)
    };
    let overage = match overage.to_ascii_uppercase().as_slice() {
        b"DEBT" => Overage::Debt,
        b"UPTOLIMIT" => Overage::UpToLimit,
        _ => return Err(SettleArgsError::Overage),
    };
    let args = SettleArgs {
        id,
        at: number(at, "at")?,
        estimate: bounded(estimate, "the estimate")?,
        // Bounded by the rule itself, which names it (`actual-too-large`).
        actual: number(actual, "the actual")?,
        overage,
    };
    Ok((args, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settle_arguments_are_named() {
        let e = |s: &str| {
            let a: alloc::vec::Vec<&[u8]> = s.split('|').map(str::as_bytes).collect();
            parse(&a).unwrap_err().to_string()
        };
        assert!(e("ff|1|2|3|DEBT").contains("its limits"));
        assert!(e("zz|1|2|3|DEBT|10/s").contains("hex"));
        assert!(e("11111111111111111|1|2|3|DEBT|10/s").contains("hex"));
        assert!(e("ff|x|2|3|DEBT|10/s").contains("at must be"));
        assert!(e("ff|1|2000000000000|3|DEBT|10/s").contains("the estimate 2000000000000"));
        assert!(e("ff|1|2|3|LATER|10/s").contains("DEBT or UPTOLIMIT"));
    }
}
