//! Composition on Postgres: batches, dependencies and child runs kept in step with inserts,
//! ends and retries, in the transaction that causes each change, as on SQLite
//! (`src/store/sqlite/compose.rs` is the reference; what each change writes is planned in
//! [`crate::store::compose_plan`]).
//!
//! Many hosts write at once, under READ COMMITTED, so each decision that depends on another
//! transaction's rows is taken under a row lock that makes the two serialize:
//! - a batch's counters change in one `UPDATE ... RETURNING`: its row lock lets exactly one
//!   transaction see `pending` reach 0 (batches are counted in id order);
//! - a parent waiting for its children is locked before its children are looked at, in a
//!   statement of their own (a fresh snapshot), so of two children ending at once the second
//!   to lock it sees the first's end;
//! - a new dependent locks its parents `FOR SHARE` (in id order): a parent's end either
//!   commits first (its final state is read) or waits for the insert (and resolves its edge).
//!
//! Locks come in one order, so two hosts never deadlock over them: runs' rows (an end's own
//! rows, then the parents it may wake, then batches, then dependents; an insert or a retry
//! locks the parents first), and the inbox lock last: the messages composition causes go
//! through [`PlainEnds`], which the end-writer writes after every row lock.
//!
//! The end-writer pays two statements per batch of ends for plain runs: [`facts`] reads only
//! the ended runs that belong to a batch, were spawned by a run, or have dependents. The plain
//! end-writer comes in as a parameter ([`PlainEnds`]): it imports this file, not the reverse.

use std::collections::HashMap;
use std::future::Future;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::codec::{RUN_COLUMNS, run_from_row, ts_opt, ts_req};
use super::{P, exec, get, query, query_opt};
use crate::clock::ts;
use crate::error::StoreError;
use crate::ids::{BatchId, RunId};
use crate::run::{
    Batch, BatchFilter, Callback, DepMode, Dependency, FailedRun, FinishRecord, Inserted, Linked,
    LinkedResult, LinkedRun, NewBatch, NewRun, Outcome, RunLinks, RunState, WaitKind,
};
use crate::store::compose_plan::{self, DepEffect, DepStart};

