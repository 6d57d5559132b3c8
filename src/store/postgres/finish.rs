//! The one end-writer on Postgres ([`record_ends`]): each end's fenced state change, then the
//! blobs and inbox messages of the ends that applied, in the caller's transaction. What it
//! writes is decided in [`crate::store::end_plan`]; this file is its statements. A caller
//! with more to do (the finisher's settle, a rescue) does its other row writes first
//! ([`apply_ends`], then its claim), and the messages last ([`Deferred::flush`]), so it holds
//! its sessions' inbox locks (see [`super::locks::take_inbox`]) only from the messages to its
//! commit.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::{P, compose, exec, get, query};
use crate::clock::ts;
use crate::error::StoreError;
use crate::run::{Fence, FinishRecord, Outcome};
use crate::store::end_plan::{self, BlobRow, ClearedLog};

/// The fenced ends of running attempts, all in one statement: each applies only while its
/// (id, attempt, lease_token) still match; returns the ids that applied, with their tools.
/// `errors` grows by one entry (text concatenation keeps the stored JSON as written). A
/// suspension, like a hold for approval, gives its attempt back; every other end clears
/// `wait_kind` and `wait_event` (bound NULL). The state guard is written so that no partial
/// index matches it: each end is a primary-key probe, never a scan of every running run
/// (see the claim's update in `claim.rs`).
const FINISH_MANY: &str = "UPDATE runs r SET state = u.state, run_at = coalesce(u.run_at, r.run_at), \
    finished_at = u.finished_at, error = u.error, internal_error = u.internal_error, \
    errors = CASE WHEN u.entry IS NULL THEN r.errors WHEN r.errors = '[]' THEN '[' || u.entry || ']' \
        ELSE left(r.errors, length(r.errors) - 1) || ',' || u.entry || ']' END, \
    status_text = coalesce(u.status_text, r.status_text), progress = coalesce(u.progress, r.progress), \
    output_tail = coalesce(u.output_tail, r.output_tail), \
    approval_state = coalesce(u.approval, r.approval_state), \
    approval_deadline = coalesce(u.deadline, r.approval_deadline), \
    attempt = CASE WHEN u.state = 'awaiting_approval' OR u.wait_kind IS NOT NULL \
        THEN r.attempt - 1 ELSE r.attempt END, \
    wait_kind = u.wait_kind, wait_event = u.wait_event, snoozes = r.snoozes + u.snoozed, \
    result = coalesce(u.result, r.result), \
    started_at = CASE WHEN u.state = 'awaiting_approval' THEN NULL ELSE r.started_at END, \
    heartbeat_at = CASE WHEN u.state = 'awaiting_approval' THEN NULL ELSE r.heartbeat_at END, \
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL \
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
        $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::bigint[], \
        $14::text[], $15::text[], $16::text[], $17::bigint[], $18::bytea[]) WITH ORDINALITY \
        AS u(state, run_at, finished_at, error, internal_error, entry, status_text, progress, \
        output_tail, approval, deadline, id, attempt, token, wait_kind, wait_event, snoozed, \
        result, n) \
    WHERE r.id = u.id AND (r.state = 'running') IS TRUE AND r.attempt = u.attempt AND r.lease_token = u.token \
    RETURNING r.id, r.tool, u.n";

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
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, \
    wait_kind = NULL, wait_event = NULL, result = $12 \
    WHERE id = $9 AND state = $10 AND attempt = $11";

/// The one end-writer on Postgres: each end's fenced state change, then composition
/// ([`compose::after_ends`]: batches, dependents and waiting parents move with the ends, in
/// the same transaction), then the blobs and messages of the ends that applied (and of the
/// dependents composition cancelled, and the batches' completion messages). Per record,
/// whether it applied.
pub(crate) async fn record_ends<C: GenericClient>(
    c: &C,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<Vec<bool>, StoreError> {
    Ok(record_ends_freeing(c, records, now).await?.0)
}

/// [`record_ends`], with the tool of each running attempt that ended, by run id: the slots
/// the ends freed.
pub(crate) async fn record_ends_freeing<C: GenericClient>(
    c: &C,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<(Vec<bool>, HashMap<String, String>), StoreError> {
    let (applied, tools, later) = apply_ends(c, records, now).await?;
    later.flush(c, now).await?;
    Ok((applied, tools))
}

/// Prepares (cached per connection) the ends' update of [`apply_ends`], so that a pipeline
/// joining it sends that update before anything else.
pub(crate) async fn prepare<C: GenericClient>(c: &C) -> Result<(), StoreError> {
    super::sql::prepare(c, FINISH_MANY, "finish runs").await?;
    Ok(())
}

/// What [`apply_ends`] leaves to write after every row lock: the blobs and messages of the
/// ends that applied, then those their composition caused.
pub(crate) struct LaterWrites<'a> {
    ends: Vec<&'a FinishRecord>,
    composed: Deferred,
}

impl LaterWrites<'_> {
    /// Writes them, in order, holding the inbox lock of every session they write a message
    /// to from here to the commit.
    pub(crate) async fn flush<C: GenericClient>(
        &self,
        c: &C,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let composed = self.composed.take();
        if !composed.is_empty() {
            // More than one statement writes messages (see `lock_inboxes`).
            let mut sessions: Vec<&str> = self.ends.iter().map(|r| r.session_id.as_str()).collect();
            sessions.extend(message_sessions(&composed));
            lock_inboxes(c, sessions).await?;
        }
        write_artifacts(c, &self.ends, now).await?;
        Deferred::write(c, &composed, now).await
    }
}

