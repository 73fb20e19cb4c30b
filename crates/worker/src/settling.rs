//! Reserve then settle at the edge (glue; the rules are the core's settle, the route's
//! [`SettleRule`] in `tollgate-http`, and the object's reservations in [`crate::table`]):
//!
//! * A route with a settle rule charges its `cost` as an estimate, and its check keeps the
//!   charge as a reservation under a fresh id in the key's coordinator object.
//! * Once the origin answered, the rule gives the real cost from the status and the cost
//!   header; the header is removed before the client sees the response. The settle goes to
//!   the same object after the response, in a task the runtime keeps alive
//!   (`ctx.waitUntil`), so the client never waits for it.
//! * A check whose answer came back after the worker's timeout (the route answered by its
//!   `on_error`) may still have been charged in the object: it is settled to nothing.
//! * A settle is sent twice at most; a second one of the same id charges nothing (the
//!   object answers it with the first's outcome), so the retry is safe.

use worker::{console_error, console_warn, Context, Env, Headers, Response};

use crate::config::SettleRule;
use crate::protocol::{Limit, ObjectRequest, ObjectResponse, Settle, When};
use crate::rpc::send_batch;
use tollgate_http::settle::Actual;

/// A reservation to settle: where, on which limits, under which id, of what estimate.
pub struct Open {
    /// The coordinator object.
    pub object: String,
    /// The limits the check charged.
    pub limits: Vec<Limit>,
    /// The check's reservation id.
    pub id: String,
    /// The estimate charged.
    pub estimate: u64,
    /// The coordinator timeout (ms), for the settle call.
    pub timeout_ms: u64,
}

/// A fresh reservation id (128 random bits, hex).
pub fn reservation_id() -> String {
    let mut bytes = [0u8; 16];
    for b in bytes.iter_mut() {
        *b = (js_sys::Math::random() * 256.0) as u8;
    }
    hex::encode(bytes)
}

/// Settles `open` from the origin's `resp` by `rule` (after the response, in `ctx`), and
/// answers `resp` without the cost header.
pub fn settle_from(
    resp: worker::Result<Response>,
    rule: &SettleRule,
    env: &Env,
    ctx: &Context,
    open: Open,
) -> worker::Result<Response> {
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            // The origin failed: what it spent is unknown; the estimate stays charged.
            settle_later(env, ctx, open.estimate, open);
            return Err(e);
        }
    };
    let header = match &rule.cost_header {
        Some(name) => resp.headers().get(name).ok().flatten(),
        None => None,
    };
    let actual = match rule.actual(open.estimate, resp.status_code(), header.as_deref()) {
        Actual::Cost(n) => n,
        Actual::Estimate => open.estimate,
        Actual::BadHeader => {
            console_warn!(
                "tollgate: cost header {:?} = {:?} is not a whole number of units; \
                 charged the estimate",
                rule.cost_header,
                header
            );
            open.estimate
        }
    };
    settle_later(env, ctx, actual, open);
    match (&rule.cost_header, header) {
        (Some(name), Some(_)) => without_header(resp, name),
        _ => Ok(resp),
    }
}

/// Gives back a reservation whose check answered after the worker's timeout (the route
/// answered by its `on_error`): if the object charged it, the charge is undone.
pub fn give_back(env: &Env, ctx: &Context, open: Open) {
    settle_later(env, ctx, 0, open);
}

/// Sends the settle of `open` at `actual` after the response (two tries).
fn settle_later(env: &Env, ctx: &Context, actual: u64, open: Open) {
    let env = env.clone();
    ctx.wait_until(async move {
        let req = ObjectRequest::Settle(Settle {
            limits: open.limits,
            reservation: open.id,
            actual,
            up_to_limit: false,
            when: When::default(),
        });
        for _ in 0..2 {
            match send_batch(
                &env,
                open.timeout_ms,
                &open.object,
                std::slice::from_ref(&req),
            )
            .await
            {
                Ok(a) => {
                    if let Some(ObjectResponse::Error { code, message }) = a.first() {
                        console_error!("tollgate: settle in {}: {code}: {message}", open.object);
                    }
                    return;
                }
                Err(f) => console_error!("tollgate: settle in {}: {f}", open.object),
            }
        }
    });
}

/// `resp` without the header `name` (a fetched response's headers are immutable: copied).
fn without_header(resp: Response, name: &str) -> worker::Result<Response> {
    let headers = Headers::new();
    for (k, v) in resp.headers().entries() {
        if !k.eq_ignore_ascii_case(name) {
            headers.append(&k, &v)?;
        }
    }
    Ok(resp.with_headers(headers))
}