/// The end-writer without composition: each end's own writes. Composition cancels dependents
/// through it (and carries on from their ends itself), and posts batches' completion messages
/// through it, so the writer decides when the messages (which take the inbox lock) are
/// written: after composition's row locks.
pub(crate) trait PlainEnds: Sync {
    /// Records the ends (their blobs and messages now or later in this transaction); per
    /// record, whether it applied.
    fn record<C: GenericClient>(
        &self,
        c: &C,
        records: &[&FinishRecord],
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<bool>, StoreError>> + Send;

    /// Posts a batch's completion message (now or later in this transaction, in order with
    /// the ends' messages).
    fn batch_message(&self, m: BatchMessage);
}

/// A batch's `batch_completed` message: no run (`run_id` NULL), `attempt` = the completion.
pub(crate) struct BatchMessage {
    /// The batch's session.
    pub session_id: String,
    /// Which completion (1 unless a retry reopened the batch).
    pub completion: i64,
    /// The message text.
    pub body: String,
    /// The summary JSON.
    pub data: String,
}

/// What the end-writer needs to know of an ended run for composition.
struct Facts {
    id: String,
    state: String,
    batch_id: Option<String>,
    parent_run_id: Option<String>,
    has_dependents: bool,
}

/// The ended runs among `ids` that composition has work for.
/// The ended runs themselves (primary-key lookups).
const ENDED: &str = "SELECT r.id, r.state, r.batch_id, r.parent_run_id FROM runs r \
    WHERE r.id = ANY($1::text[])";

/// Which of the ended runs have unresolved dependents: a probe of the partial index
/// `run_deps_parent_idx` per id. A correlated `EXISTS` in one statement with the lookups was
/// planned as a scan of every unresolved edge: 150 ms per batch of ends beside 100,000
/// blocked runs.
const WITH_DEPENDENTS: &str = "SELECT DISTINCT d.parent_id FROM run_deps d \
    WHERE d.parent_id = ANY($1::text[]) AND d.resolved IS NULL";

/// The composition facts of the ended runs `ids`, on one round trip. Read after the ends'
/// state changes (a later statement of the transaction, under their row locks): a dependent
/// inserted meanwhile has its edge committed by then, or waits for this transaction's end.
pub(crate) async fn facts<C: GenericClient>(c: &C, ids: &[&str]) -> Result<EndFacts, StoreError> {
    let args: [P<'_>; 1] = [&ids];
    let (dependents, rows) = tokio::try_join!(
        query(c, WITH_DEPENDENTS, &args, "read dependents"),
        query(c, ENDED, &args, "read composition facts"),
    )?;
    let with_dependents: Vec<String> = dependents
        .iter()
        .map(|r| get(r, 0))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for r in &rows {
        let f = Facts {
            id: get(r, 0)?,
            state: get(r, 1)?,
            batch_id: get(r, 2)?,
            parent_run_id: get(r, 3)?,
            has_dependents: false,
        };
        let has_dependents = with_dependents.contains(&f.id);
        if has_dependents || f.batch_id.is_some() || f.parent_run_id.is_some() {
            out.push(Facts {
                has_dependents,
                ..f
            });
        }
    }
    Ok(EndFacts(out))
}

/// What composition needs to know of some ended runs ([`facts`]): those it has work for.
pub(crate) struct EndFacts(Vec<Facts>);

impl EndFacts {
    /// Only the facts of `ids`.
    fn of(self, ids: &[String]) -> Vec<Facts> {
        let ids: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
        self.0
            .into_iter()
            .filter(|f| ids.contains(f.id.as_str()))
            .collect()
    }
}

/// Composition after the ends `done` (whose state changes applied) in this transaction:
/// each final end counts in its batch (completing it), wakes the run that spawned it if
/// that run waits for its children, and resolves its dependents (releasing or cancelling
/// them through `plain`; a cancelled dependent's own end is handled the same way, until
/// nothing is left). A suspension to wait for children is due at once if none is
/// unfinished. `read`: the [`facts`] of `done`'s final ends (or more), if already read after
/// their state changes.
pub(crate) async fn after_ends<C: GenericClient, W: PlainEnds>(
    c: &C,
    done: &[&FinishRecord],
    now: DateTime<Utc>,
    plain: &W,
    mut read: Option<EndFacts>,
) -> Result<(), StoreError> {
    let mut due = false;
    for r in done {
        if let Outcome::Suspend(s) = &r.outcome
            && s.kind == WaitKind::Children
        {
            // Its own row is locked by its end: the look at its children is a statement
            // after that lock.
            due |= wake_if_children_done(c, r.id.as_str(), now).await?;
        }
    }
    let mut ended: Vec<String> = done
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Final(_)))
        .map(|r| r.id.to_string())
        .collect();
    while !ended.is_empty() {
        let facts = match read.take() {
            Some(read) => read.of(&ended),
            None => {
                let ids: Vec<&str> = ended.iter().map(String::as_str).collect();
                facts(c, &ids).await?.0
            }
        };
        if facts.is_empty() {
            break;
        }
        let mut parents: Vec<&str> = facts
            .iter()
            .filter_map(|f| f.parent_run_id.as_deref())
            .collect();
        parents.sort_unstable();
        parents.dedup();
        for p in parents {
            lock_run(c, p).await?;
            due |= wake_if_children_done(c, p, now).await?;
        }
        let counts = compose_plan::count_by_batch(
            facts
                .iter()
                .filter_map(|f| Some((f.batch_id.as_deref()?, f.state.as_str()))),
        );
        for (batch, n) in counts {
            due |= count_ends(c, batch, n, now, plain).await?;
        }
        let mut next = Vec::new();
        for f in facts.iter().filter(|f| f.has_dependents) {
            due |= resolve_dependents(c, &f.id, &f.state, now, &mut next, plain).await?;
        }
        ended = next;
    }
    if due {
        // Due now: other hosts' workers learn it from the feed.
        super::notify(c).await?;
    }
    Ok(())
}

/// Locks a run's row to the commit (a lock of its own, so what the next statement reads is
/// as of after it).
async fn lock_run<C: GenericClient>(c: &C, id: &str) -> Result<(), StoreError> {
    query(
        c,
        "SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE",
        &[&id],
        "lock run",
    )
    .await?;
    Ok(())
}

/// A run that waits for its children is due once none of them is unfinished (its wait kind
/// stays: the claim that takes it is a resume).
const WAKE_PARENT: &str = "UPDATE runs SET run_at = $2 WHERE id = $1 AND state = 'queued' \
    AND wait_kind = 'children' AND run_at > $2 AND NOT EXISTS (SELECT 1 FROM runs c \
    WHERE c.parent_run_id = $1 \
    AND c.state IN ('queued', 'awaiting_approval', 'running'))";