/// The row writes of the ends and of what they compose (batches, dependents, waiting
/// parents): per record whether it applied, and the tools of the attempts that ended; their
/// blobs and messages are kept for [`Deferred::flush`], which the caller runs after every
/// other row write and lock of its transaction (a settle's claim).
///
/// Every row lock comes before the inbox locks (taken by the flush, held to the commit):
/// composition locks the batches, waiting parents and dependents of the ends, and a
/// transaction holding an inbox lock while it waits for such a row would deadlock with one
/// that holds the row (a parent's step save, say) and waits for that inbox lock.
pub(crate) async fn apply_ends<'a, C: GenericClient>(
    c: &C,
    records: &[&'a FinishRecord],
    now: DateTime<Utc>,
) -> Result<(Vec<bool>, HashMap<String, String>, LaterWrites<'a>), StoreError> {
    // When every end is fenced by its lease, their state changes are one statement, and the
    // composition facts of the final ones go on its round trip, sent after it (it is prepared
    // first, so nothing overtakes it): each statement runs after the one before, and sees
    // its changes and holds its locks.
    let finals: Vec<&str> = records
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Final(_)))
        .map(|r| r.id.as_str())
        .collect();
    let leased = records.iter().all(|r| matches!(r.fence, Fence::Lease(_)));
    let ((applied, tools), read) = if leased && !finals.is_empty() {
        prepare(c).await?;
        let (rows, read) = tokio::try_join!(
            biased;
            apply_rows(c, records, now),
            compose::facts(c, &finals),
        )?;
        (rows, Some(read))
    } else {
        (apply_rows(c, records, now).await?, None)
    };
    let done = end_plan::applied_only(records, &applied);
    let composed = Deferred::default();
    compose::after_ends(c, &done, now, &composed, read).await?;
    Ok((
        applied,
        tools,
        LaterWrites {
            ends: done,
            composed,
        },
    ))
}

/// The end-writer's own part as composition takes it: each end's row writes at once, its
/// blobs and message (and each batch's completion message) kept, in order, for
/// [`Deferred::flush`] after every row lock of the transaction.
#[derive(Default)]
pub(crate) struct Deferred {
    kept: std::sync::Mutex<Vec<Kept>>,
}

enum Kept {
    Ends(Vec<FinishRecord>),
    Batch(compose::BatchMessage),
}

impl Deferred {
    fn keep(&self, k: Kept) {
        // Never held across an await; a poisoned lock still holds the list.
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(k);
    }

