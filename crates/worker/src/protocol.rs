//! The object protocol: what the isolate asks a coordinator object, one variant per
//! operation, and what the object answers. JSON over Workers RPC (`stub.decide(json)`), a
//! batch being a JSON array of requests answered by an array of answers in the same order.

use serde::{Deserialize, Serialize};
use tollgate::plans::Override;
use tollgate::{DecideError, Decision, Policy, State};

use crate::counters::PolicyTally;
use crate::in_use::{self, SeriesInUse};

/// One limit of a request: where its state lives and the policy that decides it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    /// The storage key (the slot schema is the plan's).
    pub slot: String,
    /// The policy, as its compact string.
    pub policy: Policy,
}

/// A request from the isolate to a coordinator object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectRequest {
    /// Decide and charge (all or nothing).
    Check(Check),
    /// Decide for cost 0 (charges nothing) and report the stored states.
    Peek(Peek),
    /// Release slots of every concurrency limit.
    Release(Release),
    /// Settle a reservation a check made ([`Check::reservation`]) with the real cost.
    Settle(Settle),
    /// Forget the slots.
    Reset {
        /// The slots to forget.
        limits: Vec<Limit>,
    },
    /// Count the object's stored rows (admin; sees the alarm's sweeps). Touches no slot.
    Count,
    /// Keep `what` as the override of a key of a policy of plans (admin), replacing any;
    /// refused past [`crate::table::MAX_OVERRIDES`] keys.
    SetOverride {
        /// [`override_name`] of the policy and key.
        owner: String,
        /// A plan of that policy, or limits of the key's own.
        what: Override,
    },
    /// Answer a key's override (admin).
    GetOverride {
        /// [`override_name`] of the policy and key.
        owner: String,
    },
    /// Remove a key's override (admin); answers the one removed.
    ClearOverride {
        /// [`override_name`] of the policy and key.
        owner: String,
    },
    /// Add an isolate's tallies to the object's per-policy stats, keep a coordinator's
    /// slots in use, and answer the totals (the stats object).
    Report {
        /// The isolate's tallies by policy and route (empty in a coordinator's report).
        tallies: Vec<PolicyTally>,
        /// A coordinator object's slots in use ([`crate::in_use`]); `None` from an isolate.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        in_use: Option<in_use::Report>,
    },
}

/// The clock of a call: the test clock, if any, and the deadline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct When {
    /// The test clock (ms), only sent when the config enables it; otherwise the object's
    /// own clock decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now_ms: Option<u64>,
    /// The latest instant (ms, the isolate's clock) at which the object may still decide
    /// this call; later it is refused with [`ObjectResponse::Late`], charging nothing
    /// (see [`crate::lease::deadline`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

/// Whose limits part of a request is: one key of a policy of plans.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The policy of plans' name.
    pub policy: String,
    /// The key.
    pub key: String,
    /// Where its limits start in the request's `limits` (slots `<policy>|<i>|<key>`).
    pub at: usize,
    /// How many there are (the plan's).
    pub len: usize,
}

impl Owner {
    /// The name its override is kept under: `<policy>|<key>`.
    pub fn name(&self) -> String {
        override_name(&self.policy, &self.key)
    }
}

/// The name a key's override of a policy of plans is kept under: `<policy>|<key>`.
pub fn override_name(policy: &str, key: &str) -> String {
    format!("{policy}|{key}")
}

/// [`ObjectRequest::Check`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// The limits, all charged or none.
    pub limits: Vec<Limit>,
    /// The key's other slots of a policy of plans whose stack is in `limits`: the
    /// positions past this plan's limits, up to the most limits a plan of that policy has.
    /// Their states, written under another plan, carry into `limits` and are then deleted
    /// (see [`crate::table`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spare: Vec<String>,
    /// The key's stack of a policy of plans among `limits`, where the key's override, if
    /// the object keeps one, replaces the plan's limits (see [`crate::table`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Cost units.
    pub cost: u64,
    /// Hold the concurrency slots this check acquires under this lease id, for `lease_ms`
    /// (see [`crate::lease`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// How long a lease lasts (ms).
    #[serde(default)]
    pub lease_ms: u64,
    /// Keep the charge, when admitted, as a reservation under this id, to be settled by
    /// [`ObjectRequest::Settle`] in this object (see [`crate::table`] for its bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// The route asking (`None`: the check API); its lease is counted under it in the gauge
    /// of slots in use ([`crate::in_use`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The test clock and the deadline.
    #[serde(default)]
    pub when: When,
}

/// [`ObjectRequest::Peek`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peek {
    /// The limits to report.
    pub limits: Vec<Limit>,
    /// The key's other slots of a policy of plans whose stack is in `limits`: the
    /// positions past this plan's limits, up to the most limits a plan of that policy has.
    /// Their states, written under another plan, carry into `limits` and are then deleted
    /// (see [`crate::table`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spare: Vec<String>,
    /// The key's stack of a policy of plans among `limits`, where the key's override, if
    /// the object keeps one, replaces the plan's limits (see [`crate::table`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// The test clock and the deadline.
    #[serde(default)]
    pub when: When,
}

