//! The object's SQLite storage as the table's [`Store`]: tables `limits` (a state per slot,
//! the policy it was written under, in its compact text, and when it is back to fresh; the
//! policy column was added later, [`migrate`], and a row without it is read as written under
//! the policy asking), `leases` (a slot's concurrency leases) and `tallies` (the
//! stats object's totals: a [`Tally`] per policy and route, as JSON; it replaced the
//! `stats` table of five counters per policy, which objects made before keep, unread),
//! `overrides` (a key's override of its plan, [`tollgate::plans::Override`] as JSON, by
//! `<policy>|<key>`), `in_use` (a coordinator's own slots in use by series, one row) and `in_use_reports` (the
//! stats object's latest report of each coordinator, [`crate::in_use`]).
//! Writes wait in memory for the object's next flush (one commit for many calls); reads
//! see them first.

use std::collections::HashMap;

use serde::Deserialize;
use tollgate::metrics::Tally;
use tollgate::plans::Override;
use tollgate::{Policy, State};
use worker::{SqlStorage, SqlStorageValue};

use crate::config::Config;
use crate::counters::PolicyTally;
use crate::in_use::{self, InUse, SeriesInUse};
use crate::lease::Lease;
use crate::table::Store;

/// The schema, created once per object.
pub const SCHEMA: [&str; 7] = [
    "CREATE TABLE IF NOT EXISTS overrides (owner TEXT PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS in_use (id INTEGER PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS in_use_reports (object TEXT PRIMARY KEY, \
     version INTEGER NOT NULL, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS limits (slot TEXT PRIMARY KEY, state TEXT NOT NULL, fresh_at INTEGER, \
     policy TEXT)",
    "CREATE INDEX IF NOT EXISTS limits_fresh_at ON limits (fresh_at)",
    "CREATE TABLE IF NOT EXISTS leases (slot TEXT PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tallies (policy TEXT NOT NULL, route TEXT NOT NULL, \
     tally TEXT NOT NULL, PRIMARY KEY (policy, route))",
];

#[derive(Deserialize)]
struct StateRow {
    state: String,
    policy: Option<String>,
}

/// Brings an object's tables made by an earlier version to [`SCHEMA`]: `limits` gains its
/// `policy` column (its rows keep `NULL` there: written under the policy asking). Run once
/// per object start, after [`SCHEMA`] (one read of the table's columns).
pub fn migrate(sql: &SqlStorage) -> worker::Result<()> {
    let columns = sql
        .exec("SELECT * FROM limits LIMIT 0", None)?
        .column_names();
    if !columns.iter().any(|c| c == "policy") {
        sql.exec("ALTER TABLE limits ADD COLUMN policy TEXT", None)?;
    }
    Ok(())
}

/// A state written in memory and not yet in SQLite: the state (`None`: delete the row), the
/// policy it was written under, and when it is back to fresh.
pub type Write = (Option<State>, Policy, Option<u64>);

/// The object's SQLite storage as a [`Store`], remembering the first error. Saves go to
/// `pending` (written to SQLite by [`write_pending`] at the object's flush, one transaction for many requests);
/// loads see `pending` first.
pub struct SqlStore<'a> {
    /// The object's SQL handle.
    pub sql: &'a SqlStorage,
    /// The first error met (the object then answers an error and drops its memory).
    pub error: Option<String>,
    /// States decided and not yet written.
    pub pending: &'a mut HashMap<String, Write>,
    /// Leases changed and not yet written (by slot; empty: delete).
    pub pending_leases: &'a mut HashMap<String, Vec<Lease>>,
    /// This object's slots in use, changed and not yet written.
    pub pending_in_use: &'a mut Option<InUse>,
    /// The config running (to resolve a plan override; `None`: a bad config, overrides of
    /// a plan are then not applied).
    pub config: Option<&'a Config>,
}

#[derive(Deserialize)]
struct BodyRow {
    body: String,
}

#[derive(Deserialize)]
struct LeaseRow {
    body: String,
}

#[derive(Deserialize)]
struct CountRow {
    rows: f64,
}

#[derive(Deserialize)]
struct TallyRow {
    policy: String,
    route: Option<String>,
    tally: String,
}

