//! The `workers` table: one row per worker process, heartbeated, for ops and for rescue.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::{exec, get, query, query_one};
use crate::clock::ts;
use crate::error::StoreError;
use crate::store::WorkerRow;

/// Registers a worker process.
pub(crate) async fn register<C: GenericClient>(c: &C, w: &WorkerRow) -> Result<(), StoreError> {
    let tools = serde_json::to_string(&w.tools).map_err(|e| StoreError::Task(e.to_string()))?;
    exec(
        c,
        "INSERT INTO workers (id, host, boot_id, pid_namespace, pid, process_start_time, started_at, \
         heartbeat_at, concurrency, poll_interval_ms, heartbeat_interval_ms, lease_ms, version, tools) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        &[
            &w.id,
            &w.host,
            &w.boot_id,
            &w.pid_namespace,
            &w.pid,
            &w.process_start_time,
            &w.started_at,
            &w.heartbeat_at,
            &w.concurrency,
            &w.poll_interval_ms,
            &w.heartbeat_interval_ms,
            &w.lease_ms,
            &w.version,
            &tools,
        ],
        "register worker",
    )
    .await?;
    Ok(())
}

/// Heartbeats a worker row.
pub(crate) async fn heartbeat<C: GenericClient>(
    c: &C,
    id: &str,
    now: DateTime<Utc>,
    last_poll: Option<DateTime<Utc>>,
    busy_retries: u64,
) -> Result<(), StoreError> {
    exec(
        c,
        "UPDATE workers SET heartbeat_at = $1, last_poll_at = coalesce($2, last_poll_at), \
         busy_retries = $3 WHERE id = $4",
        &[&ts(now), &last_poll.map(ts), &(busy_retries as i64), &id],
        "worker heartbeat",
    )
    .await?;
    Ok(())
}

/// Marks a worker cleanly stopped unless a reason is already set.
pub(crate) async fn deregister<C: GenericClient>(
    c: &C,
    id: &str,
    now: DateTime<Utc>,
    busy_retries: u64,
) -> Result<(), StoreError> {
    exec(
        c,
        "UPDATE workers SET stopped_at = coalesce(stopped_at, $1), \
         stop_reason = coalesce(stop_reason, 'exited'), busy_retries = $3 WHERE id = $2",
        &[&ts(now), &id, &(busy_retries as i64)],
        "deregister worker",
    )
    .await?;
    Ok(())
}

/// Worker rows, live ones first, newest first.
pub(crate) async fn list<C: GenericClient>(
    c: &C,
    include_stopped: bool,
) -> Result<Vec<WorkerRow>, StoreError> {
    let rows = query(
        c,
        "SELECT id, host, boot_id, pid_namespace, pid, process_start_time, started_at, heartbeat_at, \
         last_poll_at, stopped_at, stop_reason, concurrency, poll_interval_ms, heartbeat_interval_ms, \
         lease_ms, busy_retries, version, tools FROM workers \
         WHERE ($1 OR stopped_at IS NULL) ORDER BY stopped_at IS NOT NULL, started_at DESC",
        &[&include_stopped],
        "list workers",
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(WorkerRow {
                id: get(r, 0)?,
                host: get(r, 1)?,
                boot_id: get(r, 2)?,
                pid_namespace: get(r, 3)?,
                pid: get(r, 4)?,
                process_start_time: get(r, 5)?,
                started_at: get(r, 6)?,
                heartbeat_at: get(r, 7)?,
                last_poll_at: get(r, 8)?,
                stopped_at: get(r, 9)?,
                stop_reason: get(r, 10)?,
                concurrency: get(r, 11)?,
                poll_interval_ms: get(r, 12)?,
                heartbeat_interval_ms: get(r, 13)?,
                lease_ms: get(r, 14)?,
                busy_retries: get(r, 15)?,
                version: get(r, 16)?,
                tools: serde_json::from_str(&get::<String>(r, 17)?).unwrap_or_default(),
            })
        })
        .collect()
}

/// Busy retries summed over every worker row.
pub(crate) async fn total_busy_retries<C: GenericClient>(c: &C) -> Result<i64, StoreError> {
    get(
        &query_one(
            c,
            "SELECT coalesce(sum(busy_retries), 0)::bigint FROM workers",
            &[],
            "sum busy retries",
        )
        .await?,
        0,
    )
}
