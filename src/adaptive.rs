//! Adaptive concurrency: a concurrency limit that finds the upstream's capacity by itself.
//!
//! A fixed limit is right for one load and one version of a service: too low wastes
//! capacity, too high lets queues grow until every request is slow. The controllers here
//! move the limit from what the requests tell them when they complete:
//!
//! | controller | runs in | signal | moves the limit |
//! |---|---|---|---|
//! | [`gradient`] | the server (or a proxy) in front of the work | windowed latency percentile against the no-load latency, plus timeouts and drops | by the ratio of the two, once per window |
//! | [`aimd`] | a client of someone else's limit | explicit overload answers (429/503) and timeouts | +1 per limit's worth of successes, times a backoff factor on overload |
//!
//! Both are plain data and pure functions, like every algorithm of the core: the caller
//! passes `now`, the instant each request started and how it ended ([`Outcome`]); the
//! state holds the limit and the count in flight. A limit is **per process** by nature: it
//! measures what this process's requests see, so there is no fleet store for it. A process
//! that serves many routes keeps one state per route.
//!
//! A request is admitted by `acquire` and must be reported once by `release` with its
//! start instant and its outcome, whatever the outcome (an admitted request that is never
//! released keeps its slot forever, as with [`crate::algorithms::concurrency`]).

pub mod aimd;
pub mod gradient;
pub mod window;

use core::fmt;

use crate::{Decision, Rule};

/// How a request admitted by a controller ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Outcome {
    /// An answer came back (including application errors that say nothing about load:
    /// their latency is as good a sample as a success's).
    Success,
    /// The upstream refused for load: 429, 503, a shed request, a full queue. Its latency
    /// is not a sample (a refusal is fast exactly when the upstream is overloaded).
    Overload,
    /// The caller gave up waiting. Its latency is not a sample either: it is at least the
    /// timeout, and the real latency is unknown.
    Timeout,
}

impl Outcome {
    /// Whether the outcome is a congestion signal (a drop or a timeout).
    pub const fn is_congestion(self) -> bool {
        !matches!(self, Outcome::Success)
    }
}

/// A controller's parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Param {
    /// The smallest limit (the floor).
    MinLimit,
    /// The largest limit (the ceiling).
    MaxLimit,
    /// The limit before any sample.
    InitialLimit,
    /// The shortest sampling window.
    Window,
    /// The samples a window needs before it may close.
    MinSamples,
    /// The latency percentile compared with the no-load latency.
    Percentile,
    /// How much slower than no-load, in percent, still counts as unloaded.
    Tolerance,
    /// The mean time between two re-measurements of the no-load latency.
    ProbeInterval,
    /// The share of the limit kept on an overload signal, in percent.
    Backoff,
}

impl Param {
    /// The parameter's name (snake_case, as in JSON and TOML).
    pub const fn name(self) -> &'static str {
        match self {
            Param::MinLimit => "min_limit",
            Param::MaxLimit => "max_limit",
            Param::InitialLimit => "initial_limit",
            Param::Window => "window",
            Param::MinSamples => "min_samples",
            Param::Percentile => "percentile",
            Param::Tolerance => "tolerance",
            Param::ProbeInterval => "probe_interval",
            Param::Backoff => "backoff",
        }
    }
}

/// An invalid controller parameter: which one, the value given and the bound it broke
/// ([`Rule::TooSmall`] or [`Rule::TooLarge`]).
///
/// ```
/// use tollgate::adaptive::gradient::{Gradient, GradientParams};
/// use tollgate::adaptive::Param;
/// use tollgate::Rule;
/// let err = Gradient::new(GradientParams { percentile: 100, ..GradientParams::default() })
///     .unwrap_err();
/// assert_eq!((err.param, err.value, err.rule), (Param::Percentile, 100, Rule::TooLarge { max: 99 }));
/// assert_eq!(err.to_string(), "invalid adaptive limit: percentile 100: must be at most 99");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParamError {
    /// The parameter at fault.
    pub param: Param,
    /// The value given.
    pub value: u64,
    /// The bound it broke.
    pub rule: Rule,
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid adaptive limit: {} {}: {}",
            self.param.name(),
            self.value,
            self.rule
        )
    }
}

impl core::error::Error for ParamError {}

/// Checks `min <= value <= max`, naming `param` when it is not.
pub(crate) fn bounded(param: Param, value: u64, min: u64, max: u64) -> Result<u64, ParamError> {
    let rule = if value < min {
        Rule::TooSmall { min }
    } else if value > max {
        Rule::TooLarge { max }
    } else {
        return Ok(value);
    };
    Err(ParamError { param, value, rule })
}

/// Checks the limits both controllers take: `1 <= min <= max <= MAX_LIMIT`, `initial`
/// between them.
pub(crate) fn limits_bounded(min: u32, max: u32, initial: u32) -> Result<(), ParamError> {
    let most = gradient::MAX_LIMIT.into();
    bounded(Param::MinLimit, min.into(), 1, most)?;
    bounded(Param::MaxLimit, max.into(), min.into(), most)?;
    bounded(Param::InitialLimit, initial.into(), min.into(), max.into())?;
    Ok(())
}

/// Fractional limits are kept in 1/1024ths, so that small steps (AIMD's `+1/limit` per
/// success) add up instead of rounding away.
pub(crate) const ONE: u64 = 1024;

/// Takes one slot of `limit` if one is free: the concurrency rule both controllers share.
pub(crate) fn take(limit: u64, in_flight: &mut u64) -> Decision {
    let allowed = *in_flight < limit;
    if allowed {
        *in_flight += 1;
    }
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(*in_flight),
        reset_after: 0,
        retry_after: 0,
        delay: 0,
    }
}
