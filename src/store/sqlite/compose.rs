//! Composition on SQLite: batches, dependencies and child runs kept in step with inserts,
//! ends and retries, in the transaction that causes each change. What each change writes is
//! planned in [`crate::store::compose_plan`]; this module reads the facts and binds them.
//!
//! The end-writer pays one probe per batch of ends for plain runs (whether any dependency edge
//! is unresolved): a run's batch and spawning run come with its end's record.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Transaction, params};

use super::Ctx;
use super::codec::ts;
use crate::error::StoreError;
use crate::ids::BatchId;
use crate::run::{
    Batch, BatchFilter, Callback, DepMode, Dependency, FailedRun, FinishRecord, Inserted, Linked,
    LinkedResult, LinkedRun, NewBatch, NewRun, Outcome, RunLinks, RunState, WaitKind,
};
use crate::store::compose_plan::{self, DepEffect, DepStart};

/// The end-writer's own part (each end's state change, blobs and message, no composition):
/// `finish::record_ends_plain`, passed in by the caller, so this module sits below the
/// end-writer that calls it.
pub(crate) type WriteEnds =
    fn(&Transaction<'_>, &[&FinishRecord], DateTime<Utc>) -> Result<Vec<bool>, StoreError>;

/// Records ends through `write` and then their composition: the end-writer as a whole.
pub(crate) fn record_ends(
    tx: &Transaction<'_>,
    write: WriteEnds,
    records: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<Vec<bool>, StoreError> {
    let applied = write(tx, records, now)?;
    after_ends(
        tx,
        write,
        &crate::store::end_plan::applied_only(records, &applied),
        now,
    )?;
    Ok(applied)
}

/// A final end as composition sees it: the run, its final state, and what it belongs to (all
/// carried by its record: a run's batch and spawning run never change after its insert).
struct Ended {
    id: String,
    state: &'static str,
    batch_id: Option<String>,
    parent_run_id: Option<String>,
}

impl Ended {
    fn of(r: &FinishRecord) -> Option<Ended> {
        let Outcome::Final(state) = r.outcome else {
            return None;
        };
        Some(Ended {
            id: r.id.to_string(),
            state: state.as_str(),
            batch_id: r.batch_id.as_ref().map(|b| b.to_string()),
            parent_run_id: r.parent_run_id.as_ref().map(|p| p.to_string()),
        })
    }
}

/// Whether any dependency edge waits for its parent. Dependents are the one link a run
/// gains after its insert (a later `--after` names it), so its record cannot carry them; one
/// probe of the partial index `run_deps_parent_idx` (empty without dependencies) answers for
/// a whole batch of ends, so plain runs pay no read per end.
const ANY_UNRESOLVED: &str =
    "SELECT EXISTS (SELECT 1 FROM run_deps INDEXED BY run_deps_parent_idx WHERE resolved IS NULL)";

fn any_unresolved(tx: &Transaction<'_>) -> Result<bool, StoreError> {
    tx.prepare_cached(ANY_UNRESOLVED)
        .ctx("prepare dependents probe")?
        .query_row([], |r| r.get(0))
        .ctx("dependents probe")
}

/// Composition after the ends `done` (whose state changes applied) in this transaction:
/// each final end counts in its batch (completing it), wakes the run that spawned it if
/// that run waits for its children, and resolves its dependents (releasing or cancelling
/// them; a cancelled dependent's own end is handled the same way, until nothing is left). A
/// suspension to wait for children is due at once if none is unfinished.
pub(crate) fn after_ends(
    tx: &Transaction<'_>,
    write: WriteEnds,
    done: &[&FinishRecord],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    for r in done {
        if let Outcome::Suspend(s) = &r.outcome
            && s.kind == WaitKind::Children
        {
            wake_if_children_done(tx, r.id.as_str(), now)?;
        }
    }
    let mut ended: Vec<Ended> = done.iter().filter_map(|r| Ended::of(r)).collect();
    if ended.is_empty() {
        return Ok(());
    }
    let mut dependents: Option<bool> = None;
    while !ended.is_empty() {
        let counts = compose_plan::count_by_batch(
            ended
                .iter()
                .filter_map(|e| Some((e.batch_id.as_deref()?, e.state))),
        );
        for (batch, c) in counts {
            count_ends(tx, batch, c, now)?;
        }
        let mut parents: Vec<&str> = ended
            .iter()
            .filter_map(|e| e.parent_run_id.as_deref())
            .collect();
        parents.sort_unstable();
        parents.dedup();
        for p in parents {
            wake_if_children_done(tx, p, now)?;
        }
        let mut next = Vec::new();
        if *dependents.get_or_insert(any_unresolved(tx)?) {
            for e in &ended {
                resolve_dependents(tx, write, &e.id, e.state, now, &mut next)?;
            }
        }
        ended = next;
    }
    Ok(())
}

/// A run that waits for its children is due once none of them is unfinished (its wait kind
/// stays: the claim that takes it is a resume).
const WAKE_PARENT: &str = "UPDATE runs SET run_at = ?2 WHERE id = ?1 AND state = 'queued' \
    AND wait_kind = 'children' AND run_at > ?2 AND NOT EXISTS (SELECT 1 FROM runs c \
    INDEXED BY runs_parent_idx WHERE c.parent_run_id = ?1 \
    AND (c.state = 'queued' OR c.state = 'awaiting_approval' OR c.state = 'running'))";

fn wake_if_children_done(
    tx: &Transaction<'_>,
    parent: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    tx.prepare_cached(WAKE_PARENT)
        .ctx("prepare wake parent")?
        .execute(params![parent, ts(now)])
        .ctx("wake parent")?;
    Ok(())
}

/// Resolves `parent`'s unresolved edges with its final `state`, then releases or cancels
/// each dependent; the ids of dependents cancelled go to `cancelled`.
fn resolve_dependents(
    tx: &Transaction<'_>,
    write: WriteEnds,
    parent: &str,
    state: &str,
    now: DateTime<Utc>,
    cancelled: &mut Vec<Ended>,
) -> Result<(), StoreError> {
    let edges: Vec<(String, String)> = {
        let mut stmt = tx
            .prepare_cached(
                "UPDATE run_deps SET resolved = ?2 WHERE parent_id = ?1 AND resolved IS NULL \
                 RETURNING child_id, mode",
            )
            .ctx("prepare resolve dependents")?;
        let rows = stmt
            .query_map(params![parent, state], |r| Ok((r.get(0)?, r.get(1)?)))
            .ctx("resolve dependents")?;
        rows.collect::<Result<_, _>>().ctx("resolve dependents")?
    };
    for (child, mode) in edges {
        let mode: DepMode = mode.parse().unwrap_or(DepMode::All);
        match compose_plan::dep_effect(mode, state) {
            DepEffect::Release => release(tx, &child, now)?,
            DepEffect::Cancel => {
                if let Some(e) = cancel_dependent(tx, write, &child, parent, state, now)? {
                    cancelled.push(e);
                }
            }
        }
    }
    Ok(())
}

/// One parent fewer for `child`; at the last, a blocked child is due now.
/// A dependent is inserted at the far-future `run_at` (the core sets it), so one awaiting
/// approval is due at its last release too (`run_at >= far`), whatever its wait kind.
const RELEASE: &str = "UPDATE runs SET deps_pending = deps_pending - 1, \
    wait_kind = CASE WHEN deps_pending <= 1 AND wait_kind = 'parents' THEN NULL ELSE wait_kind END, \
    run_at = CASE WHEN deps_pending <= 1 \
        AND (wait_kind = 'parents' OR run_at >= '9999-12-31T23:59:59.999Z') THEN ?2 ELSE run_at END \
    WHERE id = ?1 AND deps_pending > 0";

fn release(tx: &Transaction<'_>, child: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
    tx.prepare_cached(RELEASE)
        .ctx("prepare release dependent")?
        .execute(params![child, ts(now)])
        .ctx("release dependent")?;
    Ok(())
}

/// Cancels `child` (if it is still waiting: queued or awaiting approval) because `parent`
/// ended `state`, through the end-writer's state change and artifacts; its end, if it ended.
fn cancel_dependent(
    tx: &Transaction<'_>,
    write: WriteEnds,
    child: &str,
    parent: &str,
    state: &str,
    now: DateTime<Utc>,
) -> Result<Option<Ended>, StoreError> {
    let Some(run) = super::runs::get(tx, child)? else {
        return Ok(None);
    };
    if !matches!(run.state, RunState::Queued | RunState::AwaitingApproval) {
        return Ok(None);
    }
    let rec = compose_plan::dependent_cancel(&run, parent, state);
    let applied = write(tx, &[&rec], now)?;
    Ok(applied
        .first()
        .copied()
        .unwrap_or(false)
        .then(|| Ended::of(&rec))
        .flatten())
}

/// Counts final ends in a batch (`c`: completed, failed, cancelled); the end that leaves no
/// run of it unfinished completes it.
fn count_ends(
    tx: &Transaction<'_>,
    batch: &str,
    c: [i64; 3],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let left: Option<(i64, bool)> = tx
        .prepare_cached(
            "UPDATE batches SET pending = pending - ?2, completed = completed + ?3, \
             failed = failed + ?4, cancelled = cancelled + ?5 WHERE id = ?1 \
             RETURNING pending, completed_at IS NULL",
        )
        .ctx("prepare count batch ends")?
        .query_row(params![batch, c[0] + c[1] + c[2], c[0], c[1], c[2]], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()
        .ctx("count batch ends")?;
    match left {
        Some((pending, true)) if pending <= 0 => complete(tx, batch, now),
        _ => Ok(()),
    }
}

/// A batch's first runs that did not complete, oldest first.
fn first_failures(conn: &rusqlite::Connection, batch: &str) -> Result<Vec<FailedRun>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, tool, state, error FROM runs INDEXED BY runs_batch_idx \
             WHERE batch_id = ?1 AND (state = 'failed' OR state = 'cancelled') \
             ORDER BY id LIMIT ?2",
        )
        .ctx("prepare batch failures")?;
    let rows = stmt
        .query_map(
            params![batch, crate::run::composition::FIRST_FAILURES as i64],
            |r| {
                Ok(FailedRun {
                    id: r.get(0)?,
                    tool: r.get(1)?,
                    state: r.get(2)?,
                    error: r.get(3)?,
                })
            },
        )
        .ctx("read batch failures")?;
    rows.collect::<Result<_, _>>().ctx("read batch failures")
}

/// Completes a batch: its message, its callback run (with its edge to the batch), and the
/// completion recorded, in this transaction.
fn complete(tx: &Transaction<'_>, batch: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
    let row = tx
        .prepare_cached(
            "SELECT id, session_id, title, total, completed, failed, cancelled, on_complete, \
             completions FROM batches WHERE id = ?1",
        )
        .ctx("prepare read batch")?
        .query_row([batch], |r| {
            Ok(compose_plan::BatchRow {
                id: r.get(0)?,
                session_id: r.get(1)?,
                title: r.get(2)?,
                total: r.get(3)?,
                completed: r.get(4)?,
                failed: r.get(5)?,
                cancelled: r.get(6)?,
                on_complete: r.get(7)?,
                completions: r.get(8)?,
            })
        })
        .optional()
        .ctx("read batch")?;
    let Some(row) = row else {
        return Ok(());
    };
    let plan = compose_plan::completion(&row, first_failures(tx, batch)?, now);
    let now_s = ts(now);
    if let Some(cb) = &plan.callback {
        super::runs::insert_many(tx, std::slice::from_ref(cb))?;
        tx.prepare_cached(
            "INSERT INTO run_deps (child_id, parent_id, mode, resolved) \
             VALUES (?1, ?2, 'batch', 'completed')",
        )
        .ctx("prepare callback edge")?
        .execute(params![cb.id.as_str(), batch])
        .ctx("insert callback edge")?;
    }
    tx.prepare_cached(
        "INSERT INTO inbox (session_id, run_id, attempt, kind, body, data, delivery, created_at) \
         VALUES (?1, NULL, ?2, 'batch_completed', ?3, ?4, 'when_idle', ?5)",
    )
    .ctx("prepare batch message")?
    .execute(params![
        row.session_id,
        plan.summary.completion,
        plan.body,
        plan.data,
        now_s
    ])
    .ctx("insert batch message")?;
    tx.prepare_cached(
        "UPDATE batches SET completed_at = ?2, completions = completions + 1, \
         callback_run_id = coalesce(?3, callback_run_id) WHERE id = ?1",
    )
    .ctx("prepare complete batch")?
    .execute(params![
        batch,
        now_s,
        plan.callback.as_ref().map(|c| c.id.to_string())
    ])
    .ctx("complete batch")?;
    Ok(())
}

/// Creates a batch row (no runs yet: [`after_insert`] counts them).
pub(crate) fn create_batch(tx: &Transaction<'_>, b: &NewBatch) -> Result<(), StoreError> {
    let on_complete = b
        .on_complete
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Invalid(format!("batch callback: {e}")))?;
    tx.prepare_cached(
        "INSERT INTO batches (id, session_id, title, on_complete, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .ctx("prepare insert batch")?
    .execute(params![
        b.id.as_str(),
        b.session_id,
        b.title,
        on_complete,
        ts(b.created_at)
    ])
    .ctx("insert batch")?;
    Ok(())
}

/// Composition after inserting `runs` (`inserted` per run, in order) in this transaction:
/// batch counters, and each new run's dependencies (blocked, or cancelled at once).
pub(crate) fn after_insert(
    tx: &Transaction<'_>,
    write: WriteEnds,
    runs: &[NewRun],
    inserted: &[Inserted],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let new = || {
        runs.iter()
            .zip(inserted)
            .filter(|(_, i)| matches!(i, Inserted::New(_)))
            .map(|(r, _)| r)
    };
    let mut per_batch: Vec<(&str, i64)> = Vec::new();
    for b in new().filter_map(|r| r.batch_id.as_ref()) {
        match per_batch.iter_mut().find(|(id, _)| *id == b.as_str()) {
            Some((_, n)) => *n += 1,
            None => per_batch.push((b.as_str(), 1)),
        }
    }
    for (batch, n) in per_batch {
        join_batch(tx, batch, n)?;
    }
    for run in new().filter(|r| !r.after.is_empty()) {
        add_dependencies(tx, write, run, now)?;
    }
    Ok(())
}

fn join_batch(tx: &Transaction<'_>, batch: &str, n: i64) -> Result<(), StoreError> {
    let changed = tx
        .prepare_cached(
            "UPDATE batches SET total = total + ?2, pending = pending + ?2 \
             WHERE id = ?1 AND completed_at IS NULL",
        )
        .ctx("prepare join batch")?
        .execute(params![batch, n])
        .ctx("join batch")?;
    if changed == 1 {
        return Ok(());
    }
    let exists: bool = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM batches WHERE id = ?1)",
            [batch],
            |r| r.get(0),
        )
        .ctx("find batch")?;
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

