//! Durable runs on SQLite: a run's recorded steps (`step_records`) and events (`run_events`):
//! fenced step writes, the journal read, and event delivery with its wake-up.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row, Transaction};

use super::Ctx;
use super::codec::{ts, ts_col, ts_req};
use crate::error::StoreError;
use crate::run::{
    EventSent, Journal, NewEvent, RunEvent, RunState, StepEntry, StepRecord, StepSave,
};

/// Inserts steps, or replaces the record of the same place (a wait that ended, a failed step
/// run again); `?1` is now.
const UPSERT_HEAD: &str = "INSERT INTO step_records (run_id, seq, name, kind, status, output, \
     error, wake_at, attempt, recorded_at)";
const UPSERT_TAIL: &str = "ON CONFLICT (run_id, seq) DO UPDATE SET name = excluded.name, \
     kind = excluded.kind, status = excluded.status, output = excluded.output, \
     error = excluded.error, wake_at = excluded.wake_at, attempt = excluded.attempt, \
     recorded_at = excluded.recorded_at";

fn upsert_sql(rows: usize) -> &'static str {
    static SQL: super::rows::SqlBySize = super::rows::SqlBySize::new();
    SQL.get(rows, |rows| {
        super::rows::values_sql(
            UPSERT_HEAD,
            "(#, #, #, #, #, #, #, #, #, ?1)",
            rows,
            UPSERT_TAIL,
        )
    })
}

/// One step to write: its run, the attempt that records it, the entry.
pub(crate) type StepRow<'a> = (&'a str, i64, &'a StepEntry);

/// Marks an event taken by a wait.
const CONSUME_EVENT: &str = "UPDATE run_events SET consumed_at = ?3 \
     WHERE run_id = ?1 AND name = ?2 AND consumed_at IS NULL";

/// Whether the lease of a running attempt still holds.
const LEASE_HELD: &str = "SELECT 1 FROM runs WHERE id = ?1 AND state = 'running' \
     AND attempt = ?2 AND lease_token = ?3";

/// Records steps (the caller checked their fences), in order: one multi-row statement per
/// chunk, as blobs are written; an entry that took an event marks it consumed. A record
/// given twice keeps the last.
pub(crate) fn write_rows(
    tx: &Transaction<'_>,
    rows: &[StepRow<'_>],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let now = ts(now);
    // One statement cannot touch a row twice: a repeated place is written by its last entry.
    let mut last: Vec<StepRow<'_>> = Vec::with_capacity(rows.len());
    for r in rows {
        match last.iter_mut().find(|l| l.0 == r.0 && l.2.seq == r.2.seq) {
            Some(l) => *l = *r,
            None => last.push(*r),
        }
    }
    super::rows::insert_chunked(tx, &last, "record steps", upsert_sql, &now, |stmt, i, r| {
        let (run, attempt, e) = *r;
        stmt.raw_bind_parameter(i, run)?;
        stmt.raw_bind_parameter(i + 1, e.seq)?;
        stmt.raw_bind_parameter(i + 2, e.name.as_str())?;
        stmt.raw_bind_parameter(i + 3, e.kind.as_str())?;
        stmt.raw_bind_parameter(i + 4, e.status.as_str())?;
        stmt.raw_bind_parameter(i + 5, e.output.as_deref())?;
        stmt.raw_bind_parameter(i + 6, e.error.as_deref())?;
        stmt.raw_bind_parameter(i + 7, e.wake_at.map(ts))?;
        stmt.raw_bind_parameter(i + 8, attempt)?;
        Ok(i + 9)
    })?;
    for (run, _, e) in rows {
        if let Some(event) = &e.consumes {
            tx.prepare_cached(CONSUME_EVENT)
                .ctx("prepare consume event")?
                .execute(rusqlite::params![run, event, now])
                .ctx("consume event")?;
        }
    }
    Ok(())
}

/// Records `entries` for the run (the caller checked the fence), in order.
pub(crate) fn write_entries(
    tx: &Transaction<'_>,
    run: &str,
    attempt: i64,
    entries: &[StepEntry],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let rows: Vec<StepRow<'_>> = entries.iter().map(|e| (run, attempt, e)).collect();
    write_rows(tx, &rows, now)
}

/// Records running attempts' steps, each while its lease holds (all applied saves in a few
/// statements); per save, whether it did.
pub(crate) fn save_many<'a>(
    tx: &Transaction<'_>,
    saves: impl Iterator<Item = &'a StepSave>,
    now: DateTime<Utc>,
) -> Result<Vec<bool>, StoreError> {
    let mut fence = tx.prepare_cached(LEASE_HELD).ctx("prepare step fence")?;
    let mut held = Vec::new();
    let mut rows: Vec<StepRow<'_>> = Vec::new();
    for s in saves {
        let ok = fence
            .query_row(rusqlite::params![s.id.as_str(), s.attempt, s.token], |_| {
                Ok(())
            })
            .optional()
            .ctx("step fence")?
            .is_some();
        if ok {
            rows.extend(s.entries.iter().map(|e| (s.id.as_str(), s.attempt, e)));
        }
        held.push(ok);
    }
    drop(fence);
    write_rows(tx, &rows, now)?;
    Ok(held)
}

