//! Column encodings: fixed-width UTC timestamps, JSON columns, and row-to-struct mapping.

use chrono::{DateTime, NaiveDateTime, Utc};
use rusqlite::Row;
use serde_json::Value;

use crate::ids::{RunId, ScheduleId};
use crate::run::{Delivery, Progress, Run, RunState};

const TS_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.3fZ";

/// Formats an instant as fixed-width UTC text: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn ts(t: DateTime<Utc>) -> String {
    // Same text as TS_FORMAT, without interpreting a format string on every call (hot path).
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Parses text written by [`ts`] (or any RFC 3339 instant).
pub fn parse_ts(s: &str) -> Option<DateTime<Utc>> {
    // The RFC 3339 parser is hand-written and fast; what ts() writes is RFC 3339.
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
        .or_else(|| {
            NaiveDateTime::parse_from_str(s, TS_FORMAT)
                .map(|n| n.and_utc())
                .ok()
        })
}

/// Reads an optional timestamp column.
pub(crate) fn ts_col(row: &Row<'_>, name: &str) -> rusqlite::Result<Option<DateTime<Utc>>> {
    let s: Option<String> = row.get(name)?;
    Ok(s.as_deref().and_then(parse_ts))
}

/// Reads a required timestamp column; bad text is a conversion error naming the column.
pub(crate) fn ts_req(row: &Row<'_>, name: &str) -> rusqlite::Result<DateTime<Utc>> {
    let s: String = row.get(name)?;
    parse_ts(&s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("column {name}: bad timestamp {s:?}").into(),
        )
    })
}

fn json_col(row: &Row<'_>, name: &str) -> rusqlite::Result<Value> {
    let s: Option<String> = row.get(name)?;
    Ok(s.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null))
}

/// The column list that [`run_from_row`] reads, for `SELECT {RUN_COLUMNS} FROM runs`.
pub const RUN_COLUMNS: &str = "id, session_id, tool, args, title, state, priority, attempt, max_attempts, \
    run_at, created_at, started_at, finished_at, lease_owner, lease_token, lease_expires_at, heartbeat_at, \
    idempotency_key, timeout_ms, signal_on_completion, delivery, schedule_id, fire_at, ticks, status_text, \
    progress, output_tail, error, internal_error, errors, operation_id, stages, approval_state, \
    approval_deadline, approval_by, approval_at, approval_note, cancel_requested_at";

/// Maps a row selected with [`RUN_COLUMNS`] to a [`Run`].
pub fn run_from_row(row: &Row<'_>) -> rusqlite::Result<Run> {
    let state: String = row.get("state")?;
    let delivery: String = row.get("delivery")?;
    let progress = json_col(row, "progress")?;
    Ok(Run {
        id: RunId::from_db(row.get("id")?),
        session_id: row.get("session_id")?,
        tool: row.get("tool")?,
        args: json_col(row, "args")?,
        title: row.get("title")?,
        state: state.parse().unwrap_or(RunState::Failed),
        priority: row.get("priority")?,
        attempt: row.get("attempt")?,
        max_attempts: row.get("max_attempts")?,
        run_at: ts_req(row, "run_at")?,
        created_at: ts_req(row, "created_at")?,
        started_at: ts_col(row, "started_at")?,
        finished_at: ts_col(row, "finished_at")?,
        lease_owner: row.get("lease_owner")?,
        lease_token: row.get("lease_token")?,
        lease_expires_at: ts_col(row, "lease_expires_at")?,
        heartbeat_at: ts_col(row, "heartbeat_at")?,
        idempotency_key: row.get("idempotency_key")?,
        timeout_ms: row.get("timeout_ms")?,
        signal_on_completion: row.get::<_, i64>("signal_on_completion")? != 0,
        delivery: delivery.parse().unwrap_or_default(),
        schedule_id: row
            .get::<_, Option<String>>("schedule_id")?
            .map(ScheduleId::from_db),
        fire_at: ts_col(row, "fire_at")?,
        ticks: row.get("ticks")?,
        status_text: row.get("status_text")?,
        progress: serde_json::from_value::<Progress>(progress).ok(),
        output_tail: row.get("output_tail")?,
        error: row.get("error")?,
        internal_error: row.get("internal_error")?,
        errors: json_col(row, "errors")?,
        operation_id: row.get("operation_id")?,
        stages: json_col(row, "stages")?,
        approval_state: row.get("approval_state")?,
        approval_deadline: ts_col(row, "approval_deadline")?,
        approval_by: row.get("approval_by")?,
        approval_at: ts_col(row, "approval_at")?,
        approval_note: row.get("approval_note")?,
        cancel_requested_at: ts_col(row, "cancel_requested_at")?,
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
        assert_eq!(ts(early), early.format(TS_FORMAT).to_string());
        let odd = t + chrono::Duration::nanoseconds(123_999_999);
        assert_eq!(ts(odd), odd.format(TS_FORMAT).to_string());
    }
}
