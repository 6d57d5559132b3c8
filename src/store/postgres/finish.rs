//! The one end-writer on Postgres: each end's fenced state change, then the blobs and inbox
//! messages of the ends that applied, in the caller's transaction. Split in two so a caller
//! with more to do (the finisher's settle, a rescue) writes the messages last, holding the
//! inbox lock (see [`super::locks::INBOX`]) only from there to its commit.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde_json::Value;

use super::{P, exec, get, query};
use crate::clock::ts;
use crate::error::StoreError;
use crate::run::{Fence, FinishRecord, Outcome, RunState};

/// The fenced ends of running attempts, all in one statement: each applies only while its
/// (id, attempt, lease_token) still match; returns the ids that applied, with their tools.
/// `errors` grows by one entry (text concatenation keeps the stored JSON as written).
const FINISH_MANY: &str = "UPDATE runs r SET state = u.state, run_at = coalesce(u.run_at, r.run_at), \
    finished_at = u.finished_at, error = u.error, internal_error = u.internal_error, \
    errors = CASE WHEN u.entry IS NULL THEN r.errors WHEN r.errors = '[]' THEN '[' || u.entry || ']' \
        ELSE left(r.errors, length(r.errors) - 1) || ',' || u.entry || ']' END, \
    status_text = coalesce(u.status_text, r.status_text), progress = coalesce(u.progress, r.progress), \
    output_tail = coalesce(u.output_tail, r.output_tail), \
    approval_state = coalesce(u.approval, r.approval_state), \
    approval_deadline = coalesce(u.deadline, r.approval_deadline), \
    attempt = CASE WHEN u.state = 'awaiting_approval' THEN r.attempt - 1 ELSE r.attempt END, \
    started_at = CASE WHEN u.state = 'awaiting_approval' THEN NULL ELSE r.started_at END, \
    heartbeat_at = CASE WHEN u.state = 'awaiting_approval' THEN NULL ELSE r.heartbeat_at END, \
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL \
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
        $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::bigint[], \
        $14::text[]) AS u(state, run_at, finished_at, error, internal_error, entry, status_text, \
        progress, output_tail, approval, deadline, id, attempt, token) \
    WHERE r.id = u.id AND r.state = 'running' AND r.attempt = u.attempt AND r.lease_token = u.token \
    RETURNING r.id, r.tool";

/// The end of a run that is not running, fenced by (id, state, attempt); counts as attempt + 1.
/// Cancelling a run that awaits approval is no decision: its pending approval is cleared (not
/// marked denied), and so is its "awaiting approval" status line.
const END_WAITING: &str = "UPDATE runs SET state = $1, finished_at = $2, error = $3, \
    internal_error = coalesce($4, internal_error), \
    errors = CASE WHEN $5::text IS NULL THEN errors WHEN errors = '[]' THEN '[' || $5 || ']' \
        ELSE left(errors, length(errors) - 1) || ',' || $5 || ']' END, \
    attempt = attempt + 1, \
    approval_state = coalesce($6::text, CASE WHEN approval_state = 'pending' THEN NULL \
        ELSE approval_state END), \
    status_text = CASE WHEN state = 'awaiting_approval' THEN NULL ELSE status_text END, \
    approval_by = CASE WHEN $6::text IS NULL THEN approval_by ELSE $7 END, \
    approval_at = CASE WHEN $6::text IS NULL THEN approval_at ELSE $2 END, \
    approval_note = CASE WHEN $6::text IS NULL THEN approval_note ELSE $8 END, \
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL \
    WHERE id = $9 AND state = $10 AND attempt = $11";

