//! What a worker can run, and when: the next delayed run of its tools (to sleep until it),
//! whether anything of its tools is left (drain), and the queued runs of tools no live worker
//! has (`stats`, `status`).

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension};

use super::Ctx;
use super::codec::{parse_ts, ts};
use crate::error::StoreError;

/// The earliest delayed run of one tool due after `?2`: one seek into `runs_delayed_idx`,
/// whose condition (`run_at > created_at`) the query repeats so the planner can use it.
pub(crate) const NEXT_DELAYED: &str = "SELECT min(run_at) FROM runs INDEXED BY runs_delayed_idx \
    WHERE state = 'queued' AND run_at > created_at AND tool = ?1 AND run_at > ?2";

/// The earliest `run_at` after `now` of a queued run of one of `tools`: when a worker with
/// these tools next has something to claim. A run due at its creation is never in the future
/// (its `run_at` is its creation time), so only delayed runs are looked at.
pub fn next_due(
    conn: &Connection,
    now: DateTime<Utc>,
    tools: &[String],
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let now = ts(now);
    let mut stmt = conn
        .prepare_cached(NEXT_DELAYED)
        .ctx("prepare next delayed run")?;
    let mut earliest: Option<String> = None;
    for tool in tools {
        let at: Option<String> = stmt
            .query_row([tool, &now], |r| r.get(0))
            .ctx("next delayed run")?;
        if let Some(at) = at
            && earliest.as_ref().is_none_or(|e| at < *e)
        {
            earliest = Some(at);
        }
    }
    Ok(earliest.as_deref().and_then(parse_ts))
}

/// Whether a queued run of one of `tools` is due by `now` or waits for a retry (an earlier
/// attempt started): what a draining worker with these tools still waits for.
pub fn has_work_for(
    conn: &Connection,
    now: DateTime<Utc>,
    tools: &[String],
) -> Result<bool, StoreError> {
    let tools = serde_json::to_string(tools).map_err(|e| StoreError::Task(e.to_string()))?;
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE state = 'queued' AND (run_at <= ?1 OR attempt > 0) \
         AND tool IN (SELECT value FROM json_each(?2)))",
    )
    .ctx("prepare work check")?
    .query_row(rusqlite::params![ts(now), tools], |r| r.get(0))
    .ctx("work check")
}

/// Queued runs per tool, by tool name.
pub fn queued_by_tool(conn: &Connection) -> Result<Vec<(String, i64)>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT tool, count(*) FROM runs INDEXED BY runs_claimable_idx \
             WHERE state = 'queued' GROUP BY tool ORDER BY tool",
        )
        .ctx("prepare queued by tool")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .ctx("queued by tool")?;
    rows.collect::<Result<_, _>>().ctx("read queued by tool")
}

/// Enabled schedules that will fire again (a one-shot that fired has no next trigger).
pub fn enabled_schedules(conn: &Connection) -> Result<i64, StoreError> {
    conn.query_row(
        "SELECT count(*) FROM schedules WHERE enabled = 1 AND next_trigger_at IS NOT NULL",
        [],
        |r| r.get(0),
    )
    .optional()
    .ctx("count enabled schedules")
    .map(Option::unwrap_or_default)
}
