//! Column encodings: fixed-width UTC timestamps, JSON columns, and row-to-struct mapping.

use chrono::{DateTime, Utc};
use rusqlite::Row;
use serde_json::Value;

use crate::ids::{RunId, ScheduleId};
use crate::run::{Delivery, Progress, Run, RunState};

pub use crate::clock::{parse_ts, ts};
pub use crate::store::codec::{RUN_COLUMNS, col};

/// Reads an optional timestamp column.
pub(crate) fn ts_col<I: rusqlite::RowIndex>(
    row: &Row<'_>,
    idx: I,
) -> rusqlite::Result<Option<DateTime<Utc>>> {
    let s: Option<String> = row.get(idx)?;
    Ok(s.as_deref().and_then(parse_ts))
}

/// Reads a required timestamp column; bad text is a conversion error naming the column.
pub(crate) fn ts_req<I: rusqlite::RowIndex + std::fmt::Debug + Copy>(
    row: &Row<'_>,
    idx: I,
) -> rusqlite::Result<DateTime<Utc>> {
    let s: String = row.get(idx)?;
    parse_ts(&s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("column {idx:?}: bad timestamp {s:?}").into(),
        )
    })
}

fn json_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<Value> {
    // Borrowed text: no String per column; the common empty history skips the parser.
    Ok(match row.get_ref(idx)? {
        rusqlite::types::ValueRef::Text(b"[]") => Value::Array(Vec::new()),
        rusqlite::types::ValueRef::Text(b) => serde_json::from_slice(b).unwrap_or(Value::Null),
        _ => Value::Null,
    })
}

/// A text column parsed with `FromStr`, read without copying it into a `String`; `None` when
/// it is not text or does not parse.
fn parsed_text<T: std::str::FromStr>(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<T>> {
    Ok(match row.get_ref(idx)? {
        rusqlite::types::ValueRef::Text(b) => {
            std::str::from_utf8(b).ok().and_then(|s| s.parse().ok())
        }
        _ => None,
    })
}

/// Maps a row whose select list starts with [`RUN_COLUMNS`] to a [`Run`].
pub fn run_from_row(row: &Row<'_>) -> rusqlite::Result<Run> {
    use col::*;
    let state = parsed_text(row, STATE)?.unwrap_or(RunState::Failed);
    let delivery: Delivery = parsed_text(row, DELIVERY)?.unwrap_or_default();
    Ok(Run {
        id: RunId::from_db(row.get(ID)?),
        session_id: row.get(SESSION_ID)?,
        tool: row.get(TOOL)?,
        args: json_col(row, ARGS)?,
        title: row.get(TITLE)?,
        state,
        priority: row.get(PRIORITY)?,
        attempt: row.get(ATTEMPT)?,
        max_attempts: row.get(MAX_ATTEMPTS)?,
        run_at: ts_req(row, RUN_AT)?,
        created_at: ts_req(row, CREATED_AT)?,
        started_at: ts_col(row, STARTED_AT)?,
        finished_at: ts_col(row, FINISHED_AT)?,
        lease_owner: row.get(LEASE_OWNER)?,
        lease_token: row.get(LEASE_TOKEN)?,
        lease_expires_at: ts_col(row, LEASE_EXPIRES_AT)?,
        heartbeat_at: ts_col(row, HEARTBEAT_AT)?,
        idempotency_key: row.get(IDEMPOTENCY_KEY)?,
        timeout_ms: row.get(TIMEOUT_MS)?,
        signal_on_completion: row.get::<_, i64>(SIGNAL_ON_COMPLETION)? != 0,
        delivery,
        schedule_id: row
            .get::<_, Option<String>>(SCHEDULE_ID)?
            .map(ScheduleId::from_db),
        fire_at: ts_col(row, FIRE_AT)?,
        ticks: row.get(TICKS)?,
        status_text: row.get(STATUS_TEXT)?,
        progress: progress_col(row, PROGRESS)?,
        output_tail: row.get(OUTPUT_TAIL)?,
        error: row.get(ERROR)?,
        internal_error: row.get(INTERNAL_ERROR)?,
        errors: json_col(row, ERRORS)?,
        operation_id: row.get(OPERATION_ID)?,
        stages: json_col(row, STAGES)?,
        approval_state: row.get(APPROVAL_STATE)?,
        approval_deadline: ts_col(row, APPROVAL_DEADLINE)?,
        approval_by: row.get(APPROVAL_BY)?,
        approval_at: ts_col(row, APPROVAL_AT)?,
        approval_note: row.get(APPROVAL_NOTE)?,
        cancel_requested_at: ts_col(row, CANCEL_REQUESTED_AT)?,
        background: row.get::<_, i64>(BACKGROUND)? != 0,
        resumed: state == RunState::Running
            && row.get_ref(WAIT_KIND)? != rusqlite::types::ValueRef::Null,
        waiting: crate::store::codec::waiting(
            state,
            row.get::<_, Option<String>>(WAIT_KIND)?.as_deref(),
            row.get(WAIT_EVENT)?,
            ts_req(row, RUN_AT)?,
        ),
        snoozes: row.get(SNOOZES)?,
        batch_id: row
            .get::<_, Option<String>>(BATCH_ID)?
            .map(crate::ids::BatchId::from_db),
        parent_run_id: row
            .get::<_, Option<String>>(PARENT_RUN_ID)?
            .map(RunId::from_db),
        deps_pending: row.get(DEPS_PENDING)?,
        // Borrowed text, and no parse at all for the common untagged run.
        tags: match row.get_ref(TAGS)? {
            rusqlite::types::ValueRef::Text(b) => crate::run::Tags::from_json_bytes(b),
            _ => crate::run::Tags::new(),
        },
        traceparent: row.get(TRACEPARENT)?,
    })
}

/// The progress column, parsed from borrowed text; `None` when empty or unreadable.
fn progress_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Progress>> {
    Ok(match row.get_ref(idx)? {
        rusqlite::types::ValueRef::Text(b) => serde_json::from_slice::<Progress>(b).ok(),
        _ => None,
    })
}

/// Stored text for a delivery mode.
pub fn delivery(d: Delivery) -> &'static str {
    d.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_fixed_width_and_round_trip() {
        let t = DateTime::parse_from_rfc3339("2026-03-08T08:00:00.5+00:00")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(ts(t), "2026-03-08T08:00:00.500Z");
        assert_eq!(parse_ts(&ts(t)), Some(t));
        let early = DateTime::parse_from_rfc3339("0999-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(ts(early).len(), ts(t).len());
        assert_eq!(ts(early), early.format(crate::clock::TS_FORMAT).to_string());
        let odd = t + chrono::Duration::nanoseconds(123_999_999);
        assert_eq!(ts(odd), odd.format(crate::clock::TS_FORMAT).to_string());
    }
}
