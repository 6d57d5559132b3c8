//! Guards on the bytecode of the per-run statements: none may build a temporary b-tree.

use rusqlite::Connection;

/// A connection to a new database with toolq's schema; the directory must outlive it.
fn fresh(dir: &tempfile::TempDir) -> Connection {
    let path = dir.path().join("t.db");
    drop(super::Store::open(&path).expect("open"));
    Connection::open(&path).expect("reopen")
}

/// Column `col` of every row `sql` (an `EXPLAIN ...` statement) returns.
fn explain(conn: &Connection, sql: &str, col: usize) -> Vec<String> {
    let mut stmt = conn.prepare(sql).expect("explain prepares");
    // Unbound parameters are NULL; EXPLAIN only lists the program or the plan.
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next().expect("explain runs") {
        out.push(row.get::<_, String>(col).expect("explain column"));
    }
    out
}

/// The opcodes of `sql` as SQLite compiled it.
fn opcodes(conn: &Connection, sql: &str) -> Vec<String> {
    explain(conn, &format!("EXPLAIN {sql}"), 1)
}

/// The query plan of `sql` on a new database: one line per step.
fn plan(sql: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    explain(&fresh(&dir), &format!("EXPLAIN QUERY PLAN {sql}"), 3)
}

#[test]
fn per_run_statements_build_no_temporary_btree() {
    let dir = tempfile::tempdir().expect("temp dir");
    let conn = fresh(&dir);
    // An IN list of three or more values in a CHECK or a partial index condition compiles to
    // OpenEphemeral on every execution (the schema spells such lists as OR chains).
    let (blobs, messages) = (
        super::artifacts::put_many_sql(32),
        super::inbox::insert_many_sql(16),
    );
    for (name, sql, allowed) in [
        ("blobs of a cohort", blobs, 0),
        ("messages of a cohort", messages, 0),
        ("enqueue", super::runs::INSERT, 0),
        (
            "enqueue of a batch",
            super::runs::insert_sql(super::runs::ROWS_PER_INSERT, super::runs::Shared::NONE),
            0,
        ),
        ("claim", super::claim::CLAIM_ONE, 0),
        (
            "claim at the background limit",
            super::claim::CLAIM_ONE_NOT_BACKGROUND,
            0,
        ),
        ("finish", super::finish::FINISH.as_str(), 0),
        ("blob", super::artifacts::PUT, 0),
        ("inbox", super::inbox::INSERT, 0),
    ] {
        let ops = opcodes(&conn, sql);
        assert!(!ops.is_empty(), "{name}: no bytecode");
        let ephemeral = ops.iter().filter(|op| *op == "OpenEphemeral").count();
        assert_eq!(
            ephemeral, allowed,
            "{name} builds temporary b-trees on every execution: {ops:?}"
        );
    }
}

/// The rescue tick runs every poll: it must read the running runs only, not every run.
#[test]
fn the_rescue_query_reads_running_runs_only() {
    let plan = plan(&super::rescue::RESCUABLE.replace("{cols}", super::codec::RUN_COLUMNS));
    assert!(
        plan.iter().any(|d| d.contains("runs_running_owner_idx")),
        "{plan:?}"
    );
    assert!(
        !plan
            .iter()
            .any(|d| d.contains("sqlite_autoindex_runs_1") || d == "SCAN r"),
        "{plan:?}"
    );
}

/// Without a run_id index (version 3), a run's blobs are found by their path prefix: a range
/// of the primary key, never a scan of every blob.
#[test]
fn a_runs_blobs_are_a_primary_key_range() {
    let plan = plan(&format!(
        "DELETE FROM blob_rows WHERE {}",
        super::artifacts::OF_RUN
    ));
    assert!(
        plan.iter()
            .any(|d| d.contains("USING PRIMARY KEY (session_id=? AND path>? AND path<?)")),
        "{plan:?}"
    );
}

/// A run's result (version 16: `runs.result`) is read by its blob path with one probe of the
/// runs' primary key, and any other blob with one probe of the blob rows' key.
#[test]
fn a_blob_is_one_key_probe() {
    for (sql, index) in [
        (
            super::artifacts::GET_RESULT,
            "sqlite_autoindex_runs_1 (id=?)",
        ),
        (
            super::artifacts::GET_ROW,
            "PRIMARY KEY (session_id=? AND path=?)",
        ),
    ] {
        let plan = plan(sql);
        assert!(plan.iter().any(|d| d.contains(index)), "{sql}: {plan:?}");
    }
}