impl SqlStore<'_> {
    /// Keeps a coordinator's report if newer than the one kept, and answers every kept
    /// report added up.
    fn keep_in_use(&mut self, report: Option<&in_use::Report>) -> Vec<SeriesInUse> {
        // Only a newer version replaces the kept one (`in_use::newer`). Read, compare, write:
        // the object runs one call at a time, so no other report interleaves.
        if let Some(r) =
            report.filter(|r| in_use::newer(r.in_use.version, self.kept_version(&r.object)))
        {
            let body = serde_json::to_string(&r.in_use).unwrap_or_default();
            let version = SqlStorageValue::Integer(r.in_use.version.min(1 << 52) as i64);
            let result = self.sql.exec(
                "INSERT INTO in_use_reports (object, version, body) VALUES (?, ?, ?) \
                 ON CONFLICT(object) DO UPDATE SET version = excluded.version, body = excluded.body",
                vec![r.object.as_str().into(), version, body.into()],
            );
            if let Err(e) = result {
                self.error.get_or_insert(e.to_string());
            }
        }
        let rows = self
            .sql
            .exec("SELECT body FROM in_use_reports", None)
            .and_then(|c| c.to_array::<BodyRow>());
        match rows {
            Ok(rows) => {
                let kept: Vec<InUse> = rows
                    .iter()
                    .filter_map(|r| serde_json::from_str(&r.body).ok())
                    .collect();
                in_use::sum(&kept)
            }
            Err(e) => {
                self.error.get_or_insert(e.to_string());
                Vec::new()
            }
        }
    }

    /// The version of `object`'s kept report, if any.
    fn kept_version(&mut self, object: &str) -> Option<u64> {
        #[derive(Deserialize)]
        struct VersionRow {
            version: i64,
        }
        let rows = self
            .sql
            .exec(
                "SELECT version FROM in_use_reports WHERE object = ?",
                vec![object.into()],
            )
            .and_then(|c| c.to_array::<VersionRow>());
        match rows {
            Ok(rows) => rows.first().map(|r| r.version.max(0) as u64),
            Err(e) => {
                self.error.get_or_insert(e.to_string());
                None
            }
        }
    }

    fn add_tallies(&mut self, tallies: &[PolicyTally]) -> Vec<PolicyTally> {
        // Read, add, write back: the object runs one call at a time, so no other report
        // interleaves. A route of `None` (the check API) is stored as the empty string.
        for t in tallies {
            let route = t.route.as_deref().unwrap_or("");
            let key = || -> Vec<SqlStorageValue> { vec![t.policy.as_str().into(), route.into()] };
            let stored = self
                .sql
                .exec(
                    "SELECT policy, route, tally FROM tallies WHERE policy = ? AND route = ?",
                    key(),
                )
                .and_then(|c| c.to_array::<TallyRow>());
            let mut total = t.tally;
            match stored {
                Ok(rows) => {
                    for row in rows {
                        match serde_json::from_str::<Tally>(&row.tally) {
                            Ok(old) => total.merge(&old),
                            Err(e) => {
                                self.error.get_or_insert(format!("stored tally: {e}"));
                            }
                        }
                    }
                }
                Err(e) => {
                    self.error.get_or_insert(e.to_string());
                    continue;
                }
            }
            let json = serde_json::to_string(&total).unwrap_or_default();
            let mut args = key();
            args.push(json.into());
            let r = self.sql.exec(
                "INSERT INTO tallies (policy, route, tally) VALUES (?, ?, ?) \
                 ON CONFLICT(policy, route) DO UPDATE SET tally = excluded.tally",
                args,
            );
            if let Err(e) = r {
                self.error.get_or_insert(e.to_string());
            }
        }
        let rows = self
            .sql
            .exec("SELECT policy, route, tally FROM tallies", None)
            .and_then(|c| c.to_array::<TallyRow>());
        match rows {
            Ok(rows) => rows
                .into_iter()
                .filter_map(|r| {
                    let tally = serde_json::from_str::<Tally>(&r.tally).ok()?;
                    Some(PolicyTally {
                        policy: r.policy,
                        route: r.route.filter(|s| !s.is_empty()),
                        tally,
                    })
                })
                .collect(),
            Err(e) => {
                self.error.get_or_insert(e.to_string());
                Vec::new()
            }
        }
    }
}

