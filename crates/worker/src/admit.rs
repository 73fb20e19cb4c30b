//! What happens to an admitted request between the decision and the origin's answer (glue;
//! the rules are the core's decision and [`crate::lease`]):
//!
//! * **Leaky queue (a shaper).** The core admits a request of a leaky queue with a `delay`:
//!   when it may leave the queue. The request is held that long, then forwarded. How long
//!   a route can hold is bounded by the config (`settings.max_delay_ms`).
//! * **Concurrency.** Slots acquired by the check are held under a lease and released, by
//!   lease id, once the origin has answered or failed. The forward and the release run in
//!   a task the runtime keeps alive after the client goes away (`ctx.waitUntil`), so a
//!   client that disconnects releases too; the handler waits for the task's response. A
//!   release that is lost anyway (the isolate died) is freed by the lease's expiry.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use tollgate::Decision;
use wasm_bindgen::JsValue;
use worker::{console_error, Context, Delay, Env, Request, Response};

use crate::origin;
use crate::plan::LimitName;
use crate::protocol::{ObjectRequest, ObjectResponse};
use crate::rpc::send_batch;

/// How an admitted request is held.
pub struct Hold {
    /// The leaky queue's delay (ms), 0 for none.
    delay_ms: u64,
    /// The release to send once the origin answered: the object and the request.
    release: Option<(String, ObjectRequest)>,
    /// The coordinator timeout (ms) for the release call.
    timeout_ms: u64,
}

/// A fresh lease id when the route's limits include a concurrency limit.
pub fn lease_for(names: &[LimitName]) -> Option<String> {
    if !names.iter().any(|n| n.limit.holds_slots()) {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, b) in bytes.iter_mut().enumerate() {
        // Unique enough per slot: at most `n` leases of a slot are held at once.
        *b = (js_sys::Math::random() * 256.0) as u8 ^ (i as u8);
    }
    Some(hex::encode(bytes))
}

impl Hold {
    /// The hold of a request admitted by `decision` in `object`, whose check took a lease
    /// when `release` is set (see [`crate::protocol::Check::release`]).
    pub fn new(
        decision: &Decision,
        object: &str,
        release: Option<ObjectRequest>,
        timeout_ms: u64,
    ) -> Hold {
        Hold {
            delay_ms: decision.delay.div_ceil(1_000_000),
            release: release.map(|r| (object.to_string(), r)),
            timeout_ms,
        }
    }
}

/// Holds the request as `hold` says, forwards it to the origin with `fields`, and releases
/// what it holds.
pub async fn forward(
    req: Request,
    env: &Env,
    ctx: &Context,
    path: &str,
    fields: Vec<(&'static str, String)>,
    hold: Hold,
) -> worker::Result<Response> {
    let Some((object, release)) = hold.release else {
        wait(hold.delay_ms).await;
        return origin::forward(req, env, path, &fields).await;
    };
    let answer: Rc<RefCell<Option<worker::Result<Response>>>> = Rc::default();
    let mut resolve = None;
    let done = js_sys::Promise::new(&mut |ok, _| resolve = Some(ok));
    let resolve = resolve.expect("the Promise executor runs at once");
    let (env, path, out, timeout_ms) = (
        env.clone(),
        path.to_string(),
        answer.clone(),
        hold.timeout_ms,
    );
    ctx.wait_until(async move {
        wait(hold.delay_ms).await;
        let r = origin::forward(req, &env, &path, &fields).await;
        *out.borrow_mut() = Some(r);
        let _ = resolve.call0(&JsValue::UNDEFINED);
        // Two tries; the lease frees the slot if both fail.
        for _ in 0..2 {
            match send_batch(&env, timeout_ms, &object, std::slice::from_ref(&release)).await {
                Ok(a) if matches!(a.first(), Some(ObjectResponse::Released)) => return,
                Ok(a) => console_error!("tollgate: release in {object}: {a:?}"),
                Err(f) => console_error!("tollgate: release in {object}: {f}"),
            }
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(done).await;
    let taken = answer.borrow_mut().take();
    taken.unwrap_or_else(|| {
        Err(worker::Error::RustError(
            "origin task ended without an answer".into(),
        ))
    })
}

async fn wait(ms: u64) {
    if ms > 0 {
        Delay::from(Duration::from_millis(ms)).await;
    }
}
