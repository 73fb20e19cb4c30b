//! `ShouldRateLimit`: a request's descriptors matched to rules, decided together by a store,
//! answered in Envoy's `RateLimitResponse`.
//!
//! Per descriptor, as envoyproxy/ratelimit answers:
//! * no matching rule, or a rule another matched rule `replaces`: `OK`, no `current_limit`;
//! * `unlimited`: `OK` with `limit_remaining` = `u32::MAX`, never counted;
//! * a counted rule: `OK` or `OVER_LIMIT` (`OK` in shadow mode), `current_limit`,
//!   `limit_remaining` and `duration_until_reset`.
//!
//! A request over the core's bounds (too many descriptors, entries or key bytes, or too many
//! limits counted after matching) is refused with the field and the bound
//! ([`crate::bounds`]) before it is matched or decided.
//!
//! Unlike envoyproxy/ratelimit, the counted rules are one all-or-nothing stack by default: an
//! `OVER_LIMIT` descriptor charges no other (see [`crate::store`]).

use std::sync::{Arc, RwLock};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

use crate::config::Config;
use crate::metrics::{Metrics, RequestCode};
use crate::store::{Charging, Source, Store};

mod answer;
mod plan;

/// Settings that change how requests are decided.
#[derive(Clone, Copy, Debug, Default)]
pub struct Settings {
    /// How a request's limits are charged (all or nothing by default).
    pub charging: Charging,
    /// Global shadow mode: every limit counts and reports, none denies.
    pub global_shadow: bool,
}

/// Why a request was refused (a gRPC `INVALID_ARGUMENT` / HTTP 400, or an internal error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The request is malformed: the field and the reason.
    Invalid(String),
    /// The store could not decide.
    Store(String),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Invalid(m) => f.write_str(m),
            RequestError::Store(m) => write!(f, "store: {m}"),
        }
    }
}

/// The shared state of a running server: the configuration (swapped whole on reload), the
/// store, the settings and the counters.
pub struct Service<S> {
    config: RwLock<Arc<Config>>,
    store: S,
    settings: Settings,
    /// The counters shown on `/metrics`.
    pub metrics: Metrics,
}

impl<S: Store> Service<S> {
    /// A service over `config` and `store`.
    pub fn new(config: Config, store: S, settings: Settings) -> Self {
        Service {
            config: RwLock::new(Arc::new(config)),
            store,
            settings,
            metrics: Metrics::default(),
        }
    }

    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the running configuration (requests in flight finish on the old one).
    pub fn set_config(&self, config: Config) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Answers one `ShouldRateLimit` request.
    pub async fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, RequestError> {
        let result = self.decide(request).await;
        self.metrics.request(match &result {
            Ok(r) if r.overall_code == Code::OverLimit as i32 => RequestCode::OverLimit,
            Ok(_) => RequestCode::Ok,
            Err(_) => RequestCode::Error,
        });
        result
    }

    /// The request in three steps: planned (validated, matched, a plan per descriptor and
    /// the items to count), decided by the store, answered.
    async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, RequestError> {
        let planned = plan::plan(request, &self.config(), self.settings.global_shadow)?;
        let now = self.store.now();
        if planned.refund && !self.store.refunds() {
            return Err(RequestError::Invalid(
                "descriptors[0].is_negative_hits: this store cannot give hits back (the Redis store cannot yet)".into(),
            ));
        }
        let (each, source) = if planned.items.is_empty() {
            (Vec::new(), Source::Store)
        } else if planned.refund {
            let (outcome, source) = self
                .store
                .refund(
                    &request.domain,
                    planned.items.clone(),
                    self.settings.charging,
                )
                .await
                .map_err(|e| RequestError::Store(e.to_string()))?;
            (outcome.each, source)
        } else {
            let (outcome, source) = self
                .store
                .decide(
                    &request.domain,
                    planned.items.clone(),
                    self.settings.charging,
                    planned.blocked,
                )
                .await
                .map_err(|e| RequestError::Store(e.to_string()))?;
            (outcome.each, source)
        };
        Ok(answer::answer(&planned, &each, source, now, &self.metrics))
    }
}