/// A suspended event wait whose event is already stored is due at once.
const WAKE_IF_SENT: &str = "UPDATE runs SET run_at = min(run_at, ?3) \
     WHERE id = ?1 AND state = 'queued' AND wait_kind = 'event' AND wait_event = ?2 \
     AND EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = ?1 AND e.name = ?2)";

/// Makes the run due now if it waits for `event` and the event was stored (see
/// [`crate::store::Engine::event_send`]).
pub(crate) fn wake_if_sent(
    tx: &Transaction<'_>,
    run: &str,
    event: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(WAKE_IF_SENT)
        .ctx("prepare wake event wait")?
        .execute(rusqlite::params![run, event, ts(now)])
        .ctx("wake event wait")?;
    Ok(n == 1)
}

fn step_from_row(row: &Row<'_>) -> rusqlite::Result<StepRecord> {
    let kind: String = row.get(2)?;
    let status: String = row.get(3)?;
    let output: Option<String> = row.get(4)?;
    Ok(StepRecord {
        seq: row.get(0)?,
        name: row.get(1)?,
        kind: kind.parse().unwrap_or(crate::run::StepKind::Step),
        status: status.parse().unwrap_or(crate::run::StepStatus::Failed),
        output: output.and_then(|o| serde_json::from_str(&o).ok()),
        error: row.get(5)?,
        wake_at: ts_col(row, 6)?,
        attempt: row.get(7)?,
        recorded_at: ts_req(row, 8)?,
    })
}

fn event_from_row(row: &Row<'_>) -> rusqlite::Result<RunEvent> {
    let payload: String = row.get(1)?;
    Ok(RunEvent {
        name: row.get(0)?,
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        sent_at: ts_req(row, 2)?,
        sent_by: row.get(3)?,
        consumed_at: ts_col(row, 4)?,
    })
}

const EVENT_COLUMNS: &str = "name, payload, sent_at, sent_by, consumed_at";

/// A run's steps and events, in one read transaction.
pub(crate) fn read(conn: &Connection, run: &str) -> Result<Journal, StoreError> {
    let tx = conn.unchecked_transaction().ctx("begin journal read")?;
    let conn: &Connection = &tx;
    let steps = conn
        .prepare_cached(
            "SELECT seq, name, kind, status, output, error, wake_at, attempt, recorded_at \
             FROM step_records WHERE run_id = ?1 ORDER BY seq",
        )
        .ctx("prepare read steps")?
        .query_map([run], step_from_row)
        .ctx("read steps")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .ctx("read steps")?;
    let events = conn
        .prepare_cached(&format!(
            "SELECT {EVENT_COLUMNS} FROM run_events WHERE run_id = ?1 ORDER BY sent_at, name"
        ))
        .ctx("prepare read events")?
        .query_map([run], event_from_row)
        .ctx("read events")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .ctx("read events")?;
    Ok(Journal { steps, events })
}

/// Delivers an event (see [`crate::store::Engine::event_send`]).
pub(crate) fn send(tx: &Transaction<'_>, e: &NewEvent) -> Result<EventSent, StoreError> {
    let run = e.run.as_str();
    let state: Option<String> = tx
        .prepare_cached("SELECT state FROM runs WHERE id = ?1")
        .ctx("prepare read run state")?
        .query_row([run], |r| r.get(0))
        .optional()
        .ctx("read run state")?;
    let Some(state) = state else {
        return Ok(EventSent::UnknownRun);
    };
    let state: RunState = state.parse().unwrap_or(RunState::Failed);
    if state.is_final() {
        return Ok(EventSent::Finished(state));
    }
    let stored = tx
        .prepare_cached(
            "INSERT INTO run_events (run_id, name, payload, sent_at, sent_by) \
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (run_id, name) DO NOTHING",
        )
        .ctx("prepare store event")?
        .execute(rusqlite::params![
            run,
            e.name,
            e.payload,
            ts(e.now),
            e.sent_by
        ])
        .ctx("store event")?;
    if stored == 0 {
        let first = tx
            .prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM run_events WHERE run_id = ?1 AND name = ?2"
            ))
            .ctx("prepare read event")?
            .query_row([run, e.name.as_str()], event_from_row)
            .ctx("read event")?;
        return Ok(EventSent::Duplicate(first));
    }
    let woke = wake_if_sent(tx, run, &e.name, e.now)?;
    Ok(EventSent::Stored { woke })
}
