//! Retention on Postgres: the same rules as the SQLite engine's (`store::sqlite::retention`),
//! one bounded batch per transaction.

use deadpool_postgres::GenericClient;

use super::{P, exec, get, query, query_one};
use crate::clock::ts;
use crate::error::StoreError;
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

const FINAL_STATES: [&str; 3] = ["completed", "failed", "cancelled"];

fn run_cutoffs(c: &PruneCutoffs) -> [String; 3] {
    [
        ts(c.runs_before),
        ts(c.unacked_runs_before),
        ts(c.occurrences_before),
    ]
}

/// Deletes at most `batch` prunable runs with their blobs and messages, oldest first within
/// each final state, from `cursor` on.
pub(crate) async fn prune_runs_batch<C: GenericClient>(
    c: &C,
    cut: &PruneCutoffs,
    batch: usize,
    cursor: &mut RunsCursor,
) -> Result<Removed, StoreError> {
    let cutoffs = run_cutoffs(cut);
    let mut found: Vec<(String, String, String)> = Vec::new();
    while found.len() < batch && cursor.state < FINAL_STATES.len() {
        let sql = format!(
            "SELECT r.id, r.finished_at, r.session_id FROM runs r \
             WHERE r.state = '{}' AND r.finished_at >= $4 AND {PRUNABLE_RUN} \
             ORDER BY r.finished_at LIMIT $5",
            FINAL_STATES[cursor.state]
        );
        let want = (batch - found.len()) as i64;
        let params: [P<'_>; 5] = [&cutoffs[0], &cutoffs[1], &cutoffs[2], &cursor.after, &want];
        let rows = query(c, &sql, &params, "select prunable runs").await?;
        let rows: Vec<(String, String, String)> = rows
            .iter()
            .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?)))
            .collect::<Result<_, StoreError>>()?;
        cursor.advance(
            rows.last().map(|(_, last, _)| last.as_str()),
            rows.len(),
            want,
        );
        found.extend(rows);
    }
    if found.is_empty() {
        return Ok(Removed::default());
    }
    let ids: Vec<&str> = found.iter().map(|(id, _, _)| id.as_str()).collect();
    let sessions: Vec<&str> = found.iter().map(|(_, _, s)| s.as_str()).collect();
    let blobs = exec(
        c,
        "DELETE FROM blobs b USING unnest($1::text[], $2::text[]) AS u(id, s) \
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
    let runs = exec(
        c,
        "DELETE FROM runs WHERE id = ANY($1) AND state IN ('completed', 'failed', 'cancelled')",
        &[&ids],
        "delete pruned runs",
    )
    .await?;
    Ok(Removed {
        runs,
        blobs,
        inbox,
        ..Removed::default()
    })
}

async fn delete_batch<C: GenericClient>(
    c: &C,
    (table, alias, condition): (&str, &str, &str),
    cutoff: String,
    batch: usize,
) -> Result<u64, StoreError> {
    let sql = format!(
        "DELETE FROM {table} WHERE id IN \
         (SELECT {alias}.id FROM {table} {alias} WHERE {condition} LIMIT $2)"
    );
    exec(
        c,
        &sql,
        &[&cutoff, &(batch as i64)],
        &format!("prune {table}"),
    )
    .await
}

/// Deletes at most `batch` acknowledged messages older than the cutoff.
pub(crate) async fn prune_acked_inbox_batch<C: GenericClient>(
    c: &C,
    cut: &PruneCutoffs,
    batch: usize,
) -> Result<u64, StoreError> {
    let cond = "i.acked_at IS NOT NULL AND i.acked_at < $1";
    delete_batch(c, ("inbox", "i", cond), ts(cut.acked_inbox_before), batch).await
}

/// Deletes at most `batch` old occurrences (never a schedule's latest).
pub(crate) async fn prune_occurrences_batch<C: GenericClient>(
    c: &C,
    cut: &PruneCutoffs,
    batch: usize,
) -> Result<u64, StoreError> {
    let t = ("schedule_occurrences", "o", PRUNABLE_OCCURRENCE);
    delete_batch(c, t, ts(cut.occurrences_before), batch).await
}

/// Deletes at most `batch` stopped worker rows.
pub(crate) async fn prune_workers_batch<C: GenericClient>(
    c: &C,
    cut: &PruneCutoffs,
    batch: usize,
) -> Result<u64, StoreError> {
    delete_batch(
        c,
        ("workers", "w", PRUNABLE_WORKER),
        ts(cut.workers_before),
        batch,
    )
    .await
}

/// What a prune would remove (dry run).
pub(crate) async fn count_prunable<C: GenericClient>(
    c: &C,
    cut: &PruneCutoffs,
) -> Result<Removed, StoreError> {
    let rc = run_cutoffs(cut);
    let rp: [P<'_>; 3] = [&rc[0], &rc[1], &rc[2]];
    let count =
        |n: tokio_postgres::Row| -> Result<u64, StoreError> { Ok(get::<i64>(&n, 0)? as u64) };
    let runs = count(
        query_one(
            c,
            &format!("SELECT count(*) FROM runs r WHERE {PRUNABLE_RUN}"),
            &rp,
            "count prunable runs",
        )
        .await?,
    )?;
    let blobs = count(
        query_one(
            c,
            &format!(
                "SELECT count(*) FROM runs r JOIN blobs b ON b.session_id = r.session_id \
                 AND b.path >= '/.background/' || r.id || '/' AND b.path < '/.background/' || r.id || '0' \
                 WHERE {PRUNABLE_RUN}"
            ),
            &rp,
            "count prunable blobs",
        )
        .await?,
    )?;
    let acked = ts(cut.acked_inbox_before);
    let ip: [P<'_>; 4] = [&rc[0], &rc[1], &rc[2], &acked];
    let inbox = count(
        query_one(
            c,
            &format!(
                "SELECT count(*) FROM inbox i WHERE i.run_id IN (SELECT r.id FROM runs r WHERE {PRUNABLE_RUN}) \
                 OR (i.acked_at IS NOT NULL AND i.acked_at < $4)"
            ),
            &ip,
            "count prunable inbox rows",
        )
        .await?,
    )?;
    let occ = ts(cut.occurrences_before);
    let occurrences = count(
        query_one(
            c,
            &format!("SELECT count(*) FROM schedule_occurrences o WHERE {PRUNABLE_OCCURRENCE}"),
            &[&occ],
            "count prunable occurrences",
        )
        .await?,
    )?;
    let wk = ts(cut.workers_before);
    let workers = count(
        query_one(
            c,
            &format!("SELECT count(*) FROM workers w WHERE {PRUNABLE_WORKER}"),
            &[&wk],
            "count prunable workers",
        )
        .await?,
    )?;
    Ok(Removed {
        runs,
        blobs,
        inbox,
        occurrences,
        workers,
    })
}