/// Wakes `parent` if it waits for its children and none is unfinished; whether it did. The
/// caller holds `parent`'s row lock.
async fn wake_if_children_done<C: GenericClient>(
    c: &C,
    parent: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    Ok(exec(c, WAKE_PARENT, &[&parent, &ts(now)], "wake parent").await? > 0)
}

/// Resolves `parent`'s unresolved edges with its final `state`, then releases or cancels
/// each dependent; the ids of dependents cancelled go to `cancelled`. Whether a dependent
/// became due.
async fn resolve_dependents<C: GenericClient, W: PlainEnds>(
    c: &C,
    parent: &str,
    state: &str,
    now: DateTime<Utc>,
    cancelled: &mut Vec<String>,
    plain: &W,
) -> Result<bool, StoreError> {
    let rows = query(
        c,
        "UPDATE run_deps SET resolved = $2 WHERE parent_id = $1 AND resolved IS NULL \
         RETURNING child_id, mode",
        &[&parent, &state],
        "resolve dependents",
    )
    .await?;
    let mut edges: Vec<(String, String)> = rows
        .iter()
        .map(|r| Ok((get(r, 0)?, get(r, 1)?)))
        .collect::<Result<_, StoreError>>()?;
    // Children in id order: two parents' ends lock shared children alike.
    edges.sort_unstable();
    let mut due = false;
    for (child, mode) in edges {
        let mode: DepMode = mode.parse().unwrap_or(DepMode::All);
        match compose_plan::dep_effect(mode, state) {
            DepEffect::Release => due |= release(c, &child, now).await?,
            DepEffect::Cancel => {
                if cancel_dependent(c, &child, parent, state, now, plain).await? {
                    cancelled.push(child);
                }
            }
        }
    }
    Ok(due)
}

/// One parent fewer for `child`; at the last, a blocked child is due now.
const RELEASE: &str = "UPDATE runs SET deps_pending = deps_pending - 1, \
    wait_kind = CASE WHEN deps_pending <= 1 AND wait_kind = 'parents' THEN NULL ELSE wait_kind END, \
    run_at = CASE WHEN deps_pending <= 1 \
        AND (wait_kind = 'parents' OR run_at >= '9999-12-31T23:59:59.999Z') THEN $2 ELSE run_at END \
    WHERE id = $1 AND deps_pending > 0 RETURNING deps_pending = 0 AND state = 'queued'";

/// Releases `child` from one parent; whether it became due.
async fn release<C: GenericClient>(
    c: &C,
    child: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let row = query_opt(c, RELEASE, &[&child, &ts(now)], "release dependent").await?;
    Ok(match row {
        Some(r) => get::<bool>(&r, 0)?,
        None => false,
    })
}

/// Reads a run with its row locked to the commit (the latest committed version).
async fn get_locked<C: GenericClient>(
    c: &C,
    id: &str,
) -> Result<Option<crate::run::Run>, StoreError> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 FOR NO KEY UPDATE");
    query_opt(c, &sql, &[&id], "get run")
        .await?
        .as_ref()
        .map(run_from_row)
        .transpose()
}

/// Cancels `child` (if it is still waiting: queued or awaiting approval) because `parent`
/// ended `state`, through the plain end-writer. Whether it ended.
async fn cancel_dependent<C: GenericClient, W: PlainEnds>(
    c: &C,
    child: &str,
    parent: &str,
    state: &str,
    now: DateTime<Utc>,
    plain: &W,
) -> Result<bool, StoreError> {
    // Locked first: its fenced end must not miss a concurrent change of its state (an
    // approval), which would leave it blocked with its edge resolved.
    let Some(run) = get_locked(c, child).await? else {
        return Ok(false);
    };
    if !matches!(run.state, RunState::Queued | RunState::AwaitingApproval) {
        return Ok(false);
    }
    let rec = compose_plan::dependent_cancel(&run, parent, state);
    let applied = plain.record(c, &[&rec], now).await?;
    Ok(applied.first().copied().unwrap_or(false))
}