impl Store for SqlStore<'_> {
    fn report(
        &mut self,
        tallies: &[PolicyTally],
        in_use: Option<&in_use::Report>,
    ) -> (Vec<PolicyTally>, Vec<SeriesInUse>) {
        (self.add_tallies(tallies), self.keep_in_use(in_use))
    }

    fn load_in_use(&mut self) -> InUse {
        if let Some(pending) = self.pending_in_use.as_ref() {
            return pending.clone();
        }
        let rows = self
            .sql
            .exec("SELECT body FROM in_use WHERE id = 0", None)
            .and_then(|c| c.to_array::<BodyRow>());
        match rows {
            Ok(rows) => match rows.first().map(|r| serde_json::from_str(&r.body)) {
                None => InUse::default(),
                Some(Ok(kept)) => kept,
                Some(Err(e)) => {
                    self.error.get_or_insert(format!("stored in_use: {e}"));
                    InUse::default()
                }
            },
            Err(e) => {
                self.error.get_or_insert(e.to_string());
                InUse::default()
            }
        }
    }

    fn save_in_use(&mut self, in_use: &InUse) {
        *self.pending_in_use = Some(in_use.clone());
    }

    fn count(&mut self) -> u64 {
        match self
            .sql
            .exec("SELECT COUNT(*) AS rows FROM limits", None)
            .and_then(|c| c.to_array::<CountRow>())
        {
            Ok(rows) => rows.first().map(|r| r.rows as u64).unwrap_or(0),
            Err(e) => {
                self.error.get_or_insert(e.to_string());
                0
            }
        }
    }

    fn load(&mut self, slot: &str) -> (Option<State>, Option<Policy>) {
        if let Some((state, policy, _)) = self.pending.get(slot) {
            return (state.clone(), state.as_ref().map(|_| *policy));
        }
        let rows = self
            .sql
            .exec(
                "SELECT state, policy FROM limits WHERE slot = ?",
                vec![slot.into()],
            )
            .and_then(|c| c.to_array::<StateRow>());
        let row = match rows {
            Ok(mut rows) => rows.pop(),
            Err(e) => {
                self.error.get_or_insert(e.to_string());
                None
            }
        };
        let Some(row) = row else {
            return (None, None);
        };
        let state = match serde_json::from_str::<State>(&row.state) {
            Ok(s) => s,
            Err(e) => {
                self.error
                    .get_or_insert(format!("stored state of {slot}: {e}"));
                return (None, None);
            }
        };
        let policy = match row.policy.as_deref().map(str::parse::<Policy>) {
            None => None,
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => {
                self.error
                    .get_or_insert(format!("stored policy of {slot}: {e}"));
                return (None, None);
            }
        };
        (Some(state), policy)
    }

    fn save(&mut self, slot: &str, state: Option<&State>, policy: &Policy, fresh_at: Option<u64>) {
        self.pending
            .insert(slot.to_string(), (state.cloned(), *policy, fresh_at));
    }

    fn load_leases(&mut self, slot: &str) -> Vec<Lease> {
        if let Some(held) = self.pending_leases.get(slot) {
            return held.clone();
        }
        let rows = self
            .sql
            .exec("SELECT body FROM leases WHERE slot = ?", vec![slot.into()])
            .and_then(|c| c.to_array::<LeaseRow>());
        match rows {
            Ok(rows) => match rows.first().map(|r| serde_json::from_str(&r.body)) {
                None => Vec::new(),
                Some(Ok(held)) => held,
                Some(Err(e)) => {
                    self.error
                        .get_or_insert(format!("stored leases of {slot}: {e}"));
                    Vec::new()
                }
            },
            Err(e) => {
                self.error.get_or_insert(e.to_string());
                Vec::new()
            }
        }
    }

    fn save_leases(&mut self, slot: &str, leases: &[Lease]) {
        self.pending_leases
            .insert(slot.to_string(), leases.to_vec());
    }

    fn load_override(&mut self, owner: &str) -> Option<Override> {
        let rows = self
            .sql
            .exec(
                "SELECT body FROM overrides WHERE owner = ?",
                vec![owner.into()],
            )
            .and_then(|c| c.to_array::<BodyRow>());
        match rows {
            Ok(rows) => match rows.first().map(|r| serde_json::from_str(&r.body)) {
                None => None,
                Some(Ok(o)) => Some(o),
                Some(Err(e)) => {
                    self.error
                        .get_or_insert(format!("stored override of {owner}: {e}"));
                    None
                }
            },
            Err(e) => {
                self.error.get_or_insert(e.to_string());
                None
            }
        }
    }

    // Written at once, not pending: an admin call is rare, and the object's output gate
    // holds its answer until this event's writes are committed.
    fn save_override(&mut self, owner: &str, what: Option<&Override>) {
        let result = match what {
            None => self
                .sql
                .exec("DELETE FROM overrides WHERE owner = ?", vec![owner.into()]),
            Some(o) => {
                let body = serde_json::to_string(o).unwrap_or_default();
                self.sql.exec(
                    "INSERT INTO overrides (owner, body) VALUES (?, ?) \
                     ON CONFLICT(owner) DO UPDATE SET body = excluded.body",
                    vec![owner.into(), body.into()],
                )
            }
        };
        if let Err(e) = result {
            self.error.get_or_insert(e.to_string());
        }
    }

    fn count_overrides(&mut self) -> u64 {
        match self
            .sql
            .exec("SELECT COUNT(*) AS rows FROM overrides", None)
            .and_then(|c| c.to_array::<CountRow>())
        {
            Ok(rows) => rows.first().map(|r| r.rows as u64).unwrap_or(0),
            Err(e) => {
                self.error.get_or_insert(e.to_string());
                0
            }
        }
    }

    fn plan_limits(&mut self, policy: &str, plan: &str) -> Option<Vec<Policy>> {
        let (_, entry) = self.config?.policy(policy)?;
        let plans = entry.plans.as_ref()?;
        Some(plans.plans.get(plan).ok()?.layers().to_vec())
    }
}