/// [`apply_states`] then [`write_artifacts`]: the whole end of each record.
pub(crate) async fn record_ends<C: GenericClient>(
    c: &C,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<Vec<bool>, StoreError> {
    let applied = apply_states(c, records, now).await?;
    let done: Vec<&FinishRecord> = records
        .iter()
        .zip(&applied)
        .filter_map(|(r, &ok)| ok.then_some(*r))
        .collect();
    write_artifacts(c, &done, now).await?;
    Ok(applied)
}

/// The fenced state change of every record; per record, whether it applied.
pub(crate) async fn apply_states<C: GenericClient>(
    c: &C,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<Vec<bool>, StoreError> {
    Ok(apply_states_freeing(c, records, now).await?.0)
}

/// [`apply_states`], with the tool of each running attempt that ended, by run id: the slots
/// the ends freed.
pub(crate) async fn apply_states_freeing<C: GenericClient>(
    c: &C,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<(Vec<bool>, HashMap<String, String>), StoreError> {
    let mut applied = vec![false; records.len()];
    let leased: Vec<usize> = (0..records.len())
        .filter(|&i| matches!(records[i].fence, Fence::Lease(_)))
        .collect();
    let mut tools = HashMap::new();
    if !leased.is_empty() {
        tools = finish_many(c, leased.iter().map(|&i| records[i]), now).await?;
        for &i in &leased {
            applied[i] = tools.contains_key(&records[i].id);
        }
    }
    for (i, r) in records.iter().enumerate() {
        if let Fence::Waiting(expected) = r.fence {
            applied[i] = end_waiting(c, r, expected, now).await?;
        }
    }
    Ok((applied, tools))
}

async fn finish_many<'a, C: GenericClient>(
    c: &C,
    records: impl Iterator<Item = &'a FinishRecord>,
    now: DateTime<Utc>,
) -> Result<HashMap<String, String>, StoreError> {
    let mut cols: [Vec<Option<String>>; 12] = Default::default();
    let mut attempts: Vec<i64> = Vec::new();
    let mut tokens: Vec<String> = Vec::new();
    let finished = ts(now);
    for r in records {
        let Fence::Lease(token) = &r.fence else {
            continue;
        };
        let (state, run_at, fin, approval, deadline) = match &r.outcome {
            Outcome::Final(s) => (s.as_str(), None, Some(finished.clone()), None, None),
            Outcome::Retry(at) => ("queued", Some(ts(*at)), None, None, None),
            Outcome::AwaitApproval { deadline } => (
                "awaiting_approval",
                None,
                None,
                Some("pending".to_string()),
                deadline.map(ts),
            ),
        };
        let row = [
            Some(state.to_string()),
            run_at,
            fin,
            r.error.clone(),
            r.internal_error.clone(),
            r.error_entry.as_ref().map(Value::to_string),
            r.status_text.clone(),
            r.progress.clone(),
            r.output_tail.clone(),
            approval,
            deadline,
            Some(r.id.clone()),
        ];
        for (col, v) in cols.iter_mut().zip(row) {
            col.push(v);
        }
        attempts.push(r.attempt);
        tokens.push(token.clone());
    }
    let mut params: Vec<P<'_>> = cols.iter().map(|c| c as P<'_>).collect();
    params.push(&attempts);
    params.push(&tokens);
    let rows = query(c, FINISH_MANY, &params, "finish runs").await?;
    rows.iter()
        .map(|r| Ok((get::<String>(r, 0)?, get::<String>(r, 1)?)))
        .collect()
}

async fn end_waiting<C: GenericClient>(
    c: &C,
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
    let entry = r.error_entry.as_ref().map(Value::to_string);
    let n = exec(
        c,
        END_WAITING,
        &[
            &state.as_str(),
            &ts(now),
            &r.error,
            &r.internal_error,
            &entry,
            &mark.map(|m| m.state),
            &mark.map(|m| m.by.as_str()),
            &mark.and_then(|m| m.note.as_deref()),
            &r.id,
            &expected.as_str(),
            &r.attempt,
        ],
        "end waiting run",
    )
    .await?;
    Ok(n == 1)
}

/// A blob to write: (session, path, run, bytes, truncated).
type BlobRow<'a> = (&'a str, String, &'a str, &'a [u8], bool);

