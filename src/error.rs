use core::fmt;

use crate::{Algorithm, Snippet};

/// Which part of a policy an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// The whole policy text.
    Policy,
    /// The algorithm name (`token-bucket`, `gcra`, ...).
    Algorithm,
    /// The number of requests (or cost units) per window.
    Limit,
    /// The window length (`s`, `10min`, `500ms`, ...).
    Window,
    /// The bucket or queue capacity.
    Burst,
    /// The maximum number in flight of a concurrency limit.
    MaxInFlight,
    /// The per-tenant policy of a fair share.
    TenantPolicy,
    /// The list of policies of a stack.
    Stack,
}

impl Field {
    /// The field's name as it appears in the compact grammar and in JSON/TOML.
    pub const fn name(self) -> &'static str {
        match self {
            Field::Policy => "policy",
            Field::Algorithm => "algorithm",
            Field::Limit => "limit",
            Field::Window => "window",
            Field::Burst => "burst",
            Field::MaxInFlight => "max_in_flight",
            Field::TenantPolicy => "tenant",
            Field::Stack => "policies",
        }
    }
}

/// The rule a policy value broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Nothing was given where a value is required.
    Missing,
    /// Not one of the known algorithm names.
    UnknownAlgorithm,
    /// Not a whole decimal number.
    NotANumber,
    /// Zero, where at least one is required.
    Zero,
    /// Above the largest supported value.
    TooLarge {
        /// The largest value allowed.
        max: u64,
    },
    /// Below the smallest supported value.
    TooSmall {
        /// The smallest value allowed.
        min: u64,
    },
    /// A window unit that is not one of `ms, s, sec, m, min, h, hour, d, day`.
    UnknownUnit,
    /// Text left over after a complete policy.
    Unexpected,
    /// `burst` given to an algorithm that has no bucket (the window algorithms).
    BurstNotApplicable,
    /// A per-tenant limit above the shared limit it sits on (the tenant window would never
    /// bind: the shared limit would silently be every tenant's real limit).
    TenantAboveShared,
    /// A stack with no policy in it.
    EmptyStack,
    /// A window that is not a whole number of milliseconds.
    NotWholeMilliseconds,
}

impl Rule {
    /// A stable kebab-case code for the rule (used in JSON errors and test vectors).
    pub const fn code(&self) -> &'static str {
        match self {
            Rule::Missing => "missing",
            Rule::UnknownAlgorithm => "unknown-algorithm",
            Rule::NotANumber => "not-a-number",
            Rule::Zero => "zero",
            Rule::TooLarge { .. } => "too-large",
            Rule::TooSmall { .. } => "too-small",
            Rule::UnknownUnit => "unknown-unit",
            Rule::Unexpected => "unexpected",
            Rule::BurstNotApplicable => "burst-not-applicable",
            Rule::TenantAboveShared => "tenant-above-shared",
            Rule::EmptyStack => "empty-stack",
            Rule::NotWholeMilliseconds => "not-whole-milliseconds",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Missing => f.write_str("a value is required"),
            Rule::UnknownAlgorithm => f.write_str(
                "unknown algorithm (expected one of token-bucket, gcra, sliding-window, \
                 fixed-window, sliding-log, leaky-bucket, leaky-queue, concurrency)",
            ),
            Rule::NotANumber => f.write_str("must be a whole number"),
            Rule::Zero => f.write_str("must be at least 1"),
            Rule::TooLarge { max } => write!(f, "must be at most {max}"),
            Rule::TooSmall { min } => write!(f, "must be at least {min}"),
            Rule::UnknownUnit => {
                f.write_str("unknown unit (expected one of ms, s, sec, m, min, h, hour, d, day)")
            }
            Rule::Unexpected => f.write_str(
                "unexpected text (grammar: `[<algorithm>] <limit>/<window> [burst <n>]` or \
                 `concurrency <n>`)",
            ),
            Rule::BurstNotApplicable => f.write_str(
                "burst applies only to token-bucket, gcra, leaky-bucket and leaky-queue",
            ),
            Rule::TenantAboveShared => {
                f.write_str("the per-tenant limit must not exceed the shared limit")
            }
            Rule::EmptyStack => f.write_str("a stack needs at least one policy"),
            Rule::NotWholeMilliseconds => f.write_str("must be a whole number of milliseconds"),
        }
    }
}

/// An invalid policy: names the field, the value given and the rule it broke.
///
/// ```
/// use tollgate::{Field, Policy, Rule};
/// let err = "10/fortnight".parse::<Policy>().unwrap_err();
/// assert_eq!(err.field, Field::Window);
/// assert_eq!(err.rule, Rule::UnknownUnit);
/// assert_eq!(err.value.as_str(), "fortnight");
/// assert!(err.to_string().starts_with("invalid policy: window \"fortnight\": unknown unit"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PolicyError {
    /// The field at fault.
    pub field: Field,
    /// The offending value, as given (shortened when long).
    pub value: Snippet,
    /// The rule the value broke.
    pub rule: Rule,
}

impl PolicyError {
    // Out of line: built at some thirty error sites, each copy of the snippet code
    // inlined would cost wasm size; errors are the cold path.
    #[cold]
    #[inline(never)]
    pub(crate) fn new(field: Field, value: &str, rule: Rule) -> PolicyError {
        PolicyError {
            field,
            value: Snippet::new(value),
            rule,
        }
    }

    // Out of line: built at some thirty error sites, each copy of the snippet code
    // inlined would cost wasm size; errors are the cold path.
    #[cold]
    #[inline(never)]
    pub(crate) fn number(field: Field, value: u64, rule: Rule) -> PolicyError {
        PolicyError {
            field,
            value: Snippet::number(value),
            rule,
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid policy: {} \"{}\": {}",
            self.field.name(),
            self.value,
            self.rule
        )
    }
}

