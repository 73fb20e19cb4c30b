//! Which counts a series is: a policy's name and its route. The tallies
//! ([`crate::counters`]) and the gauge of slots in use ([`crate::in_use`]) are both kept by
//! series, and the admin API joins them on it ([`crate::report`]).

/// A policy's name and the route (`None`: the check API, which has no route).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeriesId {
    /// The policy's name.
    pub policy: String,
    /// The route's name (`None`: the check API).
    pub route: Option<String>,
}

impl SeriesId {
    /// The series of `policy` on `route`.
    pub fn new(policy: &str, route: Option<&str>) -> SeriesId {
        SeriesId {
            policy: policy.to_string(),
            route: route.map(str::to_string),
        }
    }
}
