//! The `runs` table: insert (idempotent), claim, heartbeat, progress, finish, cancel, list.
//! Every state change names the state it expects, and writes after a claim are fenced by
//! (id, attempt, lease_token).

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Transaction, named_params};

use super::Ctx;
use super::codec::{RUN_COLUMNS, run_from_row, ts};
use crate::error::StoreError;
use crate::ids::RunId;
use crate::run::ListFilter;
use crate::run::{Run, RunState};

mod insert;

pub use insert::*;

/// Reads one run.
pub fn get(conn: &rusqlite::Connection, id: &str) -> Result<Option<Run>, StoreError> {
    conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))
        .ctx("prepare get run")?
        .query_row([id], run_from_row)
        .optional()
        .ctx("get run")
}

/// Lists runs, newest first.
pub fn list(conn: &rusqlite::Connection, f: &ListFilter) -> Result<Vec<Run>, StoreError> {
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE (:state IS NULL OR state = :state) \
         AND (:session IS NULL OR session_id = :session) AND (:tool IS NULL OR tool = :tool) \
         AND (:schedule IS NULL OR schedule_id = :schedule) ORDER BY created_at DESC, id DESC LIMIT :limit"
    );
    let mut stmt = conn.prepare_cached(&sql).ctx("prepare list runs")?;
    let rows = stmt
        .query_map(
            named_params! {
                ":state": f.state.map(|s| s.as_str()),
                ":session": f.session,
                ":tool": f.tool,
                ":schedule": f.schedule_id,
                ":limit": f.limit,
            },
            run_from_row,
        )
        .ctx("list runs")?;
    rows.collect::<Result<_, _>>().ctx("read runs")
}

/// Count of runs in each state.
pub fn count_by_state(conn: &rusqlite::Connection) -> Result<Vec<(String, i64)>, StoreError> {
    let mut stmt = conn
        // One state at a time, each from its (partial) index instead of a scan of the table.
        .prepare_cached(
            "SELECT state, n FROM ( \
               SELECT 'queued' AS state, count(*) AS n FROM runs WHERE state = 'queued' \
               UNION ALL SELECT 'awaiting_approval', count(*) FROM runs WHERE state = 'awaiting_approval' \
               UNION ALL SELECT 'running', count(*) FROM runs WHERE state = 'running' \
               UNION ALL SELECT 'completed', count(*) FROM runs WHERE state = 'completed' \
               UNION ALL SELECT 'failed', count(*) FROM runs WHERE state = 'failed' \
               UNION ALL SELECT 'cancelled', count(*) FROM runs WHERE state = 'cancelled') \
             WHERE n > 0 ORDER BY state",
        )
        .ctx("prepare count runs")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .ctx("count runs")?;
    rows.collect::<Result<_, _>>().ctx("read counts")
}

/// The oldest runnable queued run's `run_at`.
pub fn oldest_queued(
    conn: &rusqlite::Connection,
    now: DateTime<Utc>,
) -> Result<Option<String>, StoreError> {
    conn.query_row(
        "SELECT min(run_at) FROM runs WHERE state = 'queued' AND run_at <= ?1",
        [ts(now)],
        |r| r.get(0),
    )
    .ctx("oldest queued run")
}

/// Whether anything is queued and due by `now`, or running, or awaiting approval.
pub fn has_unfinished(
    conn: &rusqlite::Connection,
    now: DateTime<Utc>,
) -> Result<(bool, bool), StoreError> {
    let runnable: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE state = 'queued' AND run_at <= ?1)",
        )
        .ctx("prepare runnable check")?
        .query_row([ts(now)], |r| r.get(0))
        .ctx("runnable check")?;
    let running: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE state = 'running')")
        .ctx("prepare running check")?
        .query_row([], |r| r.get(0))
        .ctx("running check")?;
    Ok((runnable, running))
}

/// Asks a running run to stop; its worker notices at its next heartbeat.
pub fn request_cancel(
    tx: &Transaction<'_>,
    id: &RunId,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE runs SET cancel_requested_at = coalesce(cancel_requested_at, :now) \
             WHERE id = :id AND state = 'running'",
        )
        .ctx("prepare request cancel")?
        .execute(named_params! {":now": ts(now), ":id": id.as_str()})
        .ctx("request cancel")?;
    Ok(n == 1)
}

/// Puts a failed or cancelled run back in the queue as a new attempt (one more allowed).
pub fn requeue_finished(
    tx: &Transaction<'_>,
    id: &RunId,
    expected: RunState,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE runs SET state = 'queued', run_at = :now, finished_at = NULL, error = NULL, \
             internal_error = NULL, cancel_requested_at = NULL, status_text = NULL, progress = NULL, \
             max_attempts = max(max_attempts, attempt + 1) WHERE id = :id AND state = :expected",
        )
        .ctx("prepare retry")?
        .execute(named_params! {":now": ts(now), ":id": id.as_str(), ":expected": expected.as_str()})
        .ctx("retry run")?;
    Ok(n == 1)
}