/// The state of each of `parents`, refusing an unknown one.
fn parent_states(
    tx: &Transaction<'_>,
    parents: &[crate::ids::RunId],
) -> Result<Vec<String>, StoreError> {
    let mut stmt = tx
        .prepare_cached("SELECT state FROM runs WHERE id = ?1")
        .ctx("prepare parent state")?;
    parents
        .iter()
        .map(|p| {
            stmt.query_row([p.as_str()], |r| r.get::<_, String>(0))
                .optional()
                .ctx("read parent state")?
                .ok_or_else(|| StoreError::rejected("after", p.as_str(), "no such run"))
        })
        .collect()
}

const INSERT_EDGE: &str = "INSERT OR REPLACE INTO run_deps (child_id, parent_id, mode, resolved) \
    VALUES (?1, ?2, ?3, ?4)";

/// Records `run`'s edges and starts it blocked, due, or cancelled.
fn add_dependencies(
    tx: &Transaction<'_>,
    write: WriteEnds,
    run: &NewRun,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let states = parent_states(tx, &run.after)?;
    {
        let mut stmt = tx.prepare_cached(INSERT_EDGE).ctx("prepare insert edge")?;
        for (p, s) in run.after.iter().zip(&states) {
            stmt.execute(params![
                run.id.as_str(),
                p.as_str(),
                run.after_mode.as_str(),
                compose_plan::final_state(s)
            ])
            .ctx("insert edge")?;
        }
    }
    let start = compose_plan::dep_start(
        run.after
            .iter()
            .zip(&states)
            .map(|(p, s)| (run.after_mode, p.as_str(), s.as_str())),
    );
    start_dependent(tx, write, run.id.as_str(), start, now)
}

