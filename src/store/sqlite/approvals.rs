//! Approval decisions on `runs`: approve (back to the queue), and the awaiting runs past their
//! deadline. Deny and expire are ends, written by `finish::record_ends`.

use chrono::{DateTime, Utc};
use rusqlite::{Transaction, named_params};

use super::Ctx;
use super::codec::{RUN_COLUMNS, run_from_row, ts};
use crate::error::StoreError;
use crate::run::Run;

/// A decision on one run.
#[derive(Debug, Clone)]
pub struct Decision<'a> {
    /// The run.
    pub id: &'a str,
    /// Who decided.
    pub by: &'a str,
    /// The note (approve) or reason (deny).
    pub note: Option<&'a str>,
    /// When.
    pub now: DateTime<Utc>,
}

impl<'a> Decision<'a> {
    /// The decision an approval carries.
    pub fn of(a: &'a crate::store::RunApprove) -> Self {
        Decision {
            id: a.id.as_str(),
            by: &a.by,
            note: a.note.as_deref(),
            now: a.now,
        }
    }
}

/// Queues an awaiting run to execute as approved: due now, or at its own later `run_at` (a
/// run enqueued with a delay keeps it). False when it was not awaiting approval.
pub fn approve(tx: &Transaction<'_>, d: &Decision<'_>) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE runs SET state = 'queued', \
             run_at = CASE WHEN deps_pending > 0 THEN :blocked ELSE max(run_at, :now) END, \
             wait_kind = CASE WHEN deps_pending > 0 THEN 'parents' ELSE wait_kind END, \
             approval_state = 'approved', \
             approval_by = :by, approval_at = :now, approval_note = :note, status_text = NULL \
             WHERE id = :id AND state = 'awaiting_approval'",
        )
        .ctx("prepare approve")?
        .execute(named_params! {
            ":now": ts(d.now), ":by": d.by, ":note": d.note, ":id": d.id,
            ":blocked": ts(crate::store::compose_plan::blocked_until()),
        })
        .ctx("approve run")?;
    Ok(n == 1)
}

/// Records a decision taken before the run was queued (a host approved the call first), so
/// the worker runs it without asking again. False when the run is not queued.
pub fn preapprove(tx: &Transaction<'_>, d: &Decision<'_>) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE runs SET approval_state = 'approved', approval_by = :by, \
             approval_at = :now, approval_note = :note WHERE id = :id AND state = 'queued'",
        )
        .ctx("prepare preapprove")?
        .execute(named_params! {":now": ts(d.now), ":by": d.by, ":note": d.note, ":id": d.id})
        .ctx("preapprove run")?;
    Ok(n == 1)
}

/// Awaiting runs whose approval deadline has passed (oldest deadline first, at most `limit`).
pub fn overdue(
    conn: &rusqlite::Connection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<Run>, StoreError> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE state = 'awaiting_approval' \
             AND approval_deadline <= :now ORDER BY approval_deadline LIMIT :limit"
        ))
        .ctx("prepare overdue approvals")?;
    let rows = stmt
        .query_map(
            named_params! {":now": ts(now), ":limit": limit},
            run_from_row,
        )
        .ctx("overdue approvals")?;
    rows.collect::<Result<_, _>>().ctx("read overdue approvals")
}