/// Counts final ends in a batch (`n`: completed, failed, cancelled); the end that leaves no
/// run of it unfinished completes it. The `UPDATE` locks the batch's row to the commit, so
/// of several transactions counting in it exactly one sees `pending` reach 0. Whether a
/// callback run was enqueued.
async fn count_ends<C: GenericClient, W: PlainEnds>(
    c: &C,
    batch: &str,
    n: [i64; 3],
    now: DateTime<Utc>,
    plain: &W,
) -> Result<bool, StoreError> {
    let row = query_opt(
        c,
        "UPDATE batches SET pending = pending - $2, completed = completed + $3, \
         failed = failed + $4, cancelled = cancelled + $5 WHERE id = $1 \
         RETURNING pending, completed_at IS NULL",
        &[&batch, &(n[0] + n[1] + n[2]), &n[0], &n[1], &n[2]],
        "count batch ends",
    )
    .await?;
    let Some(row) = row else {
        return Ok(false);
    };
    let (pending, open): (i64, bool) = (get(&row, 0)?, get(&row, 1)?);
    if pending <= 0 && open {
        complete(c, batch, now, plain).await
    } else {
        Ok(false)
    }
}

/// A batch's first runs that did not complete, oldest first.
async fn first_failures<C: GenericClient>(
    c: &C,
    batch: &str,
) -> Result<Vec<FailedRun>, StoreError> {
    let rows = query(
        c,
        "SELECT id, tool, state, error FROM runs WHERE batch_id = $1 \
         AND state IN ('failed', 'cancelled') ORDER BY id LIMIT $2",
        &[&batch, &(crate::run::composition::FIRST_FAILURES as i64)],
        "read batch failures",
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(FailedRun {
                id: get(r, 0)?,
                tool: get(r, 1)?,
                state: get(r, 2)?,
                error: get(r, 3)?,
            })
        })
        .collect()
}

/// Completes a batch: its callback run (with its edge to the batch), its message (through
/// `plain`) and the completion recorded, in this transaction. Whether a callback run was
/// enqueued.
async fn complete<C: GenericClient, W: PlainEnds>(
    c: &C,
    batch: &str,
    now: DateTime<Utc>,
    plain: &W,
) -> Result<bool, StoreError> {
    let row = query_opt(
        c,
        "SELECT id, session_id, title, total, completed, failed, cancelled, on_complete, \
         completions FROM batches WHERE id = $1",
        &[&batch],
        "read batch",
    )
    .await?;
    let Some(r) = row else {
        return Ok(false);
    };
    let row = compose_plan::BatchRow {
        id: get(&r, 0)?,
        session_id: get(&r, 1)?,
        title: get(&r, 2)?,
        total: get(&r, 3)?,
        completed: get(&r, 4)?,
        failed: get(&r, 5)?,
        cancelled: get(&r, 6)?,
        on_complete: get(&r, 7)?,
        completions: get(&r, 8)?,
    };
    let plan = compose_plan::completion(&row, first_failures(c, batch).await?, now);
    let callback_id = plan.callback.as_ref().map(|cb| cb.id.to_string());
    if let Some(cb) = &plan.callback {
        super::runs::insert_many(c, std::slice::from_ref(cb)).await?;
        exec(
            c,
            "INSERT INTO run_deps (child_id, parent_id, mode, resolved) \
             VALUES ($1, $2, 'batch', 'completed')",
            &[&cb.id.as_str(), &batch],
            "insert callback edge",
        )
        .await?;
    }
    exec(
        c,
        "UPDATE batches SET completed_at = $2, completions = completions + 1, \
         callback_run_id = coalesce($3, callback_run_id) WHERE id = $1",
        &[&batch, &ts(now), &callback_id],
        "complete batch",
    )
    .await?;
    plain.batch_message(BatchMessage {
        session_id: row.session_id,
        completion: plan.summary.completion,
        body: plan.body,
        data: plan.data,
    });
    Ok(plan.callback.is_some())
}

/// Creates a batch row (no runs yet: [`after_insert`] counts them).
pub(crate) async fn create_batch<C: GenericClient>(c: &C, b: &NewBatch) -> Result<(), StoreError> {
    let on_complete = b
        .on_complete
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Invalid(format!("batch callback: {e}")))?;
    exec(
        c,
        "INSERT INTO batches (id, session_id, title, on_complete, created_at) \
         VALUES ($1, $2, $3, $4, $5)",
        &[
            &b.id.as_str(),
            &b.session_id,
            &b.title,
            &on_complete,
            &ts(b.created_at),
        ],
        "insert batch",
    )
    .await?;
    Ok(())
}

