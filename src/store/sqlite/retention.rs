//! Retention: deleting finished runs (with their blobs and inbox rows), acknowledged inbox
//! messages and old schedule occurrences, one bounded batch per call so every write
//! transaction stays short. Unfinished runs are never candidates.

use rusqlite::{Connection, Transaction, named_params};

use super::Ctx;
use super::codec::ts;
use crate::error::StoreError;
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

fn run_params(c: &PruneCutoffs) -> [(&'static str, String); 3] {
    [
        (":runs_before", ts(c.runs_before)),
        (":unacked_before", ts(c.unacked_runs_before)),
        (":occ_before", ts(c.occurrences_before)),
    ]
}

fn as_params<'a>(p: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a dyn rusqlite::ToSql)> {
    p.iter()
        .map(|(k, v)| (*k, v as &dyn rusqlite::ToSql))
        .collect()
}

/// The final states, in the order a prune walks them.
const FINAL_STATES: [&str; 3] = ["completed", "failed", "cancelled"];

/// Deletes at most `batch` prunable runs with their blobs and inbox rows (their occurrences
/// keep the row with `run_id` set to NULL), oldest first within each final state. `cursor`
/// says where the previous batch stopped, so kept runs are not scanned again batch after
/// batch. Returns the counts; `runs < batch` means done.
pub fn prune_runs_batch(
    tx: &Transaction<'_>,
    c: &PruneCutoffs,
    batch: usize,
    cursor: &mut RunsCursor,
) -> Result<Removed, StoreError> {
    let mut found: Vec<(String, String, String)> = Vec::new();
    let rp = run_params(c);
    while found.len() < batch && cursor.state < FINAL_STATES.len() {
        // A literal state (not a parameter) lets the planner prove the partial index applies.
        let sql = format!(
            "SELECT r.id, r.finished_at, r.session_id FROM runs r \
             WHERE r.state = '{}' AND r.finished_at >= :after \
             AND {PRUNABLE_RUN} ORDER BY r.finished_at LIMIT :batch",
            FINAL_STATES[cursor.state]
        );
        let mut stmt = tx.prepare_cached(&sql).ctx("prepare prunable runs")?;
        let mut p = as_params(&rp);
        let want = (batch - found.len()) as i64;
        p.push((":batch", &want));
        p.push((":after", &cursor.after));
        let rows: Vec<(String, String, String)> = stmt
            .query_map(p.as_slice(), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .ctx("select prunable runs")?
            .collect::<Result<_, _>>()
            .ctx("read prunable runs")?;
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
    let ids: Vec<&String> = found.iter().map(|(id, _, _)| id).collect();
    let ids = serde_json::to_string(&ids).map_err(|e| StoreError::Task(e.to_string()))?;
    let del = |sql: &str, what: &str| -> Result<u64, StoreError> {
        Ok(tx
            .prepare_cached(sql)
            .ctx(what)?
            .execute(named_params! {":ids": ids})
            .ctx(what)? as u64)
    };
    // Children first, so the counts are ours rather than hidden in the cascade and trigger.
    let mut blobs = 0;
    {
        let mut stmt = tx
            .prepare_cached(&format!(
                "DELETE FROM blobs WHERE {}",
                super::artifacts::OF_RUN
            ))
            .ctx("prepare delete blobs of pruned runs")?;
        for (id, _, session) in &found {
            blobs += stmt
                .execute([session, id])
                .ctx("delete blobs of pruned runs")? as u64;
        }
    }
    let inbox = del(
        "DELETE FROM inbox WHERE run_id IN (SELECT value FROM json_each(:ids))",
        "delete inbox rows of pruned runs",
    )?;
    let runs = del(
        "DELETE FROM runs WHERE id IN (SELECT value FROM json_each(:ids)) \
         AND state IN ('completed', 'failed', 'cancelled')",
        "delete pruned runs",
    )?;
    Ok(Removed {
        runs,
        blobs,
        inbox,
        ..Removed::default()
    })
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

/// Deletes at most `batch` acknowledged inbox messages older than the cutoff.
pub fn prune_acked_inbox_batch(
    tx: &Transaction<'_>,
    c: &PruneCutoffs,
    batch: usize,
) -> Result<u64, StoreError> {
    let cutoff = (":acked_before", ts(c.acked_inbox_before));
    delete_batch(tx, ("inbox", "i", PRUNABLE_ACKED), cutoff, batch)
}

/// Deletes at most `batch` old schedule occurrences (never a schedule's latest).
pub fn prune_occurrences_batch(
    tx: &Transaction<'_>,
    c: &PruneCutoffs,
    batch: usize,
) -> Result<u64, StoreError> {
    let cutoff = (":occ_before", ts(c.occurrences_before));
    delete_batch(
        tx,
        ("schedule_occurrences", "o", PRUNABLE_OCCURRENCE),
        cutoff,
        batch,
    )
}

/// Deletes at most `batch` rows of workers that stopped cleanly before the cutoff.
pub fn prune_workers_batch(
    tx: &Transaction<'_>,
    c: &PruneCutoffs,
    batch: usize,
) -> Result<u64, StoreError> {
    let cutoff = (":workers_before", ts(c.workers_before));
    delete_batch(tx, ("workers", "w", PRUNABLE_WORKER), cutoff, batch)
}

/// What a prune with these cutoffs would remove, counted without writing (dry run).
pub fn count_prunable(conn: &Connection, c: &PruneCutoffs) -> Result<Removed, StoreError> {
    let rp = run_params(c);
    let count =
        |sql: String, p: &[(&'static str, String)], what: &str| -> Result<u64, StoreError> {
            conn.prepare_cached(&sql)
                .ctx(what)?
                .query_row(as_params(p).as_slice(), |r| r.get::<_, i64>(0))
                .ctx(what)
                .map(|n| n as u64)
        };
    let runs = count(
        format!("SELECT count(*) FROM runs r WHERE {PRUNABLE_RUN}"),
        &rp,
        "count prunable runs",
    )?;
    let blobs = count(
        format!(
            "SELECT count(*) FROM runs r JOIN blobs b ON b.session_id = r.session_id \
             AND b.path >= '/.background/' || r.id || '/' AND b.path < '/.background/' || r.id || '0' \
             WHERE {PRUNABLE_RUN}"
        ),
        &rp,
        "count prunable blobs",
    )?;
    let mut ip = rp.to_vec();
    ip.push((":acked_before", ts(c.acked_inbox_before)));
    // A message goes with its run, or on its own when acknowledged long ago; count it once.
    let inbox = count(
        format!(
            "SELECT count(*) FROM inbox i WHERE i.run_id IN (SELECT r.id FROM runs r WHERE {PRUNABLE_RUN}) \
             OR ({PRUNABLE_ACKED})"
        ),
        &ip,
        "count prunable inbox rows",
    )?;
    let occurrences = count(
        format!("SELECT count(*) FROM schedule_occurrences o WHERE {PRUNABLE_OCCURRENCE}"),
        &[(":occ_before", ts(c.occurrences_before))],
        "count prunable occurrences",
    )?;
    let workers = count(
        format!("SELECT count(*) FROM workers w WHERE {PRUNABLE_WORKER}"),
        &[(":workers_before", ts(c.workers_before))],
        "count prunable workers",
    )?;
    Ok(Removed {
        runs,
        blobs,
        inbox,
        occurrences,
        workers,
    })
}
