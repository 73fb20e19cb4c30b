//! Plans: a policy whose limits depend on who calls ([`crate::Builder::plans`]). A request's
//! plan is chosen by its API key through a table of the keys' SHA-256 hashes, or by a
//! function of the request; a caller without a known key counts by IP under the default
//! plan. The counters are the core's [`tollgate::keyed::PlanLimiter`]: a key keeps what it
//! has spent when its plan changes.

use std::collections::HashMap;
use std::sync::Arc;

use http::header::HeaderValue;
use http::request::Parts;
use tollgate::headers::{limit_name, rate_limit_policy, Named};
use tollgate::plans::{Override, Plans};
use tollgate::store::Limits;
use tollgate::Decision;
use tollgate_http::bounds;
use tollgate_http::key as name;

use crate::key::{header_text, key_of, Key, KeyError, Keyed};
use crate::settings::Settings;

/// A function choosing a request's key and plan from its head: `Some((key, plan))`, or
/// `None` for a caller it does not know.
pub type PlanChooser = Arc<dyn Fn(&Parts) -> Option<(String, String)> + Send + Sync>;

/// How a policy of plans picks a request's plan, and the key it is counted under.
#[derive(Clone)]
pub enum PlanChoice {
    /// The API key header ([`crate::Builder::api_key_header`]) looked up by its SHA-256
    /// (lower-case hex) in `keys`, pairs of a hash and a plan name; the key is named as
    /// [`Key::ApiKey`] names it (`key:<hash>`). A request without a key, or with a key not
    /// in the table, counts as no key: by IP, under the plan `default`.
    ApiKeys {
        /// `(sha256 hex of the key, plan name)`.
        keys: Vec<(String, String)>,
        /// The plan of callers without a known key.
        default: String,
    },
    /// Your function of the request: `Some((key, plan))`, the key named as [`Key::Custom`]
    /// names it (`custom:<key>`); `None`, or a plan that is not one of the plans: by IP,
    /// under the plan `default`.
    Custom {
        /// Chooses the key and the plan.
        choose: PlanChooser,
        /// The plan of callers it does not know.
        default: String,
    },
    /// A verified JWT in `Authorization: Bearer`: its subject is the key (named
    /// `sub:<subject>`), its plan claim ([`tollgate_http::jwt::Rules::plan_claim`]) the
    /// plan. A request without a token, or whose plan claim is missing or names no plan,
    /// is under `default` (by IP without a token); a refused token counts as anonymous or
    /// is answered 401, as [`crate::jwt::Jwt::on_invalid`] says.
    #[cfg(feature = "jwt")]
    Jwt {
        /// The keys, rules and what to do with a refused token.
        jwt: Arc<crate::jwt::Jwt>,
        /// The plan of callers without a (valid) plan claim.
        default: String,
    },
}

impl PlanChoice {
    /// [`PlanChoice::Custom`] from a closure.
    pub fn custom(
        choose: impl Fn(&Parts) -> Option<(String, String)> + Send + Sync + 'static,
        default: &str,
    ) -> PlanChoice {
        PlanChoice::Custom {
            choose: Arc::new(choose),
            default: default.into(),
        }
    }

    pub(crate) fn default_plan(&self) -> &str {
        match self {
            PlanChoice::ApiKeys { default, .. } | PlanChoice::Custom { default, .. } => default,
            #[cfg(feature = "jwt")]
            PlanChoice::Jwt { default, .. } => default,
        }
    }
}

/// One plan as the layer reports it.
pub(crate) struct PlanInfo {
    pub(crate) name: String,
    pub(crate) limits: Limits,
    /// Its limits' names in `RateLimit` fields (`pro`, or `pro.1`, `pro.2`, ...).
    pub(crate) names: Arc<[String]>,
    /// Its `RateLimit-Policy` value, written once.
    pub(crate) policy_field: HeaderValue,
    pub(crate) holds_slots: bool,
}

impl PlanInfo {
    fn new(name: &str, limits: Limits) -> PlanInfo {
        let n = limits.layers().len();
        let names: Vec<String> = (0..n).map(|i| limit_name(name, i, n)).collect();
        PlanInfo {
            name: name.into(),
            policy_field: policy_field_of(&limits, &names),
            names: names.into(),
            holds_slots: limits.holds_slots(),
            limits,
        }
    }
}

/// The limits a request of a policy of plans is decided and reported by.
pub(crate) enum PlanRef {
    /// The plan at this index of [`PlanMeta::each`]: chosen for the request, or the key's
    /// override's.
    Plan(usize),
    /// The key's own limits (an override), reported as `own`; the index is the plan chosen
    /// for the request, which the store is asked for (and overrides).
    Own(usize, Box<PlanInfo>),
}