/// Blocks a dependent run, or cancels it, as `start` says.
fn start_dependent(
    tx: &Transaction<'_>,
    write: WriteEnds,
    id: &str,
    start: DepStart,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    match start {
        DepStart::Ready => {
            // A new dependent (inserted at the far-future run_at) or a retried one blocked
            // before is due now.
            tx.prepare_cached(
                "UPDATE runs SET deps_pending = 0, \
                 wait_kind = CASE WHEN wait_kind = 'parents' THEN NULL ELSE wait_kind END, \
                 run_at = CASE WHEN run_at >= '9999-12-31T23:59:59.999Z' THEN ?2 ELSE run_at END \
                 WHERE id = ?1 AND (deps_pending <> 0 OR run_at >= '9999-12-31T23:59:59.999Z')",
            )
            .ctx("prepare unblock")?
            .execute(params![id, ts(now)])
            .ctx("unblock")?;
            Ok(())
        }
        DepStart::Blocked(n) => {
            tx.prepare_cached(
                "UPDATE runs SET deps_pending = ?2, \
                 wait_kind = CASE WHEN state = 'queued' THEN 'parents' ELSE wait_kind END, \
                 run_at = CASE WHEN state = 'queued' THEN ?3 ELSE run_at END WHERE id = ?1",
            )
            .ctx("prepare block")?
            .execute(params![id, n, ts(compose_plan::blocked_until())])
            .ctx("block")?;
            Ok(())
        }
        DepStart::Cancel { parent, state } => {
            let Some(run) = super::runs::get(tx, id)? else {
                return Ok(());
            };
            let rec = compose_plan::dependent_cancel(&run, &parent, &state);
            record_ends(tx, write, &[&rec], now).map(|_| ())
        }
    }
}

