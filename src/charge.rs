//! The plain data of a settle ([`crate::settle`]): what a reservation charged one limit, what
//! to do with an overage, and what a settle did. Apart from the rule, so that the
//! algorithms, which settle, and the rule's module, which dispatches to them, do not import
//! each other.

use crate::Nanos;

/// What a settle does with an actual cost above the estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Overage {
    /// Charge it in full, past the limit if need be: a debt that later requests wait out.
    /// Nothing is lost.
    #[default]
    Debt,
    /// Charge only what remains below the limit; report the rest as [`Settled::unpaid`].
    UpToLimit,
}

/// What a reservation charged one limit, and when: what its settle needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Charge {
    /// The estimate charged.
    pub cost: u64,
    /// The reserve's `now`: it names the window (or log entry) a refund goes to.
    pub at: Nanos,
}

/// What a settle did to one limit, in whole units. At most one of `refunded` and
/// `charged + unpaid` is non-zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Settled {
    /// Units given back: `estimate - actual`, or less where the rule caps it (a bucket
    /// refilled to full, a window no longer counting: then rounded down).
    pub refunded: u64,
    /// Units charged beyond the estimate.
    pub charged: u64,
    /// Units of the overage not charged ([`Overage::UpToLimit`], or past the debt's bound).
    pub unpaid: u64,
}

impl Settled {
    /// A refund of `units`.
    pub(crate) const fn refund(units: u64) -> Settled {
        Settled {
            refunded: units,
            charged: 0,
            unpaid: 0,
        }
    }

    /// An overage of `extra` units where `room` units remain below the limit and `most`
    /// may be charged before the debt's bound: what is charged and what is left unpaid.
    pub(crate) fn overage(extra: u64, room: u64, most: u64, overage: Overage) -> Settled {
        let charged = match overage {
            Overage::Debt => extra.min(most),
            Overage::UpToLimit => extra.min(room).min(most),
        };
        Settled {
            refunded: 0,
            charged,
            unpaid: extra - charged,
        }
    }
}
