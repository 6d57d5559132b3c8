//! Retention: deleting finished runs (with their blobs and inbox rows), acknowledged inbox
//! messages and old schedule occurrences, one bounded batch per call so every write
//! transaction stays short. Unfinished runs are never candidates.

use rusqlite::{Connection, Transaction, named_params};

use super::Ctx;
use super::codec::ts;
use crate::error::StoreError;
use crate::store::prune::{Counted, PrunableRun, RunsWalk, TableStep};
use crate::store::{PruneCutoffs, Removed, RunsCursor};

/// A finished run `r` that may be deleted. Kept: runs an unacknowledged message still points
/// at (until `:unacked_before`), the latest finished run of each enabled schedule, and runs a
/// schedule occurrence younger than `:occ_before` points at (so the ledger keeps its link).
/// The state condition repeats `runs_final_idx`'s own, so its ranges of (state, finished_at)
/// serve it.
pub(crate) const PRUNABLE_RUN: &str = "r.finished_at IS NOT NULL AND r.finished_at < :runs_before \
    AND (r.state = 'completed' OR r.state = 'failed' OR r.state = 'cancelled') \
    AND (r.finished_at < :unacked_before OR NOT EXISTS \
        (SELECT 1 FROM inbox i WHERE i.run_id = r.id AND i.acked_at IS NULL)) \
    AND NOT EXISTS (SELECT 1 FROM schedule_occurrences o \
        WHERE o.run_id = r.id AND o.recorded_at >= :occ_before) \
    AND (r.schedule_id IS NULL OR r.fire_at IS NULL \
        OR NOT EXISTS (SELECT 1 FROM schedules s WHERE s.id = r.schedule_id AND s.enabled = 1) \
        OR r.fire_at <> (SELECT r2.fire_at FROM runs r2 WHERE r2.schedule_id = r.schedule_id \
            AND r2.finished_at IS NOT NULL ORDER BY r2.fire_at DESC LIMIT 1))";

/// An occurrence `o` that may be deleted: recorded long ago, and not its schedule's latest.
const PRUNABLE_OCCURRENCE: &str = "o.recorded_at < :occ_before AND o.fire_at < \
    (SELECT max(o2.fire_at) FROM schedule_occurrences o2 WHERE o2.schedule_id = o.schedule_id)";

/// An acknowledged message `i` that may be deleted on its own (its run may be kept).
const PRUNABLE_ACKED: &str = "i.acked_at IS NOT NULL AND i.acked_at < :acked_before";

/// A stopped worker row `w` that may be deleted: no run still names it as lease owner.
const PRUNABLE_WORKER: &str = "w.stopped_at IS NOT NULL AND w.stopped_at < :workers_before \
    AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.lease_owner = w.id AND r.state = 'running')";

/// A batch `b` that may be deleted: completed before the cutoff, and none of its runs left
/// (its runs go first, by their own retention).
const PRUNABLE_BATCH: &str = "b.completed_at IS NOT NULL AND b.completed_at < :batches_before \
    AND NOT EXISTS (SELECT 1 FROM runs r INDEXED BY runs_batch_idx WHERE r.batch_id = b.id)";

/// The parameters of [`PRUNABLE_RUN`] for runs in the final state `state` (each outcome has
/// its own cutoff).
fn run_params(c: &PruneCutoffs, state: &str) -> [(&'static str, String); 3] {
    [
        (":runs_before", ts(c.runs_before_in(state))),
        (":unacked_before", ts(c.unacked_runs_before)),
        (":occ_before", ts(c.occurrences_before)),
    ]
}

fn as_params<'a>(p: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a dyn rusqlite::ToSql)> {
    p.iter()
        .map(|(k, v)| (*k, v as &dyn rusqlite::ToSql))
        .collect()
}

/// Deletes at most `batch` prunable runs with their blobs and inbox rows (their occurrences
/// keep the row with `run_id` set to NULL), oldest first within each final state, from where
/// `cursor` says the previous batch stopped (`store::prune::RunsWalk`). Returns the counts; `runs <
/// batch` means done.
pub fn prune_runs_batch(
    tx: &Transaction<'_>,
    c: &PruneCutoffs,
    batch: usize,
    cursor: &mut RunsCursor,
) -> Result<Removed, StoreError> {
    let found = find_prunable(tx, c, RunsWalk::new(cursor, batch))?;
    if found.is_empty() {
        return Ok(Removed::default());
    }
    delete_runs(tx, &found)
}