/// Composition after retries re-queued `runs` (id, the final state each left): each counts
/// again in its batch (reopening it), and its dependencies are evaluated again from its
/// parents' current states.
pub(crate) fn after_requeue(
    tx: &Transaction<'_>,
    write: WriteEnds,
    runs: &[(&str, RunState)],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    for (id, was) in runs {
        let Some(counter) = compose_plan::counter_of(*was) else {
            continue;
        };
        let batch: Option<String> = tx
            .prepare_cached("SELECT batch_id FROM runs WHERE id = ?1")
            .ctx("prepare read batch of run")?
            .query_row([id], |r| r.get(0))
            .optional()
            .ctx("read batch of run")?
            .flatten();
        if let Some(b) = batch {
            tx.execute(
                &format!(
                    "UPDATE batches SET pending = pending + 1, {counter} = {counter} - 1, \
                     completed_at = NULL WHERE id = ?1"
                ),
                [&b],
            )
            .ctx("reopen batch")?;
        }
        let edges: Vec<(String, String)> = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT parent_id, mode FROM run_deps WHERE child_id = ?1 AND mode <> 'batch'",
                )
                .ctx("prepare read edges")?;
            let rows = stmt
                .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))
                .ctx("read edges")?;
            rows.collect::<Result<_, _>>().ctx("read edges")?
        };
        if edges.is_empty() {
            continue;
        }
        let mut states = Vec::with_capacity(edges.len());
        for (parent, _) in &edges {
            let s: Option<String> = tx
                .prepare_cached("SELECT state FROM runs WHERE id = ?1")
                .ctx("prepare parent state")?
                .query_row([parent], |r| r.get(0))
                .optional()
                .ctx("read parent state")?;
            // A parent pruned since counts as completed: it ended before its dependent could.
            let s = s.unwrap_or_else(|| "completed".to_string());
            tx.prepare_cached(
                "UPDATE run_deps SET resolved = ?3 WHERE child_id = ?1 AND parent_id = ?2",
            )
            .ctx("prepare re-arm edge")?
            .execute(params![id, parent, compose_plan::final_state(&s)])
            .ctx("re-arm edge")?;
            states.push(s);
        }
        let start = compose_plan::dep_start(
            edges
                .iter()
                .zip(&states)
                .map(|((p, m), s)| (m.parse().unwrap_or(DepMode::All), p.as_str(), s.as_str())),
        );
        start_dependent(tx, write, id, start, now)?;
    }
    Ok(())
}

