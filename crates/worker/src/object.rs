//! The coordinator: a Durable Object per (policy group, shard). It decides with the core
//! and its own clock, keeps its states in memory and in its SQLite storage, and sweeps
//! states that are back to fresh with an alarm.
//!
//! # Consistency and durability
//! * **Serialised per object.** The isolate calls `decide(json)` over Workers RPC (see
//!   `js/entry.mjs`; `fetch` with the same body also works). It decides and writes
//!   synchronously (the SQL API is synchronous): no await sits between reading a state and
//!   writing it back, so two requests for one key can never interleave, even when the
//!   runtime delivers the next request while another awaits. A call may carry a batch of
//!   requests; they are decided in order, each all or nothing, and committed together. Every limit of a stack lives
//!   in the same object (the config puts stacked policies in one group), so a stack is
//!   decided all or nothing.
//! * **Durable before answered.** The writes are not awaited: the runtime's output gate
//!   holds the response until the implicit transaction of this event is committed, so a
//!   client never sees an admission whose charge could still be lost. **Group commit:** a
//!   check arriving while the object is busy (another call within [`GROUP_WINDOW_MS`]) is
//!   decided at once but its write waits for the next flush, which writes every pending
//!   state in one turn (one commit for all of them); the call answers only after that
//!   flush, and so does every call decided while anything is pending. A lone call writes at
//!   once, as before. An evicted or
//!   restarted object re-reads its states lazily (one read per slot, then memory is
//!   authoritative, the object being the only writer of its storage).
//! * **Swept when fresh.** Each row records when it will be back to fresh; an alarm deletes
//!   such rows (deleting a fresh state changes no decision). States made under the test
//!   clock and concurrency counts are never swept (a count is deleted when released to 0).
//! * **Slots in use, reported.** The object keeps its slots in use by policy and route
//!   ([`crate::in_use`]), written in the same commit as the states. Once they change, the
//!   alarm ([`REPORT_AFTER_MS`] later) frees the expired leases no call would free, then
//!   reports the totals whole to the stats object; the alarm also comes back when the next
//!   lease expires. A failed report is retried [`REPORT_RETRY_MS`] later with the totals of
//!   then, which carry every change (the stats object keeps each object's newest report).

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashMap;

use serde::Deserialize;
use worker::{
    console_error, durable_object, Date, DurableObject, Env, Request, Response, SqlStorage,
    SqlStorageValue,
};

use crate::in_use::{self, InUse};
use crate::lease::{self, Lease};
use crate::protocol::{Limit, ObjectRequest, ObjectResponse};
use crate::rpc::send_batch;
use crate::sql_store::{all_leases, migrate, write_pending, SqlStore, Write, SCHEMA};
use crate::stats::STATS_OBJECT;
use crate::table::Table;

/// Sweeps of fresh states run at most this often per object (ms): sweeping is
/// housekeeping, not accuracy.
const SWEEP_EVERY_MS: u64 = 10_000;

/// A change of the slots in use is reported this long after it (ms), with every change
/// made meanwhile (one report per object and second at most); expired leases are freed by
/// the alarm no sooner either. How fresh the edge's `tollgate_concurrency_in_use` is.
const REPORT_AFTER_MS: u64 = 1_000;

/// A failed report is retried this long after (ms).
const REPORT_RETRY_MS: u64 = 5_000;

/// How long a report may take (ms) before it counts as failed.
const REPORT_TIMEOUT_MS: u64 = 5_000;

/// A check arriving within this long (ms) of the previous call joins a group commit; an
/// object called less often writes at once (a one-call object never waits for a flush).
const GROUP_WINDOW_MS: u64 = 10;

/// The rate-limit coordinator object.
#[durable_object]
pub struct Limiter {
    state: worker::State,
    env: Env,
    table: RefCell<Table>,
    /// The SQL handle, once its schema exists (kept: one lookup per object, not per call).
    sql: OnceCell<SqlStorage>,
    /// When the pending alarm fires (ms), if one is pending.
    alarm_at: Cell<Option<u64>>,
    /// States decided and not yet written to SQLite (see [`Limiter::flush`]).
    pending: RefCell<HashMap<String, Write>>,
    /// Concurrency leases changed and not yet written (by slot; empty: delete).
    pending_leases: RefCell<HashMap<String, Vec<Lease>>>,
    /// Slots in use changed and not yet written.
    pending_in_use: RefCell<Option<InUse>>,
    /// The version of the slots in use the stats object acknowledged (0: none this life).
    reported: Cell<u64>,
    /// Whether the `leases` table was read since the object started.
    leases_scanned: Cell<bool>,
    /// No lease expires before this (ms), as far as the object knows (`None`: none held).
    leases_next: Cell<Option<u64>>,
    /// When the last call arrived (ms, the object's clock).
    last_call_ms: Cell<u64>,
}