/// Sets the fields every final or retried attempt writes; fenced by the lease.
pub(crate) fn guard_sql(set: &str) -> String {
    format!(
        "UPDATE runs SET {set} WHERE id = :id AND state = 'running' AND attempt = :attempt \
         AND lease_token = :token"
    )
}

/// [`count_active_background`]'s statement.
pub(crate) const COUNT_ACTIVE_BACKGROUND: &str = "SELECT count(*) FROM (SELECT 1 FROM runs \
    INDEXED BY runs_background_idx WHERE background = 1 AND session_id = :session \
    AND (state = 'running' OR (state IN ('queued', 'awaiting_approval') AND run_at <= :now)) \
    AND id <> coalesce(:except, '') LIMIT :cap)";

/// Active background runs of `session` (`runs.background` = 1): queued or awaiting approval
/// and due at `now`, or running; not counting `except` (the calling spawn_background run).
/// Delayed runs are not active. Counts at most `cap` rows through `runs_background_idx`,
/// which holds background runs only, so neither the session's other runs nor the rest of the
/// queue are read.
pub fn count_active_background(
    conn: &rusqlite::Connection,
    session: &str,
    except: Option<&str>,
    now: DateTime<Utc>,
    cap: i64,
) -> Result<i64, StoreError> {
    conn.prepare_cached(COUNT_ACTIVE_BACKGROUND)
        .ctx("prepare count active background runs")?
        .query_row(
            named_params! {":session": session, ":except": except, ":now": ts(now), ":cap": cap},
            |r| r.get(0),
        )
        .ctx("count active background runs")
}

/// Marks a run just inserted as started in the background (`runs.background` = 1).
pub fn mark_background(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    tx.prepare_cached("UPDATE runs SET background = 1 WHERE id = ?1")
        .ctx("prepare mark background run")?
        .execute([id])
        .ctx("mark background run")?;
    Ok(())
}