/// Every stored lease by slot (for the alarm, which frees the expired ones).
pub fn all_leases(sql: &SqlStorage) -> worker::Result<Vec<(String, Vec<Lease>)>> {
    #[derive(Deserialize)]
    struct Row {
        slot: String,
        body: String,
    }
    let rows: Vec<Row> = sql
        .exec("SELECT slot, body FROM leases", None)?
        .to_array()?;
    Ok(rows
        .into_iter()
        .filter_map(|r| Some((r.slot, serde_json::from_str(&r.body).ok()?)))
        .collect())
}

/// Writes the pending states, leases and slots in use to SQLite; answers the earliest
/// instant a written state is fresh again (for the sweep) and the first error.
pub fn write_pending(
    sql: &SqlStorage,
    pending: HashMap<String, Write>,
    leases: HashMap<String, Vec<Lease>>,
    in_use: Option<InUse>,
) -> (Option<u64>, Option<String>) {
    let mut error = None;
    if let Some(totals) = in_use {
        let body = serde_json::to_string(&totals).unwrap_or_default();
        let result = sql.exec(
            "INSERT INTO in_use (id, body) VALUES (0, ?) \
             ON CONFLICT(id) DO UPDATE SET body = excluded.body",
            vec![body.into()],
        );
        if let Err(e) = result {
            error.get_or_insert(e.to_string());
        }
    }
    for (slot, held) in leases {
        let result = if held.is_empty() {
            sql.exec("DELETE FROM leases WHERE slot = ?", vec![slot.into()])
        } else {
            let body = serde_json::to_string(&held).unwrap_or_default();
            sql.exec(
                "INSERT INTO leases (slot, body) VALUES (?, ?) \
                 ON CONFLICT(slot) DO UPDATE SET body = excluded.body",
                vec![slot.into(), body.into()],
            )
        };
        if let Err(e) = result {
            error.get_or_insert(e.to_string());
        }
    }
    let mut earliest: Option<u64> = None;
    for (slot, (state, policy, fresh_at)) in pending {
        let result = match state {
            None => sql
                .exec("DELETE FROM limits WHERE slot = ?", vec![slot.into()])
                .map(|_| ()),
            Some(s) => {
                // The core's own serde form (externally tagged: `{"gcra":{"tat":...}}`).
                let text = serde_json::to_string(&s).unwrap_or_default();
                let at: SqlStorageValue = match fresh_at {
                    Some(t) => SqlStorageValue::Integer(t.min(1 << 52) as i64),
                    None => SqlStorageValue::Null,
                };
                if let Some(t) = fresh_at {
                    earliest = Some(earliest.map_or(t, |e| e.min(t)));
                }
                sql.exec(
                    "INSERT INTO limits (slot, state, fresh_at, policy) VALUES (?, ?, ?, ?) \
                     ON CONFLICT(slot) DO UPDATE SET state = excluded.state, \
                     fresh_at = excluded.fresh_at, policy = excluded.policy",
                    vec![slot.into(), text.into(), at, policy.to_string().into()],
                )
                .map(|_| ())
            }
        };
        if let Err(e) = result {
            error.get_or_insert(e.to_string());
        }
    }
    (earliest, error)
}