/// Writes (or replaces) blobs in one statement; a path given twice keeps its last content.
pub(crate) async fn put_blobs<C: GenericClient>(
    c: &C,
    blobs: &[BlobRow<'_>],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if blobs.is_empty() {
        return Ok(());
    }
    let mut last: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, b) in blobs.iter().enumerate() {
        last.insert((b.0, b.1.as_str()), i);
    }
    let mut keep: Vec<usize> = last.into_values().collect();
    keep.sort_unstable();
    let session: Vec<&str> = keep.iter().map(|&i| blobs[i].0).collect();
    let path: Vec<&str> = keep.iter().map(|&i| blobs[i].1.as_str()).collect();
    let run: Vec<&str> = keep.iter().map(|&i| blobs[i].2).collect();
    let content: Vec<&[u8]> = keep.iter().map(|&i| blobs[i].3).collect();
    let size: Vec<i64> = content.iter().map(|b| b.len() as i64).collect();
    let cut: Vec<i64> = keep.iter().map(|&i| blobs[i].4 as i64).collect();
    exec(
        c,
        "INSERT INTO blobs (session_id, path, run_id, content, size, truncated, created_at, updated_at) \
         SELECT s, p, r, b, n, t, $7, $7 FROM unnest($1::text[], $2::text[], $3::text[], \
         $4::bytea[], $5::bigint[], $6::bigint[]) AS u(s, p, r, b, n, t) \
         ON CONFLICT (session_id, path) DO UPDATE SET content = excluded.content, \
         size = excluded.size, truncated = excluded.truncated, run_id = excluded.run_id, \
         updated_at = excluded.updated_at",
        &[&session, &path, &run, &content, &size, &cut, &ts(now)],
        "put blobs",
    )
    .await?;
    Ok(())
}

/// The blobs and messages of ends that applied: the log (or the one so far, or an empty
/// one), the result (or `{"status", "error"}`), extra blobs, and one message per run attempt
/// (`inbox_run_idx` fails the transaction on a second).
pub(crate) async fn write_artifacts<C: GenericClient>(
    c: &C,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if records.is_empty() {
        return Ok(());
    }
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
    let mut blobs: Vec<BlobRow<'_>> = Vec::new();
    let (mut empty_sessions, mut empty_paths, mut empty_runs) =
        (Vec::new(), Vec::new(), Vec::new());
    for (r, fallback) in records.iter().zip(&fallback) {
        let log_path = format!("/.background/{}/output.log", r.id);
        if let Some((log, cut)) = &r.log {
            blobs.push((&r.session_id, log_path, &r.id, log, *cut));
        } else if matches!(r.outcome, Outcome::Final(_)) {
            empty_sessions.push(r.session_id.as_str());
            empty_paths.push(log_path);
            empty_runs.push(r.id.as_str());
        }
        if let Some(res) = r.result.as_ref().or(fallback.as_ref()) {
            let path = format!("/.background/{}/result.json", r.id);
            blobs.push((&r.session_id, path, &r.id, res, false));
        }
        for (path, content) in &r.extra_blobs {
            blobs.push((&r.session_id, path.clone(), &r.id, content, false));
        }
    }
    let encoded: Vec<Option<String>> = records
        .iter()
        .map(|r| match (&r.message, &r.message_data) {
            (Some(m), None) => Some(m.data.to_string()),
            _ => None,
        })
        .collect();
    let messages: Vec<(&crate::inbox::NewMessage, &str)> = records
        .iter()
        .zip(&encoded)
        .filter_map(|(r, late)| {
            let m = r.message.as_ref()?;
            Some((m, r.message_data.as_deref().or(late.as_deref())?))
        })
        .collect();
    // The three writes are independent: pipelined, one round trip.
    let ensure = async {
        if empty_paths.is_empty() {
            return Ok(());
        }
        exec(
            c,
            "INSERT INTO blobs (session_id, path, run_id, content, size, truncated, created_at, updated_at) \
             SELECT s, p, r, '\\x'::bytea, 0, 0, $4, $4 FROM unnest($1::text[], $2::text[], $3::text[]) \
             AS u(s, p, r) ON CONFLICT (session_id, path) DO NOTHING",
            &[&empty_sessions, &empty_paths, &empty_runs, &ts(now)],
            "ensure logs",
        )
        .await
        .map(|_| ())
    };
    tokio::try_join!(
        ensure,
        put_blobs(c, &blobs, now),
        super::inbox::insert_many(c, &messages, now)
    )?;
    Ok(())
}