// ---- reads ---------------------------------------------------------------------------------

const BATCH_COLUMNS: &str = "id, session_id, title, total, pending, completed, failed, cancelled, \
    on_complete, callback_run_id, completions, created_at, completed_at";

fn batch_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Batch> {
    let completed_at = super::codec::ts_col(r, 12)?;
    let on_complete: Option<String> = r.get(8)?;
    Ok(Batch {
        id: BatchId::from_db(r.get(0)?),
        session_id: r.get(1)?,
        title: r.get(2)?,
        state: if completed_at.is_some() {
            "completed"
        } else {
            "running"
        },
        total: r.get(3)?,
        pending: r.get(4)?,
        completed: r.get(5)?,
        failed: r.get(6)?,
        cancelled: r.get(7)?,
        on_complete: on_complete.and_then(|t| serde_json::from_str::<Callback>(&t).ok()),
        callback_run_id: r.get(9)?,
        completions: r.get(10)?,
        created_at: super::codec::ts_req(r, 11)?,
        completed_at,
        states: Default::default(),
        first_failures: Vec::new(),
    })
}

/// One batch with its runs counted by state and its first failures.
pub(crate) fn batch_get(
    conn: &rusqlite::Connection,
    id: &str,
) -> Result<Option<Batch>, StoreError> {
    let Some(mut b) = conn
        .prepare_cached(&format!(
            "SELECT {BATCH_COLUMNS} FROM batches WHERE id = ?1"
        ))
        .ctx("prepare get batch")?
        .query_row([id], batch_from_row)
        .optional()
        .ctx("get batch")?
    else {
        return Ok(None);
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT CASE WHEN state = 'queued' AND wait_kind = 'parents' THEN 'blocked' \
             ELSE state END AS s, count(*) FROM runs INDEXED BY runs_batch_idx \
             WHERE batch_id = ?1 GROUP BY s",
        )
        .ctx("prepare count batch runs")?;
    let rows = stmt
        .query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .ctx("count batch runs")?;
    b.states = rows.collect::<Result<_, _>>().ctx("count batch runs")?;
    b.first_failures = first_failures(conn, id)?;
    Ok(Some(b))
}

