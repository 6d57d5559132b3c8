//! Retention on Postgres: the same rules as the SQLite engine's (`store::sqlite::retention`),
//! one bounded batch per transaction.

use deadpool_postgres::GenericClient;

use super::{P, exec, get, query, query_one};
use crate::clock::ts;
use crate::error::StoreError;
use crate::store::prune::{Counted, PrunableRun, RunsWalk, TableStep};
use crate::store::{PruneCutoffs, Removed, RunsCursor};

/// A finished run `r` that may be deleted ($1 runs_before, $2 unacked_before, $3 occ_before).
const PRUNABLE_RUN: &str = "r.finished_at IS NOT NULL AND r.finished_at < $1 \
    AND r.state IN ('completed', 'failed', 'cancelled') \
    AND (r.finished_at < $2 OR NOT EXISTS \
        (SELECT 1 FROM inbox i WHERE i.run_id = r.id AND i.acked_at IS NULL)) \
    AND NOT EXISTS (SELECT 1 FROM schedule_occurrences o \
        WHERE o.run_id = r.id AND o.recorded_at >= $3) \
    AND (r.schedule_id IS NULL OR r.fire_at IS NULL \
        OR NOT EXISTS (SELECT 1 FROM schedules s WHERE s.id = r.schedule_id AND s.enabled = 1) \
        OR r.fire_at <> (SELECT r2.fire_at FROM runs r2 WHERE r2.schedule_id = r.schedule_id \
            AND r2.finished_at IS NOT NULL ORDER BY r2.fire_at DESC LIMIT 1))";

const PRUNABLE_OCCURRENCE: &str = "o.recorded_at < $1 AND o.fire_at < \
    (SELECT max(o2.fire_at) FROM schedule_occurrences o2 WHERE o2.schedule_id = o.schedule_id)";

const PRUNABLE_WORKER: &str = "w.stopped_at IS NOT NULL AND w.stopped_at < $1 \
    AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.lease_owner = w.id AND r.state = 'running')";

const PRUNABLE_BATCH: &str = "b.completed_at IS NOT NULL AND b.completed_at < $1 \
    AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.batch_id = b.id)";

const PRUNABLE_ACKED: &str = "i.acked_at IS NOT NULL AND i.acked_at < $1";

/// The cutoffs of [`PRUNABLE_RUN`] for runs in the final state `state` (each outcome has its
/// own).
fn run_cutoffs(c: &PruneCutoffs, state: &str) -> [String; 3] {
    [
        ts(c.runs_before_in(state)),
        ts(c.unacked_runs_before),
        ts(c.occurrences_before),
    ]
}

/// Deletes at most `batch` prunable runs with their blobs and messages, oldest first within
/// each final state, from `cursor` on ([`RunsWalk`]).
pub(crate) async fn prune_runs_batch<C: GenericClient>(
    c: &C,
    cut: &PruneCutoffs,
    batch: usize,
    cursor: &mut RunsCursor,
) -> Result<Removed, StoreError> {
    let found = find_prunable(c, cut, RunsWalk::new(cursor, batch)).await?;
    if found.is_empty() {
        return Ok(Removed::default());
    }
    delete_runs(c, &found).await
}

