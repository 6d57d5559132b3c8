//! Rows to values: the same column list and encodings as the SQLite engine (fixed-width UTC
//! text timestamps, JSON text, 0/1 flags), read from Postgres rows.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;

use super::get;
use crate::clock::parse_ts;
use crate::error::StoreError;
use crate::ids::{RunId, ScheduleId};
use crate::run::{Progress, Run, RunState};

pub(crate) use crate::store::codec::RUN_COLUMNS;

/// An optional timestamp column.
pub(crate) fn ts_opt(row: &Row, idx: usize) -> Result<Option<DateTime<Utc>>, StoreError> {
    Ok(get::<Option<String>>(row, idx)?
        .as_deref()
        .and_then(parse_ts))
}

/// A required timestamp column; bad text is an error naming the column.
pub(crate) fn ts_req(row: &Row, idx: usize) -> Result<DateTime<Utc>, StoreError> {
    let s: String = get(row, idx)?;
    parse_ts(&s).ok_or_else(|| StoreError::Invalid(format!("column {idx}: bad timestamp {s:?}")))
}

fn json(row: &Row, idx: usize) -> Result<Value, StoreError> {
    Ok(match get::<Option<&str>>(row, idx)? {
        Some("[]") => Value::Array(Vec::new()),
        Some(s) => serde_json::from_str(s).unwrap_or(Value::Null),
        None => Value::Null,
    })
}

/// Maps a row whose select list starts with [`RUN_COLUMNS`] to a [`Run`].
pub(crate) fn run_from_row(row: &Row) -> Result<Run, StoreError> {
    use crate::store::codec::col::*;
    let state = get::<&str>(row, STATE)?
        .parse::<RunState>()
        .unwrap_or(RunState::Failed);
    Ok(Run {
        id: RunId::from_db(get(row, ID)?),
        session_id: get(row, SESSION_ID)?,
        tool: get(row, TOOL)?,
        args: json(row, ARGS)?,
        title: get(row, TITLE)?,
        state,
        priority: get(row, PRIORITY)?,
        attempt: get(row, ATTEMPT)?,
        max_attempts: get(row, MAX_ATTEMPTS)?,
        run_at: ts_req(row, RUN_AT)?,
        created_at: ts_req(row, CREATED_AT)?,
        started_at: ts_opt(row, STARTED_AT)?,
        finished_at: ts_opt(row, FINISHED_AT)?,
        lease_owner: get(row, LEASE_OWNER)?,
        lease_token: get(row, LEASE_TOKEN)?,
        lease_expires_at: ts_opt(row, LEASE_EXPIRES_AT)?,
        heartbeat_at: ts_opt(row, HEARTBEAT_AT)?,
        idempotency_key: get(row, IDEMPOTENCY_KEY)?,
        timeout_ms: get(row, TIMEOUT_MS)?,
        signal_on_completion: get::<i64>(row, SIGNAL_ON_COMPLETION)? != 0,
        delivery: get::<&str>(row, DELIVERY)?.parse().unwrap_or_default(),
        schedule_id: get::<Option<String>>(row, SCHEDULE_ID)?.map(ScheduleId::from_db),
        fire_at: ts_opt(row, FIRE_AT)?,
        ticks: get(row, TICKS)?,
        status_text: get(row, STATUS_TEXT)?,
        progress: get::<Option<&str>>(row, PROGRESS)?
            .and_then(|s| serde_json::from_str::<Progress>(s).ok()),
        output_tail: get(row, OUTPUT_TAIL)?,
        error: get(row, ERROR)?,
        internal_error: get(row, INTERNAL_ERROR)?,
        errors: json(row, ERRORS)?,
        operation_id: get(row, OPERATION_ID)?,
        stages: json(row, STAGES)?,
        approval_state: get(row, APPROVAL_STATE)?,
        approval_deadline: ts_opt(row, APPROVAL_DEADLINE)?,
        approval_by: get(row, APPROVAL_BY)?,
        approval_at: ts_opt(row, APPROVAL_AT)?,
        approval_note: get(row, APPROVAL_NOTE)?,
        cancel_requested_at: ts_opt(row, CANCEL_REQUESTED_AT)?,
        background: get::<i64>(row, BACKGROUND)? != 0,
        resumed: state == RunState::Running && get::<Option<&str>>(row, WAIT_KIND)?.is_some(),
        waiting: crate::store::codec::waiting(
            state,
            get::<Option<&str>>(row, WAIT_KIND)?,
            get(row, WAIT_EVENT)?,
            ts_req(row, RUN_AT)?,
        ),
        snoozes: get(row, SNOOZES)?,
        batch_id: get::<Option<String>>(row, BATCH_ID)?.map(crate::ids::BatchId::from_db),
        parent_run_id: get::<Option<String>>(row, PARENT_RUN_ID)?.map(RunId::from_db),
        deps_pending: get(row, DEPS_PENDING)?,
        tags: crate::run::Tags::from_json(get::<Option<&str>>(row, TAGS)?),
        traceparent: get(row, TRACEPARENT)?,
    })
}

/// Maps every row.
pub(crate) fn runs_from_rows(rows: &[Row]) -> Result<Vec<Run>, StoreError> {
    rows.iter().map(run_from_row).collect()
}
