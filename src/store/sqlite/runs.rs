//! The `runs` table: insert (idempotent), claim, heartbeat, progress, finish, cancel, list.
//! Every state change names the state it expects, and writes after a claim are fenced by
//! (id, attempt, lease_token).

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Transaction, named_params};

use super::Ctx;
use super::codec::{RUN_COLUMNS, run_from_row, ts};
use crate::error::StoreError;
use crate::ids::RunId;
use crate::run::ListFilter;
use crate::run::{Run, RunState};

mod background;
mod insert;

pub use background::*;
pub use insert::*;

/// Reads one run.
pub fn get(conn: &rusqlite::Connection, id: &str) -> Result<Option<Run>, StoreError> {
    conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))
        .ctx("prepare get run")?
        .query_row([id], run_from_row)
        .optional()
        .ctx("get run")
}

/// Lists runs, newest first.
pub fn list(conn: &rusqlite::Connection, f: &ListFilter) -> Result<Vec<Run>, StoreError> {
    // A batch's or a parent's runs are read through their own index (ids sort by creation).
    let (from, order) = match (&f.batch_id, &f.parent_run_id) {
        // Tagged runs: walked from `run_tags_tag_idx` (tag, run_id), newest id first, each
        // run read by its key; further tags and the other filters test each one.
        _ if !f.tags.is_empty() => (
            "run_tags t INDEXED BY run_tags_tag_idx CROSS JOIN runs ON runs.id = t.run_id \
             WHERE t.tag = :tag0 AND (:batch IS NULL OR batch_id = :batch) \
             AND (:parent IS NULL OR parent_run_id = :parent)",
            "t.run_id DESC",
        ),
        (Some(_), _) => (
            "runs INDEXED BY runs_batch_idx WHERE batch_id = :batch AND (:parent IS NULL OR parent_run_id = :parent)",
            "id DESC",
        ),
        (None, Some(_)) => (
            "runs INDEXED BY runs_parent_idx WHERE parent_run_id = :parent AND :batch IS NULL",
            "id DESC",
        ),
        (None, None) => (
            "runs WHERE :batch IS NULL AND :parent IS NULL",
            "created_at DESC, id DESC",
        ),
    };
    let tags: Vec<String> = f.tags.rows().collect();
    let names: Vec<String> = (0..tags.len()).map(|i| format!(":tag{i}")).collect();
    let more_tags: String = names
        .iter()
        .skip(1)
        .map(|n| format!(" AND EXISTS (SELECT 1 FROM run_tags m WHERE m.run_id = runs.id AND m.tag = {n})"))
        .collect();
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM {from} AND (:state IS NULL OR state = :state) \
         AND (:session IS NULL OR session_id = :session) AND (:tool IS NULL OR tool = :tool) \
         AND (:schedule IS NULL OR schedule_id = :schedule){more_tags} ORDER BY {order} LIMIT :limit"
    );
    let mut stmt = conn.prepare_cached(&sql).ctx("prepare list runs")?;
    let state = f.state.map(|s| s.as_str());
    let mut params: Vec<(&str, &dyn rusqlite::ToSql)> = vec![
        (":state", &state),
        (":session", &f.session),
        (":tool", &f.tool),
        (":schedule", &f.schedule_id),
        (":batch", &f.batch_id),
        (":parent", &f.parent_run_id),
        (":limit", &f.limit),
    ];
    params.extend(
        names
            .iter()
            .zip(&tags)
            .map(|(n, t)| (n.as_str(), t as &dyn rusqlite::ToSql)),
    );
    let rows = stmt.query_map(&*params, run_from_row).ctx("list runs")?;
    rows.collect::<Result<_, _>>().ctx("read runs")
}

/// Count of runs in each state.
pub fn count_by_state(conn: &rusqlite::Connection) -> Result<Vec<(String, i64)>, StoreError> {
    let mut stmt = conn
        // One state at a time, each from its (partial) index instead of a scan of the table.
        .prepare_cached(
            "SELECT state, n FROM ( \
               SELECT 'queued' AS state, count(*) AS n FROM runs WHERE state = 'queued' \
               UNION ALL SELECT 'awaiting_approval', count(*) FROM runs WHERE state = 'awaiting_approval' \
               UNION ALL SELECT 'running', count(*) FROM runs WHERE state = 'running' \
               UNION ALL SELECT 'completed', count(*) FROM runs WHERE state = 'completed' \
               UNION ALL SELECT 'failed', count(*) FROM runs WHERE state = 'failed' \
               UNION ALL SELECT 'cancelled', count(*) FROM runs WHERE state = 'cancelled') \
             WHERE n > 0 ORDER BY state",
        )
        .ctx("prepare count runs")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .ctx("count runs")?;
    rows.collect::<Result<_, _>>().ctx("read counts")
}

