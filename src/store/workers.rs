//! The `workers` table: one row per worker process, heartbeated, for ops and for rescue.

use chrono::{DateTime, Utc};
use rusqlite::{Transaction, named_params};
use serde::Serialize;

use super::Ctx;
use super::codec::ts;
use crate::error::StoreError;

/// Identity of a worker process.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerRow {
    /// Worker id.
    pub id: String,
    /// Host name.
    pub host: String,
    /// Kernel boot id.
    pub boot_id: String,
    /// Pid namespace: pids are only comparable within one.
    pub pid_namespace: String,
    /// Process id.
    pub pid: i64,
    /// Process start time (from /proc), to tell a reused pid apart.
    pub process_start_time: String,
    /// When it started.
    pub started_at: String,
    /// Last heartbeat.
    pub heartbeat_at: String,
    /// Last claim poll.
    pub last_poll_at: Option<String>,
    /// Set on a clean exit, or when another worker found the process dead.
    pub stopped_at: Option<String>,
    /// Why it stopped: `exited` (clean exit) or `died` (found dead by another worker).
    pub stop_reason: Option<String>,
    /// Its concurrency limit.
    pub concurrency: i64,
    /// Its claim loop's poll interval, in milliseconds.
    pub poll_interval_ms: i64,
    /// Its heartbeat interval, in milliseconds.
    pub heartbeat_interval_ms: i64,
    /// Its lease length, in milliseconds.
    pub lease_ms: i64,
    /// SQLITE_BUSY retries it needed.
    pub busy_retries: i64,
    /// toolq version.
    pub version: String,
    /// The tools it has registered, sorted: it claims runs of these only (empty for a row
    /// written before schema version 5).
    pub tools: Vec<String>,
}

/// Registers a worker process.
pub fn register(tx: &Transaction<'_>, w: &WorkerRow) -> Result<(), StoreError> {
    let tools = serde_json::to_string(&w.tools).map_err(|e| StoreError::Task(e.to_string()))?;
    tx.prepare_cached(
        "INSERT INTO workers (id, host, boot_id, pid_namespace, pid, process_start_time, started_at, heartbeat_at, \
         concurrency, poll_interval_ms, heartbeat_interval_ms, lease_ms, version, tools) \
         VALUES (:id, :host, :boot, :pidns, :pid, :pst, :started, :hb, :conc, :poll, :hbi, :lease, :version, :tools)",
    )
    .ctx("prepare register worker")?
    .execute(named_params! {
        ":id": w.id, ":host": w.host, ":boot": w.boot_id, ":pidns": w.pid_namespace, ":pid": w.pid, ":pst": w.process_start_time,
        ":started": w.started_at, ":hb": w.heartbeat_at, ":conc": w.concurrency,
        ":poll": w.poll_interval_ms, ":hbi": w.heartbeat_interval_ms, ":lease": w.lease_ms, ":version": w.version,
        ":tools": tools,
    })
    .ctx("register worker")?;
    Ok(())
}

/// Heartbeats a worker, recording its last poll and busy-retry count.
pub fn heartbeat(
    tx: &Transaction<'_>,
    id: &str,
    now: DateTime<Utc>,
    last_poll: Option<DateTime<Utc>>,
    busy_retries: u64,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "UPDATE workers SET heartbeat_at = :now, last_poll_at = coalesce(:poll, last_poll_at), \
         busy_retries = :busy WHERE id = :id",
    )
    .ctx("prepare worker heartbeat")?
    .execute(named_params! {":now": ts(now), ":poll": last_poll.map(ts), ":busy": busy_retries as i64, ":id": id})
    .ctx("worker heartbeat")?;
    Ok(())
}

/// Marks a worker as cleanly stopped, with its final busy-retry count.
pub fn deregister(
    tx: &Transaction<'_>,
    id: &str,
    now: DateTime<Utc>,
    busy_retries: u64,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "UPDATE workers SET stopped_at = coalesce(stopped_at, :now), \
         stop_reason = coalesce(stop_reason, 'exited'), busy_retries = :busy WHERE id = :id",
    )
    .ctx("prepare deregister")?
    .execute(named_params! {":now": ts(now), ":id": id, ":busy": busy_retries as i64})
    .ctx("deregister worker")?;
    Ok(())
}

/// Lists workers, live ones first, newest first.
pub fn list(
    conn: &rusqlite::Connection,
    include_stopped: bool,
) -> Result<Vec<WorkerRow>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, host, boot_id, pid_namespace, pid, process_start_time, started_at, heartbeat_at, last_poll_at, \
             stopped_at, stop_reason, concurrency, poll_interval_ms, heartbeat_interval_ms, lease_ms, \
             busy_retries, version, tools FROM workers \
             WHERE (:all = 1 OR stopped_at IS NULL) ORDER BY stopped_at IS NOT NULL, started_at DESC",
        )
        .ctx("prepare list workers")?;
    let rows = stmt
        .query_map(named_params! {":all": include_stopped as i64}, |r| {
            Ok(WorkerRow {
                id: r.get(0)?,
                host: r.get(1)?,
                boot_id: r.get(2)?,
                pid_namespace: r.get(3)?,
                pid: r.get(4)?,
                process_start_time: r.get(5)?,
                started_at: r.get(6)?,
                heartbeat_at: r.get(7)?,
                last_poll_at: r.get(8)?,
                stopped_at: r.get(9)?,
                stop_reason: r.get(10)?,
                concurrency: r.get(11)?,
                poll_interval_ms: r.get(12)?,
                heartbeat_interval_ms: r.get(13)?,
                lease_ms: r.get(14)?,
                busy_retries: r.get(15)?,
                version: r.get(16)?,
                tools: tool_list(&r.get::<_, String>(17)?),
            })
        })
        .ctx("list workers")?;
    rows.collect::<Result<_, _>>().ctx("read workers")
}

/// A stored tool list; one that is not a JSON array of names reads as empty (the column is
/// checked to be valid JSON, and only toolq writes it).
fn tool_list(json: &str) -> Vec<String> {
    serde_json::from_str(json).unwrap_or_default()
}

/// Sum of busy retries over all workers.
pub fn total_busy_retries(conn: &rusqlite::Connection) -> Result<i64, StoreError> {
    conn.query_row(
        "SELECT coalesce(sum(busy_retries), 0) FROM workers",
        [],
        |r| r.get(0),
    )
    .ctx("sum busy retries")
}