/// Locks the parents of `runs` that exist (`FOR SHARE`, in id order) before they are
/// inserted: inserting a run that awaits approval takes the inbox lock, and a parent's end
/// holds its row while it waits for that lock. Nothing for runs without parents.
pub(crate) async fn before_insert<C: GenericClient>(
    c: &C,
    runs: &[NewRun],
) -> Result<(), StoreError> {
    let mut all: Vec<&str> = runs
        .iter()
        .flat_map(|r| r.after.iter().map(RunId::as_str))
        .collect();
    if all.is_empty() {
        return Ok(());
    }
    all.sort_unstable();
    all.dedup();
    lock_parents(c, &all).await.map(|_| ())
}

/// Composition after inserting `runs` (`inserted` per run, in order) in this transaction:
/// batch counters, and each new run's dependencies (blocked, or cancelled at once through
/// `plain` and composition).
pub(crate) async fn after_insert<C: GenericClient, W: PlainEnds>(
    c: &C,
    runs: &[NewRun],
    inserted: &[Inserted],
    now: DateTime<Utc>,
    plain: &W,
) -> Result<(), StoreError> {
    let new: Vec<&NewRun> = runs
        .iter()
        .zip(inserted)
        .filter(|(_, i)| matches!(i, Inserted::New(_)))
        .map(|(r, _)| r)
        .collect();
    // Every parent locked first, in id order (an unknown one refused): the same order as a
    // parent's end takes its row, then its batch.
    let mut all: Vec<&str> = new
        .iter()
        .flat_map(|r| r.after.iter().map(RunId::as_str))
        .collect();
    if !all.is_empty() {
        all.sort_unstable();
        all.dedup();
        let found = lock_parents(c, &all).await?;
        for p in new.iter().flat_map(|r| r.after.iter()) {
            if !found.contains_key(p.as_str()) {
                return Err(StoreError::rejected("after", p.as_str(), "no such run"));
            }
        }
    }
    let mut per_batch: Vec<(&str, i64)> = Vec::new();
    for b in new.iter().filter_map(|r| r.batch_id.as_ref()) {
        match per_batch.iter_mut().find(|(id, _)| *id == b.as_str()) {
            Some((_, n)) => *n += 1,
            None => per_batch.push((b.as_str(), 1)),
        }
    }
    per_batch.sort_unstable();
    for (batch, n) in per_batch {
        join_batch(c, batch, n).await?;
    }
    for run in new.iter().filter(|r| !r.after.is_empty()) {
        add_dependencies(c, run, now, plain).await?;
    }
    Ok(())
}

async fn join_batch<C: GenericClient>(c: &C, batch: &str, n: i64) -> Result<(), StoreError> {
    let changed = exec(
        c,
        "UPDATE batches SET total = total + $2, pending = pending + $2 \
         WHERE id = $1 AND completed_at IS NULL",
        &[&batch, &n],
        "join batch",
    )
    .await?;
    if changed == 1 {
        return Ok(());
    }
    let exists = query_opt(
        c,
        "SELECT 1 FROM batches WHERE id = $1",
        &[&batch],
        "find batch",
    )
    .await?
    .is_some();
    Err(StoreError::rejected(
        "batch",
        batch,
        if exists {
            "has completed: a run cannot join a batch whose runs have all ended"
        } else {
            "no such batch"
        },
    ))
}

/// Locks `ids` (sorted) `FOR SHARE` to the commit and reads their states: a parent's end
/// commits before (its final state is read here) or waits for this transaction (and finds
/// the edges written here). Unknown ids are left out.
async fn lock_parents<C: GenericClient>(
    c: &C,
    ids: &[&str],
) -> Result<HashMap<String, String>, StoreError> {
    let rows = query(
        c,
        "SELECT id, state FROM runs WHERE id = ANY($1::text[]) ORDER BY id FOR SHARE",
        &[&ids],
        "lock parents",
    )
    .await?;
    rows.iter().map(|r| Ok((get(r, 0)?, get(r, 1)?))).collect()
}

/// The state of each of `parents` (locked), in order, refusing an unknown one.
async fn parent_states<C: GenericClient>(
    c: &C,
    parents: &[&str],
) -> Result<Vec<String>, StoreError> {
    let mut sorted = parents.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let found = lock_parents(c, &sorted).await?;
    parents
        .iter()
        .map(|p| {
            found
                .get(*p)
                .cloned()
                .ok_or_else(|| StoreError::rejected("after", *p, "no such run"))
        })
        .collect()
}

const INSERT_EDGES: &str = "INSERT INTO run_deps (child_id, parent_id, mode, resolved) \
    SELECT $1, p, $2, s FROM unnest($3::text[], $4::text[]) AS u(p, s) \
    ON CONFLICT (child_id, parent_id) DO UPDATE SET mode = excluded.mode, \
    resolved = excluded.resolved";

