//! Reads for the web dashboard: keyset pages of runs newest first, finished runs per time
//! bucket, and the inbox messages about one run. Each is one read on a pooled reader.

use chrono::{DateTime, Utc};
use rusqlite::types::ToSql;
use rusqlite::{Connection, named_params};

use super::Ctx;
use super::codec::{RUN_COLUMNS, run_from_row, ts};
use crate::error::StoreError;
use crate::inbox::Message;
use crate::run::Run;
use crate::store::{FinishedBucket, RunPage};

/// At most `p.limit` runs matching the filter with an id below `p.before`, newest first.
/// Ids are time-ordered, so most pages walk the primary key backwards and stop after `limit`
/// matches without sorting. Queued, awaiting and running runs are few and each state has a
/// partial index: a filter on those states reads the index and sorts the few matches, where
/// a walk of the key could pass a million finished runs first.
pub fn page(conn: &Connection, p: &RunPage) -> Result<Vec<Run>, StoreError> {
    let unfinished = !p.filter.states.is_empty() && p.filter.states.iter().all(|s| !s.is_final());
    let (cond, mut values) = super::bulk::conditions(&p.filter, !unfinished);
    let n = values.len();
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE id < ?{} AND {cond} ORDER BY id DESC LIMIT ?{}",
        n + 1,
        n + 2
    );
    // Past every id ("bg_" + uuid): the first page.
    values.push(Box::new(p.before.clone().unwrap_or_else(|| "~".into())));
    values.push(Box::new(p.limit));
    let params: Vec<&dyn ToSql> = values.iter().map(|v| &**v).collect();
    let mut stmt = conn.prepare_cached(&sql).ctx("prepare run page")?;
    let rows = stmt.query_map(&*params, run_from_row).ctx("run page")?;
    rows.collect::<Result<_, _>>().ctx("read run page")
}

/// Runs finished since `since`, per final state and bucket of `bucket_secs` seconds.
pub fn finished_buckets(
    conn: &Connection,
    since: DateTime<Utc>,
    bucket_secs: i64,
) -> Result<Vec<FinishedBucket>, StoreError> {
    // One state at a time, each a range of runs_final_idx (state, finished_at).
    let arm = |state: &str| {
        format!(
            "SELECT '{state}' AS state, \
             CAST((julianday(finished_at) - julianday(:since)) * 86400 / :bucket AS INTEGER) AS b, \
             count(*) AS n FROM runs WHERE state = '{state}' AND finished_at >= :since GROUP BY b"
        )
    };
    let sql = ["completed", "failed", "cancelled"]
        .iter()
        .map(|s| arm(s))
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let mut stmt = conn.prepare_cached(&sql).ctx("prepare finished buckets")?;
    let rows = stmt
        .query_map(
            named_params! {":since": ts(since), ":bucket": bucket_secs.max(1)},
            |r| {
                Ok(FinishedBucket {
                    state: r.get(0)?,
                    bucket: r.get(1)?,
                    count: r.get(2)?,
                })
            },
        )
        .ctx("finished buckets")?;
    rows.collect::<Result<_, _>>().ctx("read finished buckets")
}

/// The inbox messages about one run, oldest first (at most `limit`).
pub fn messages_of_run(
    conn: &Connection,
    run_id: &str,
    limit: i64,
) -> Result<Vec<Message>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, session_id, run_id, kind, body, data, delivery, created_at, read_at, acked_at \
             FROM inbox WHERE run_id = :run ORDER BY id LIMIT :limit",
        )
        .ctx("prepare run messages")?;
    let rows = stmt
        .query_map(
            named_params! {":run": run_id, ":limit": limit},
            super::inbox::message_row,
        )
        .ctx("run messages")?;
    rows.collect::<Result<_, _>>().ctx("read run messages")
}
