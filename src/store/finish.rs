//! Recording the end of an attempt: the run's new state, its log and result blobs and its
//! inbox message, all or nothing per run, many runs per transaction (group commit).

use chrono::{DateTime, Utc};
use rusqlite::{Transaction, named_params};
use serde_json::Value;

use super::Ctx;
use super::artifacts::{BlobWrite, put_many};
use super::codec::ts;
use super::inbox::NewMessage;
use super::runs::APPEND_ERROR;
use crate::error::StoreError;
use crate::run::RunState;

/// Where an attempt leaves its run.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A final state: completed, failed or cancelled.
    Final(RunState),
    /// Back to the queue for another attempt, not before this instant.
    Retry(DateTime<Utc>),
    /// Waiting for an operator (approval required).
    AwaitApproval {
        /// Optional deadline after which it expires.
        deadline: Option<DateTime<Utc>>,
    },
}

/// Everything one attempt writes when it ends. Fenced by (id, attempt, token).
#[derive(Debug, Clone)]
pub struct FinishRecord {
    /// Run id.
    pub id: String,
    /// Owner session.
    pub session_id: String,
    /// The attempt that ends.
    pub attempt: i64,
    /// Its lease token.
    pub token: String,
    /// The new state.
    pub outcome: Outcome,
    /// Error shown to the session.
    pub error: Option<String>,
    /// Ops-only detail.
    pub internal_error: Option<String>,
    /// An entry for the run's `errors` history.
    pub error_entry: Option<Value>,
    /// Latest status line.
    pub status_text: Option<String>,
    /// Latest progress, JSON text.
    pub progress: Option<String>,
    /// Log tail, escaped.
    pub output_tail: Option<String>,
    /// The log: bytes and whether it was cut at its cap.
    pub log: Option<(Vec<u8>, bool)>,
    /// The result JSON.
    pub result: Option<Vec<u8>>,
    /// Extra blobs (path, bytes), e.g. a raw output sidecar.
    pub extra_blobs: Vec<(String, Vec<u8>)>,
    /// The inbox message, when the run signals completion.
    pub message: Option<NewMessage>,
    /// The message's `data` as JSON text, encoded before the write transaction by
    /// [`FinishRecord::encode_message`]; `None`: the writer encodes it.
    pub message_data: Option<String>,
}

impl FinishRecord {
    /// Encodes the message's structured data now, off the writer. Call it once the message
    /// is final (after a tool's formatter ran); [`finish`] then inserts the text as is.
    pub fn encode_message(&mut self) {
        self.message_data = self.message.as_ref().map(|m| m.data.to_string());
    }
}

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
     lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL \
     WHERE id = ?12 AND state = 'running' AND attempt = ?13 AND lease_token = ?14"
        .to_string()
});

/// Writes one attempt's end. Returns false, writing nothing, when the attempt no longer holds
/// the lease (its run was rescued or cancelled meanwhile).
pub fn finish(
    tx: &Transaction<'_>,
    r: &FinishRecord,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    if !finish_state(tx, r, now)? {
        return Ok(false);
    }
    write_artifacts_many(tx, &[r], now)?;
    Ok(true)
}

/// The fenced state change of [`finish`] alone: true when the attempt still held the lease.
/// Its artifacts must follow in the same transaction ([`write_artifacts_many`]).
pub fn finish_state(
    tx: &Transaction<'_>,
    r: &FinishRecord,
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
            r.token,
        ])
        .ctx("finish run")?;
    Ok(n == 1)
}

/// The blobs and messages of attempt ends whose [`finish_state`] applied, in this
/// transaction: multi-row inserts for the whole batch instead of one statement per row.
pub fn write_artifacts_many(
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
    let mut blobs = Vec::with_capacity(records.len() * 2);
    for (r, [log_path, result_path]) in records.iter().zip(&paths) {
        let log = r.log.as_ref().map(|(log, cut)| (log_path, log, *cut));
        let result = r.result.as_ref().map(|res| (result_path, res, false));
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

/// Finishes many attempts in one transaction; each run is still all-or-nothing, because its
/// guarded update decides whether any of its records are written. Returns, per record,
/// whether it was applied.
pub fn finish_many(
    tx: &Transaction<'_>,
    records: &[FinishRecord],
    now: DateTime<Utc>,
) -> Result<Vec<bool>, StoreError> {
    let applied = records
        .iter()
        .map(|r| finish_state(tx, r, now))
        .collect::<Result<Vec<bool>, _>>()?;
    let done: Vec<&FinishRecord> = records
        .iter()
        .zip(&applied)
        .filter_map(|(r, &ok)| ok.then_some(r))
        .collect();
    write_artifacts_many(tx, &done, now)?;
    Ok(applied)
}

/// Records the end of a run that is not running (rescued by another process, cancelled while
/// waiting, expired approval): state change guarded by `expected`, plus message and artifacts.
pub fn finish_unleased(
    tx: &Transaction<'_>,
    r: &FinishRecord,
    expected: RunState,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let Outcome::Final(state) = r.outcome else {
        return Ok(false);
    };
    let n = tx
        .prepare_cached(&format!(
            "UPDATE runs SET state = :state, finished_at = :now, error = :error, \
             internal_error = coalesce(:internal, internal_error), \
             errors = CASE WHEN :error_entry IS NULL THEN errors ELSE {APPEND_ERROR} END, \
             lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL \
             WHERE id = :id AND state = :expected AND attempt = :attempt"
        ))
        .ctx("prepare finish unleased")?
        .execute(named_params! {
            ":state": state.as_str(), ":now": ts(now), ":error": r.error, ":internal": r.internal_error,
            ":error_entry": r.error_entry.as_ref().map(Value::to_string),
            ":id": r.id, ":expected": expected.as_str(), ":attempt": r.attempt,
        })
        .ctx("finish run")?;
    if n == 0 {
        return Ok(false);
    }
    write_artifacts_many(tx, &[r], now)?;
    Ok(true)
}
