//! Calls to the coordinator objects over Workers RPC (`stub.decide(json)`, served by the
//! `Limiter` class of `js/entry.mjs`), each bounded by the coordinator timeout.

use std::time::Duration;

use futures_util::future::{select, Either};
use worker::{Delay, Env};

use crate::protocol::{ObjectRequest, ObjectResponse};

/// The Durable Object binding.
pub const BINDING: &str = "LIMITER";

/// Why the coordinator could not decide.
#[derive(Debug)]
pub enum Failure {
    /// No answer within `settings.timeout_ms`.
    Timeout,
    /// The binding is missing, the call failed, or the object answered an error.
    Unavailable(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Timeout => f.write_str("timed out"),
            Failure::Unavailable(why) => write!(f, "unavailable: {why}"),
        }
    }
}

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// A Durable Object stub seen through Workers RPC.
    type LimiterRpc;
    #[wasm_bindgen::prelude::wasm_bindgen(method, catch)]
    fn decide(this: &LimiterRpc, body: &str) -> Result<js_sys::Promise, wasm_bindgen::JsValue>;
}

fn rpc_error(e: &wasm_bindgen::JsValue) -> String {
    use wasm_bindgen::JsCast;
    match e.dyn_ref::<js_sys::Error>() {
        Some(err) => String::from(err.message()),
        None => format!("{e:?}"),
    }
}

/// Sends a batch of requests to one object (one round trip), with the timeout.
pub async fn send_batch(
    env: &Env,
    timeout_ms: u64,
    object: &str,
    reqs: &[ObjectRequest],
) -> Result<Vec<ObjectResponse>, Failure> {
    let call = async {
        let ns = env
            .durable_object(BINDING)
            .map_err(|e| Failure::Unavailable(format!("binding {BINDING}: {e}")))?;
        let stub = ns
            .id_from_name(object)
            .and_then(|id| id.get_stub())
            .map_err(|e| Failure::Unavailable(e.to_string()))?;
        let body = serde_json::to_string(reqs).map_err(|e| Failure::Unavailable(e.to_string()))?;
        let rpc: LimiterRpc = stub.into_rpc();
        let promise = rpc
            .decide(&body)
            .map_err(|e| Failure::Unavailable(format!("{e:?}")))?;
        let text = wasm_bindgen_futures::JsFuture::from(promise)
            .await
            .map_err(|e| Failure::Unavailable(rpc_error(&e)))?
            .as_string()
            .ok_or_else(|| Failure::Unavailable("object answered a non-string".into()))?;
        let answers = serde_json::from_str::<Vec<ObjectResponse>>(&text)
            .map_err(|e| Failure::Unavailable(format!("object answer: {e}")))?;
        if answers.len() != reqs.len() {
            return Err(Failure::Unavailable(format!(
                "object answered {} of {} requests",
                answers.len(),
                reqs.len()
            )));
        }
        Ok(answers)
    };
    let timeout = Delay::from(Duration::from_millis(timeout_ms));
    match select(Box::pin(call), timeout).await {
        Either::Left((r, _)) => r,
        Either::Right(_) => Err(Failure::Timeout),
    }
}

/// One request to one object. (Coalescing concurrent requests of an isolate into one call
/// would share the round trip, but Workers tie I/O and promise resolution to the request
/// that started them: a request woken by another request's call is reported as hung. So
/// every request makes its own call; the object still accepts batches.)
pub async fn call(
    env: &Env,
    timeout_ms: u64,
    object: &str,
    req: &ObjectRequest,
) -> Result<ObjectResponse, Failure> {
    let mut answers = send_batch(env, timeout_ms, object, std::slice::from_ref(req)).await?;
    answers
        .pop()
        .ok_or_else(|| Failure::Unavailable("empty answer".into()))
}
