//! What a response really cost: the rule a front end applies after the origin answered, to
//! settle the reservation it made before ([`tollgate::settle`] gives back or charges the
//! difference). One rule per route, three parts, each optional:
//!
//! * **Count only given statuses** ([`SettleRule::count_statuses`]): a request whose
//!   response has another status costs nothing (a login route that counts failures:
//!   `[401, 403]`).
//! * **Refund given statuses** ([`SettleRule::refund_statuses`]): a request whose response
//!   has one of them costs nothing (give back what the origin failed: `[500, 502, 503]`).
//!   A route names one list or the other, never both (the config refuses it).
//! * **A cost the origin reports** ([`SettleRule::cost_header`]): a counted response's cost
//!   is the value of this header (a whole number of units, such as an LLM call's tokens);
//!   the front end removes the header before the client sees it. A response without the
//!   header, or with a value that is not a whole number within [`tollgate::MAX_COUNT`],
//!   stays charged at the estimate (an origin's mistake never refunds).
//!
//! Pros: the limit counts what happened, not a guess; the estimate still bounds how much
//! parallel requests can spend before their answers come back. Cons: a refund arrives after
//! the response, so a client racing its own refunds can be denied when a later settle would
//! have admitted it (never the other way round).
//!
//! ```
//! use tollgate_http::settle::{Actual, SettleRule};
//! let login = SettleRule { count_statuses: vec![401, 403], ..SettleRule::default() };
//! assert_eq!(login.actual(1, 200, None), Actual::Cost(0));
//! assert_eq!(login.actual(1, 401, None), Actual::Cost(1));
//! let llm = SettleRule { cost_header: Some("x-tollgate-cost".into()), ..SettleRule::default() };
//! assert_eq!(llm.actual(1000, 200, Some("312")), Actual::Cost(312));
//! assert_eq!(llm.actual(1000, 200, None), Actual::Estimate);
//! assert_eq!(llm.actual(1000, 200, Some("-5")), Actual::BadHeader);
//! ```

/// How a route settles the reservation of a request from its response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SettleRule {
    /// The response header carrying the real cost (lower case), removed before the client
    /// sees the response.
    pub cost_header: Option<String>,
    /// Only responses with one of these statuses are counted (empty: every status).
    pub count_statuses: Vec<u16>,
    /// Responses with one of these statuses are given back.
    pub refund_statuses: Vec<u16>,
}

/// What a response cost, by a [`SettleRule`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actual {
    /// This many units (0: given back whole).
    Cost(u64),
    /// The estimate: no header said otherwise (nothing to settle).
    Estimate,
    /// The cost header was present but not a whole number within the bound: charged at
    /// the estimate, and worth a log line.
    BadHeader,
}

impl SettleRule {
    /// What a response of `status`, whose cost header (if the rule names one) has the
    /// value `header`, cost, for a reservation of `estimate` units.
    pub fn actual(&self, estimate: u64, status: u16, header: Option<&str>) -> Actual {
        let counted = (self.count_statuses.is_empty() || self.count_statuses.contains(&status))
            && !self.refund_statuses.contains(&status);
        if !counted {
            return Actual::Cost(0);
        }
        match (&self.cost_header, header) {
            (Some(_), Some(v)) => match parse_cost(v) {
                Some(n) => Actual::Cost(n),
                None => Actual::BadHeader,
            },
            // A status rule alone, or no header: the estimate was the cost.
            _ if self.cost_header.is_none() => Actual::Cost(estimate),
            _ => Actual::Estimate,
        }
    }
}

/// A cost header's value: ASCII digits only (no sign, no fraction, no spaces inside), at
/// most [`tollgate::MAX_COUNT`]; `None` for anything else (the estimate stays charged).
pub fn parse_cost(v: &str) -> Option<u64> {
    let v = v.trim();
    if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u64>().ok().filter(|&n| n <= tollgate::MAX_COUNT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_rule() -> SettleRule {
        SettleRule {
            cost_header: Some("x-cost".into()),
            ..SettleRule::default()
        }
    }

    #[test]
    fn count_statuses_charge_only_those_statuses() {
        let r = SettleRule {
            count_statuses: vec![401],
            ..SettleRule::default()
        };
        assert_eq!(r.actual(3, 401, None), Actual::Cost(3));
        assert_eq!(r.actual(3, 200, None), Actual::Cost(0));
        assert_eq!(r.actual(3, 500, None), Actual::Cost(0));
    }

    #[test]
    fn refund_statuses_give_back_only_those_statuses() {
        let r = SettleRule {
            refund_statuses: vec![500, 503],
            ..SettleRule::default()
        };
        assert_eq!(r.actual(3, 503, None), Actual::Cost(0));
        assert_eq!(r.actual(3, 200, None), Actual::Cost(3));
    }

    #[test]
    fn cost_header_sets_the_cost_of_a_counted_response() {
        let r = SettleRule {
            refund_statuses: vec![500],
            ..header_rule()
        };
        assert_eq!(r.actual(100, 200, Some(" 7 ")), Actual::Cost(7));
        assert_eq!(r.actual(100, 200, Some("250")), Actual::Cost(250));
        // A refunded status ignores what the header says.
        assert_eq!(r.actual(100, 500, Some("250")), Actual::Cost(0));
    }

    #[test]
    fn missing_header_keeps_the_estimate() {
        assert_eq!(header_rule().actual(100, 200, None), Actual::Estimate);
    }

    #[test]
    fn malformed_header_keeps_the_estimate_and_says_so() {
        let r = header_rule();
        for bad in ["-1", "1.5", "", "12a", "+3", "1 2"] {
            assert_eq!(r.actual(100, 200, Some(bad)), Actual::BadHeader, "{bad:?}");
        }
        let over = (tollgate::MAX_COUNT + 1).to_string();
        assert_eq!(r.actual(100, 200, Some(&over)), Actual::BadHeader);
        let max = tollgate::MAX_COUNT.to_string();
        assert_eq!(
            r.actual(100, 200, Some(&max)),
            Actual::Cost(tollgate::MAX_COUNT)
        );
    }
}