/// Records `run`'s edges and starts it blocked, due, or cancelled.
async fn add_dependencies<C: GenericClient, W: PlainEnds>(
    c: &C,
    run: &NewRun,
    now: DateTime<Utc>,
    plain: &W,
) -> Result<(), StoreError> {
    let mut parents: Vec<&str> = Vec::with_capacity(run.after.len());
    for p in &run.after {
        if !parents.contains(&p.as_str()) {
            parents.push(p.as_str());
        }
    }
    // Read again per run: a parent inserted with it may have been cancelled at once since.
    let states = parent_states(c, &parents).await?;
    let resolved: Vec<Option<&str>> = states
        .iter()
        .map(|s| compose_plan::final_state(s))
        .collect();
    let params: [P<'_>; 4] = [
        &run.id.as_str(),
        &run.after_mode.as_str(),
        &parents,
        &resolved,
    ];
    exec(c, INSERT_EDGES, &params, "insert edges").await?;
    let start = compose_plan::dep_start(
        parents
            .iter()
            .zip(&states)
            .map(|(p, s)| (run.after_mode, *p, s.as_str())),
    );
    start_dependent(c, run.id.as_str(), start, now, plain).await
}

/// Blocks a dependent run, or cancels it (with composition after its end), as `start` says.
async fn start_dependent<C: GenericClient, W: PlainEnds>(
    c: &C,
    id: &str,
    start: DepStart,
    now: DateTime<Utc>,
    plain: &W,
) -> Result<(), StoreError> {
    match start {
        DepStart::Ready => {
            // A new dependent (inserted at the far-future run_at) or a retried one blocked
            // before is due now.
            exec(
                c,
                "UPDATE runs SET deps_pending = 0, \
                 wait_kind = CASE WHEN wait_kind = 'parents' THEN NULL ELSE wait_kind END, \
                 run_at = CASE WHEN run_at >= '9999-12-31T23:59:59.999Z' THEN $2 ELSE run_at END \
                 WHERE id = $1 AND (deps_pending <> 0 OR run_at >= '9999-12-31T23:59:59.999Z')",
                &[&id, &ts(now)],
                "unblock",
            )
            .await?;
            Ok(())
        }
        DepStart::Blocked(n) => {
            exec(
                c,
                "UPDATE runs SET deps_pending = $2, \
                 wait_kind = CASE WHEN state = 'queued' THEN 'parents' ELSE wait_kind END, \
                 run_at = CASE WHEN state = 'queued' THEN $3 ELSE run_at END WHERE id = $1",
                &[&id, &n, &ts(compose_plan::blocked_until())],
                "block",
            )
            .await?;
            Ok(())
        }
        DepStart::Cancel { parent, state } => {
            let Some(run) = get_locked(c, id).await? else {
                return Ok(());
            };
            let rec = compose_plan::dependent_cancel(&run, &parent, &state);
            let applied = plain.record(c, &[&rec], now).await?;
            if applied.first().copied().unwrap_or(false) {
                after_ends(c, &[&rec], now, plain, None).await?;
            }
            Ok(())
        }
    }
}

/// Locks the parents of the runs `ids` (`FOR SHARE`, in id order) before they are re-queued:
/// a parent's end locks its row and then its dependents', so a retry that locked the
/// dependent first and its parents after would deadlock with it.
pub(crate) async fn before_requeue<C: GenericClient>(
    c: &C,
    ids: &[&str],
) -> Result<(), StoreError> {
    query(
        c,
        "SELECT r.id FROM runs r WHERE r.id IN (SELECT d.parent_id FROM run_deps d \
         WHERE d.child_id = ANY($1::text[]) AND d.mode <> 'batch') ORDER BY r.id FOR SHARE OF r",
        &[&ids],
        "lock parents of retried runs",
    )
    .await?;
    Ok(())
}