/// Reads the pages `walk` asks for.
fn find_prunable(
    tx: &Transaction<'_>,
    c: &PruneCutoffs,
    mut walk: RunsWalk<'_>,
) -> Result<Vec<PrunableRun>, StoreError> {
    while let Some(page) = walk.next_page() {
        let rp = run_params(c, page.state);
        let sql = format!(
            "SELECT r.id, r.finished_at, r.session_id FROM runs r \
             WHERE r.state = '{}' AND r.finished_at >= :after \
             AND {PRUNABLE_RUN} ORDER BY r.finished_at LIMIT :batch",
            page.state
        );
        let mut stmt = tx.prepare_cached(&sql).ctx("prepare prunable runs")?;
        let mut p = as_params(&rp);
        p.push((":batch", &page.want));
        p.push((":after", &page.after));
        let rows: Vec<PrunableRun> = stmt
            .query_map(p.as_slice(), |r| {
                Ok(PrunableRun {
                    id: r.get(0)?,
                    finished_at: r.get(1)?,
                    session_id: r.get(2)?,
                })
            })
            .ctx("select prunable runs")?
            .collect::<Result<_, _>>()
            .ctx("read prunable runs")?;
        let want = page.want;
        walk.took(rows, want);
    }
    Ok(walk.found())
}

/// Deletes the runs found, children first, so the counts are ours rather than hidden in the
/// cascade and trigger.
fn delete_runs(tx: &Transaction<'_>, found: &[PrunableRun]) -> Result<Removed, StoreError> {
    let ids: Vec<&String> = found.iter().map(|r| &r.id).collect();
    let ids = serde_json::to_string(&ids).map_err(|e| StoreError::Task(e.to_string()))?;
    let del = |sql: &str, what: &str| -> Result<u64, StoreError> {
        Ok(tx
            .prepare_cached(sql)
            .ctx(what)?
            .execute(named_params! {":ids": ids})
            .ctx(what)? as u64)
    };
    let mut blobs = 0;
    {
        let mut stmt = tx
            .prepare_cached(&format!(
                "DELETE FROM blob_rows WHERE {}",
                super::artifacts::OF_RUN
            ))
            .ctx("prepare delete blobs of pruned runs")?;
        for r in found {
            blobs += stmt
                .execute([&r.session_id, &r.id])
                .ctx("delete blobs of pruned runs")? as u64;
        }
    }
    let inbox = del(
        "DELETE FROM inbox WHERE run_id IN (SELECT value FROM json_each(:ids))",
        "delete inbox rows of pruned runs",
    )?;
    // The states deleted (not those found), so the counts by outcome are what went; a run's
    // result goes with its row and counts as the blob it is shown as.
    let states: Vec<(String, bool)> = tx
        .prepare_cached(
            "DELETE FROM runs WHERE id IN (SELECT value FROM json_each(:ids)) \
             AND state IN ('completed', 'failed', 'cancelled') \
             RETURNING state, result IS NOT NULL",
        )
        .ctx("prepare delete pruned runs")?
        .query_map(named_params! {":ids": ids}, |r| Ok((r.get(0)?, r.get(1)?)))
        .ctx("delete pruned runs")?
        .collect::<Result<_, _>>()
        .ctx("delete pruned runs")?;
    let mut removed = Removed {
        blobs,
        inbox,
        ..Removed::default()
    };
    for (state, had_result) in &states {
        removed.add_runs(state, 1);
        removed.blobs += u64::from(*had_result);
    }
    Ok(removed)
}

/// Deletes at most `batch` rows of `table` (alias `alias`) matching `condition`, whose one
/// parameter besides `:batch` is the cutoff `param`.
fn delete_batch(
    tx: &Transaction<'_>,
    (table, alias, condition): (&str, &str, &str),
    (param, cutoff): (&str, String),
    batch: usize,
) -> Result<u64, StoreError> {
    let sql = format!(
        "DELETE FROM {table} WHERE id IN \
         (SELECT {alias}.id FROM {table} {alias} WHERE {condition} LIMIT :batch)"
    );
    Ok(tx
        .prepare_cached(&sql)
        .map_err(|e| StoreError::sqlite(format!("prepare prune {table}"), e))?
        .execute(&[
            (param, &cutoff as &dyn rusqlite::ToSql),
            (":batch", &(batch as i64)),
        ])
        .map_err(|e| StoreError::sqlite(format!("prune {table}"), e))? as u64)
}