    /// What was kept, in order, leaving none.
    fn take(&self) -> Vec<Kept> {
        std::mem::take(
            &mut *self
                .kept
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Writes what was kept, in order (more than one statement of messages: with their
    /// sessions' inbox locks taken first, all at once in key order).
    pub(crate) async fn flush<C: GenericClient>(
        &self,
        c: &C,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let kept = self.take();
        if kept.len() > 1 {
            lock_inboxes(c, message_sessions(&kept).collect()).await?;
        }
        Self::write(c, &kept, now).await
    }

    async fn write<C: GenericClient>(
        c: &C,
        kept: &[Kept],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        for k in kept {
            match k {
                Kept::Ends(ends) => {
                    let refs: Vec<&FinishRecord> = ends.iter().collect();
                    write_artifacts(c, &refs, now).await?;
                }
                Kept::Batch(m) => {
                    super::inbox::insert_batch_message(
                        c,
                        &m.session_id,
                        m.completion,
                        &m.body,
                        &m.data,
                        now,
                    )
                    .await?;
                }
            }
        }
        Ok(())
    }
}

/// The sessions `kept` writes messages to (with repeats).
fn message_sessions(kept: &[Kept]) -> impl Iterator<Item = &str> {
    kept.iter().flat_map(|k| match k {
        Kept::Ends(ends) => ends
            .iter()
            .map(|r| r.session_id.as_str())
            .collect::<Vec<_>>(),
        Kept::Batch(m) => vec![m.session_id.as_str()],
    })
}

/// Takes the inbox locks of `sessions` before a transaction writes messages in more than one
/// statement: each statement takes its own sessions' locks, in key order within it, but two
/// statements taking theirs one after the other could wait in a cycle with another
/// transaction's. The statements then pass through the locks they already hold.
async fn lock_inboxes<C: GenericClient>(c: &C, mut sessions: Vec<&str>) -> Result<(), StoreError> {
    sessions.sort_unstable();
    sessions.dedup();
    super::locks::take_inbox(c, &sessions).await
}

impl compose::PlainEnds for Deferred {
    async fn record<C: GenericClient>(
        &self,
        c: &C,
        records: &[&FinishRecord],
        now: DateTime<Utc>,
    ) -> Result<Vec<bool>, StoreError> {
        let (applied, _) = apply_rows(c, records, now).await?;
        let done = end_plan::applied_only(records, &applied);
        if !done.is_empty() {
            self.keep(Kept::Ends(done.into_iter().cloned().collect()));
        }
        Ok(applied)
    }

    fn batch_message(&self, m: compose::BatchMessage) {
        self.keep(Kept::Batch(m));
    }
}

/// The row writes of each end: its fenced state change, and for the ends that applied their
/// step records and the wake-up of an event already sent. Their blobs and messages are
/// [`write_artifacts`], after every row lock.
async fn apply_rows<C: GenericClient>(
    c: &C,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<(Vec<bool>, HashMap<String, String>), StoreError> {
    let (applied, tools) = apply_states(c, records, now).await?;
    let done = end_plan::applied_only(records, &applied);
    for r in done.iter().filter(|r| !r.steps.is_empty()) {
        super::journal::write_entries(c, r.id.as_str(), r.attempt, &r.steps, now).await?;
    }
    let mut woke = false;
    for (id, event) in end_plan::event_waits(&done) {
        woke |= super::journal::wake_if_sent(c, id, event, now).await?;
    }
    if woke {
        // Due now: other hosts' workers learn it from the feed.
        super::notify(c).await?;
    }
    Ok((applied, tools))
}

/// The fenced state change of every record: per record, whether it applied, and the tool of
/// each running attempt that ended, by run id.
async fn apply_states<C: GenericClient>(
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
        // Judged per record (its place in the batch), not per run: two ends of one run in a
        // batch, one of them stale, must not both count as applied.
        for (n, id, tool) in finish_many(c, leased.iter().map(|&i| records[i]), now).await? {
            if let Some(&i) = leased.get(n) {
                applied[i] = true;
            }
            tools.insert(id, tool);
        }
    }
    for (i, r) in records.iter().enumerate() {
        if let Fence::Waiting(expected) = r.fence {
            let end = end_plan::WaitingEnd::of(r, expected, now)?;
            applied[i] = end_waiting(c, &end).await?;
        }
    }
    Ok((applied, tools))
}

/// The columns of [`FINISH_MANY`], one row per running attempt's end.
#[derive(Default)]
struct FinishColumns {
    text: [Vec<Option<String>>; 12],
    attempts: Vec<i64>,
    tokens: Vec<String>,
    wait_kinds: Vec<Option<&'static str>>,
    wait_events: Vec<Option<String>>,
    snoozed: Vec<i64>,
    results: Vec<Option<Vec<u8>>>,
}

impl FinishColumns {
    fn push(&mut self, r: &FinishRecord, token: &str, now: DateTime<Utc>) {
        let s = end_plan::StateChange::of(r, now);
        let row = [
            Some(s.state.to_string()),
            s.run_at,
            s.finished_at,
            r.error.clone(),
            r.internal_error.clone(),
            end_plan::error_entry(r),
            r.status_text.clone(),
            r.progress.clone(),
            r.output_tail.clone(),
            s.approval.map(str::to_string),
            s.deadline,
            Some(r.id.to_string()),
        ];
        for (col, v) in self.text.iter_mut().zip(row) {
            col.push(v);
        }
        self.attempts.push(r.attempt);
        self.tokens.push(token.to_string());
        self.wait_kinds.push(s.wait_kind);
        self.wait_events.push(s.wait_event.map(str::to_string));
        self.snoozed.push(s.snoozed);
        self.results
            .push(s.result.map(std::borrow::Cow::into_owned));
    }
}

/// Ends running attempts in one statement; per end that applied: its place among `records`
/// (0-based), its run id and tool.
async fn finish_many<'a, C: GenericClient>(
    c: &C,
    records: impl Iterator<Item = &'a FinishRecord>,
    now: DateTime<Utc>,
) -> Result<Vec<(usize, String, String)>, StoreError> {
    let mut cols = FinishColumns::default();
    for r in records {
        if let Fence::Lease(token) = &r.fence {
            cols.push(r, token, now);
        }
    }
    let mut params: Vec<P<'_>> = cols.text.iter().map(|c| c as P<'_>).collect();
    params.push(&cols.attempts);
    params.push(&cols.tokens);
    params.push(&cols.wait_kinds);
    params.push(&cols.wait_events);
    params.push(&cols.snoozed);
    params.push(&cols.results);
    let rows = query(c, FINISH_MANY, &params, "finish runs").await?;
    rows.iter()
        .map(|r| {
            let n = usize::try_from(get::<i64>(r, 2)? - 1).unwrap_or(usize::MAX);
            Ok((n, get::<String>(r, 0)?, get::<String>(r, 1)?))
        })
        .collect()
}

async fn end_waiting<C: GenericClient>(
    c: &C,
    w: &end_plan::WaitingEnd<'_>,
) -> Result<bool, StoreError> {
    let result = w.result.as_deref();
    let params: [P<'_>; 12] = [
        &w.state,
        &w.at,
        &w.error,
        &w.internal_error,
        &w.entry,
        &w.approval,
        &w.by,
        &w.note,
        &w.id,
        &w.expected,
        &w.attempt,
        &result,
    ];
    Ok(exec(c, END_WAITING, &params, "end waiting run").await? == 1)
}

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
        last.insert((b.session_id, b.path.as_str()), i);
    }
    let mut keep: Vec<usize> = last.into_values().collect();
    keep.sort_unstable();
    let kept: Vec<&BlobRow<'_>> = keep.iter().map(|&i| &blobs[i]).collect();
    let session: Vec<&str> = kept.iter().map(|b| b.session_id).collect();
    let path: Vec<&str> = kept.iter().map(|b| b.path.as_str()).collect();
    let run: Vec<&str> = kept.iter().map(|b| b.run_id).collect();
    let content: Vec<&[u8]> = kept.iter().map(|b| &*b.content).collect();
    let size: Vec<i64> = content.iter().map(|b| b.len() as i64).collect();
    let cut: Vec<i64> = kept.iter().map(|b| b.truncated as i64).collect();
    exec(
        c,
        "INSERT INTO blob_rows (session_id, path, run_id, content, size, truncated, created_at, updated_at) \
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

/// Deletes the earlier logs of runs whose final log is empty (no row is written for an empty
/// log; a missing one is an index probe that writes nothing).
///
/// Only the logs an earlier attempt may have left ([`ClearedLog::may_have_a_row`]): a first
/// attempt's empty log needs no statement. That is most ends, and the statement is not free
/// on a young table: its cached generic plan, made while `blob_rows` was nearly empty, reads the
/// whole table at every settle (1.8 ms each by the end of a 20,000-run drain) until an
/// `ANALYZE` replans it.
async fn clear_logs<C: GenericClient>(c: &C, logs: &[ClearedLog<'_>]) -> Result<(), StoreError> {
    let logs: Vec<&ClearedLog<'_>> = logs.iter().filter(|l| l.may_have_a_row()).collect();
    if logs.is_empty() {
        return Ok(());
    }
    let session: Vec<&str> = logs.iter().map(|l| l.session_id).collect();
    let path: Vec<&str> = logs.iter().map(|l| l.path.as_str()).collect();
    exec(
        c,
        "DELETE FROM blob_rows b USING unnest($1::text[], $2::text[]) AS u(s, p) \
         WHERE b.session_id = u.s AND b.path = u.p",
        &[&session, &path],
        "clear logs",
    )
    .await?;
    Ok(())
}

/// The blobs and messages of ends that applied (see [`end_plan::Artifacts`]); one message
/// per run attempt (`inbox_run_idx` fails the transaction on a second).
async fn write_artifacts<C: GenericClient>(
    c: &C,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if records.is_empty() {
        return Ok(());
    }
    let plan = end_plan::Artifacts::of(records);
    let messages = plan.message_refs();
    // The three writes are independent: pipelined, one round trip.
    tokio::try_join!(
        clear_logs(c, &plan.cleared_logs),
        put_blobs(c, &plan.blobs, now),
        super::inbox::insert_many(c, &messages, now)
    )?;
    Ok(())
}