/// Version 4 keeps one index of finished runs (`runs_final_idx`, state then finish time); the
/// counts, the failures view and retention's per-state walk must all read a range of it.
#[test]
fn finished_runs_are_found_through_runs_final_idx() {
    for sql in [
        "SELECT count(*) FROM runs WHERE state = 'completed'".to_string(),
        "SELECT * FROM failures_24h".to_string(),
        format!(
            "SELECT r.id FROM runs r WHERE r.state = 'cancelled' AND r.finished_at >= '' AND {} \
             ORDER BY r.finished_at LIMIT 10",
            super::retention::PRUNABLE_RUN
        ),
    ] {
        let p = plan(&sql);
        assert!(
            p.iter().any(
                |d| d.contains("USING COVERING INDEX runs_final_idx (state=?")
                    || d.contains("USING INDEX runs_final_idx (state=?")
            ),
            "{sql}: {p:?}"
        );
        assert!(
            !p.iter()
                .any(|d| d.starts_with("SCAN r") || d == "SCAN runs"),
            "{sql}: {p:?}"
        );
        assert!(!p.iter().any(|d| d.contains("TEMP B-TREE")), "{sql}: {p:?}");
    }
}

/// A run's messages (retention, the cascade of a run deleted by hand) are a range of
/// `inbox_run_idx`, which is also the one-final-message-per-attempt guard.
#[test]
fn a_runs_messages_are_found_through_inbox_run_idx() {
    for sql in [
        "DELETE FROM inbox WHERE run_id IN (SELECT value FROM json_each('[\"bg_x\"]'))",
        "SELECT 1 FROM inbox i WHERE i.run_id = 'bg_x' AND i.acked_at IS NULL",
    ] {
        let p = plan(sql);
        assert!(
            p.iter().any(|d| d.contains("inbox_run_idx (run_id=?)")),
            "{sql}: {p:?}"
        );
    }
}

/// A claim walks the queued (session, tool) pairs, reads each session's heads for each tool
/// the worker has, and the next delayed run of each tool: all are seeks into one index
/// (session and tool, or tool), none a scan or a sort, so their cost does not grow with the
/// runs queued for other tools or sessions.
#[test]
fn claims_and_the_next_due_run_seek_by_tool() {
    for (sql, wanted) in [
        (
            super::claim::SESSION_HEAD,
            "runs_claimable_idx (session_id=? AND tool=?)",
        ),
        (
            super::survey::NEXT_TOOL,
            "runs_claimable_idx (session_id=? AND tool>?)",
        ),
        (
            super::survey::NEXT_SESSION,
            "runs_claimable_idx (session_id>?)",
        ),
        (
            super::due::NEXT_DELAYED,
            "runs_delayed_idx (tool=? AND run_at>?)",
        ),
    ] {
        let p = plan(sql);
        assert!(p.iter().any(|d| d.contains(wanted)), "{sql}: {p:?}");
        assert!(!p.iter().any(|d| d.contains("TEMP B-TREE")), "{sql}: {p:?}");
        assert!(!p.iter().any(|d| d.starts_with("SCAN")), "{sql}: {p:?}");
    }
}

/// Limits add no per-limit cost to a claim: the running counts per session and tool are one
/// read of the small running-runs index, and a rate window is a range of the per-slice start
/// counts of the one tool (at most 120 rows, whatever the rate or the number of limited tools).
#[test]
fn limit_counts_read_the_running_index_and_a_key_range() {
    for (sql, wanted) in [
        (super::survey::RUNNING_PER_SESSION, "runs_running_owner_idx"),
        (
            super::flow::SLICES,
            "PRIMARY KEY (tool=? AND slice_start>?)",
        ),
    ] {
        let p = plan(sql);
        assert!(p.iter().any(|d| d.contains(wanted)), "{sql}: {p:?}");
        assert!(
            !p.iter()
                .any(|d| d == "SCAN runs" || d == "SCAN tool_starts"),
            "{sql}: {p:?}"
        );
    }
    // The per-tool counts come from the index alone (tool is in it since version 8).
    let p = plan(super::survey::RUNNING_PER_SESSION);
    assert!(p.iter().any(|d| d.contains("COVERING INDEX")), "{p:?}");
}