/// Deletes at most `batch` rows of the table `step` prunes, older than its cutoff. How many
/// went.
pub(crate) fn prune_table_batch(
    tx: &Transaction<'_>,
    step: TableStep,
    c: &PruneCutoffs,
    batch: usize,
) -> Result<u64, StoreError> {
    let (table, param) = match step {
        TableStep::AckedInbox => (("inbox", "i", PRUNABLE_ACKED), ":acked_before"),
        TableStep::Occurrences => (
            ("schedule_occurrences", "o", PRUNABLE_OCCURRENCE),
            ":occ_before",
        ),
        TableStep::Workers => (("workers", "w", PRUNABLE_WORKER), ":workers_before"),
        TableStep::Batches => (("batches", "b", PRUNABLE_BATCH), ":batches_before"),
    };
    delete_batch(tx, table, (param, ts(step.cutoff(c))), batch)
}

/// What a prune with these cutoffs would remove, counted without writing (dry run).
pub fn count_prunable(conn: &Connection, c: &PruneCutoffs) -> Result<Removed, StoreError> {
    let mut removed = Removed::default();
    for what in Counted::ALL {
        let (sql, p) = count_query(what, c);
        let n = conn
            .prepare_cached(&sql)
            .ctx(what.action())?
            .query_row(as_params(&p).as_slice(), |r| r.get::<_, i64>(0))
            .ctx(what.action())?;
        what.add_to(&mut removed, n as u64);
    }
    Ok(removed)
}

/// The query of one dry-run count, and its parameters.
fn count_query(what: Counted, c: &PruneCutoffs) -> (String, Vec<(&'static str, String)>) {
    // Blobs and messages of prunable runs of any outcome: each state's own cutoff.
    let any_outcome = PRUNABLE_RUN.replace(
        "r.finished_at < :runs_before",
        "r.finished_at < (CASE r.state WHEN 'failed' THEN :failed_before \
         WHEN 'cancelled' THEN :cancelled_before ELSE :runs_before END)",
    );
    let mut any_params = run_params(c, "completed").to_vec();
    any_params.push((":failed_before", ts(c.failed_runs_before)));
    any_params.push((":cancelled_before", ts(c.cancelled_runs_before)));
    match what {
        Counted::RunsCompleted | Counted::RunsFailed | Counted::RunsCancelled => {
            let state = what.state().unwrap_or_default();
            (
                format!("SELECT count(*) FROM runs r WHERE r.state = '{state}' AND {PRUNABLE_RUN}"),
                run_params(c, state).to_vec(),
            )
        }
        Counted::Blobs => (
            format!(
                "SELECT (SELECT count(*) FROM runs r JOIN blob_rows b ON b.session_id = r.session_id \
                 AND b.path >= '/.background/' || r.id || '/' AND b.path < '/.background/' || r.id || '0' \
                 WHERE {any_outcome}) \
                 + (SELECT count(*) FROM runs r WHERE r.result IS NOT NULL AND {any_outcome})"
            ),
            any_params,
        ),
        Counted::Inbox => {
            let mut p = any_params;
            p.push((":acked_before", ts(c.acked_inbox_before)));
            // A message goes with its run, or on its own when acknowledged long ago; count it once.
            let sql = format!(
                "SELECT count(*) FROM inbox i WHERE i.run_id IN (SELECT r.id FROM runs r WHERE {any_outcome}) \
                 OR ({PRUNABLE_ACKED})"
            );
            (sql, p)
        }
        Counted::Occurrences => (
            format!("SELECT count(*) FROM schedule_occurrences o WHERE {PRUNABLE_OCCURRENCE}"),
            vec![(":occ_before", ts(c.occurrences_before))],
        ),
        Counted::Workers => (
            format!("SELECT count(*) FROM workers w WHERE {PRUNABLE_WORKER}"),
            vec![(":workers_before", ts(c.workers_before))],
        ),
        Counted::Batches => (
            format!("SELECT count(*) FROM batches b WHERE {PRUNABLE_BATCH}"),
            vec![(":batches_before", ts(c.batches_before))],
        ),
    }
}