/// Active (queued, awaiting_approval, running) runs of a session, not counting `except`
/// (spawn_background's own run).
pub fn count_active_in_session(
    conn: &rusqlite::Connection,
    session: &str,
    except: Option<&str>,
) -> Result<i64, StoreError> {
    // One partial index per state, so the cost does not grow with the session's finished runs.
    conn.prepare_cached(
        "SELECT (SELECT count(*) FROM runs INDEXED BY runs_claimable_idx \
           WHERE session_id = :session AND state = 'queued' AND id <> coalesce(:except, '')) \
         + (SELECT count(*) FROM runs INDEXED BY runs_running_owner_idx \
           WHERE session_id = :session AND state = 'running' AND id <> coalesce(:except, '')) \
         + (SELECT count(*) FROM runs INDEXED BY runs_awaiting_deadline_idx \
           WHERE session_id = :session AND state = 'awaiting_approval')",
    )
    .ctx("prepare count active runs")?
    .query_row(
        named_params! {":session": session, ":except": except},
        |r| r.get(0),
    )
    .ctx("count active runs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_group_is_bound_once_and_the_rest_per_row() {
        let all = Shared(Shared::NAMES | Shared::TIMES | Shared::OPTIONS);
        assert_eq!(all.per_row(), 2, "id and args");
        let sql = insert_sql(2, all);
        let values = &sql[sql.find(" VALUES ").expect("values")..];
        assert_eq!(
            values,
            " VALUES (?18, ?2, ?3, ?19, ?5, 'queued', ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17), \
             (?20, ?2, ?3, ?21, ?5, 'queued', ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
        );
        let times = Shared(Shared::TIMES);
        assert_eq!(times.per_row(), PARAMS - 2);
        let sql = insert_sql(2, times);
        assert!(
            sql.contains("(?18, ?19, ?20, ?21, ?22, 'queued', ?23, ?24, ?8, ?9, ?25,"),
            "{sql}"
        );
        assert!(
            sql.contains("(?33, ?34, ?35, ?36, ?37, 'queued', ?38, ?39, ?8, ?9, ?40,"),
            "{sql}"
        );
        let none = insert_sql(1, Shared::NONE);
        assert!(none.ends_with("(?18, ?19, ?20, ?21, ?22, 'queued', ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34)"), "{none}");
    }

    /// A plain queued run of tool `t` with title `t`, created `now`.
    fn new_run(session: &str, args: serde_json::Value, now: DateTime<Utc>) -> NewRun {
        NewRun {
            id: RunId::generate(),
            session_id: session.into(),
            tool: "t".into(),
            args: args.to_string(),
            title: "t".into(),
            priority: 0,
            max_attempts: 3,
            run_at: now,
            created_at: now,
            idempotency_key: None,
            timeout_ms: None,
            signal_on_completion: true,
            delivery: crate::run::Delivery::WhenIdle,
            schedule_id: None,
            fire_at: None,
            ticks: 1,
            unique: None,
            approval: None,
        }
    }

    #[test]
    fn the_shared_groups_are_those_equal_in_every_run() {
        let now = chrono::Utc::now();
        let run = |session: &str, priority: i64, at: i64| NewRun {
            priority,
            run_at: now + chrono::Duration::seconds(at),
            ..new_run(session, serde_json::json!({}), now)
        };
        let all = Shared::NAMES | Shared::TIMES | Shared::OPTIONS;
        assert_eq!(Shared::of(&[run("a", 0, 0), run("a", 0, 0)]), Shared(all));
        assert_eq!(
            Shared::of(&[run("a", 0, 0), run("b", 0, 0)]),
            Shared(all & !Shared::NAMES)
        );
        assert_eq!(
            Shared::of(&[run("a", 0, 0), run("a", 1, 0)]),
            Shared(all & !Shared::OPTIONS)
        );
        assert_eq!(
            Shared::of(&[run("a", 0, 0), run("a", 0, 1), run("b", 1, 0)]),
            Shared::NONE
        );
        assert_eq!(
            Shared::of(&[run("a", 0, 0)]),
            Shared::NONE,
            "one row: nothing to share"
        );
    }

    /// Runs enough to fill a file with a few thousand rows in batches of 1,000.
    fn six_thousand_runs() -> Vec<NewRun> {
        let now = chrono::Utc::now();
        (0..6_000)
            .map(|i| {
                let args = serde_json::json!({"i": i, "pad": "0123456789abcdef0123456789abcdef"});
                new_run("s", args, now)
            })
            .collect()
    }

    /// Temporary files SQLite holds open in this process (its names start with `etilqs_`;
    /// they are unlinked at once, so only `/proc/self/fd` still shows them).
    #[cfg(target_os = "linux")]
    fn open_sqlite_temp_files() -> usize {
        std::fs::read_dir("/proc/self/fd")
            .expect("list /proc/self/fd")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().contains("etilqs_"))
            .count()
    }

    /// A batch's multi-row INSERTs each keep a statement journal (the pages they change, to
    /// undo the one statement). SQLite spills one past 64 KiB to a file in the temporary
    /// directory, which the batches of a file with a few thousand runs did: half the `pwrite`
    /// calls of a 20,000-run batch enqueue, and an error where that directory is full. The
    /// writer keeps them in memory. (Fails with SQLite's default `temp_store`.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_batch_insert_writes_no_temporary_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = super::super::Store::open(dir.path().join("q.db")).expect("open");
        let runs = six_thousand_runs();
        for batch in runs.chunks(1_000) {
            let held = store
                .write(|tx| {
                    insert_many(tx, batch)?;
                    Ok(open_sqlite_temp_files())
                })
                .expect("insert");
            assert_eq!(held, 0, "temporary files open at the end of a batch");
        }
        let count: i64 = store
            .read(|c| {
                c.query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
                    .ctx("count")
            })
            .expect("count");
        assert_eq!(count, 6_000);
    }

    /// A multi-row INSERT that may stop halfway keeps a statement journal, to undo its own
    /// rows (SQLite copies every page the statement changes first, and the journal's 1 KiB
    /// chunks churned the allocator: a fifth of a batch enqueue's time, BENCHMARKS.md, issue
    /// 19, session 10). The batch statements are `INSERT OR FAIL` (a failure leaves the
    /// statement's earlier rows, and the caller's transaction rolls back) and no immediate
    /// foreign key or function call is checked on insert, so they keep none. Seen from a
    /// connection with SQLite's default `temp_store`, which spills a journal past 64 KiB to a
    /// temporary file.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_batch_insert_keeps_no_statement_journal() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("q.db");
        drop(super::super::Store::open(&path).expect("create the schema"));
        let mut conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA temp_store = DEFAULT")
            .expect("pragmas");
        let runs = six_thousand_runs();
        for batch in runs.chunks(1_000) {
            let tx = conn.transaction().expect("begin");
            insert_many(&tx, batch).expect("insert");
            assert_eq!(
                open_sqlite_temp_files(),
                0,
                "a statement journal spilled to a file"
            );
            tx.commit().expect("commit");
        }
    }
}
