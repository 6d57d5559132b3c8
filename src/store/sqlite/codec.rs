//! Column encodings: fixed-width UTC timestamps, JSON columns, and row-to-struct mapping.

use chrono::{DateTime, Utc};
use rusqlite::Row;
use serde_json::Value;

use crate::ids::{RunId, ScheduleId};
use crate::run::{Delivery, Progress, Run, RunState};

pub use crate::clock::{parse_ts, ts};

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

/// The column list that [`run_from_row`] reads, for `SELECT {RUN_COLUMNS} FROM runs`. It must
/// come first in the select list: [`run_from_row`] reads by position (the [`col`] constants).
pub const RUN_COLUMNS: &str = "id, session_id, tool, args, title, state, priority, attempt, max_attempts, \
    run_at, created_at, started_at, finished_at, lease_owner, lease_token, lease_expires_at, heartbeat_at, \
    idempotency_key, timeout_ms, signal_on_completion, delivery, schedule_id, fire_at, ticks, status_text, \
    progress, output_tail, error, internal_error, errors, operation_id, stages, approval_state, \
    approval_deadline, approval_by, approval_at, approval_note, cancel_requested_at, background";

/// Positions of [`RUN_COLUMNS`]: reading by position instead of by name saves a scan of the
/// column names per value (a third of the cost of decoding a claimed run).
#[allow(missing_docs)]
pub mod col {
    pub const ID: usize = 0;
    pub const SESSION_ID: usize = 1;
    pub const TOOL: usize = 2;
    pub const ARGS: usize = 3;
    pub const TITLE: usize = 4;
    pub const STATE: usize = 5;
    pub const PRIORITY: usize = 6;
    pub const ATTEMPT: usize = 7;
    pub const MAX_ATTEMPTS: usize = 8;
    pub const RUN_AT: usize = 9;
    pub const CREATED_AT: usize = 10;
    pub const STARTED_AT: usize = 11;
    pub const FINISHED_AT: usize = 12;
    pub const LEASE_OWNER: usize = 13;
    pub const LEASE_TOKEN: usize = 14;
    pub const LEASE_EXPIRES_AT: usize = 15;
    pub const HEARTBEAT_AT: usize = 16;
    pub const IDEMPOTENCY_KEY: usize = 17;
    pub const TIMEOUT_MS: usize = 18;
    pub const SIGNAL_ON_COMPLETION: usize = 19;
    pub const DELIVERY: usize = 20;
    pub const SCHEDULE_ID: usize = 21;
    pub const FIRE_AT: usize = 22;
    pub const TICKS: usize = 23;
    pub const STATUS_TEXT: usize = 24;
    pub const PROGRESS: usize = 25;
    pub const OUTPUT_TAIL: usize = 26;
    pub const ERROR: usize = 27;
    pub const INTERNAL_ERROR: usize = 28;
    pub const ERRORS: usize = 29;
    pub const OPERATION_ID: usize = 30;
    pub const STAGES: usize = 31;
    pub const APPROVAL_STATE: usize = 32;
    pub const APPROVAL_DEADLINE: usize = 33;
    pub const APPROVAL_BY: usize = 34;
    pub const APPROVAL_AT: usize = 35;
    pub const APPROVAL_NOTE: usize = 36;
    pub const CANCEL_REQUESTED_AT: usize = 37;
    pub const BACKGROUND: usize = 38;
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
    let progress = match row.get_ref(PROGRESS)? {
        rusqlite::types::ValueRef::Text(b) => serde_json::from_slice::<Progress>(b).ok(),
        _ => None,
    };
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
        progress,
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
    fn column_positions_match_the_column_list() {
        use col::*;
        let names: Vec<&str> = RUN_COLUMNS.split(',').map(str::trim).collect();
        let expect = [
            (ID, "id"),
            (SESSION_ID, "session_id"),
            (TOOL, "tool"),
            (ARGS, "args"),
            (TITLE, "title"),
            (STATE, "state"),
            (PRIORITY, "priority"),
            (ATTEMPT, "attempt"),
            (MAX_ATTEMPTS, "max_attempts"),
            (RUN_AT, "run_at"),
            (CREATED_AT, "created_at"),
            (STARTED_AT, "started_at"),
            (FINISHED_AT, "finished_at"),
            (LEASE_OWNER, "lease_owner"),
            (LEASE_TOKEN, "lease_token"),
            (LEASE_EXPIRES_AT, "lease_expires_at"),
            (HEARTBEAT_AT, "heartbeat_at"),
            (IDEMPOTENCY_KEY, "idempotency_key"),
            (TIMEOUT_MS, "timeout_ms"),
            (SIGNAL_ON_COMPLETION, "signal_on_completion"),
            (DELIVERY, "delivery"),
            (SCHEDULE_ID, "schedule_id"),
            (FIRE_AT, "fire_at"),
            (TICKS, "ticks"),
            (STATUS_TEXT, "status_text"),
            (PROGRESS, "progress"),
            (OUTPUT_TAIL, "output_tail"),
            (ERROR, "error"),
            (INTERNAL_ERROR, "internal_error"),
            (ERRORS, "errors"),
            (OPERATION_ID, "operation_id"),
            (STAGES, "stages"),
            (APPROVAL_STATE, "approval_state"),
            (APPROVAL_DEADLINE, "approval_deadline"),
            (APPROVAL_BY, "approval_by"),
            (APPROVAL_AT, "approval_at"),
            (APPROVAL_NOTE, "approval_note"),
            (CANCEL_REQUESTED_AT, "cancel_requested_at"),
            (BACKGROUND, "background"),
        ];
        assert_eq!(names.len(), expect.len());
        for (i, name) in expect {
            assert_eq!(names[i], name, "position {i}");
        }
    }

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
