//! Durable runs on Postgres: a run's recorded steps (`step_records`) and events (`run_events`):
//! fenced step writes, the journal read, and event delivery with its wake-up. The same
//! statements as the SQLite engine's `journal.rs`, with row locks where SQLite has its single
//! writer: a step save and an event delivery lock the run's row first, so each serializes with
//! the end (a suspension) of the same run.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::codec::{ts_opt, ts_req};
use super::{exec, get, query, query_one, query_opt};
use crate::clock::ts;
use crate::error::StoreError;
use crate::run::{
    EventSent, Journal, NewEvent, RunEvent, RunState, StepEntry, StepKind, StepRecord, StepSave,
    StepStatus,
};

/// Inserts steps, or replaces the record of the same place (a failed step run again), in one
/// statement.
const UPSERT_STEPS: &str = "INSERT INTO step_records (run_id, seq, name, kind, status, output, \
     error, wake_at, attempt, recorded_at) \
     SELECT $1, u.seq, u.name, u.kind, u.status, u.output, u.error, u.wake_at, $9, $10 \
     FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
         $8::text[]) AS u(seq, name, kind, status, output, error, wake_at) \
     ON CONFLICT (run_id, seq) DO UPDATE SET name = excluded.name, kind = excluded.kind, \
     status = excluded.status, output = excluded.output, error = excluded.error, \
     wake_at = excluded.wake_at, attempt = excluded.attempt, recorded_at = excluded.recorded_at";

/// Marks events taken by a wait.
const CONSUME_EVENTS: &str = "UPDATE run_events SET consumed_at = $3 \
     WHERE run_id = $1 AND name = ANY($2) AND consumed_at IS NULL";

/// Whether the lease of a running attempt still holds; the row stays locked to the commit, so
/// no end (a rescue, a cancel) can slip between the check and the write.
const LEASE_HELD: &str = "SELECT 1 FROM runs WHERE id = $1 AND state = 'running' \
     AND attempt = $2 AND lease_token = $3 FOR NO KEY UPDATE";

/// Records `entries` for the run (the caller checked the fence), in order: a `seq` given twice
/// keeps its last entry (one upsert may not touch a row twice).
pub(crate) async fn write_entries<C: GenericClient>(
    c: &C,
    run: &str,
    attempt: i64,
    entries: &[StepEntry],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut last: HashMap<i64, usize> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        last.insert(e.seq, i);
    }
    let mut keep: Vec<usize> = last.into_values().collect();
    keep.sort_unstable();
    let kept: Vec<&StepEntry> = keep.iter().map(|&i| &entries[i]).collect();
    let seq: Vec<i64> = kept.iter().map(|e| e.seq).collect();
    let name: Vec<&str> = kept.iter().map(|e| e.name.as_str()).collect();
    let kind: Vec<&str> = kept.iter().map(|e| e.kind.as_str()).collect();
    let status: Vec<&str> = kept.iter().map(|e| e.status.as_str()).collect();
    let output: Vec<Option<&str>> = kept.iter().map(|e| e.output.as_deref()).collect();
    let error: Vec<Option<&str>> = kept.iter().map(|e| e.error.as_deref()).collect();
    let wake_at: Vec<Option<String>> = kept.iter().map(|e| e.wake_at.map(ts)).collect();
    let now = ts(now);
    exec(
        c,
        UPSERT_STEPS,
        &[
            &run, &seq, &name, &kind, &status, &output, &error, &wake_at, &attempt, &now,
        ],
        "record steps",
    )
    .await?;
    let consumed: Vec<&str> = entries
        .iter()
        .filter_map(|e| e.consumes.as_deref())
        .collect();
    if !consumed.is_empty() {
        exec(
            c,
            CONSUME_EVENTS,
            &[&run, &consumed, &now],
            "consume events",
        )
        .await?;
    }
    Ok(())
}

/// Records a running attempt's steps while its lease holds; whether it did.
pub(crate) async fn save<C: GenericClient>(
    c: &C,
    s: &StepSave,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let held = query_opt(
        c,
        LEASE_HELD,
        &[&s.id.as_str(), &s.attempt, &s.token],
        "step fence",
    )
    .await?
    .is_some();
    if held {
        write_entries(c, s.id.as_str(), s.attempt, &s.entries, now).await?;
    }
    Ok(held)
}

