//! Recording the end of an attempt: the run's new state, its log and result blobs and its
//! inbox message, all or nothing per run, many runs per transaction (group commit).

use chrono::{DateTime, Utc};
use rusqlite::Transaction;
use serde_json::Value;

use super::Ctx;
use super::artifacts::{BlobWrite, put_many};
use super::codec::ts;
use crate::error::StoreError;
use crate::inbox::NewMessage;
use crate::run::RunState;
use crate::run::{Fence, FinishRecord, Outcome};

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
     attempt = CASE WHEN ?1 = 'awaiting_approval' THEN attempt - 1 ELSE attempt END, \
     started_at = CASE WHEN ?1 = 'awaiting_approval' THEN NULL ELSE started_at END, \
     heartbeat_at = CASE WHEN ?1 = 'awaiting_approval' THEN NULL ELSE heartbeat_at END, \
     lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL \
     WHERE id = ?12 AND state = 'running' AND attempt = ?13 AND lease_token = ?14"
        .to_string()
});

/// The one end-writer: records many attempt ends in the caller's transaction. Each end is
/// all or nothing: its fenced state change decides whether its blobs and message are
/// written. A final state always gets an output.log (the one given, else the log so far,
/// else an empty one) and a result.json, and its message (one per run and attempt, enforced
/// by `inbox_run_idx`). Returns, per record, whether it applied.
pub fn record_ends(
    tx: &Transaction<'_>,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<Vec<bool>, StoreError> {
    let applied = records
        .iter()
        .map(|r| match &r.fence {
            Fence::Lease(token) => finish_state(tx, r, token, now),
            Fence::Waiting(expected) => end_waiting(tx, r, *expected, now),
        })
        .collect::<Result<Vec<bool>, _>>()?;
    let done: Vec<&FinishRecord> = records
        .iter()
        .zip(&applied)
        .filter_map(|(r, &ok)| ok.then_some(*r))
        .collect();
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
    let (state, run_at, finished, approval, deadline) = match &r.outcome {
        Outcome::Final(s) => (s.as_str(), None, Some(ts(now)), None, None),
        Outcome::Retry(at) => ("queued", Some(ts(*at)), None, None, None),
        Outcome::AwaitApproval { deadline } => (
            "awaiting_approval",
            None,
            None,
            Some("pending"),
            deadline.map(ts),
        ),
    };
    let n = tx
        .prepare_cached(&FINISH)
        .ctx("prepare finish")?
        .execute(rusqlite::params![
            state,
            run_at,
            finished,
            r.error,
            r.internal_error,
            r.error_entry.as_ref().map(Value::to_string),
            r.status_text,
            r.progress,
            r.output_tail,
            approval,
            deadline,
            r.id,
            r.attempt,
            token,
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
     lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL \
     WHERE id = ?9 AND state = ?10 AND attempt = ?11";

fn end_waiting(
    tx: &Transaction<'_>,
    r: &FinishRecord,
    expected: RunState,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let Outcome::Final(state) = r.outcome else {
        return Err(StoreError::Invalid(format!(
            "run {}: a run that is not running can only end in a final state",
            r.id
        )));
    };
    let mark = r.approval.as_ref();
    let n = tx
        .prepare_cached(END_WAITING)
        .ctx("prepare end waiting run")?
        .execute(rusqlite::params![
            state.as_str(),
            ts(now),
            r.error,
            r.internal_error,
            r.error_entry.as_ref().map(Value::to_string),
            mark.map(|m| m.state),
            mark.map(|m| &m.by),
            mark.and_then(|m| m.note.as_deref()),
            r.id,
            expected.as_str(),
            r.attempt,
        ])
        .ctx("end waiting run")?;
    Ok(n == 1)
}

/// Keeps the log written so far, or writes an empty one (`?1` now).
const ENSURE_LOG: &str = "INSERT INTO blobs (session_id, path, run_id, content, size, truncated, \
     created_at, updated_at) VALUES (?2, ?3, ?4, x'', 0, 0, ?1, ?1) \
     ON CONFLICT (session_id, path) DO NOTHING";

/// The blobs and messages of attempt ends whose state change applied, in this transaction:
/// multi-row inserts for the whole batch instead of one statement per row.
fn write_artifacts_many(
    tx: &Transaction<'_>,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let paths: Vec<[String; 2]> = records
        .iter()
        .map(|r| {
            [
                format!("/.background/{}/output.log", r.id),
                format!("/.background/{}/result.json", r.id),
            ]
        })
        .collect();
    // A final state's result when its record brought none: its status and error.
    let fallback: Vec<Option<Vec<u8>>> = records
        .iter()
        .map(|r| match (&r.outcome, &r.result) {
            (Outcome::Final(s), None) => Some(
                serde_json::json!({"status": s.as_str(), "error": r.error})
                    .to_string()
                    .into_bytes(),
            ),
            _ => None,
        })
        .collect();
    let mut blobs = Vec::with_capacity(records.len() * 2);
    let now_s = ts(now);
    for ((r, [log_path, result_path]), fallback) in records.iter().zip(&paths).zip(&fallback) {
        let log = r.log.as_ref().map(|(log, cut)| (log_path, log, *cut));
        let result = r
            .result
            .as_ref()
            .or(fallback.as_ref())
            .map(|res| (result_path, res, false));
        let extra = r
            .extra_blobs
            .iter()
            .map(|(path, content)| (path, content, false));
        for (path, content, truncated) in log.into_iter().chain(result).chain(extra) {
            blobs.push(BlobWrite {
                session_id: &r.session_id,
                path,
                run_id: &r.id,
                content,
                truncated,
            });
        }
        if r.log.is_none() && matches!(r.outcome, Outcome::Final(_)) {
            tx.prepare_cached(ENSURE_LOG)
                .ctx("prepare ensure log")?
                .execute(rusqlite::params![now_s, r.session_id, log_path, r.id])
                .ctx("ensure log")?;
        }
    }
    put_many(tx, &blobs, now)?;
    let encoded: Vec<Option<String>> = records
        .iter()
        .map(|r| match (&r.message, &r.message_data) {
            (Some(m), None) => Some(m.data.to_string()),
            _ => None,
        })
        .collect();
    let messages: Vec<(&NewMessage, &str)> = records
        .iter()
        .zip(&encoded)
        .filter_map(|(r, late)| {
            let m = r.message.as_ref()?;
            Some((m, r.message_data.as_deref().or(late.as_deref())?))
        })
        .collect();
    super::inbox::insert_many_encoded(tx, &messages, now)
}
