//! Bulk cancel and retry: select matching runs in id order (keyset), re-queue many, and ask
//! many running runs to stop. Selection is a read; each write re-checks the state it expects.

use rusqlite::types::ToSql;
use rusqlite::{Connection, Transaction};

use super::Ctx;
use super::codec::{RUN_COLUMNS, run_from_row, ts};
use crate::error::StoreError;
use crate::ids::RunId;
use crate::run::{Run, RunFilter, RunState};

/// The filter's WHERE terms (after `WHERE`) and their values. With `plain`, each column is
/// written `+col` so SQLite cannot walk another index for it: a keyset walk must follow the
/// primary key, or it sorts every match on every batch.
pub(crate) fn conditions(f: &RunFilter, plain: bool) -> (String, Vec<Box<dyn ToSql>>) {
    let c = |name: &str| {
        if plain {
            format!("+{name}")
        } else {
            name.to_string()
        }
    };
    let mut terms = Vec::new();
    let mut values: Vec<Box<dyn ToSql>> = Vec::new();
    if !f.states.is_empty() {
        // States come from the enum, never from input text: spelled inline, as an OR chain
        // (an IN list builds a temporary b-tree per execution).
        let states: Vec<String> = f
            .states
            .iter()
            .map(|s| format!("{} = '{}'", c("state"), s.as_str()))
            .collect();
        terms.push(format!("({})", states.join(" OR ")));
    }
    let mut eq = |col: &str, v: &Option<String>| {
        if let Some(v) = v {
            values.push(Box::new(v.clone()));
            terms.push(format!("{} = ?{}", c(col), values.len()));
        }
    };
    eq("tool", &f.tool);
    eq("session_id", &f.session);
    eq("schedule_id", &f.schedule_id);
    if let Some(b) = &f.batch_id {
        // Never `+`: the batch index (batch_id, id) is the keyset walk a batch needs.
        values.push(Box::new(b.clone()));
        terms.push(format!("batch_id = ?{}", values.len()));
    }
    if let Some(p) = &f.parent_run_id {
        // Never `+`: the parent index is the walk a run's children need.
        values.push(Box::new(p.clone()));
        terms.push(format!("parent_run_id = ?{}", values.len()));
    }
    for tag in f.tags.rows() {
        // Each tag's runs from `run_tags_tag_idx` (tag, run_id): a list built once per
        // statement that the walk tests each id against.
        values.push(Box::new(tag));
        terms.push(format!(
            "id IN (SELECT run_id FROM run_tags WHERE tag = ?{})",
            values.len()
        ));
    }
    if let Some(t) = f.created_before {
        values.push(Box::new(ts(t)));
        terms.push(format!("{} < ?{}", c("created_at"), values.len()));
    }
    if let Some(t) = f.created_after {
        values.push(Box::new(ts(t)));
        terms.push(format!("{} > ?{}", c("created_at"), values.len()));
    }
    if terms.is_empty() {
        terms.push("1".into());
    }
    (terms.join(" AND "), values)
}

/// The SELECT of one keyset batch: matching runs with id after `?1`, in id order.
pub(crate) fn select_sql(f: &RunFilter) -> (String, Vec<Box<dyn ToSql>>) {
    let (cond, values) = conditions(f, true);
    let n = values.len();
    (
        format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id > ?{} AND {cond} ORDER BY id LIMIT ?{}",
            n + 1,
            n + 2
        ),
        values,
    )
}

/// At most `limit` runs matching `f` whose id sorts after `after`, in id order.
pub fn select(
    conn: &Connection,
    f: &RunFilter,
    after: &str,
    limit: i64,
) -> Result<Vec<Run>, StoreError> {
    let (sql, mut values) = select_sql(f);
    values.push(Box::new(after.to_string()));
    values.push(Box::new(limit));
    let params: Vec<&dyn ToSql> = values.iter().map(|v| &**v).collect();
    let mut stmt = conn.prepare_cached(&sql).ctx("prepare select runs")?;
    let rows = stmt.query_map(&*params, run_from_row).ctx("select runs")?;
    rows.collect::<Result<_, _>>().ctx("read runs")
}

/// How many runs match `f`.
pub fn count(conn: &Connection, f: &RunFilter) -> Result<i64, StoreError> {
    let (cond, values) = conditions(f, false);
    let params: Vec<&dyn ToSql> = values.iter().map(|v| &**v).collect();
    conn.prepare_cached(&format!("SELECT count(*) FROM runs WHERE {cond}"))
        .ctx("prepare count runs")?
        .query_row(&*params, |r| r.get(0))
        .ctx("count runs")
}

/// Re-queues each (run, state it was read in); per run, whether it was still in that state.
pub fn retry_many(
    tx: &Transaction<'_>,
    runs: &[(RunId, RunState)],
    approvals: &[Option<crate::run::PendingApproval>],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<bool>, StoreError> {
    let applied = runs
        .iter()
        .enumerate()
        .map(|(i, (id, state))| {
            let ok = super::runs::requeue_finished(tx, id, *state, now)?;
            if let (true, Some(Some(a))) = (ok, approvals.get(i)) {
                super::runs::mark_awaiting(tx, id, a, now)?;
            }
            Ok(ok)
        })
        .collect::<Result<Vec<bool>, StoreError>>()?;
    let requeued: Vec<(&str, RunState)> = runs
        .iter()
        .zip(&applied)
        .filter(|(_, ok)| **ok)
        .map(|((id, s), _)| (id.as_str(), *s))
        .collect();
    super::compose::after_requeue(tx, super::finish::record_ends_plain, &requeued, now)?;
    Ok(applied)
}

/// Asks each running run to stop; per run, whether it was still running.
pub fn request_cancel_many(
    tx: &Transaction<'_>,
    ids: &[RunId],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<bool>, StoreError> {
    ids.iter()
        .map(|id| super::runs::request_cancel(tx, id, now))
        .collect()
}
