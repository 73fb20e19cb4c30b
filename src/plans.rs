//! Plans: named limits, so that the limit can depend on who calls (free 100/min, pro
//! 1,000/min), and per-key overrides of them.
//!
//! A plan is a name and its limits: one policy or an all-or-nothing stack
//! ([`crate::stack`]). [`Plans`] validates a set of them once: at least one plan, every name
//! non-empty and different, every stack non-empty; each error names the plan and the field
//! ([`PlanError`]). A key's state carries from one plan to another by the rule of
//! [`crate::carry`], so that changing a customer's plan never resets what it has spent.
//!
//! [`Override`] is what a runtime keeps for one key that has its own plan or its own limits
//! (a raised limit for a launch, a lowered one for an abuser): plain data, for the in-process
//! [`crate::keyed::PlanLimiter`] and for the stores to come.
//!
//! ```
//! use tollgate::plans::{PlanError, Plans};
//! let plans = Plans::parse(&[("free", &["100/min"]), ("pro", &["1000/min", "50/s"])]).unwrap();
//! assert_eq!(plans.get("pro").unwrap().layers().len(), 2);
//! assert!(matches!(plans.get("gold"), Err(PlanError::UnknownPlan { .. })));
//! let err = Plans::parse(&[("free", &["100/min"]), ("free", &["10/s"])]).unwrap_err();
//! assert_eq!(err.to_string(), "invalid plans: plans[1].name \"free\": a plan of that name is already defined");
//! ```

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::store::Limits;
use crate::{Policy, PolicyError, Snippet};

/// One named plan: a policy or an all-or-nothing stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Plan {
    name: Box<str>,
    limits: Limits,
}

impl Plan {
    /// The plan's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plan's limits (a single policy is a stack of one).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// A validated set of named plans (at least one; names non-empty and distinct). With
/// `serde`, a list of `{"name", "policies"}`:
///
/// ```
/// # #[cfg(feature = "serde")] {
/// use tollgate::plans::Plans;
/// let json = r#"[{"name": "free", "policies": ["100/min"]}, {"name": "free", "policies": ["5/s"]}]"#;
/// let err = serde_json::from_str::<Plans>(json).unwrap_err();
/// assert!(err.to_string().starts_with("invalid plans: plans[1].name \"free\""));
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Plans {
    plans: Vec<Plan>,
}

impl Plans {
    /// Plans from names and their policies (one policy, or several for a stack), in order.
    /// Errors: no plan ([`PlanError::NoPlans`]), an empty name ([`PlanError::EmptyName`]),
    /// a name given twice ([`PlanError::DuplicateName`]), a plan with no policy
    /// ([`PlanError::Policy`]).
    pub fn new<S: AsRef<str>>(
        plans: impl IntoIterator<Item = (S, Vec<Policy>)>,
    ) -> Result<Plans, PlanError> {
        let mut out: Vec<Plan> = Vec::new();
        for (index, (name, policies)) in plans.into_iter().enumerate() {
            let name = name.as_ref();
            if name.is_empty() {
                return Err(PlanError::EmptyName { index });
            }
            if out.iter().any(|p| &*p.name == name) {
                return Err(PlanError::DuplicateName {
                    index,
                    name: Snippet::new(name),
                });
            }
            let limits = Limits::stack(&policies).map_err(|error| PlanError::Policy {
                plan: Snippet::new(name),
                index: None,
                error,
            })?;
            out.push(Plan {
                name: name.into(),
                limits,
            });
        }
        if out.is_empty() {
            return Err(PlanError::NoPlans);
        }
        Ok(Plans { plans: out })
    }