/// [`ObjectRequest::Release`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    /// The limits; only the concurrency limits among them are released.
    pub limits: Vec<Limit>,
    /// Slots to release when no lease is named (the check API's caller releases).
    pub cost: u64,
    /// Free what this lease holds, once (a repeated or late release frees nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// The test clock and the deadline.
    #[serde(default)]
    pub when: When,
}

/// [`ObjectRequest::Settle`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settle {
    /// The limits the check charged (the same list, in the same order).
    pub limits: Vec<Limit>,
    /// The check's [`Check::reservation`].
    pub reservation: String,
    /// What the request really cost (0: give it all back).
    pub actual: u64,
    /// Charge an overage only up to the limit, reporting the rest as unpaid (default: in
    /// full, a debt; see [`tollgate::Overage`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub up_to_limit: bool,
    /// The test clock and the deadline.
    #[serde(default)]
    pub when: When,
}

impl Check {
    /// The release of what this check acquired under its lease, if it took one.
    pub fn release(&self) -> Option<ObjectRequest> {
        self.lease.as_ref().map(|id| {
            ObjectRequest::Release(Release {
                limits: self.limits.clone(),
                cost: self.cost,
                lease: Some(id.clone()),
                when: When::default(),
            })
        })
    }
}

/// A coordinator's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectResponse {
    /// A decision over the stack (check and peek).
    Decided {
        /// The combined decision.
        decision: Decision,
        /// Each limit's decision, in request order.
        each: Vec<Decision>,
        /// The object's clock when it decided (ms), so the isolate's deny cache uses the
        /// same instant.
        now_ms: u64,
        /// The stored states (peek only).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        states: Vec<Option<State>>,
        /// The limits decided by, when the key's override replaced its plan's ([`Owner`]):
        /// the request's, with the owner's replaced.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        overridden: Option<Vec<Policy>>,
    },
    /// A key's override (`None`: it has none), after a set, get or clear.
    Override {
        /// The override.
        what: Option<Override>,
    },
    /// Slots released.
    Released,
    /// A reservation settled (the core's [`tollgate::settle::Settlement`], without `each`).
    Settled {
        /// Units given back (the least of any limit).
        refunded: u64,
        /// Units charged beyond the estimate (the least of any limit).
        charged: u64,
        /// Units of an overage not charged (the most of any limit).
        unpaid: u64,
    },
    /// No reservation has this id here: never admitted, or forgotten by a restart of the
    /// object (then it stays charged at its estimate).
    NotReserved,
    /// The call reached the object after its deadline: not decided, nothing charged.
    Late {
        /// The object's clock (ms).
        now_ms: u64,
    },
    /// Per-policy totals ([`ObjectRequest::Report`]).
    Stats {
        /// The totals by policy and route.
        tallies: Vec<PolicyTally>,
        /// Slots in use by policy and route: every coordinator's latest report, added up.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        in_use: Vec<SeriesInUse>,
    },
    /// The object's stored rows.
    Count {
        /// Rows in storage.
        rows: u64,
    },
    /// Slots forgotten; how many were stored.
    Reset {
        /// Slots that held a state.
        found: u32,
    },
    /// The request can never be decided as asked (nothing was charged).
    Error {
        /// The core's stable code, e.g. `cost-exceeds-capacity`.
        code: String,
        /// A sentence for people.
        message: String,
    },
}

impl From<DecideError> for ObjectResponse {
    fn from(e: DecideError) -> ObjectResponse {
        ObjectResponse::Error {
            code: e.code().to_string(),
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_variant_per_operation_on_the_wire() {
        let limits = vec![Limit {
            slot: "p|0|ip4:192.0.2.1".into(),
            policy: "10/s".parse().unwrap(),
        }];
        let check = Check {
            spare: Vec::new(),
            owner: None,
            reservation: None,
            limits: limits.clone(),
            cost: 2,
            lease: Some("ab".into()),
            lease_ms: 1000,
            route: Some("/api".into()),
            when: When {
                now_ms: None,
                deadline_ms: Some(5),
            },
        };
        let batch = vec![
            ObjectRequest::Check(check.clone()),
            check.release().unwrap(),
            ObjectRequest::Count,
        ];
        let text = serde_json::to_string(&batch).unwrap();
        assert!(
            text.starts_with(r#"[{"check":{"limits":[{"slot":"p|0|ip4:192.0.2.1""#),
            "{text}"
        );
        assert!(text.ends_with(r#""count"]"#), "{text}");
        assert_eq!(
            serde_json::from_str::<Vec<ObjectRequest>>(&text).unwrap(),
            batch
        );
        // The release frees what the check's lease holds, on the same limits.
        let Some(ObjectRequest::Release(r)) = check.release() else {
            panic!()
        };
        assert_eq!((r.limits, r.cost, r.lease), (limits, 2, Some("ab".into())));
        let no_lease = Check {
            lease: None,
            ..check
        };
        assert_eq!(no_lease.release(), None);
    }
}
