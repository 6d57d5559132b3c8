//! Rescue queries: live worker rows on this host and boot (so their pids can be checked),
//! marking dead workers stopped, and the running runs whose owner is gone or whose lease
//! expired. The decision per run is pure and lives in `worker::rescue`, the bookkeeping
//! around it in `store::rescue_plan`; writing it back uses the fenced end-writer
//! (`super::finish::record_ends`), so a rescue races safely with a late finish.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, Transaction, named_params};

use super::Ctx;
use super::codec::{RUN_COLUMNS, run_from_row, ts};
use crate::error::StoreError;
use crate::run::Run;
use crate::store::RescueReason;
pub use crate::store::rescue_plan::LiveWorker;

/// Where pids can be checked: this host, this boot, this pid namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locality<'a> {
    /// Host name.
    pub host: &'a str,
    /// Kernel boot id.
    pub boot_id: &'a str,
    /// Pid namespace.
    pub pid_namespace: &'a str,
}

/// Workers not marked stopped that registered on this host, during this boot, in this pid
/// namespace: the only ones whose process can be checked for sure.
pub fn live_workers_on(
    conn: &Connection,
    here: &Locality<'_>,
) -> Result<Vec<LiveWorker>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, pid, process_start_time FROM workers \
             WHERE stopped_at IS NULL AND host = :host AND boot_id = :boot AND pid_namespace = :ns",
        )
        .ctx("prepare live workers")?;
    let rows = stmt
        .query_map(
            named_params! {":host": here.host, ":boot": here.boot_id, ":ns": here.pid_namespace},
            |r| {
                Ok(LiveWorker {
                    id: r.get(0)?,
                    pid: r.get(1)?,
                    process_start_time: r.get(2)?,
                })
            },
        )
        .ctx("live workers")?;
    rows.collect::<Result<_, _>>().ctx("read live workers")
}

/// Marks workers whose process is gone as stopped (`stop_reason = 'died'`). Returns how many
/// rows changed.
pub fn mark_died(
    tx: &Transaction<'_>,
    ids: &[String],
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "UPDATE workers SET stopped_at = :now, stop_reason = 'died' \
             WHERE id = :id AND stopped_at IS NULL",
        )
        .ctx("prepare mark died")?;
    let mut n = 0;
    for id in ids {
        n += stmt
            .execute(named_params! {":now": ts(now), ":id": id})
            .ctx("mark worker died")?;
    }
    Ok(n)
}

/// Running runs whose owner row is missing or stopped (including workers just marked dead),
/// or whose lease expired before `now`. The owner's liveness wins over the lease: a run of a
/// dead owner is reported as such even when its lease also ran out. `INDEXED BY`: to avoid
/// sorting, the planner would otherwise walk every run in id order.
pub(crate) const RESCUABLE: &str = "SELECT {cols}, reason FROM ( \
    SELECT r.*, CASE \
        WHEN w.id IS NULL THEN 'owner_missing' \
        WHEN w.stop_reason = 'died' THEN 'owner_died' \
        WHEN w.stopped_at IS NOT NULL THEN 'owner_stopped' \
        ELSE 'lease_expired' END AS reason \
    FROM runs r INDEXED BY runs_running_owner_idx LEFT JOIN workers w ON w.id = r.lease_owner \
    WHERE r.state = 'running' \
      AND (w.id IS NULL OR w.stopped_at IS NOT NULL OR r.lease_expires_at < :now)) \
    ORDER BY id";

/// The running runs to take back now, each with its reason.
pub fn rescuable(
    conn: &Connection,
    now: DateTime<Utc>,
) -> Result<Vec<(Run, RescueReason)>, StoreError> {
    let sql = RESCUABLE.replace("{cols}", RUN_COLUMNS);
    let mut stmt = conn.prepare_cached(&sql).ctx("prepare rescuable")?;
    let rows = stmt
        .query_map(named_params! {":now": ts(now)}, |r| {
            let run = run_from_row(r)?;
            let reason: String = r.get("reason")?;
            Ok((
                run,
                RescueReason::parse(&reason).unwrap_or(RescueReason::LeaseExpired),
            ))
        })
        .ctx("rescuable runs")?;
    rows.collect::<Result<_, _>>().ctx("read rescuable runs")
}