    /// [`Plans::new`] from policies in the compact grammar (see [`Policy`]); a policy that
    /// does not parse is a [`PlanError::Policy`] naming the plan and the policy's position.
    pub fn parse(plans: &[(&str, &[&str])]) -> Result<Plans, PlanError> {
        let mut parsed = Vec::with_capacity(plans.len());
        for (name, texts) in plans {
            let policies = texts
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    t.parse().map_err(|error| PlanError::Policy {
                        plan: Snippet::new(name),
                        index: Some(i),
                        error,
                    })
                })
                .collect::<Result<Vec<Policy>, _>>()?;
            parsed.push((*name, policies));
        }
        Plans::new(parsed)
    }

    /// The limits of the plan called `name`; [`PlanError::UnknownPlan`] if there is none.
    pub fn get(&self, name: &str) -> Result<&Limits, PlanError> {
        self.plans
            .iter()
            .find(|p| &*p.name == name)
            .map(|p| &p.limits)
            .ok_or_else(|| PlanError::UnknownPlan {
                name: Snippet::new(name),
            })
    }

    /// Every plan, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = &Plan> {
        self.plans.iter()
    }
}

/// What one key is given in place of the plan its caller would choose: another plan, or
/// limits of its own. Plain data, as a runtime stores it; with `serde`, `{"plan": "pro"}`
/// or `{"limits": ["5/s", "fixed-window 1000/day"]}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Override {
    /// The plan of this name (one of the [`Plans`]).
    Plan(String),
    /// These limits: one policy, or an all-or-nothing stack (at least one).
    Limits(Vec<Policy>),
}

impl Override {
    /// The limits this override gives, checked against `plans`: the named plan's (or
    /// [`PlanError::UnknownPlan`]), or its own (or [`PlanError::Policy`] for an empty list).
    pub fn resolve(&self, plans: &Plans) -> Result<Limits, PlanError> {
        match self {
            Override::Plan(name) => plans.get(name).cloned(),
            Override::Limits(policies) => {
                Limits::stack(policies).map_err(|error| PlanError::Policy {
                    plan: Snippet::EMPTY,
                    index: None,
                    error,
                })
            }
        }
    }
}

#[cfg(feature = "serde")]
mod serde_form {
    //! Plans in JSON and TOML (with the `serde` feature): a list of `{"name", "policies"}`,
    //! in order (a list, not a map, so that a name given twice is an error and not lost).

    use super::*;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// One plan as written.
    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Written {
        name: String,
        policies: Vec<Policy>,
    }

    impl<'de> Deserialize<'de> for Plans {
        /// `[{"name": "free", "policies": ["100/min"]}, ...]`, validated as [`Plans::new`].
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Plans, D::Error> {
            let written = Vec::<Written>::deserialize(d)?;
            Plans::new(written.into_iter().map(|w| (w.name, w.policies)))
                .map_err(serde::de::Error::custom)
        }
    }

    impl Serialize for Plans {
        /// The form [`Plans`] deserialises from.
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(self.plans.iter().map(|p| Written {
                name: String::from(&*p.name),
                policies: p.limits.layers().to_vec(),
            }))
        }
    }
}

/// Invalid plans or a plan that does not exist: names the plan (or its position) and the
/// reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanError {
    /// No plan was given (`plans` is empty).
    NoPlans,
    /// The plan at this position has an empty name.
    EmptyName {
        /// Its position in the list.
        index: usize,
    },
    /// The plan at this position has the name of an earlier one.
    DuplicateName {
        /// Its position in the list.
        index: usize,
        /// The name given twice.
        name: Snippet,
    },
    /// No plan has this name.
    UnknownPlan {
        /// The name asked for.
        name: Snippet,
    },
    /// A plan's limits are invalid: no policy at all, or a policy that does not parse.
    Policy {
        /// The plan's name (empty for a key's own limits, [`Override::Limits`]).
        plan: Snippet,
        /// The policy's position in the plan's list, when one policy is at fault.
        index: Option<usize>,
        /// What is wrong with it.
        error: PolicyError,
    },
    /// A limiter keeps at most this many overrides, and is full (clear one first): an
    /// override is configuration, so it is never evicted to make room.
    TooManyOverrides {
        /// The bound.
        max: usize,
    },
    /// A key's own limits, or a plan, have more limits than a store keeps for one key: on
    /// a fleet store, the longest plan's stack (every caller has that many slots), and at
    /// most [`crate::store::fleet::plan::MAX_LAYERS`].
    TooManyLayers {
        /// The bound.
        max: usize,
    },
}