/// Reads the pages `walk` asks for.
async fn find_prunable<C: GenericClient>(
    c: &C,
    cut: &PruneCutoffs,
    mut walk: RunsWalk<'_>,
) -> Result<Vec<PrunableRun>, StoreError> {
    while let Some(page) = walk.next_page() {
        let cutoffs = run_cutoffs(cut, page.state);
        let sql = format!(
            "SELECT r.id, r.finished_at, r.session_id FROM runs r \
             WHERE r.state = '{}' AND r.finished_at >= $4 AND {PRUNABLE_RUN} \
             ORDER BY r.finished_at LIMIT $5",
            page.state
        );
        let want = page.want;
        let params: [P<'_>; 5] = [&cutoffs[0], &cutoffs[1], &cutoffs[2], &page.after, &want];
        let rows = query(c, &sql, &params, "select prunable runs").await?;
        let rows: Vec<PrunableRun> = rows
            .iter()
            .map(|r| {
                Ok(PrunableRun {
                    id: get(r, 0)?,
                    finished_at: get(r, 1)?,
                    session_id: get(r, 2)?,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        walk.took(rows, want);
    }
    Ok(walk.found())
}

/// Deletes the runs found, children first, so the counts are ours.
async fn delete_runs<C: GenericClient>(
    c: &C,
    found: &[PrunableRun],
) -> Result<Removed, StoreError> {
    let ids: Vec<&str> = found.iter().map(|r| r.id.as_str()).collect();
    let sessions: Vec<&str> = found.iter().map(|r| r.session_id.as_str()).collect();
    let blobs = exec(
        c,
        "DELETE FROM blob_rows b USING unnest($1::text[], $2::text[]) AS u(id, s) \
         WHERE b.session_id = u.s AND b.path >= '/.background/' || u.id || '/' \
         AND b.path < '/.background/' || u.id || '0'",
        &[&ids, &sessions],
        "delete blobs of pruned runs",
    )
    .await?;
    let inbox = exec(
        c,
        "DELETE FROM inbox WHERE run_id = ANY($1)",
        &[&ids],
        "delete inbox rows of pruned runs",
    )
    .await?;
    // The states deleted (not those found), so the counts by outcome are what went; a run's
    // result goes with its row and counts as the blob it is shown as.
    let rows = query(
        c,
        "DELETE FROM runs WHERE id = ANY($1) AND state IN ('completed', 'failed', 'cancelled') \
         RETURNING state, result IS NOT NULL",
        &[&ids],
        "delete pruned runs",
    )
    .await?;
    let mut removed = Removed {
        blobs,
        inbox,
        ..Removed::default()
    };
    for r in &rows {
        removed.add_runs(&get::<String>(r, 0)?, 1);
        removed.blobs += u64::from(get::<bool>(r, 1)?);
    }
    Ok(removed)
}

/// Deletes at most `batch` rows of the table `step` prunes, older than its cutoff. How many
/// went.
pub(crate) async fn prune_table_batch<C: GenericClient>(
    c: &C,
    step: TableStep,
    cut: &PruneCutoffs,
    batch: usize,
) -> Result<u64, StoreError> {
    let (table, alias, condition) = match step {
        TableStep::AckedInbox => ("inbox", "i", PRUNABLE_ACKED),
        TableStep::Occurrences => ("schedule_occurrences", "o", PRUNABLE_OCCURRENCE),
        TableStep::Workers => ("workers", "w", PRUNABLE_WORKER),
        TableStep::Batches => ("batches", "b", PRUNABLE_BATCH),
    };
    let sql = format!(
        "DELETE FROM {table} WHERE id IN \
         (SELECT {alias}.id FROM {table} {alias} WHERE {condition} LIMIT $2)"
    );
    let cutoff = ts(step.cutoff(cut));
    exec(
        c,
        &sql,
        &[&cutoff, &(batch as i64)],
        &format!("prune {table}"),
    )
    .await
}

/// What a prune would remove (dry run).
pub(crate) async fn count_prunable<C: GenericClient>(
    c: &C,
    cut: &PruneCutoffs,
) -> Result<Removed, StoreError> {
    let mut removed = Removed::default();
    for what in Counted::ALL {
        let (sql, cutoffs) = count_query(what, cut);
        let params: Vec<P<'_>> = cutoffs.iter().map(|t| t as P<'_>).collect();
        let row = query_one(c, &sql, &params, what.action()).await?;
        what.add_to(&mut removed, get::<i64>(&row, 0)? as u64);
    }
    Ok(removed)
}

/// The query of one dry-run count, and its parameters (cutoffs as text).
fn count_query(what: Counted, cut: &PruneCutoffs) -> (String, Vec<String>) {
    // Blobs and messages of prunable runs of any outcome: each state's own cutoff ($4 failed,
    // $5 cancelled; $1 stays the completed runs').
    let any_outcome = PRUNABLE_RUN.replace(
        "r.finished_at < $1",
        "r.finished_at < (CASE r.state WHEN 'failed' THEN $4 WHEN 'cancelled' THEN $5 ELSE $1 END)",
    );
    let mut any_params = run_cutoffs(cut, "completed").to_vec();
    any_params.push(ts(cut.failed_runs_before));
    any_params.push(ts(cut.cancelled_runs_before));
    match what {
        Counted::RunsCompleted | Counted::RunsFailed | Counted::RunsCancelled => {
            let state = what.state().unwrap_or_default();
            (
                format!("SELECT count(*) FROM runs r WHERE r.state = '{state}' AND {PRUNABLE_RUN}"),
                run_cutoffs(cut, state).to_vec(),
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
            p.push(ts(cut.acked_inbox_before));
            let sql = format!(
                "SELECT count(*) FROM inbox i WHERE i.run_id IN (SELECT r.id FROM runs r WHERE {any_outcome}) \
                 OR (i.acked_at IS NOT NULL AND i.acked_at < $6)"
            );
            (sql, p)
        }
        Counted::Occurrences => (
            format!("SELECT count(*) FROM schedule_occurrences o WHERE {PRUNABLE_OCCURRENCE}"),
            vec![ts(cut.occurrences_before)],
        ),
        Counted::Workers => (
            format!("SELECT count(*) FROM workers w WHERE {PRUNABLE_WORKER}"),
            vec![ts(cut.workers_before)],
        ),
        Counted::Batches => (
            format!("SELECT count(*) FROM batches b WHERE {PRUNABLE_BATCH}"),
            vec![ts(cut.batches_before)],
        ),
    }
}