impl core::error::Error for PolicyError {}

/// A request that can never be decided as asked. Denial is *not* an error: it is a
/// [`crate::Decision`] with `allowed == false`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecideError {
    /// The cost is larger than the policy's capacity (bucket size, window limit or maximum in
    /// flight), so no amount of waiting would admit it. Nothing was charged.
    CostExceedsCapacity {
        /// The cost asked for.
        cost: u64,
        /// The most one request can ever cost under this policy.
        capacity: u64,
    },
    /// The stored state belongs to another algorithm than the policy's (for example after a
    /// configuration change). Nothing was charged; the store decides whether to reset the key.
    StateMismatch {
        /// The policy's algorithm.
        policy: Algorithm,
        /// The algorithm the state was made by.
        state: Algorithm,
    },
    /// [`crate::release`] was called with a policy that is not a concurrency limit.
    NotConcurrency {
        /// The policy's algorithm.
        policy: Algorithm,
    },
    /// The sliding log keeps a list of instants and needs the `alloc` feature.
    SlidingLogNeedsAlloc,
}

impl DecideError {
    /// A stable kebab-case code for the error (used in JSON errors and test vectors).
    pub const fn code(&self) -> &'static str {
        match self {
            DecideError::CostExceedsCapacity { .. } => "cost-exceeds-capacity",
            DecideError::StateMismatch { .. } => "state-mismatch",
            DecideError::NotConcurrency { .. } => "not-concurrency",
            DecideError::SlidingLogNeedsAlloc => "sliding-log-needs-alloc",
        }
    }
}

impl fmt::Display for DecideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecideError::CostExceedsCapacity { cost, capacity } => write!(
                f,
                "cost {cost} exceeds the policy's capacity {capacity}: it can never be admitted"
            ),
            DecideError::StateMismatch { policy, state } => write!(
                f,
                "stored state is for {} but the policy is {}",
                state.name(),
                policy.name()
            ),
            DecideError::SlidingLogNeedsAlloc => {
                f.write_str("the sliding log needs tollgate's `alloc` feature")
            }
            DecideError::NotConcurrency { policy } => write!(
                f,
                "release applies only to concurrency limits, not to {}",
                policy.name()
            ),
        }
    }
}

impl core::error::Error for DecideError {}

/// Which part of a reservation's identity differs from the limiter it is settled on
/// ([`ReservationError::Foreign`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Identity {
    /// The reservation was made for another key.
    Key,
    /// The reservation was made under other policies (another configuration).
    Policy,
    /// The reservation was made by another limiter (same policies, another store: its
    /// charges are not in this one's counters).
    Limiter,
}

impl Identity {
    /// The part's name, as in [`ReservationError::code`]'s messages and the vectors.
    pub const fn name(self) -> &'static str {
        match self {
            Identity::Key => "key",
            Identity::Policy => "policy",
            Identity::Limiter => "limiter",
        }
    }
}

/// A reservation that cannot be made or settled as asked (see [`crate::settle`]). A
/// denied reserve is not an error: it is a [`crate::Decision`] and no reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReservationError {
    /// The reserve itself cannot be decided (an estimate above a capacity, a state of
    /// another algorithm). Nothing was charged.
    Decide(DecideError),
    /// The actual cost is above [`crate::MAX_COUNT`], the bound every count is kept under so
    /// that its products with time fit in 128 bits. Nothing was settled.
    ActualTooLarge {
        /// The actual cost given.
        actual: u64,
        /// The largest allowed.
        max: u64,
    },
    /// The reservation was made for another key, policy or limiter. Nothing was settled.
    Foreign {
        /// What differs.
        differs: Identity,
    },
    /// The algorithm has no settle: a concurrency limit holds slots until they are released
    /// (its reserve is an acquire; give the slots back with `release`), and a leaky queue is
    /// a shaper whose reserve is refused (a request's place in the queue is fixed by its cost
    /// when it joins; changing it later would move every request queued behind it).
    NotSettleable {
        /// The algorithm.
        policy: Algorithm,
    },
}

impl ReservationError {
    /// A stable kebab-case code for the error (used in JSON errors and test vectors).
    pub const fn code(&self) -> &'static str {
        match self {
            ReservationError::Decide(e) => e.code(),
            ReservationError::ActualTooLarge { .. } => "actual-too-large",
            ReservationError::Foreign { differs } => match differs {
                Identity::Key => "foreign-key",
                Identity::Policy => "foreign-policy",
                Identity::Limiter => "foreign-limiter",
            },
            ReservationError::NotSettleable { .. } => "not-settleable",
        }
    }
}

impl From<DecideError> for ReservationError {
    fn from(e: DecideError) -> Self {
        ReservationError::Decide(e)
    }
}

impl fmt::Display for ReservationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReservationError::Decide(e) => e.fmt(f),
            ReservationError::ActualTooLarge { actual, max } => {
                write!(
                    f,
                    "actual cost {actual} is above the largest allowed, {max}"
                )
            }
            ReservationError::Foreign { differs } => write!(
                f,
                "the reservation was made for another {} than the one it is settled on",
                differs.name()
            ),
            ReservationError::NotSettleable { policy } => write!(
                f,
                "{} has no settle (a concurrency limit is released; a leaky queue, a shaper, \
                 takes no reservation)",
                policy.name()
            ),
        }
    }
}

impl core::error::Error for ReservationError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            ReservationError::Decide(e) => Some(e),
            _ => None,
        }
    }
}