/// A suspended event wait whose event is already stored is due at once.
const WAKE_IF_SENT: &str = "UPDATE runs SET run_at = LEAST(run_at, $3) \
     WHERE id = $1 AND state = 'queued' AND wait_kind = 'event' AND wait_event = $2 \
     AND EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = $1 AND e.name = $2)";

/// Makes the run due now if it waits for `event` and the event was stored (see
/// [`crate::store::Engine::event_send`]); whether it did.
pub(crate) async fn wake_if_sent<C: GenericClient>(
    c: &C,
    run: &str,
    event: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = exec(
        c,
        WAKE_IF_SENT,
        &[&run, &event, &ts(now)],
        "wake event wait",
    )
    .await?;
    Ok(n == 1)
}

fn step_from_row(row: &Row) -> Result<StepRecord, StoreError> {
    Ok(StepRecord {
        seq: get(row, 0)?,
        name: get(row, 1)?,
        kind: get::<&str>(row, 2)?.parse().unwrap_or(StepKind::Step),
        status: get::<&str>(row, 3)?.parse().unwrap_or(StepStatus::Failed),
        output: get::<Option<&str>>(row, 4)?.and_then(|o| serde_json::from_str(o).ok()),
        error: get(row, 5)?,
        wake_at: ts_opt(row, 6)?,
        attempt: get(row, 7)?,
        recorded_at: ts_req(row, 8)?,
    })
}

fn event_from_row(row: &Row) -> Result<RunEvent, StoreError> {
    Ok(RunEvent {
        name: get(row, 0)?,
        payload: serde_json::from_str(get::<&str>(row, 1)?).unwrap_or(serde_json::Value::Null),
        sent_at: ts_req(row, 2)?,
        sent_by: get(row, 3)?,
        consumed_at: ts_opt(row, 4)?,
    })
}

const EVENT_COLUMNS: &str = "name, payload, sent_at, sent_by, consumed_at";

/// A run's steps and events; the caller gives one snapshot for both (a read transaction).
pub(crate) async fn read<C: GenericClient>(c: &C, run: &str) -> Result<Journal, StoreError> {
    let steps = query(
        c,
        "SELECT seq, name, kind, status, output, error, wake_at, attempt, recorded_at \
         FROM step_records WHERE run_id = $1 ORDER BY seq",
        &[&run],
        "read steps",
    )
    .await?
    .iter()
    .map(step_from_row)
    .collect::<Result<Vec<_>, _>>()?;
    let events = query(
        c,
        &format!("SELECT {EVENT_COLUMNS} FROM run_events WHERE run_id = $1 ORDER BY sent_at, name"),
        &[&run],
        "read events",
    )
    .await?
    .iter()
    .map(event_from_row)
    .collect::<Result<Vec<_>, _>>()?;
    Ok(Journal { steps, events })
}

/// Delivers an event (see [`crate::store::Engine::event_send`]). The run's row is locked
/// first: a delivery and the run's suspension (which locks the row with its end) serialize, so
/// whichever commits second sees the other and the wait is never left asleep.
pub(crate) async fn send<C: GenericClient>(c: &C, e: &NewEvent) -> Result<EventSent, StoreError> {
    let run = e.run.as_str();
    let Some(row) = query_opt(
        c,
        "SELECT state FROM runs WHERE id = $1 FOR UPDATE",
        &[&run],
        "lock run",
    )
    .await?
    else {
        return Ok(EventSent::UnknownRun);
    };
    let state: RunState = get::<&str>(&row, 0)?.parse().unwrap_or(RunState::Failed);
    if state.is_final() {
        return Ok(EventSent::Finished(state));
    }
    let stored = exec(
        c,
        "INSERT INTO run_events (run_id, name, payload, sent_at, sent_by) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, name) DO NOTHING",
        &[&run, &e.name, &e.payload, &ts(e.now), &e.sent_by],
        "store event",
    )
    .await?;
    if stored == 0 {
        let first = query_one(
            c,
            &format!("SELECT {EVENT_COLUMNS} FROM run_events WHERE run_id = $1 AND name = $2"),
            &[&run, &e.name],
            "read event",
        )
        .await?;
        return Ok(EventSent::Duplicate(event_from_row(&first)?));
    }
    let woke = wake_if_sent(c, run, &e.name, e.now).await?;
    Ok(EventSent::Stored { woke })
}
