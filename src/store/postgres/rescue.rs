//! The rescue's queries on Postgres: live worker rows on this host and boot (so their pids
//! can be checked), marking dead workers stopped, and the running runs whose owner is gone or
//! whose lease expired. What a rescue does with them is decided in
//! [`crate::store::rescue_plan`]; it writes through the one end-writer
//! (`super::finish::record_ends`), so a rescue races safely with a late finish.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::codec::{RUN_COLUMNS, run_from_row};
use super::{exec, get, query};
use crate::clock::ts;
use crate::error::StoreError;
use crate::run::Run;
use crate::store::RescueReason;
use crate::store::rescue_plan::LiveWorker;

/// Live workers registered on this host, boot and pid namespace.
pub(crate) async fn live_workers_on<C: GenericClient>(
    c: &C,
    host: &str,
    boot: &str,
    ns: &str,
) -> Result<Vec<LiveWorker>, StoreError> {
    let rows = query(
        c,
        "SELECT id, pid, process_start_time FROM workers \
         WHERE stopped_at IS NULL AND host = $1 AND boot_id = $2 AND pid_namespace = $3",
        &[&host, &boot, &ns],
        "live workers",
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(LiveWorker {
                id: get(r, 0)?,
                pid: get(r, 1)?,
                process_start_time: get(r, 2)?,
            })
        })
        .collect()
}

/// Marks workers whose process is gone as stopped (`died`); how many changed.
pub(crate) async fn mark_died<C: GenericClient>(
    c: &C,
    ids: &[String],
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(exec(
        c,
        "UPDATE workers SET stopped_at = $1, stop_reason = 'died' WHERE id = ANY($2) AND stopped_at IS NULL",
        &[&ts(now), &ids],
        "mark workers died",
    )
    .await? as usize)
}

/// Running runs whose owner is missing, stopped or dead, or whose lease expired.
pub(crate) async fn rescuable<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
) -> Result<Vec<(Run, RescueReason)>, StoreError> {
    let cols: String = RUN_COLUMNS
        .split(',')
        .map(|c| format!("r.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT {cols}, CASE WHEN w.id IS NULL THEN 'owner_missing' \
            WHEN w.stop_reason = 'died' THEN 'owner_died' \
            WHEN w.stopped_at IS NOT NULL THEN 'owner_stopped' \
            ELSE 'lease_expired' END \
         FROM runs r LEFT JOIN workers w ON w.id = r.lease_owner \
         WHERE r.state = 'running' AND (w.id IS NULL OR w.stopped_at IS NOT NULL OR r.lease_expires_at < $1) \
         ORDER BY r.id"
    );
    let reason_col = RUN_COLUMNS.split(',').count();
    let rows = query(c, &sql, &[&ts(now)], "rescuable runs").await?;
    rows.iter()
        .map(|r| {
            let reason: String = get(r, reason_col)?;
            Ok((
                run_from_row(r)?,
                RescueReason::parse(&reason).unwrap_or(RescueReason::LeaseExpired),
            ))
        })
        .collect()
}