#[derive(Deserialize)]
struct SlotRow {
    slot: String,
}

#[derive(Deserialize)]
struct MinRow {
    next: Option<f64>,
}

impl Limiter {
    fn sql(&self) -> worker::Result<&SqlStorage> {
        if let Some(sql) = self.sql.get() {
            return Ok(sql);
        }
        let sql = self.state.storage().sql();
        for statement in SCHEMA {
            sql.exec(statement, None)?;
        }
        migrate(&sql)?;
        Ok(self.sql.get_or_init(|| sql))
    }

    /// Schedules the sweep of states fresh at `at`, at most every [`SWEEP_EVERY_MS`].
    fn schedule_sweep(&self, at: u64) {
        self.schedule_alarm(at.max(Date::now().as_millis() + SWEEP_EVERY_MS));
    }

    /// Schedules the alarm at `at` unless one is due sooner, without awaiting: the output
    /// gate holds this event's answer until the alarm is stored, like every other write.
    fn schedule_alarm(&self, at: u64) {
        if self.alarm_at.get().is_some_and(|t| t <= at) {
            return;
        }
        self.alarm_at.set(Some(at));
        let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(at as f64));
        match self
            .state
            .storage()
            .as_raw()
            .set_alarm(date, js_sys::Object::new())
        {
            Ok(promise) => {
                // Report a failure instead of leaving an unhandled rejection.
                let on_error = wasm_bindgen::closure::Closure::once(|e: wasm_bindgen::JsValue| {
                    console_error!("tollgate object: set_alarm: {e:?}");
                });
                let _ = promise.catch(&on_error);
                on_error.forget();
            }
            Err(e) => {
                console_error!("tollgate object: set_alarm: {e:?}");
                self.alarm_at.set(None);
            }
        }
    }

    /// Writes every pending state to SQLite (synchronously: the writes join this event's
    /// implicit transaction, and the output gate holds every answer until it is committed).
    /// On an error, memory is dropped (storage is the truth) and the error returned.
    fn flush(&self) -> Result<(), String> {
        let pending = std::mem::take(&mut *self.pending.borrow_mut());
        let leases = std::mem::take(&mut *self.pending_leases.borrow_mut());
        let in_use = self.pending_in_use.borrow_mut().take();
        if pending.is_empty() && leases.is_empty() && in_use.is_none() {
            return Ok(());
        }
        // The alarm frees expired leases no sooner than the earliest it knows of.
        let granted = leases.values().filter_map(|l| lease::next_expiry(l)).min();
        if let Some(t) = granted {
            let next = self.leases_next.get().map_or(t, |n| n.min(t));
            self.leases_next.set(Some(next));
        }
        let sql = self.sql().map_err(|e| e.to_string())?;
        let (earliest, error) = write_pending(sql, pending, leases, in_use);
        if let Some(e) = error {
            console_error!("tollgate object: storage error: {e}");
            *self.table.borrow_mut() = Table::new();
            return Err(format!("storage error: {e}"));
        }
        if let Some(at) = earliest {
            self.schedule_sweep(at);
        }
        Ok(())
    }

    /// Decides a batch (JSON array of [`ObjectRequest`]) and answers a JSON array of
    /// [`ObjectResponse`], or an error text. Synchronous from the first read to the last
    /// decision. A batch of checks only (`defer`) arriving while the object is busy (another
    /// call within [`GROUP_WINDOW_MS`], or writes already pending) leaves its writes pending
    /// for the next [`Limiter::flush`], which the caller must then await before answering
    /// (see `js/entry.mjs`); any other batch is written before this returns, as is
    /// everything pending.
    fn decide_text(&self, body: &[u8], defer: bool) -> Result<String, String> {
        let requests: Vec<ObjectRequest> =
            serde_json::from_slice(body).map_err(|e| format!("bad object request: {e}"))?;
        let now = Date::now().as_millis();
        let busy = now.saturating_sub(self.last_call_ms.replace(now)) <= GROUP_WINDOW_MS
            || self.pending_rpc();
        let defer = defer
            && busy
            && requests
                .iter()
                .all(|r| matches!(r, ObjectRequest::Check(_)));
        if !defer {
            // Counts and reports read SQLite: bring it up to date first.
            self.flush()?;
        }
        let (answers, error) = self.with_store(|table, store| {
            requests
                .iter()
                .map(|r| table.handle(r, now, store))
                .collect::<Vec<ObjectResponse>>()
        })?;
        if let Some(e) = error {
            console_error!("tollgate object: storage error: {e}");
            // Memory may be ahead of storage now: drop it, storage is the truth. Writes
            // already pending were decided before this batch and stay pending.
            *self.table.borrow_mut() = Table::new();
            return Err(format!("storage error: {e}"));
        }
        if !defer {
            self.flush()?;
        }
        if self.unreported() {
            self.schedule_alarm(now + REPORT_AFTER_MS);
        }
        serde_json::to_string(&answers).map_err(|e| format!("answer: {e}"))
    }

    /// Runs `f` on the table over the SQLite store; answers its result and the store's
    /// first error.
    fn with_store<R>(
        &self,
        f: impl FnOnce(&mut Table, &mut SqlStore<'_>) -> R,
    ) -> Result<(R, Option<String>), String> {
        let mut pending = self.pending.borrow_mut();
        let mut pending_leases = self.pending_leases.borrow_mut();
        let mut pending_in_use = self.pending_in_use.borrow_mut();
        let config = crate::env::config(&self.env);
        let mut store = SqlStore {
            config: config.as_ref().as_ref().ok(),
            sql: self.sql().map_err(|e| e.to_string())?,
            error: None,
            pending: &mut pending,
            pending_leases: &mut pending_leases,
            pending_in_use: &mut pending_in_use,
        };
        let mut table = self.table.borrow_mut();
        let r = f(&mut table, &mut store);
        Ok((r, store.error))
    }

    /// Whether the slots in use changed since the stats object last acknowledged them.
    fn unreported(&self) -> bool {
        let table = self.table.borrow();
        table
            .in_use()
            .is_some_and(|u| u.version > self.reported.get())
    }

    /// Frees the expired leases of every slot (their policy is stored with them) when one
    /// may be due, and answers when the next lease expires. Reads the `leases` table only
    /// then: after a start, and once the earliest expiry known is reached (leases granted
    /// since are counted in by [`Limiter::flush`]).
    fn expire_leases(&self, now: u64) -> worker::Result<Option<u64>> {
        if self.leases_scanned.get() && self.leases_next.get().is_none_or(|t| t > now) {
            return Ok(self.leases_next.get());
        }
        let mut due = Vec::new();
        let mut next: Option<u64> = None;
        for (slot, leases) in all_leases(self.sql()?)? {
            // Stored before leases named their policy: freed by the next call instead.
            let Some(policy) = leases.iter().find_map(|l| l.policy) else {
                continue;
            };
            let later = leases
                .iter()
                .map(|l| l.expires_ms)
                .filter(|&t| t > now)
                .min();
            if let Some(t) = later {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
            if lease::next_expiry(&leases).is_some_and(|t| t <= now) {
                due.push(Limit { slot, policy });
            }
        }
        if !due.is_empty() {
            let ((), error) = self
                .with_store(|table, store| table.expire(&due, now, store))
                .map_err(worker::Error::RustError)?;
            if let Some(e) = error {
                *self.table.borrow_mut() = Table::new();
                return Err(worker::Error::RustError(format!("storage error: {e}")));
            }
            self.flush().map_err(worker::Error::RustError)?;
        }
        self.leases_scanned.set(true);
        self.leases_next.set(next);
        Ok(next)
    }

    /// Reports the slots in use to the stats object if they changed since the last
    /// acknowledged report; on failure, schedules a retry. The report is the whole totals,
    /// so a failed one loses nothing: the next carries its changes too.
    async fn report_in_use(&self) {
        let totals = {
            let loaded = self.with_store(|table, store| table.in_use_or_load(store).clone());
            match loaded {
                Ok((totals, None)) => totals,
                Ok((_, Some(e))) | Err(e) => {
                    console_error!("tollgate object: reading slots in use: {e}");
                    return;
                }
            }
        };
        if totals.version <= self.reported.get() {
            return;
        }
        let version = totals.version;
        let req = ObjectRequest::Report {
            tallies: Vec::new(),
            in_use: Some(in_use::Report {
                object: self.state.id().to_string(),
                in_use: totals,
            }),
        };
        let sent = send_batch(
            &self.env,
            REPORT_TIMEOUT_MS,
            STATS_OBJECT,
            std::slice::from_ref(&req),
        )
        .await;
        match sent.map(|mut a| a.pop()) {
            Ok(Some(ObjectResponse::Stats { .. })) => {
                self.reported.set(self.reported.get().max(version));
            }
            other => {
                let why = match other {
                    Err(f) => f.to_string(),
                    Ok(a) => format!("stats object answered {a:?}"),
                };
                console_error!("tollgate object: slots in use report: {why}");
                self.schedule_alarm(Date::now().as_millis() + REPORT_RETRY_MS);
            }
        }
    }
}

/// The RPC entry points, called by the JavaScript class in `js/entry.mjs` (which extends
/// `DurableObject`, as Workers RPC requires): `stub.decide(json)` costs less than a
/// `fetch` round trip (no HTTP request and response objects).
///
/// **Group commit.** `decide` leaves the writes of a batch of checks pending; the class
/// answers only after the next `flush` (run once for every call that arrived meanwhile, so
/// concurrent calls share one SQLite commit instead of paying one each). Every answer waits
/// for the flush after its decision when anything is pending, so no answer (admission or
/// denial) leaves before every state it saw is written; the output gate then holds it
/// until that write is committed.
#[wasm_bindgen::prelude::wasm_bindgen]
impl Limiter {
    /// Decides a batch; throws the error text. Writes of checks stay pending.
    #[wasm_bindgen::prelude::wasm_bindgen(js_name = decide)]
    pub fn decide_rpc(&self, body: String) -> Result<String, wasm_bindgen::JsValue> {
        self.decide_text(body.as_bytes(), true)
            .map_err(|e| wasm_bindgen::JsValue::from(js_sys::Error::new(&e)))
    }

    /// Whether decided states wait for [`Limiter::flush`].
    #[wasm_bindgen::prelude::wasm_bindgen(js_name = pending)]
    pub fn pending_rpc(&self) -> bool {
        !self.pending.borrow().is_empty()
            || !self.pending_leases.borrow().is_empty()
            || self.pending_in_use.borrow().is_some()
    }

    /// Writes the pending states (one transaction); throws the error text.
    #[wasm_bindgen::prelude::wasm_bindgen(js_name = flush)]
    pub fn flush_rpc(&self) -> Result<(), wasm_bindgen::JsValue> {
        self.flush()
            .map_err(|e| wasm_bindgen::JsValue::from(js_sys::Error::new(&e)))
    }
}

impl DurableObject for Limiter {
    fn new(state: worker::State, env: Env) -> Self {
        Limiter {
            state,
            env,
            table: RefCell::new(Table::new()),
            sql: OnceCell::new(),
            alarm_at: Cell::new(None),
            pending: RefCell::new(HashMap::new()),
            pending_leases: RefCell::new(HashMap::new()),
            pending_in_use: RefCell::new(None),
            reported: Cell::new(0),
            leases_scanned: Cell::new(false),
            leases_next: Cell::new(None),
            last_call_ms: Cell::new(0),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let body = req.bytes().await?;
        match self.decide_text(&body, false) {
            Ok(text) => Response::ok(text),
            Err(e) => Response::error(e, 500),
        }
    }

    async fn alarm(&self) -> worker::Result<Response> {
        self.alarm_at.set(None);
        // Rows are swept by what SQLite holds: write what memory decided first.
        self.flush().map_err(worker::Error::RustError)?;
        let now = Date::now().as_millis();
        let sql = self.sql()?;
        let swept: Vec<SlotRow> = sql
            .exec(
                "DELETE FROM limits WHERE fresh_at IS NOT NULL AND fresh_at <= ? RETURNING slot",
                vec![SqlStorageValue::Integer(now as i64)],
            )?
            .to_array()?;
        {
            let mut table = self.table.borrow_mut();
            for row in &swept {
                table.forget(&row.slot);
            }
        }
        let next: Vec<MinRow> = sql
            .exec("SELECT MIN(fresh_at) AS next FROM limits", None)?
            .to_array()?;
        if let Some(next) = next.first().and_then(|r| r.next) {
            self.schedule_sweep(next as u64);
        }
        // Leases no call frees, then the slots in use they held.
        match self.expire_leases(now) {
            Ok(Some(at)) => self.schedule_alarm(at.max(now + REPORT_AFTER_MS)),
            Ok(None) => {}
            Err(e) => {
                console_error!("tollgate object: expiring leases: {e}");
                self.schedule_alarm(now + REPORT_RETRY_MS);
            }
        }
        self.report_in_use().await;
        Response::ok(format!("swept {}", swept.len()))
    }
}
