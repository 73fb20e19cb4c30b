//! The isolate's environment: string bindings (vars and secrets), the clock, and the config,
//! parsed once per isolate.

use std::cell::RefCell;
use std::rc::Rc;

use worker::{console_error, Date, Env};

use crate::config::{Config, ConfigError, BUNDLED, OBJECT_PER_KEY_VAR};

thread_local! {
    static CONFIG: RefCell<Option<Rc<Result<Config, ConfigError>>>> = const { RefCell::new(None) };
}

/// A string binding (var or secret), if set and not empty.
pub fn string_binding(env: &Env, name: &str) -> Option<String> {
    let v = env
        .secret(name)
        .map(|s| s.to_string())
        .or_else(|_| env.var(name).map(|v| v.to_string()))
        .ok()
        .or_else(|| {
            env.object_var::<serde_json::Value>(name)
                .ok()
                .map(|v| v.to_string())
        })?;
    (!v.is_empty()).then_some(v)
}

/// The validated config of this isolate: parsed once, on the first request (`TOLLGATE_CONFIG`,
/// else the bundled file). A bad config is logged once and kept: every request answers it.
pub fn config(env: &Env) -> Rc<Result<Config, ConfigError>> {
    CONFIG.with(|c| {
        let mut c = c.borrow_mut();
        if let Some(cfg) = c.as_ref() {
            return cfg.clone();
        }
        let mut parsed = match string_binding(env, "TOLLGATE_CONFIG") {
            Some(text) => Config::parse(&text),
            None => Config::parse(BUNDLED),
        };
        // The load test's naive design, set beside the config (see `bench/run.sh`).
        if let (Ok(cfg), Some(names)) = (&mut parsed, string_binding(env, OBJECT_PER_KEY_VAR)) {
            if let Err(e) = cfg.objects_per_key(&names) {
                parsed = Err(e);
            }
        }
        if let Err(e) = &parsed {
            console_error!("tollgate: {e}");
        }
        let rc = Rc::new(parsed);
        *c = Some(rc.clone());
        rc
    })
}

/// The isolate's clock (ms).
pub fn now_ms() -> u64 {
    Date::now().as_millis()
}
