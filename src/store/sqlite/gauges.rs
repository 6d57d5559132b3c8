//! Figures read at scrape time for metrics: queue depth by session and tool, schedule lag.

use chrono::{DateTime, Utc};
use rusqlite::Connection;

use super::Ctx;
use super::codec::{parse_ts, ts};
use crate::error::StoreError;
use crate::store::QueueDepth;

/// Unfinished runs by session and tool (the `queue_depth` view).
pub fn queue_depth(conn: &Connection) -> Result<Vec<QueueDepth>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT session_id, tool, queued, awaiting_approval, running FROM queue_depth \
             ORDER BY session_id, tool",
        )
        .ctx("prepare queue depth")?;
    let rows = stmt
        .query_map([], |r| {
            Ok(QueueDepth {
                session_id: r.get(0)?,
                tool: r.get(1)?,
                queued: r.get(2)?,
                awaiting_approval: r.get(3)?,
                running: r.get(4)?,
            })
        })
        .ctx("queue depth")?;
    rows.collect::<Result<_, _>>().ctx("read queue depth")
}

/// How late the most overdue enabled schedule is: `now` minus the oldest `next_trigger_at`
/// that is already due, in seconds; 0 when nothing is due.
pub fn schedule_lag_secs(conn: &Connection, now: DateTime<Utc>) -> Result<f64, StoreError> {
    let oldest: Option<String> = conn
        .prepare_cached(
            "SELECT min(next_trigger_at) FROM schedules \
             WHERE enabled = 1 AND next_trigger_at IS NOT NULL AND next_trigger_at <= :now",
        )
        .ctx("prepare schedule lag")?
        .query_row(rusqlite::named_params! {":now": ts(now)}, |r| r.get(0))
        .ctx("schedule lag")?;
    Ok(oldest
        .as_deref()
        .and_then(parse_ts)
        .map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0))
}

/// Runs not finished yet (queued, awaiting approval, running).
pub fn unfinished(conn: &Connection) -> Result<i64, StoreError> {
    conn.prepare_cached(
        // One state at a time, so each count reads its partial index.
        "SELECT (SELECT count(*) FROM runs WHERE state = 'queued') \
         + (SELECT count(*) FROM runs WHERE state = 'awaiting_approval') \
         + (SELECT count(*) FROM runs WHERE state = 'running')",
    )
    .ctx("prepare unfinished count")?
    .query_row([], |r| r.get(0))
    .ctx("unfinished count")
}
