//! Before the decision: a request's route, policy, key, tenant and cost, or why it is not
//! decided (no route or policy, no key and `skip`, or a refused path or header).

use http::request::Parts;
use http::Request;
use tollgate_http::bounds;
use tollgate_http::client::HeaderError;
use tollgate_http::route::{self, PathError};

use crate::key::{header_text, key_of, KeyError, Keyed, TENANT_FIELD};
use crate::plans::PlanRef;
use crate::shared::Shared;
use crate::store::Store;

/// Where a request goes before the decision.
pub(crate) enum Target<ReqB> {
    /// Not rate-limited (no route, no policy on its route, or no key and `skip`).
    Pass(Request<ReqB>),
    /// To be decided.
    Check(Checking<ReqB>),
    /// Refused before the decision (a 400).
    Refuse(Refusal),
}

/// Why a request is refused (answered 400) before it is decided.
pub(crate) enum Refusal {
    /// A path that cannot be routed safely.
    Path(PathError),
    /// A refused header, or no key for a policy that rejects requests without one.
    Key(KeyError),
}

/// A request to decide: its policy, key, tenant and cost.
pub(crate) struct Checking<ReqB> {
    pub(crate) entry: usize,
    /// The route's index (its metrics).
    pub(crate) route: usize,
    pub(crate) key: String,
    /// For a policy of plans: the request's plan, or the key's own limits.
    pub(crate) plan: Option<PlanRef>,
    pub(crate) tenant: Option<String>,
    pub(crate) cost: u64,
    pub(crate) shadow: bool,
    pub(crate) parts: Parts,
    pub(crate) body: ReqB,
}

/// Routes and keys a request.
pub(crate) fn target<S: Store, ReqB>(shared: &Shared<S>, req: Request<ReqB>) -> Target<ReqB> {
    let settings = &shared.settings;
    let path = match route::normalized(req.uri().path()) {
        Ok(p) => p,
        Err(e) => return Target::Refuse(Refusal::Path(e)),
    };
    let method = req.method().as_str();
    // (`route::find`'s rule, keeping the index: the route's series are found by it.)
    let Some(route_index) = shared
        .routes
        .iter()
        .position(|r| route::matches(r, method, &path))
    else {
        return Target::Pass(req);
    };
    let r = &shared.routes[route_index];
    let Some(entry_index) = r.entry else {
        return Target::Pass(req);
    };
    let (cost, shadow) = (r.cost, r.shadow || settings.shadow);
    let entry = &shared.entries[entry_index];
    let (parts, body) = req.into_parts();
    let (key, plan) = match &entry.plans {
        None => match key_of(settings, &entry.key, &parts) {
            Ok(Keyed::Key(k)) => (k, None),
            Ok(Keyed::Skip) => return Target::Pass(Request::from_parts(parts, body)),
            Err(e) => return Target::Refuse(Refusal::Key(e)),
        },
        Some(plans) => match plans.choose(settings, &parts) {
            Ok(Some((k, p))) => {
                let plan = plans.overridden(p, entry.store.plan_override(&k));
                (k, Some(plan))
            }
            Ok(None) => return Target::Pass(Request::from_parts(parts, body)),
            Err(e) => return Target::Refuse(Refusal::Key(e)),
        },
    };
    let tenant = if entry.with_tenant.len() > entry.names.len() {
        match header_text(settings, &parts, &settings.tenant_header) {
            Ok(t) => t.filter(|t| !t.is_empty()),
            Err(e) => return Target::Refuse(header(e)),
        }
    } else {
        None
    };
    // A tenant is a key part the store keeps (a fair share's tenant window): held to the
    // core's bound whatever `max_header_bytes` allows.
    if let Some(Err(e)) = tenant
        .as_deref()
        .map(|t| bounds::check_key(TENANT_FIELD, t))
    {
        return Target::Refuse(Refusal::Key(KeyError::OverBound(e)));
    }
    Target::Check(Checking {
        entry: entry_index,
        route: route_index,
        key,
        plan,
        tenant,
        cost,
        shadow,
        parts,
        body,
    })
}

fn header(e: HeaderError) -> Refusal {
    Refusal::Key(KeyError::Header(e))
}