impl PlanError {
    /// A stable kebab-case code for the error (used in JSON errors and test vectors).
    pub const fn code(&self) -> &'static str {
        match self {
            PlanError::NoPlans => "no-plans",
            PlanError::EmptyName { .. } => "empty-name",
            PlanError::DuplicateName { .. } => "duplicate-name",
            PlanError::UnknownPlan { .. } => "unknown-plan",
            PlanError::Policy { .. } => "invalid-policy",
            PlanError::TooManyOverrides { .. } => "too-many-overrides",
            PlanError::TooManyLayers { .. } => "too-many-layers",
        }
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::NoPlans => f.write_str("invalid plans: plans: at least one plan is needed"),
            PlanError::EmptyName { index } => {
                write!(f, "invalid plans: plans[{index}].name: must not be empty")
            }
            PlanError::DuplicateName { index, name } => write!(
                f,
                "invalid plans: plans[{index}].name \"{name}\": a plan of that name is already defined"
            ),
            PlanError::UnknownPlan { name } => write!(f, "unknown plan \"{name}\""),
            PlanError::Policy { plan, index, error } => {
                write!(f, "invalid plans: plan \"{plan}\"")?;
                if let Some(i) = index {
                    write!(f, " policies[{i}]")?;
                }
                write!(f, ": {error}")
            }
            PlanError::TooManyOverrides { max } => write!(
                f,
                "overrides: at most {max} keys can have an override; clear one first"
            ),
            PlanError::TooManyLayers { max } => write!(
                f,
                "limits: at most {max} policies (the longest plan's stack)"
            ),
        }
    }
}

impl core::error::Error for PlanError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn every_invalid_set_of_plans_is_named() {
        let none: [(&str, &[&str]); 0] = [];
        assert_eq!(Plans::parse(&none), Err(PlanError::NoPlans));
        assert_eq!(
            Plans::parse(&[("free", &["1/s"]), ("", &["1/s"])]),
            Err(PlanError::EmptyName { index: 1 })
        );
        let empty = Plans::parse(&[("free", &[])]).unwrap_err();
        assert_eq!(empty.code(), "invalid-policy");
        assert_eq!(
            empty.to_string(),
            "invalid plans: plan \"free\": invalid policy: policies \"[]\": a stack needs at least one policy"
        );
        let bad = Plans::parse(&[("pro", &["1/s", "10/fortnight"])]).unwrap_err();
        assert!(matches!(bad, PlanError::Policy { index: Some(1), .. }));
        assert!(bad
            .to_string()
            .starts_with("invalid plans: plan \"pro\" policies[1]: invalid policy: window"));
    }

    #[test]
    fn an_override_resolves_to_its_plan_or_its_own_limits() {
        let plans = Plans::parse(&[("free", &["1/s"])]).unwrap();
        let own: Policy = "5/s".parse().unwrap();
        assert_eq!(
            Override::Limits(alloc::vec![own]).resolve(&plans),
            Ok(Limits::single(own))
        );
        assert_eq!(
            Override::Plan("free".into()).resolve(&plans).unwrap(),
            *plans.get("free").unwrap()
        );
        assert_eq!(
            Override::Plan("gold".into())
                .resolve(&plans)
                .unwrap_err()
                .code(),
            "unknown-plan"
        );
        assert_eq!(
            Override::Limits(alloc::vec![])
                .resolve(&plans)
                .unwrap_err()
                .code(),
            "invalid-policy"
        );
    }
}
