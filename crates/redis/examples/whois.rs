//! WHOIS lookups paced across a fleet: one shared budget per registry, a per-tenant window
//! on top, per-TLD overrides from a JSON map, the in-memory limiter while Redis is down.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ \
//! WHOIS_RATE_LIMIT_OVERRIDES='{"com": "gcra 1/2000ms", "de": "gcra 1/5s"}' \
//!   cargo run -p tollgate-redis --example whois
//! ```
//!
//! Every replica that runs this shares one budget: `whois` at 2 lookups per 2000 ms for
//! the registries without an override, 1 per 2000 ms per tenant; `whois:com` and
//! `whois:de` their own buckets, each with a tenant window as strict as the bucket.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use tollgate::fair_share::FairShare;
use tollgate::store::Limits;
use tollgate_redis::namespaces::parse_overrides;
use tollgate_redis::{Error, Fallback, Options, RedisLimiter};

type Limiter = RedisLimiter<redis::aio::ConnectionManager>;

/// The limiter for each registry: `whois` for the default, `whois:<tld>` per override.
struct WhoisLimits {
    default: Limiter,
    per_tld: BTreeMap<String, Limiter>,
}

impl WhoisLimits {
    fn for_domain(&self, domain: &str) -> &Limiter {
        let tld = domain.rsplit('.').next().unwrap_or_default();
        self.per_tld.get(tld).unwrap_or(&self.default)
    }
}

async fn build(conn: redis::aio::ConnectionManager, overrides: &str) -> Result<WhoisLimits, Error> {
    let options = |namespace: &str| {
        Options::new(
            namespace,
            Fallback::Local {
                max_keys: NonZeroUsize::new(10_000).unwrap(),
            },
        )
        .timeout(Duration::from_millis(100))
    };
    let shared = "gcra 2/2000ms".parse().map_err(Error::Policy)?;
    let tenant = "gcra 1/2000ms".parse().map_err(Error::Policy)?;
    let default = RedisLimiter::new(
        conn.clone(),
        Limits::fair_share(FairShare::new(shared, tenant)?),
        options("whois"),
    )?;
    let mut per_tld = BTreeMap::new();
    for (tld, policy) in parse_overrides(overrides)? {
        // A per-TLD bucket's tenant window defaults to the bucket itself.
        let limits = Limits::fair_share(FairShare::new(policy, policy)?);
        let limiter = RedisLimiter::new(conn.clone(), limits, options(&format!("whois:{tld}")))?;
        per_tld.insert(tld, limiter);
    }
    Ok(WhoisLimits { default, per_tld })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let overrides = std::env::var("WHOIS_RATE_LIMIT_OVERRIDES").unwrap_or_else(|_| "{}".into());
    let conn = redis::Client::open(url)?.get_connection_manager().await?;
    let limits = build(conn, &overrides).await?;
    for (tenant, domain) in [
        ("acme", "example.org"),
        ("acme", "example.net"),
        ("globex", "example.org"),
        ("acme", "example.com"),
    ] {
        // The key is the registry-facing budget itself: one shared bucket per namespace.
        let outcome = limits
            .for_domain(domain)
            .check_tenant("registry", Some(tenant), 1)
            .await?;
        let d = outcome.decision;
        println!(
            "{tenant:>6} {domain:<12} allowed={} remaining={} retry_after={}ms ({:?})",
            d.allowed,
            d.remaining,
            d.retry_after_ms(),
            outcome.source
        );
    }
    Ok(())
}