/// Composition after retries re-queued `runs` (id, the final state each left): each counts
/// again in its batch (reopening it), and its dependencies are evaluated again from its
/// parents' current states (locked, as at insert).
pub(crate) async fn after_requeue<C: GenericClient, W: PlainEnds>(
    c: &C,
    runs: &[(&str, RunState)],
    now: DateTime<Utc>,
    plain: &W,
) -> Result<(), StoreError> {
    for (id, was) in runs {
        let Some(counter) = compose_plan::counter_of(*was) else {
            continue;
        };
        let batch: Option<String> = match query_opt(
            c,
            "SELECT batch_id FROM runs WHERE id = $1",
            &[id],
            "read batch of run",
        )
        .await?
        {
            Some(r) => get(&r, 0)?,
            None => None,
        };
        if let Some(b) = batch {
            // `counter` is one of three column names from compose_plan, never input.
            exec(
                c,
                &format!(
                    "UPDATE batches SET pending = pending + 1, {counter} = {counter} - 1, \
                     completed_at = NULL WHERE id = $1"
                ),
                &[&b],
                "reopen batch",
            )
            .await?;
        }
        let rows = query(
            c,
            "SELECT parent_id, mode FROM run_deps WHERE child_id = $1 AND mode <> 'batch' \
             ORDER BY parent_id",
            &[id],
            "read edges",
        )
        .await?;
        let edges: Vec<(String, String)> = rows
            .iter()
            .map(|r| Ok((get(r, 0)?, get(r, 1)?)))
            .collect::<Result<_, StoreError>>()?;
        if edges.is_empty() {
            continue;
        }
        let parents: Vec<&str> = edges.iter().map(|(p, _)| p.as_str()).collect();
        let found = lock_parents(c, &parents).await?;
        let mut states = Vec::with_capacity(edges.len());
        for (parent, _) in &edges {
            // A parent pruned since counts as completed: it ended before its dependent could.
            let s = found
                .get(parent)
                .cloned()
                .unwrap_or_else(|| "completed".to_string());
            exec(
                c,
                "UPDATE run_deps SET resolved = $3 WHERE child_id = $1 AND parent_id = $2",
                &[id, parent, &compose_plan::final_state(&s)],
                "re-arm edge",
            )
            .await?;
            states.push(s);
        }
        let start = compose_plan::dep_start(
            edges
                .iter()
                .zip(&states)
                .map(|((p, m), s)| (m.parse().unwrap_or(DepMode::All), p.as_str(), s.as_str())),
        );
        start_dependent(c, id, start, now, plain).await?;
    }
    Ok(())
}

// ---- reads ---------------------------------------------------------------------------------

const BATCH_COLUMNS: &str = "id, session_id, title, total, pending, completed, failed, cancelled, \
    on_complete, callback_run_id, completions, created_at, completed_at";

fn batch_from_row(r: &tokio_postgres::Row) -> Result<Batch, StoreError> {
    let completed_at = ts_opt(r, 12)?;
    let on_complete: Option<String> = get(r, 8)?;
    Ok(Batch {
        id: BatchId::from_db(get(r, 0)?),
        session_id: get(r, 1)?,
        title: get(r, 2)?,
        state: if completed_at.is_some() {
            "completed"
        } else {
            "running"
        },
        total: get(r, 3)?,
        pending: get(r, 4)?,
        completed: get(r, 5)?,
        failed: get(r, 6)?,
        cancelled: get(r, 7)?,
        on_complete: on_complete.and_then(|t| serde_json::from_str::<Callback>(&t).ok()),
        callback_run_id: get(r, 9)?,
        completions: get(r, 10)?,
        created_at: ts_req(r, 11)?,
        completed_at,
        states: Default::default(),
        first_failures: Vec::new(),
    })
}

/// One batch with its runs counted by state ("blocked": queued waiting for parents) and its
/// first failures. Call it in one read transaction (one snapshot).
pub(crate) async fn batch_get<C: GenericClient>(
    c: &C,
    id: &str,
) -> Result<Option<Batch>, StoreError> {
    let sql = format!("SELECT {BATCH_COLUMNS} FROM batches WHERE id = $1");
    let Some(row) = query_opt(c, &sql, &[&id], "get batch").await? else {
        return Ok(None);
    };
    let mut b = batch_from_row(&row)?;
    let rows = query(
        c,
        "SELECT CASE WHEN state = 'queued' AND wait_kind = 'parents' THEN 'blocked' \
         ELSE state END AS s, count(*) FROM runs WHERE batch_id = $1 GROUP BY 1",
        &[&id],
        "count batch runs",
    )
    .await?;
    b.states = rows
        .iter()
        .map(|r| Ok((get(r, 0)?, get(r, 1)?)))
        .collect::<Result<_, StoreError>>()?;
    b.first_failures = first_failures(c, id).await?;
    Ok(Some(b))
}