/// Batches, newest first.
pub(crate) fn batch_list(
    conn: &rusqlite::Connection,
    f: &BatchFilter,
) -> Result<Vec<Batch>, StoreError> {
    let sql = format!(
        "SELECT {BATCH_COLUMNS} FROM batches WHERE (?1 IS NULL OR session_id = ?1) \
         AND (?2 IS NULL OR id < ?2) \
         AND (?3 IS NULL OR (?3 = 'completed') = (completed_at IS NOT NULL)) \
         ORDER BY id DESC LIMIT ?4"
    );
    let mut stmt = conn.prepare_cached(&sql).ctx("prepare list batches")?;
    let rows = stmt
        .query_map(
            params![
                f.session,
                f.before.as_ref().map(|b| b.as_str()),
                f.state,
                f.limit
            ],
            batch_from_row,
        )
        .ctx("list batches")?;
    rows.collect::<Result<_, _>>().ctx("list batches")
}

fn dependency_rows(
    conn: &rusqlite::Connection,
    sql: &str,
    id: &str,
) -> Result<Vec<Dependency>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).ctx("prepare read edges")?;
    let rows = stmt
        .query_map([id], |r| {
            let mode: String = r.get(2)?;
            Ok(Dependency {
                parent: r.get(0)?,
                child: r.get(1)?,
                mode: mode.parse().unwrap_or(DepMode::All),
                resolved: r.get(3)?,
            })
        })
        .ctx("read edges")?;
    rows.collect::<Result<_, _>>().ctx("read edges")
}

