//! Reads for the web dashboard: keyset pages of runs newest first, finished runs per time
//! bucket, and the inbox messages about one run. Each is one read on a pooled reader.

use chrono::{DateTime, Utc};
use rusqlite::types::ToSql;
use rusqlite::{Connection, OptionalExtension, named_params};

use super::Ctx;
use super::codec::{RUN_COLUMNS, run_from_row, ts};
use crate::error::StoreError;
use crate::inbox::Message;
use crate::run::Run;
use crate::store::{FinishedBucket, RunPage};

/// At most `p.limit` runs matching the filter with an id below `p.before`, newest first.
/// Ids are time-ordered, so most pages walk the primary key backwards and stop after `limit`
/// matches without sorting. Two filters would make that walk pass a million runs that do not
/// match: queued, awaiting and running runs (few, each state with a partial index: the page
/// reads the index and sorts the few matches), and one session (its index is in creation
/// order: the page walks it backwards from the `before` run's creation time).
pub fn page(conn: &Connection, p: &RunPage) -> Result<Vec<Run>, StoreError> {
    let (sql, mut values) = page_sql(p);
    if by_session(p) {
        let created: Option<String> = match &p.before {
            None => Some("~".into()),
            Some(id) => conn
                .prepare_cached("SELECT created_at FROM runs WHERE id = ?1")
                .ctx("prepare page bound")?
                .query_row([id], |r| r.get(0))
                .optional()
                .ctx("page bound")?,
        };
        // The `before` run is gone (pruned): nothing older can be placed after it.
        let Some(created) = created else {
            return Ok(Vec::new());
        };
        values.push(Box::new(created));
    }
    // Past every id ("bg_" + uuid): the first page.
    values.push(Box::new(p.before.clone().unwrap_or_else(|| "~".into())));
    values.push(Box::new(p.limit));
    let params: Vec<&dyn ToSql> = values.iter().map(|v| &**v).collect();
    let mut stmt = conn.prepare_cached(&sql).ctx("prepare run page")?;
    let rows = stmt.query_map(&*params, run_from_row).ctx("run page")?;
    rows.collect::<Result<_, _>>().ctx("read run page")
}

fn unfinished_only(p: &RunPage) -> bool {
    !p.filter.states.is_empty() && p.filter.states.iter().all(|s| !s.is_final())
}

/// Whether the page walks the session's index (see [`page`]).
fn by_session(p: &RunPage) -> bool {
    p.filter.session.is_some() && !unfinished_only(p)
}

/// The SELECT of [`page`] and its filter's values (then, in order: the `before` run's
/// creation time for a session's page, the `before` id, the limit).
fn page_sql(p: &RunPage) -> (String, Vec<Box<dyn ToSql>>) {
    let unfinished = unfinished_only(p);
    if by_session(p) {
        let rest = crate::run::RunFilter {
            session: None,
            ..p.filter.clone()
        };
        let (cond, mut values) = super::bulk::conditions(&rest, true);
        values.push(Box::new(p.filter.session.clone().unwrap_or_default()));
        let n = values.len();
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ?{n} AND {cond} \
             AND (created_at < ?{c} OR (created_at = ?{c} AND +id < ?{b})) \
             ORDER BY created_at DESC, id DESC LIMIT ?{l}",
            c = n + 1,
            b = n + 2,
            l = n + 3
        );
        return (sql, values);
    }
    let (cond, values) = super::bulk::conditions(&p.filter, !unfinished);
    let n = values.len();
    // For unfinished states the key is hidden from the planner too (`+id`), or it would
    // still prefer walking it for the ORDER BY.
    let id = if unfinished { "+id" } else { "id" };
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE {id} < ?{} AND {cond} ORDER BY {id} DESC LIMIT ?{}",
        n + 1,
        n + 2
    );
    (sql, values)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{RunFilter, RunState};

    /// The query plan of `sql`, one line per step, on a new database with toolq's schema.
    fn plan(sql: &str) -> Vec<String> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.db");
        drop(super::super::Store::open(&path).expect("open"));
        let conn = Connection::open(&path).expect("reopen");
        let mut stmt = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("explain prepares");
        let mut rows = stmt.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next().expect("explain runs") {
            out.push(row.get::<_, String>(3).expect("detail"));
        }
        out
    }

    fn page_plan(filter: RunFilter) -> Vec<String> {
        plan(
            &page_sql(&RunPage {
                filter,
                before: None,
                limit: 50,
            })
            .0,
        )
    }

    /// A page of finished (or any) runs walks the primary key backwards and stops after the
    /// page: no sort of every match, so page one and page 20,000 cost the same.
    #[test]
    fn a_run_page_walks_the_key_without_sorting() {
        for filter in [
            RunFilter::default(),
            RunFilter {
                states: vec![RunState::Failed],
                ..RunFilter::default()
            },
            RunFilter {
                tool: Some("t".into()),
                ..RunFilter::default()
            },
        ] {
            let plan = page_plan(filter.clone());
            assert!(
                plan.iter().any(|d| d.contains("USING INTEGER PRIMARY KEY")
                    || d.contains("sqlite_autoindex_runs_1")
                    || d.contains("PRIMARY KEY")),
                "{filter:?}: {plan:?}"
            );
            assert!(
                !plan.iter().any(|d| d.contains("TEMP B-TREE")),
                "{filter:?}: {plan:?}"
            );
        }
    }

    /// Queued, awaiting and running runs are few among millions: their pages read the
    /// state's partial index instead of walking past every finished run.
    #[test]
    fn a_page_of_unfinished_runs_reads_its_partial_index() {
        for (state, index) in [
            (RunState::Queued, "runs_claimable_idx"),
            (RunState::Running, "runs_running_owner_idx"),
            (RunState::AwaitingApproval, "runs_awaiting_deadline_idx"),
        ] {
            let plan = page_plan(RunFilter {
                states: vec![state],
                ..RunFilter::default()
            });
            assert!(
                plan.iter().any(|d| d.contains(index)),
                "{state:?}: {plan:?}"
            );
        }
    }

    /// A session's page walks the session's index backwards (creation order): a session with
    /// a handful of runs among millions costs what its own runs cost.
    #[test]
    fn a_session_page_walks_its_index() {
        for states in [vec![], vec![RunState::Completed]] {
            let filter = RunFilter {
                session: Some("s".into()),
                states,
                ..RunFilter::default()
            };
            let plan = page_plan(filter.clone());
            assert!(
                plan.iter().any(|d| d.contains("runs_session_created_idx")),
                "{filter:?}: {plan:?}"
            );
            assert!(
                !plan.iter().any(|d| d == "USE TEMP B-TREE FOR ORDER BY"),
                "{filter:?}: {plan:?}"
            );
        }
    }

    /// The chart's counts read ranges of the final-state index, never the table.
    #[test]
    fn finished_buckets_read_ranges_of_the_final_state_index() {
        let sql = "SELECT 'failed' AS state, CAST((julianday(finished_at) - julianday(:since)) * 86400 / :bucket AS INTEGER) AS b, count(*) AS n FROM runs WHERE state = 'failed' AND finished_at >= :since GROUP BY b";
        let plan = plan(sql);
        assert!(
            plan.iter()
                .any(|d| d.contains("COVERING INDEX runs_final_idx")),
            "{plan:?}"
        );
    }
}