/// Batches, newest first.
pub(crate) async fn batch_list<C: GenericClient>(
    c: &C,
    f: &BatchFilter,
) -> Result<Vec<Batch>, StoreError> {
    let sql = format!(
        "SELECT {BATCH_COLUMNS} FROM batches WHERE ($1::text IS NULL OR session_id = $1) \
         AND ($2::text IS NULL OR id < $2) \
         AND ($3::text IS NULL OR ($3 = 'completed') = (completed_at IS NOT NULL)) \
         ORDER BY id DESC LIMIT $4"
    );
    let before = f.before.as_ref().map(|b| b.as_str());
    let rows = query(
        c,
        &sql,
        &[&f.session, &before, &f.state, &f.limit],
        "list batches",
    )
    .await?;
    rows.iter().map(batch_from_row).collect()
}

async fn dependency_rows<C: GenericClient>(
    c: &C,
    sql: &str,
    id: &str,
) -> Result<Vec<Dependency>, StoreError> {
    let rows = query(c, sql, &[&id], "read edges").await?;
    rows.iter()
        .map(|r| {
            let mode: String = get(r, 2)?;
            Ok(Dependency {
                parent: get(r, 0)?,
                child: get(r, 1)?,
                mode: mode.parse().unwrap_or(DepMode::All),
                resolved: get(r, 3)?,
            })
        })
        .collect()
}

/// A run's links. Call it in one read transaction (one snapshot).
pub(crate) async fn links<C: GenericClient>(c: &C, id: &str) -> Result<RunLinks, StoreError> {
    let Some(head) = query_opt(
        c,
        "SELECT batch_id, parent_run_id FROM runs WHERE id = $1",
        &[&id],
        "read run links",
    )
    .await?
    else {
        return Ok(RunLinks::default());
    };
    let (batch_id, parent_run_id): (Option<String>, Option<String>) =
        (get(&head, 0)?, get(&head, 1)?);
    let parents = dependency_rows(
        c,
        "SELECT parent_id, child_id, mode, resolved FROM run_deps WHERE child_id = $1 \
         ORDER BY parent_id",
        id,
    )
    .await?;
    let dependents = dependency_rows(
        c,
        "SELECT parent_id, child_id, mode, resolved FROM run_deps WHERE parent_id = $1 \
         ORDER BY child_id",
        id,
    )
    .await?;
    let rows = query(
        c,
        "SELECT id, tool, state FROM runs WHERE parent_run_id = $1 ORDER BY id",
        &[&id],
        "read children",
    )
    .await?;
    let children = rows
        .iter()
        .map(|r| {
            Ok(LinkedRun {
                id: get(r, 0)?,
                tool: get(r, 1)?,
                state: get(r, 2)?,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(RunLinks {
        batch_id,
        parents,
        dependents,
        parent_run_id,
        children,
    })
}

/// The outcomes of a run's parents or children, in id order. Call it in one read
/// transaction (one snapshot).
pub(crate) async fn linked_results<C: GenericClient>(
    c: &C,
    id: &str,
    which: Linked,
) -> Result<Vec<LinkedResult>, StoreError> {
    let sql = match which {
        Linked::Parents => {
            "SELECT d.parent_id, r.tool, r.state, r.error, r.result \
             FROM run_deps d LEFT JOIN runs r ON r.id = d.parent_id \
             WHERE d.child_id = $1 ORDER BY d.parent_id"
        }
        Linked::Children => {
            "SELECT r.id, r.tool, r.state, r.error, r.result \
             FROM runs r \
             WHERE r.parent_run_id = $1 ORDER BY r.id"
        }
    };
    let rows = query(c, sql, &[&id], "read linked results").await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let lid: String = get(r, 0)?;
        if lid.starts_with("bt_") {
            out.push(batch_result(c, &lid).await?);
            continue;
        }
        let content: Option<Vec<u8>> = get(r, 4)?;
        let result = content
            .and_then(|c| serde_json::from_slice(&c).ok())
            .unwrap_or(serde_json::Value::Null);
        out.push(LinkedResult {
            id: lid,
            tool: get(r, 1)?,
            // A parent pruned since: it had ended (retention keeps only finished runs' rows).
            state: get::<Option<String>>(r, 2)?.unwrap_or_else(|| "pruned".to_string()),
            result,
            error: get(r, 3)?,
        });
    }
    Ok(out)
}

/// A batch as its callback reads it: its latest summary.
async fn batch_result<C: GenericClient>(c: &C, id: &str) -> Result<LinkedResult, StoreError> {
    let b = batch_get(c, id).await?;
    Ok(Batch::as_parent(id, b.as_ref()))
}