/// Queued runs that are suspended (`wait_kind` set): `stats`.
pub fn count_waiting(conn: &rusqlite::Connection) -> Result<i64, StoreError> {
    conn.query_row(
        "SELECT count(*) FROM runs WHERE state = 'queued' AND wait_kind IS NOT NULL",
        [],
        |r| r.get(0),
    )
    .ctx("count waiting runs")
}

/// The oldest runnable queued run's `run_at`.
pub fn oldest_queued(
    conn: &rusqlite::Connection,
    now: DateTime<Utc>,
) -> Result<Option<String>, StoreError> {
    conn.query_row(
        "SELECT min(run_at) FROM runs WHERE state = 'queued' AND run_at <= ?1",
        [ts(now)],
        |r| r.get(0),
    )
    .ctx("oldest queued run")
}

/// Whether anything is queued and due by `now`, or running, or awaiting approval.
pub fn has_unfinished(
    conn: &rusqlite::Connection,
    now: DateTime<Utc>,
) -> Result<(bool, bool), StoreError> {
    let runnable: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE state = 'queued' AND run_at <= ?1)",
        )
        .ctx("prepare runnable check")?
        .query_row([ts(now)], |r| r.get(0))
        .ctx("runnable check")?;
    let running: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE state = 'running')")
        .ctx("prepare running check")?
        .query_row([], |r| r.get(0))
        .ctx("running check")?;
    Ok((runnable, running))
}

/// Asks a running run to stop; its worker notices at its next heartbeat.
pub fn request_cancel(
    tx: &Transaction<'_>,
    id: &RunId,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE runs SET cancel_requested_at = coalesce(cancel_requested_at, :now) \
             WHERE id = :id AND state = 'running'",
        )
        .ctx("prepare request cancel")?
        .execute(named_params! {":now": ts(now), ":id": id.as_str()})
        .ctx("request cancel")?;
    Ok(n == 1)
}

/// Puts a failed or cancelled run back in the queue as a new attempt (one more allowed).
pub fn requeue_finished(
    tx: &Transaction<'_>,
    id: &RunId,
    expected: RunState,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE runs SET state = 'queued', run_at = :now, finished_at = NULL, error = NULL, \
             internal_error = NULL, cancel_requested_at = NULL, status_text = NULL, progress = NULL, \
             max_attempts = max(max_attempts, attempt + 1) WHERE id = :id AND state = :expected",
        )
        .ctx("prepare retry")?
        .execute(named_params! {":now": ts(now), ":id": id.as_str(), ":expected": expected.as_str()})
        .ctx("retry run")?;
    Ok(n == 1)
}

/// Sets the fields every final or retried attempt writes; fenced by the lease.
pub(crate) fn guard_sql(set: &str) -> String {
    format!(
        "UPDATE runs SET {set} WHERE id = :id AND state = 'running' AND attempt = :attempt \
         AND lease_token = :token"
    )
}

/// Active (queued, awaiting_approval, running) runs of a session, not counting `except`
/// (spawn_background's own run).
pub fn count_active_in_session(
    conn: &rusqlite::Connection,
    session: &str,
    except: Option<&str>,
) -> Result<i64, StoreError> {
    // One partial index per state, so the cost does not grow with the session's finished runs.
    conn.prepare_cached(
        "SELECT (SELECT count(*) FROM runs INDEXED BY runs_claimable_idx \
           WHERE session_id = :session AND state = 'queued' AND id <> coalesce(:except, '')) \
         + (SELECT count(*) FROM runs INDEXED BY runs_running_owner_idx \
           WHERE session_id = :session AND state = 'running' AND id <> coalesce(:except, '')) \
         + (SELECT count(*) FROM runs INDEXED BY runs_awaiting_deadline_idx \
           WHERE session_id = :session AND state = 'awaiting_approval')",
    )
    .ctx("prepare count active runs")?
    .query_row(
        named_params! {":session": session, ":except": except},
        |r| r.get(0),
    )
    .ctx("count active runs")
}