impl PlanRef {
    /// How the layer reports it.
    pub(crate) fn info<'a>(&'a self, meta: &'a PlanMeta) -> &'a PlanInfo {
        match self {
            PlanRef::Plan(i) => &meta.each[*i],
            PlanRef::Own(_, own) => own,
        }
    }

    /// The plan name the store is asked to decide by (it applies the key's override).
    pub(crate) fn asked<'a>(&self, meta: &'a PlanMeta) -> &'a str {
        &meta.each[self.chosen()].name
    }

    /// The index of that plan in [`PlanMeta::each`].
    pub(crate) fn chosen(&self) -> usize {
        match self {
            PlanRef::Plan(i) | PlanRef::Own(i, _) => *i,
        }
    }
}

/// How the layer chooses a request's plan.
enum Chooser {
    /// Key names (`key:<hash>`) to plan indices, found by the hash's first 64 bits
    /// ([`Digest`]).
    Table(HashMap<u64, Vec<(String, usize)>, Digest>),
    Custom(PlanChooser),
    #[cfg(feature = "jwt")]
    Jwt(Arc<crate::jwt::Jwt>),
}

/// A policy of plans, compiled by the builder.
pub(crate) struct PlanMeta {
    chooser: Chooser,
    default: usize,
    pub(crate) each: Vec<PlanInfo>,
}

impl PlanMeta {
    /// Checks `choice` against `plans` (every plan it names exists, every hash is a
    /// SHA-256) and writes each plan's names and field. Errors name the field under
    /// `policies.<policy>`.
    pub(crate) fn new(
        policy: &str,
        plans: &Plans,
        choice: PlanChoice,
    ) -> Result<PlanMeta, (String, String)> {
        let each: Vec<PlanInfo> = plans
            .iter()
            .map(|p| PlanInfo::new(p.name(), p.limits().clone()))
            .collect();
        let index = |field: String, plan: &str| {
            each.iter()
                .position(|p| p.name == plan)
                .ok_or_else(|| (field, format!("no plan named {plan:?}")))
        };
        let default = index(format!("policies.{policy}.default"), choice.default_plan())?;
        let chooser = match choice {
            PlanChoice::ApiKeys { keys, .. } => {
                let mut table = HashMap::with_capacity_and_hasher(keys.len(), Digest);
                for (i, (hash, plan)) in keys.iter().enumerate() {
                    let field = format!("policies.{policy}.keys[{i}]");
                    let hex = hash.len() == 64
                        && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                    if !hex {
                        return Err((
                            format!("{field}.sha256"),
                            "must be a SHA-256 in lower-case hex (64 characters)".into(),
                        ));
                    }
                    let plan = index(format!("{field}.plan"), plan)?;
                    let named = name::hashed_api_key(hash);
                    let same: &mut Vec<(String, usize)> = table.entry(prefix(&named)).or_default();
                    if same.iter().any(|(n, _)| *n == named) {
                        return Err((format!("{field}.sha256"), "listed twice".into()));
                    }
                    same.push((named, plan));
                }
                Chooser::Table(table)
            }
            PlanChoice::Custom { choose, .. } => Chooser::Custom(choose),
            #[cfg(feature = "jwt")]
            PlanChoice::Jwt { jwt, .. } => Chooser::Jwt(jwt),
        };
        Ok(PlanMeta {
            chooser,
            default,
            each,
        })
    }

    /// The key and plan (an index of [`PlanMeta::each`]) a request counts under; `Skip`
    /// when it has no known key and the layer skips requests without one.
    pub(crate) fn choose(
        &self,
        settings: &Settings,
        parts: &Parts,
    ) -> Result<Option<(String, usize)>, KeyError> {
        let known = match &self.chooser {
            Chooser::Table(table) => header_text(settings, parts, &settings.api_key_header)
                .map_err(KeyError::Header)?
                .filter(|k| !k.is_empty())
                .and_then(|k| {
                    let named = name::api_key_name(k.as_bytes());
                    let plan = table
                        .get(&prefix(&named))?
                        .iter()
                        .find(|(n, _)| *n == named)?
                        .1;
                    Some((named, plan))
                }),
            Chooser::Custom(f) => match f(parts) {
                Some((key, plan)) => match self.each.iter().position(|p| p.name == plan) {
                    Some(plan) => {
                        let named = name::custom(&key);
                        bounds::check_key("key", &named).map_err(KeyError::OverBound)?;
                        Some((named, plan))
                    }
                    None => None,
                },
                None => None,
            },
            #[cfg(feature = "jwt")]
            Chooser::Jwt(jwt) => self.by_token(jwt, parts)?,
        };
        if known.is_some() {
            return Ok(known);
        }
        // No known key: counted by IP, as a policy keyed by IP counts it.
        match key_of(settings, &Key::Ip, parts)? {
            Keyed::Key(ip) => Ok(Some((ip, self.default))),
            Keyed::Skip => Ok(None),
        }
    }