/// A run's links, in one read.
pub(crate) fn links(conn: &rusqlite::Connection, id: &str) -> Result<RunLinks, StoreError> {
    let head: Option<(Option<String>, Option<String>)> = conn
        .prepare_cached("SELECT batch_id, parent_run_id FROM runs WHERE id = ?1")
        .ctx("prepare read run links")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .ctx("read run links")?;
    let Some((batch_id, parent_run_id)) = head else {
        return Ok(RunLinks::default());
    };
    let parents = dependency_rows(
        conn,
        "SELECT parent_id, child_id, mode, resolved FROM run_deps WHERE child_id = ?1 \
         ORDER BY parent_id",
        id,
    )?;
    let dependents = dependency_rows(
        conn,
        "SELECT parent_id, child_id, mode, resolved FROM run_deps WHERE parent_id = ?1 \
         ORDER BY child_id",
        id,
    )?;
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, tool, state FROM runs INDEXED BY runs_parent_idx \
             WHERE parent_run_id = ?1 ORDER BY id",
        )
        .ctx("prepare read children")?;
    let children = stmt
        .query_map([id], |r| {
            Ok(LinkedRun {
                id: r.get(0)?,
                tool: r.get(1)?,
                state: r.get(2)?,
            })
        })
        .ctx("read children")?
        .collect::<Result<_, _>>()
        .ctx("read children")?;
    Ok(RunLinks {
        batch_id,
        parents,
        dependents,
        parent_run_id,
        children,
    })
}

/// A linked run as read: id, tool, state, error, result.json.
type LinkedRow = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<Vec<u8>>,
);

/// The outcomes of a run's parents or children, in id order.
pub(crate) fn linked_results(
    conn: &rusqlite::Connection,
    id: &str,
    which: Linked,
) -> Result<Vec<LinkedResult>, StoreError> {
    let sql = match which {
        Linked::Parents => {
            "SELECT d.parent_id, r.tool, r.state, r.error, r.result, r.session_id \
             FROM run_deps d LEFT JOIN runs r ON r.id = d.parent_id \
             WHERE d.child_id = ?1 ORDER BY d.parent_id"
        }
        Linked::Children => {
            "SELECT r.id, r.tool, r.state, r.error, r.result, r.session_id \
             FROM runs r INDEXED BY runs_parent_idx \
             WHERE r.parent_run_id = ?1 ORDER BY r.id"
        }
    };
    let mut stmt = conn.prepare_cached(sql).ctx("prepare linked results")?;
    let rows: Vec<LinkedRow> = stmt
        .query_map([id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .ctx("read linked results")?
        .collect::<Result<_, _>>()
        .ctx("read linked results")?;
    let mut out = Vec::with_capacity(rows.len());
    for (lid, tool, state, error, content) in rows {
        if lid.starts_with("bt_") {
            out.push(batch_result(conn, &lid)?);
            continue;
        }
        let result = content
            .and_then(|c| serde_json::from_slice(&c).ok())
            .unwrap_or(serde_json::Value::Null);
        out.push(LinkedResult {
            id: lid,
            tool,
            // A parent pruned since: it had ended (retention keeps only finished runs' rows).
            state: state.unwrap_or_else(|| "pruned".to_string()),
            result,
            error,
        });
    }
    Ok(out)
}

/// A batch as its callback reads it: its latest summary.
fn batch_result(conn: &rusqlite::Connection, id: &str) -> Result<LinkedResult, StoreError> {
    let b = batch_get(conn, id)?;
    Ok(Batch::as_parent(id, b.as_ref()))
}