/// A bulk cancel or retry walks runs by id: each page must seek the primary key after the
/// last id and stop at its limit, never sort all matches (a temporary b-tree per page).
#[test]
fn a_bulk_page_walks_the_primary_key() {
    use crate::run::{RunFilter, RunState};
    let filter = RunFilter {
        states: vec![RunState::Failed, RunState::Cancelled],
        tool: Some("t".into()),
        session: Some("s".into()),
        schedule_id: Some("sch".into()),
        created_before: Some(chrono::Utc::now()),
        created_after: Some(chrono::Utc::now()),
        batch_id: None,
        parent_run_id: None,
        tags: Default::default(),
    };
    for f in [filter, RunFilter::default()] {
        let plan = plan(&super::bulk::select_sql(&f).0);
        assert!(
            plan.iter()
                .any(|d| d.contains("sqlite_autoindex_runs_1 (id>?)")),
            "{plan:?}"
        );
        assert!(!plan.iter().any(|d| d.contains("TEMP B-TREE")), "{plan:?}");
    }
}

/// A unique enqueue's lookup is one seek of its own index per state, under the writer.
#[test]
fn the_unique_lookup_seeks_its_index() {
    let plan = plan(super::runs::FIND_UNIQUE);
    assert!(
        plan.iter()
            .any(|d| d.contains("runs_unique_idx (unique_key=? AND state=? AND created_at>?)")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|d| d.contains("TEMP B-TREE")), "{plan:?}");
}

/// A draining worker with nothing to claim asks whether work waits: the due check reads
/// `runs_claimable_idx` alone, and the retry check walks `runs_delayed_idx` per tool (in
/// `run_at` order, so it stops at the first retry, and below the far-future `run_at` of blocked
/// runs and waits without a timeout), never the whole table.
#[test]
fn the_work_check_reads_the_queue_indexes() {
    let plan = plan(super::due::WORK_WAITING);
    assert!(
        plan.iter()
            .any(|d| d.contains("USING COVERING INDEX runs_claimable_idx")),
        "{plan:?}"
    );
    assert!(
        plan.iter()
            .any(|d| d.contains("USING INDEX runs_delayed_idx (tool=? AND run_at<?)")),
        "{plan:?}"
    );
    assert!(
        !plan.iter().any(|d| d == "SCAN runs"),
        "a check reads every run: {plan:?}"
    );
}

/// spawn_background's per-session count seeks the background-only index by session (issue
/// 33): its cost follows the session's background runs, not the queue or the session's other
/// runs; a claim at the per-worker limit still walks the claimable index.
#[test]
fn background_limits_read_their_indexes() {
    let count = plan(super::runs::COUNT_ACTIVE_BACKGROUND);
    assert!(
        count
            .iter()
            .any(|d| d.contains("runs_background_idx (session_id=?")),
        "{count:?}"
    );
    let head = plan(super::claim::SESSION_HEAD_NOT_BACKGROUND);
    assert!(
        head.iter()
            .any(|d| d.contains("USING INDEX runs_claimable_idx")),
        "{head:?}"
    );
    assert!(!head.iter().any(|d| d.contains("TEMP B-TREE")), "{head:?}");
}

/// `runs --tag` walks `run_tags_tag_idx` for its first tag, newest id first, and reads each
/// run by its key: no scan of the runs, no sort. A bulk page with a tag still walks the
/// primary key (the tag's runs a list built once from the same index).
#[test]
fn a_tag_filter_reads_the_tag_index() {
    use crate::run::{ListFilter, RunFilter, Tags};
    let two = Tags::parse_all(["customer=acme", "env=prod"]).expect("tags");
    let list = plan(&super::runs::list_sql(&ListFilter {
        tags: two.clone(),
        tool: Some("t".into()),
        limit: 50,
        ..ListFilter::default()
    }));
    assert!(
        list.iter()
            .any(|d| d.contains("run_tags_tag_idx") && d.contains("tag=?")),
        "{list:?}"
    );
    assert!(
        list.iter()
            .any(|d| d.contains("sqlite_autoindex_runs_1 (id=?)")),
        "{list:?}"
    );
    assert!(!list.iter().any(|d| d.contains("TEMP B-TREE")), "{list:?}");
    assert!(!list.iter().any(|d| d.starts_with("SCAN runs")), "{list:?}");
    let bulk = plan(
        &super::bulk::select_sql(&RunFilter {
            tags: two,
            ..RunFilter::default()
        })
        .0,
    );
    assert!(
        bulk.iter().any(|d| d.contains("run_tags_tag_idx")),
        "{bulk:?}"
    );
    assert!(!bulk.iter().any(|d| d.contains("TEMP B-TREE")), "{bulk:?}");
}
