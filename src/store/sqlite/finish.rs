//! Recording the end of an attempt: the run's new state and result, its log blob and its
//! inbox message, all or nothing per run, many runs per transaction (group commit).

use chrono::{DateTime, Utc};
use rusqlite::Transaction;

use super::Ctx;
use super::artifacts::{BlobWrite, put_many};
use crate::error::StoreError;
use crate::run::{Fence, FinishRecord};
use crate::store::end_plan;

/// The fenced end of an attempt. Built once and bound by position: this runs for every
/// attempt, and binding 14 parameters by name costs a scan of the names for each.
pub(crate) static FINISH: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    "UPDATE runs SET state = ?1, run_at = coalesce(?2, run_at), finished_at = ?3, \
     error = ?4, internal_error = ?5, \
     errors = CASE WHEN ?6 IS NULL THEN errors ELSE json_insert(errors, '$[#]', json(?6)) END, \
     status_text = coalesce(?7, status_text), progress = coalesce(?8, progress), \
     output_tail = coalesce(?9, output_tail), \
     approval_state = coalesce(?10, approval_state), \
     approval_deadline = coalesce(?11, approval_deadline), \
     attempt = CASE WHEN ?1 = 'awaiting_approval' OR ?15 IS NOT NULL THEN attempt - 1 \
         ELSE attempt END, \
     wait_kind = ?15, wait_event = ?16, snoozes = snoozes + ?17, result = coalesce(?18, result), \
     started_at = CASE WHEN ?1 = 'awaiting_approval' THEN NULL ELSE started_at END, \
     heartbeat_at = CASE WHEN ?1 = 'awaiting_approval' THEN NULL ELSE heartbeat_at END, \
     lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL \
     WHERE id = ?12 AND state = 'running' AND attempt = ?13 AND lease_token = ?14"
        .to_string()
});

/// The one end-writer: records many attempt ends in the caller's transaction. Each end is
/// all or nothing: its fenced state change decides whether its blobs and message are
/// written. A final state always gets a result (`runs.result`, read as its result.json) and its message, and its output.log
/// (the one given, else the log so far) unless that log is empty: an empty log costs no row
/// (readers show a finished run without one as empty) (one per run and attempt, enforced
/// by `inbox_run_idx`). Then composition (`compose::after_ends`): batches,
/// dependents and waiting parents move with the ends, in the same transaction. Returns, per
/// record, whether it applied.
pub fn record_ends(
    tx: &Transaction<'_>,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<Vec<bool>, StoreError> {
    super::compose::record_ends(tx, record_ends_plain, records, now)
}

/// [`record_ends`] without composition: what each end writes of its own run. Composition
/// calls it for the dependents it cancels, and carries on from their ends itself.
pub(crate) fn record_ends_plain(
    tx: &Transaction<'_>,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<Vec<bool>, StoreError> {
    let applied = records
        .iter()
        .map(|r| match &r.fence {
            Fence::Lease(token) => finish_state(tx, r, token, now),
            Fence::Waiting(expected) => {
                end_waiting(tx, &end_plan::WaitingEnd::of(r, *expected, now)?)
            }
        })
        .collect::<Result<Vec<bool>, _>>()?;
    let done = end_plan::applied_only(records, &applied);
    for r in done.iter().filter(|r| !r.steps.is_empty()) {
        super::journal::write_entries(tx, r.id.as_str(), r.attempt, &r.steps, now)?;
    }
    for (id, event) in end_plan::event_waits(&done) {
        super::journal::wake_if_sent(tx, id, event, now)?;
    }
    write_artifacts_many(tx, &done, now)?;
    Ok(applied)
}

/// The fenced state change of a running attempt's end: true when it still held the lease.
fn finish_state(
    tx: &Transaction<'_>,
    r: &FinishRecord,
    token: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let change = end_plan::StateChange::of(r, now);
    let n = tx
        .prepare_cached(&FINISH)
        .ctx("prepare finish")?
        .execute(rusqlite::params![
            change.state,
            change.run_at,
            change.finished_at,
            r.error,
            r.internal_error,
            end_plan::error_entry(r),
            r.status_text,
            r.progress,
            r.output_tail,
            change.approval,
            change.deadline,
            r.id.as_str(),
            r.attempt,
            token,
            change.wait_kind,
            change.wait_event,
            change.snoozed,
            change.result.as_deref(),
        ])
        .ctx("finish run")?;
    Ok(n == 1)
}

/// The end of a run that is not running (cancelled while queued or awaiting approval, denied,
/// expired): fenced by (id, state, attempt); the end counts as attempt + 1. Cancelling a run
/// that awaits approval is no decision: its pending approval is cleared (not marked denied),
/// and so is its "awaiting approval" status line.
const END_WAITING: &str = "UPDATE runs SET state = ?1, finished_at = ?2, error = ?3, \
     internal_error = coalesce(?4, internal_error), \
     errors = CASE WHEN ?5 IS NULL THEN errors ELSE json_insert(errors, '$[#]', json(?5)) END, \
     attempt = attempt + 1, \
     approval_state = coalesce(?6, CASE WHEN approval_state = 'pending' THEN NULL \
         ELSE approval_state END), \
     status_text = CASE WHEN state = 'awaiting_approval' THEN NULL ELSE status_text END, \
     approval_by = CASE WHEN ?6 IS NULL THEN approval_by ELSE ?7 END, \
     approval_at = CASE WHEN ?6 IS NULL THEN approval_at ELSE ?2 END, \
     approval_note = CASE WHEN ?6 IS NULL THEN approval_note ELSE ?8 END, \
     lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, \
     wait_kind = NULL, wait_event = NULL, result = ?12 \
     WHERE id = ?9 AND state = ?10 AND attempt = ?11";

fn end_waiting(tx: &Transaction<'_>, w: &end_plan::WaitingEnd<'_>) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(END_WAITING)
        .ctx("prepare end waiting run")?
        .execute(rusqlite::params![
            w.state,
            w.at,
            w.error,
            w.internal_error,
            w.entry,
            w.approval,
            w.by,
            w.note,
            w.id,
            w.expected,
            w.attempt,
            w.result.as_deref(),
        ])
        .ctx("end waiting run")?;
    Ok(n == 1)
}

/// Deletes an earlier log of a run whose final log is empty (a primary-key probe that
/// writes nothing when there is none, as for most runs).
const CLEAR_LOG: &str = "DELETE FROM blob_rows WHERE session_id = ?1 AND path = ?2";

/// The blobs and messages of attempt ends whose state change applied (see
/// [`end_plan::Artifacts`]), in this transaction: multi-row inserts for the whole batch
/// instead of one statement per row.
fn write_artifacts_many(
    tx: &Transaction<'_>,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let plan = end_plan::Artifacts::of(records);
    for log in &plan.cleared_logs {
        tx.prepare_cached(CLEAR_LOG)
            .ctx("prepare clear log")?
            .execute(rusqlite::params![log.session_id, log.path])
            .ctx("clear log")?;
    }
    let blobs: Vec<BlobWrite<'_>> = plan
        .blobs
        .iter()
        .map(|b| BlobWrite {
            session_id: b.session_id,
            path: &b.path,
            run_id: b.run_id,
            content: &b.content,
            truncated: b.truncated,
        })
        .collect();
    put_many(tx, &blobs, now)?;
    super::inbox::insert_many_encoded(tx, &plan.message_refs(), now)
}