    /// The key and plan of a request's bearer token: `None` without a token, or with a
    /// refused one on a route that counts those as anonymous.
    #[cfg(feature = "jwt")]
    fn by_token(
        &self,
        jwt: &crate::jwt::Jwt,
        parts: &Parts,
    ) -> Result<Option<(String, usize)>, KeyError> {
        use tollgate_http::jwt::{bearer, JwtError};
        let Some(value) = parts.headers.get(http::header::AUTHORIZATION) else {
            return Ok(None);
        };
        let verified = value
            .to_str()
            .map_err(|_| JwtError::Malformed("the Authorization header is not visible ASCII"))
            .map(bearer)
            .and_then(|token| match token {
                Some(t) => jwt.verify(t).map(Some),
                None => Ok(None),
            });
        let caller = match verified {
            Ok(Some(caller)) => caller,
            Ok(None) => return Ok(None),
            Err(e) => match jwt.invalid() {
                crate::jwt::InvalidToken::Anonymous => return Ok(None),
                crate::jwt::InvalidToken::Reject => return Err(KeyError::Token(e)),
            },
        };
        let named = name::jwt_subject(&caller.subject);
        bounds::check_key("sub", &named).map_err(KeyError::OverBound)?;
        let plan = caller
            .plan
            .and_then(|p| self.each.iter().position(|e| e.name == p))
            .unwrap_or(self.default);
        Ok(Some((named, plan)))
    }

    /// The limits a request chosen for plan `chosen` is reported by, given the key's
    /// override (set at run time: the store applies it to the decision too). An override
    /// set or cleared between this look and the decision is reported at the key's next
    /// request.
    pub(crate) fn overridden(&self, chosen: usize, o: Option<Override>) -> PlanRef {
        match o {
            None => PlanRef::Plan(chosen),
            Some(Override::Plan(name)) => PlanRef::Plan(
                self.each
                    .iter()
                    .position(|p| p.name == name)
                    .unwrap_or(chosen),
            ),
            Some(Override::Limits(own)) => match Limits::stack(&own) {
                Ok(limits) => PlanRef::Own(chosen, Box::new(PlanInfo::new("own", limits))),
                Err(_) => PlanRef::Plan(chosen),
            },
        }
    }

    /// The smallest capacity among the plans: the most a route's cost may be.
    pub(crate) fn capacity(&self) -> u64 {
        self.each
            .iter()
            .map(|p| p.limits.capacity())
            .min()
            .unwrap_or(0)
    }
}

/// The `RateLimit-Policy` value of `limits` with these names (a plan's, or a store's:
/// `shared::policy_field`). The field describes the limits, not a decision: the items'
/// decisions are never read, so none is needed.
pub(crate) fn policy_field_of(limits: &Limits, names: &[String]) -> HeaderValue {
    let none = Decision::default();
    let items: Vec<Named<'_>> = names
        .iter()
        .zip(limits.layers().iter().chain(limits.tenant()))
        .map(|(name, policy)| Named {
            name,
            policy,
            decision: &none,
        })
        .collect();
    // The core writes visible ASCII only.
    HeaderValue::try_from(rate_limit_policy(&items))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The first 64 bits of a key name's SHA-256 (`key:<hex>`), the key of the plans' table.
fn prefix(named: &str) -> u64 {
    let hex = named.get(4..20).unwrap_or_default();
    u64::from_str_radix(hex, 16).unwrap_or(0)
}

/// The table's hasher: the key is already 64 bits of a SHA-256, uniform and not chosen by
/// a client (finding a key whose hash lands on a given bucket is a preimage search), so it
/// is its own hash. (SipHash over the 68-byte name was about 80 instructions a request:
/// `scripts/counts.sh tower-plans-10k` against `tower-apikey-10k`, PERF.md.)
#[derive(Clone, Copy, Default)]
struct Digest;

impl std::hash::BuildHasher for Digest {
    type Hasher = DigestHasher;
    fn build_hasher(&self) -> DigestHasher {
        DigestHasher(0)
    }
}

/// [`Digest`]'s hasher: the `u64` written is the hash.
struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64`s are hashed (`write_u64`); anything else folded in, never lost.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
