//! Schema upgrades: a version-1 file (the schema as first released) opens as the current
//! version, keeps its rows, and ends up with exactly the schema a new file gets.

use rusqlite::Connection;
use toolq::store::sqlite::{SCHEMA_VERSION, Store};

const SCHEMA_V1: &str = include_str!("fixtures/schema_v1.sql");

/// Every schema object as (type, name, SQL with whitespace collapsed), sorted by name.
fn objects(conn: &Connection) -> Vec<(String, String, String)> {
    let mut stmt = conn
        .prepare("SELECT type, name, coalesce(sql, '') FROM sqlite_master ORDER BY type, name")
        .unwrap();
    stmt.query_map([], |r| {
        let sql: String = r.get(2)?;
        Ok((
            r.get(0)?,
            r.get(1)?,
            sql.split_whitespace().collect::<Vec<_>>().join(" "),
        ))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// The `CREATE TABLE` statement SQLite keeps for `table`.
fn table_sql(conn: &Connection, table: &str) -> String {
    conn.query_row(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [table],
        |r| r.get(0),
    )
    .unwrap()
}

/// SQLite's integrity check of an upgraded file finds nothing.
fn assert_intact(conn: &Connection) {
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

fn v1_file(path: &std::path::Path) {
    let c = Connection::open(path).unwrap();
    c.execute_batch(SCHEMA_V1).unwrap();
    c.execute_batch(
        "PRAGMA user_version = 1;
         INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at)
           VALUES ('bg_q', 's1', 'echo', '{}', 'queued one', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');
         INSERT INTO runs (id, session_id, tool, args, title, state, attempt, run_at, created_at, finished_at)
           VALUES ('bg_c', 's1', 'echo', '{}', 'done one', 'completed', 1, '2026-01-01T00:00:00.000Z',
                   '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z');
         INSERT INTO runs (id, session_id, tool, args, title, state, attempt, run_at, created_at, finished_at)
           VALUES ('bg_cc', 's1', 'echo', '{}', 'other one', 'completed', 1, '2026-01-01T00:00:00.000Z',
                   '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z');
         INSERT INTO inbox (session_id, run_id, attempt, kind, body, created_at)
           VALUES ('s1', 'bg_c', 1, 'completed', 'done', '2026-01-01T00:00:01.000Z');
         INSERT INTO blobs (session_id, path, run_id, content, size, created_at, updated_at)
           VALUES ('s1', '/.background/bg_c/result.json', 'bg_c', CAST('{\"ok\":1}' AS BLOB), 8,
                   '2026-01-01T00:00:01.000Z', '2026-01-01T00:00:01.000Z'),
                  ('s1', '/.background/bg_cc/result.json', 'bg_cc', CAST('other' AS BLOB), 5,
                   '2026-01-01T00:00:01.000Z', '2026-01-01T00:00:01.000Z');",
    )
    .unwrap();
}

/// Opens `old` (an older file) and `new` (no file yet) with today's toolq, checks that the
/// upgraded file has the current version and exactly a new file's schema, and returns a
/// connection to the upgraded file.
fn upgrade(old: &std::path::Path, new: &std::path::Path) -> Connection {
    drop(Store::open(old).unwrap());
    drop(Store::open(new).unwrap());
    let (o, n) = (
        Connection::open(old).unwrap(),
        Connection::open(new).unwrap(),
    );
    let version: i64 = o
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(
        objects(&o),
        objects(&n),
        "upgraded schema differs from a new file's"
    );
    o
}

#[test]
fn a_version_1_file_is_upgraded_in_place_to_the_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.db");
    let new = dir.path().join("new.db");
    v1_file(&old);
    let o = upgrade(&old, &new);

    let rows: Vec<(String, String)> = o
        .prepare("SELECT id, state FROM runs ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        [
            ("bg_c".into(), "completed".into()),
            ("bg_cc".into(), "completed".into()),
            ("bg_q".into(), "queued".into())
        ]
    );
    let inbox: i64 = o
        .query_row("SELECT count(*) FROM inbox", [], |r| r.get(0))
        .unwrap();
    assert_eq!(inbox, 1);
    let queued: i64 = o
        .query_row(
            "SELECT queued FROM queue_depth WHERE session_id = 's1'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(queued, 1);
    // The blobs table was rebuilt (version 3) with its rows.
    let blob: (String, i64) = o
        .query_row(
            "SELECT CAST(content AS TEXT), size FROM blobs WHERE session_id = 's1' \
             AND path = '/.background/bg_c/result.json'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(blob, ("{\"ok\":1}".to_string(), 8));
    // Opening again is a no-op.
    drop(Store::open(&old).unwrap());
    assert_eq!(
        objects(&Connection::open(&old).unwrap()),
        objects(&Connection::open(&new).unwrap())
    );
}

/// A hand-written `DELETE FROM runs` still takes the run's blobs (trigger) and messages
/// (cascade) with it, and only that run's: `bg_cc` shares a prefix with `bg_c`.
#[test]
fn deleting_a_run_by_hand_deletes_its_blobs_and_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    v1_file(&path);
    drop(Store::open(&path).unwrap());
    let c = Connection::open(&path).unwrap();
    c.execute_batch("PRAGMA foreign_keys = ON; DELETE FROM runs WHERE id = 'bg_c';")
        .unwrap();
    let left: Vec<String> = c
        .prepare("SELECT path FROM blobs ORDER BY path")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(left, ["/.background/bg_cc/result.json"]);
    let inbox: i64 = c
        .query_row("SELECT count(*) FROM inbox", [], |r| r.get(0))
        .unwrap();
    assert_eq!(inbox, 0);
}

/// The ops views and the state counts read partial indexes, never the whole runs table.
#[test]
fn state_queries_read_indexes_not_the_runs_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    drop(Store::open(&path).unwrap());
    let c = Connection::open(&path).unwrap();
    for sql in [
        "SELECT * FROM queue_depth",
        "SELECT * FROM stuck_runs",
        "SELECT * FROM failures_24h",
        "SELECT count(*) FROM runs WHERE state = 'queued'",
        "SELECT count(*) FROM runs WHERE state = 'awaiting_approval'",
        "SELECT count(*) FROM runs WHERE state = 'running'",
        "SELECT count(*) FROM runs WHERE state = 'failed'",
        "SELECT EXISTS (SELECT 1 FROM runs WHERE schedule_id = 'sch_x' \
         AND (state = 'queued' OR state = 'awaiting_approval' OR state = 'running'))",
    ] {
        let plan: Vec<String> = c
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            !plan.iter().any(|d| d == "SCAN runs" || d == "SCAN r"),
            "{sql} scans the runs table: {plan:?}"
        );
    }
}

const SCHEMA_V4: &str = include_str!("fixtures/schema_v4.sql");

/// Version 4 -> 5: the claim index gains the tool, delayed runs get their own index (built
/// from the rows already there), and worker rows get an empty tool list.
#[test]
fn a_version_4_file_gains_tool_routing_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("v4.db"), dir.path().join("new.db"));
    {
        let c = Connection::open(&old).unwrap();
        c.execute_batch(SCHEMA_V4).unwrap();
        c.execute_batch(
            "PRAGMA user_version = 4;
             INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at)
               VALUES ('bg_now', 's1', 'echo', '{}', 'due at once', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z'),
                      ('bg_later', 's1', 'disk_check', '{}', 'delayed', '2026-01-01T00:05:00.000Z', '2026-01-01T00:00:00.000Z');
             INSERT INTO workers (id, host, boot_id, pid, process_start_time, started_at, heartbeat_at, concurrency, version)
               VALUES ('wk_old', 'h', 'b', 1, '1', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', 4, '0.1.0');",
        )
        .unwrap();
    }
    let o = upgrade(&old, &new);
    let tools: String = o
        .query_row("SELECT tools FROM workers WHERE id = 'wk_old'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(tools, "[]");
    // Only the delayed run is in the delayed-run index; both are claimable by session and tool.
    let delayed: Vec<String> = o
        .prepare(
            "SELECT id FROM runs INDEXED BY runs_delayed_idx \
             WHERE state = 'queued' AND run_at > created_at AND tool >= ''",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(delayed, ["bg_later"]);
    let claimable: i64 = o
        .query_row(
            "SELECT count(*) FROM runs INDEXED BY runs_claimable_idx \
             WHERE state = 'queued' AND session_id = 's1'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(claimable, 2);
}

/// Version 8 rebuilds `schedule_occurrences` to allow the `paused` outcome: a schedule's ledger
/// keeps its rows and ids, its link to the run, and the view over it reads the new table.
#[test]
fn the_occurrence_ledger_survives_the_version_8_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    v1_file(&path);
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "INSERT INTO schedules (id, session_id, tool, args, title, cron_expression, next_trigger_at, \
               created_at, updated_at)
               VALUES ('sch_1', 's1', 'echo', '{}', 'daily', '0 9 * * *', '2026-01-02T09:00:00.000Z',
                       '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');
             INSERT INTO schedule_occurrences (id, schedule_id, fire_at, outcome, run_id, detail, recorded_at)
               VALUES (7, 'sch_1', '2026-01-01T09:00:00.000Z', 'fired', 'bg_c', NULL, '2026-01-01T09:00:00.000Z'),
                      (9, 'sch_1', '2025-12-31T09:00:00.000Z', 'missed', NULL, 'down', '2026-01-01T09:00:00.000Z');",
        )
        .unwrap();
    drop(Store::open(&path).unwrap());
    let c = Connection::open(&path).unwrap();
    let rows: Vec<(i64, String, Option<String>)> = c
        .prepare("SELECT id, outcome, run_id FROM schedule_occurrences ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        [
            (7, "fired".to_string(), Some("bg_c".to_string())),
            (9, "missed".to_string(), None)
        ]
    );
    c.execute_batch(
        "INSERT INTO schedule_occurrences (schedule_id, fire_at, outcome, recorded_at)
           VALUES ('sch_1', '2026-01-02T09:00:00.000Z', 'paused', '2026-01-02T09:00:00.000Z')",
    )
    .unwrap();
    let n: i64 = c
        .query_row(
            "SELECT count(*) FROM schedule_occurrences o JOIN schedules s ON s.id = o.schedule_id",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 3);
}

const SCHEMA_V5: &str = include_str!("fixtures/schema_v5.sql");

/// Version 5 -> 7 (through 6, the stages view): runs gain `unique_key` (NULL for the runs already there) and its index;
/// the rows stay, and a unique enqueue then works on the upgraded file.
#[tokio::test]
async fn a_version_5_file_gains_unique_keys_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("v5.db"), dir.path().join("new.db"));
    {
        let c = Connection::open(&old).unwrap();
        c.execute_batch(SCHEMA_V5).unwrap();
        c.execute_batch(
            "PRAGMA user_version = 5;
             INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at)
               VALUES ('bg_old', 's1', 'echo', '{\"message\":\"hi\"}', 'old one', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');",
        )
        .unwrap();
    }
    let o = upgrade(&old, &new);
    let (state, key): (String, Option<String>) = o
        .query_row(
            "SELECT state, unique_key FROM runs WHERE id = 'bg_old'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((state.as_str(), key), ("queued", None));

    // A run enqueued before the upgrade has no key: a unique enqueue inserts; a second one
    // returns the first.
    let config = toolq::Config {
        db_path: old.display().to_string(),
        ..Default::default()
    };
    let registry = toolq::RegistryBuilder::new()
        .with_builtins()
        .build()
        .unwrap();
    let client = toolq::Client::open(config, registry).unwrap();
    let req = toolq::EnqueueRequest::new("echo", serde_json::json!({"message": "hi"}))
        .unique(toolq::run::Unique::default());
    let a = client.enqueue(req.clone()).await.unwrap();
    let b = client.enqueue(req).await.unwrap();
    assert!(a.created && !b.created);
    assert_eq!(a.run_id, b.run_id);
}

const SCHEMA_V8: &str = include_str!("fixtures/schema_v8.sql");

/// Version 8 -> 9 (issue 19): the unread session index is dropped and the json_valid CHECKs of
/// runs.args and inbox.data are edited out of the table definitions in place. The rows stay,
/// the file is intact, and the connection that migrated no longer enforces the old CHECKs.
#[test]
fn a_version_8_file_loses_the_enqueue_checks_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("v8.db"), dir.path().join("new.db"));
    {
        let c = Connection::open(&old).unwrap();
        c.execute_batch(SCHEMA_V8).unwrap();
        c.execute_batch(
            "PRAGMA user_version = 8;
             INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at)
               VALUES ('bg_q', 's1', 'echo', '{\"x\":1}', 'queued one', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');
             INSERT INTO inbox (session_id, run_id, attempt, kind, body, data, created_at)
               VALUES ('s1', 'bg_q', 1, 'completed', 'done', '{\"ok\":true}', '2026-01-01T00:00:01.000Z');",
        )
        .unwrap();
        let invalid = c.execute("UPDATE runs SET args = 'not json' WHERE id = 'bg_q'", []);
        assert!(invalid.is_err(), "version 8 checks args");
    }
    // The store that migrates writes through the same connection afterwards.
    let store = Store::open(&old).unwrap();
    store
        .write(|tx| {
            tx.execute(
                "INSERT INTO inbox (session_id, attempt, kind, body, data, created_at) \
                 VALUES ('s1', 0, 'approval_request', 'raw', 'not json', '2026-01-01T00:00:02.000Z')",
                [],
            )
            .map_err(|e| toolq::error::StoreError::Task(format!("insert: {e}")))
        })
        .expect("the migrating connection no longer checks inbox.data");
    drop(store);
    let o = upgrade(&old, &new);
    let (args, data): (String, String) = o
        .query_row(
            "SELECT r.args, i.data FROM runs r JOIN inbox i ON i.run_id = r.id WHERE r.id = 'bg_q'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (args.as_str(), data.as_str()),
        ("{\"x\":1}", "{\"ok\":true}")
    );
    let index: i64 = o
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'runs_session_created_idx'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        index, 1,
        "the dashboard's session pages read runs_session_created_idx"
    );
    assert_intact(&o);
}

const SCHEMA_V9: &str = include_str!("fixtures/schema_v9.sql");

/// Version 9 -> 10 (issue 19): the json_valid CHECKs of runs.errors and runs.stages, evaluated
/// on every insert and on every finish, are edited out of the table definition in place. Runs
/// in every state keep their rows, and the connection that migrated no longer enforces them.
#[test]
fn a_version_9_file_loses_the_errors_and_stages_checks_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("v9.db"), dir.path().join("new.db"));
    let states = [
        "queued",
        "awaiting_approval",
        "running",
        "completed",
        "failed",
        "cancelled",
    ];
    {
        let c = Connection::open(&old).unwrap();
        c.execute_batch(SCHEMA_V9).unwrap();
        c.execute_batch("PRAGMA user_version = 9").unwrap();
        for (i, state) in states.iter().enumerate() {
            c.execute(
                "INSERT INTO runs (id, session_id, tool, args, title, state, attempt, run_at, created_at,
                                   errors, stages)
                 VALUES (?1, 's1', 'echo', '{}', ?2, ?2, ?3, '2026-01-01T00:00:00.000Z',
                         '2026-01-01T00:00:00.000Z', ?4, ?5)",
                rusqlite::params![
                    format!("bg_{state}"),
                    state,
                    i as i64,
                    format!("[{{\"attempt\":{i}}}]"),
                    format!("[{{\"stage\":\"{state}\"}}]"),
                ],
            )
            .unwrap();
        }
        let invalid = c.execute(
            "UPDATE runs SET errors = 'not json' WHERE id = 'bg_queued'",
            [],
        );
        assert!(invalid.is_err(), "version 9 checks errors");
    }
    // The store that migrates writes through the same connection afterwards.
    let store = Store::open(&old).unwrap();
    store
        .write(|tx| {
            tx.execute(
                "INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at, errors, stages) \
                 VALUES ('bg_raw', 's1', 'echo', '{}', 'raw', '2026-01-01T00:00:00.000Z', \
                         '2026-01-01T00:00:00.000Z', 'not json', 'not json either')",
                [],
            )
            .map_err(|e| toolq::error::StoreError::Task(format!("insert: {e}")))
        })
        .expect("the migrating connection no longer checks errors and stages");
    drop(store);
    let o = upgrade(&old, &new);
    for (i, state) in states.iter().enumerate() {
        let row: (String, i64, String, String) = o
            .query_row(
                "SELECT state, attempt, errors, stages FROM runs WHERE id = ?1",
                [format!("bg_{state}")],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(
            row,
            (
                state.to_string(),
                i as i64,
                format!("[{{\"attempt\":{i}}}]"),
                format!("[{{\"stage\":\"{state}\"}}]"),
            )
        );
    }
    let sql = table_sql(&o, "runs");
    assert!(!sql.contains("json_valid(errors)") && !sql.contains("json_valid(stages)"));
    assert_intact(&o);
}

/// Version 10 as a file had it: version 9 and its one migration (whose result the upgrade test
/// compared with schema.sql while version 10 was current), instead of another frozen copy.
const MIGRATION_10: &str = include_str!("../../migrations/010_lean_errors_stages.sql");

/// Version 10 -> 11 (issue 19): runs.schedule_id and inbox.run_id become deferred foreign
/// keys and runs.progress loses its json_valid CHECK, so a multi-row INSERT needs no
/// statement journal. Rows stay; a violation now fails at COMMIT instead of at the
/// statement, and still stores nothing; the ON DELETE actions still run at once.
#[test]
fn a_version_10_file_defers_its_insert_foreign_keys_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("v10.db"), dir.path().join("new.db"));
    let insert_run = "INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at, \
                      schedule_id, fire_at, progress) \
                      VALUES (?1, 's1', 'echo', '{}', 't', '2026-01-01T00:00:00.000Z', \
                              '2026-01-01T00:00:00.000Z', ?2, ?3, ?4)";
    let insert_message = "INSERT INTO inbox (session_id, run_id, kind, body, created_at) \
                          VALUES ('s1', ?1, 'completed', 'done', '2026-01-01T00:00:01.000Z')";
    {
        let c = Connection::open(&old).unwrap();
        c.execute_batch(SCHEMA_V9).unwrap();
        c.execute_batch(MIGRATION_10).unwrap();
        c.execute_batch(
            "PRAGMA user_version = 10; PRAGMA foreign_keys = ON;
             INSERT INTO schedules (id, session_id, tool, args, title, cron_expression,
                                    created_at, updated_at)
               VALUES ('sch_1', 's1', 'echo', '{}', 'every minute', '* * * * *',
                       '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');",
        )
        .unwrap();
        c.execute(
            insert_run,
            rusqlite::params![
                "bg_sched",
                "sch_1",
                "2026-01-01T00:00:00.000Z",
                r#"{"current":1}"#
            ],
        )
        .unwrap();
        c.execute(insert_message, ["bg_sched"]).unwrap();
        let dangling = c.execute(
            insert_run,
            rusqlite::params!["bg_x", "sch_none", "x", None::<String>],
        );
        assert!(
            dangling.is_err(),
            "version 10 checks the schedule at the statement"
        );
    }
    // The store that migrates writes through the same connection afterwards: a dangling
    // schedule passes the statement and fails the commit, which stores nothing.
    let store = Store::open(&old).unwrap();
    let err = store
        .write(|tx| {
            tx.execute(
                insert_run,
                rusqlite::params!["bg_x", "sch_none", "x", None::<String>],
            )
            .map_err(|e| toolq::error::StoreError::Task(format!("the statement failed: {e}")))?;
            tx.execute(insert_message, ["bg_none"])
                .map_err(|e| toolq::error::StoreError::Task(format!("the statement failed: {e}")))
        })
        .expect_err("a dangling foreign key fails the commit");
    let message = err.to_string();
    assert!(
        message.contains("commit") && message.contains("FOREIGN KEY"),
        "{message}"
    );
    drop(store);
    let o = upgrade(&old, &new);
    o.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    let rows: Vec<(String, Option<String>, Option<String>)> = o
        .prepare("SELECT id, schedule_id, progress FROM runs ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        [(
            "bg_sched".to_string(),
            Some("sch_1".to_string()),
            Some(r#"{"current":1}"#.to_string())
        )],
        "the rows are kept and the failed commit stored nothing"
    );
    let sql = |table: &str| table_sql(&o, table);
    assert!(sql("runs").contains("ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED"));
    assert!(!sql("runs").contains("json_valid("), "{}", sql("runs"));
    assert!(sql("inbox").contains("ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED"));
    // The ON DELETE actions run at once.
    o.execute("DELETE FROM schedules WHERE id = 'sch_1'", [])
        .unwrap();
    let schedule: Option<String> = o
        .query_row(
            "SELECT schedule_id FROM runs WHERE id = 'bg_sched'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        schedule, None,
        "deleting the schedule clears the run's schedule_id"
    );
    o.execute("DELETE FROM runs WHERE id = 'bg_sched'", [])
        .unwrap();
    let messages: i64 = o
        .query_row("SELECT count(*) FROM inbox", [], |r| r.get(0))
        .unwrap();
    assert_eq!(messages, 0, "deleting the run deletes its message");
    assert_intact(&o);
    let violations: i64 = o
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(violations, 0);
}

/// Version 11 as a file had it: version 10 (above) and migration 11.
const MIGRATION_11: &str = include_str!("../../migrations/011_no_statement_journal.sql");

/// Version 11 -> 12 (issue 33): runs gain `background` (0 for every run already there: none
/// was started in the background as the limits now count) and `runs_background_idx`. The
/// column is added after version 11's in-place edits of the same table in the same
/// transaction, which needs the schema parsed again after each step.
#[test]
fn a_version_11_file_gains_the_background_flag_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("v11.db"), dir.path().join("new.db"));
    {
        let c = Connection::open(&old).unwrap();
        c.execute_batch(SCHEMA_V9).unwrap();
        c.execute_batch(MIGRATION_10).unwrap();
        c.execute_batch(MIGRATION_11).unwrap();
        c.execute_batch(
            "PRAGMA user_version = 11;
             INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at)
               VALUES ('bg_old', 's1', 'echo', '{}', 'old one', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');",
        )
        .unwrap();
    }
    let o = upgrade(&old, &new);
    assert_intact(&o);
    let (state, background): (String, i64) = o
        .query_row(
            "SELECT state, background FROM runs WHERE id = 'bg_old'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((state.as_str(), background), ("queued", 0));
    assert!(
        o.execute("UPDATE runs SET background = 2 WHERE id = 'bg_old'", [])
            .is_err(),
        "background is 0 or 1"
    );
}

/// Migrations 12 and 13 as files had them (version 11 above, then these).
const MIGRATION_12: &str = include_str!("../../migrations/012_background_runs.sql");
const MIGRATION_13: &str = include_str!("../../migrations/013_durable_runs.sql");

/// Applies migration steps to `c` as migrate.rs does: after each one, the schema cookie is
/// bumped so that connections parse the edited tables again.
fn apply_steps(c: &Connection, steps: &[&str]) {
    for step in steps {
        c.execute_batch(step).unwrap();
        let cookie: i64 = c
            .query_row("PRAGMA schema_version", [], |r| r.get(0))
            .unwrap();
        c.execute_batch(&format!("PRAGMA schema_version = {}", cookie + 1))
            .unwrap();
    }
}

/// Version 13 -> 14 (issue 36): runs gain `batch_id`, `parent_run_id` and `deps_pending`
/// (none, none and 0 for the runs already there); the CHECKs of `wait_kind`, `inbox.kind` and
/// `step_records.kind` widen in place after the new columns are added; the new tables and
/// views work on the old rows, and a suspended run of version 13 keeps its wait.
#[test]
fn a_version_13_file_gains_composition_and_keeps_its_rows_and_waits() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("v13.db"), dir.path().join("new.db"));
    {
        let c = Connection::open(&old).unwrap();
        c.execute_batch(SCHEMA_V9).unwrap();
        apply_steps(
            &c,
            &[MIGRATION_10, MIGRATION_11, MIGRATION_12, MIGRATION_13],
        );
        c.execute_batch(
            "PRAGMA user_version = 13;
             INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at, wait_kind, wait_event)
               VALUES ('bg_wait', 's1', 'echo', '{}', 'waits', '9999-12-31T23:59:59.999Z',
                       '2026-01-01T00:00:00.000Z', 'event', 'go');",
        )
        .unwrap();
    }
    let o = upgrade(&old, &new);
    assert_intact(&o);
    let row: (Option<String>, Option<String>, i64, String, String) = o
        .query_row(
            "SELECT batch_id, parent_run_id, deps_pending, wait_kind, wait_event FROM runs \
             WHERE id = 'bg_wait'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(row, (None, None, 0, "event".into(), "go".into()));
    o.execute_batch(
        "UPDATE runs SET wait_kind = 'parents' WHERE id = 'bg_wait';
         INSERT INTO inbox (session_id, run_id, attempt, kind, body, created_at)
           VALUES ('s1', NULL, 1, 'batch_completed', 'done', '2026-01-01T00:00:01.000Z');
         INSERT INTO run_deps (child_id, parent_id, mode) VALUES ('bg_wait', 'bg_x', 'all');",
    )
    .unwrap();
    assert!(
        o.execute("UPDATE runs SET wait_kind = 'nap' WHERE id = 'bg_wait'", [])
            .is_err(),
        "wait_kind is still checked"
    );
    let blocked: i64 = o
        .query_row("SELECT count(*) FROM blocked_runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(blocked, 1);
    let edges: i64 = o
        .query_row("SELECT count(*) FROM run_edges", [], |r| r.get(0))
        .unwrap();
    assert_eq!(edges, 1);
}

/// Migration 14 as files had it (version 13 above, then this).
const MIGRATION_14: &str = include_str!("../../migrations/014_composition.sql");

/// Version 14 -> 15 (issue 39): runs and schedules gain `tags` (none for the rows already
/// there), runs gain `traceparent`, and `run_tags` indexes tags; deleting a tagged run by hand
/// deletes its tag rows, and an untagged run's delete touches none.
#[test]
fn a_version_14_file_gains_tags_and_traces_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("v14.db"), dir.path().join("new.db"));
    {
        let c = Connection::open(&old).unwrap();
        c.execute_batch(SCHEMA_V9).unwrap();
        apply_steps(
            &c,
            &[
                MIGRATION_10,
                MIGRATION_11,
                MIGRATION_12,
                MIGRATION_13,
                MIGRATION_14,
            ],
        );
        c.execute_batch(
            "PRAGMA user_version = 14;
             INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at)
               VALUES ('bg_old', 's1', 'echo', '{}', 'old', '2026-01-01T00:00:00.000Z',
                       '2026-01-01T00:00:00.000Z');",
        )
        .unwrap();
    }
    let o = upgrade(&old, &new);
    assert_intact(&o);
    let row: (Option<String>, Option<String>) = o
        .query_row(
            "SELECT tags, traceparent FROM runs WHERE id = 'bg_old'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(row, (None, None));
    o.execute_batch(
        "INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at, tags)
           VALUES ('bg_tagged', 's1', 'echo', '{}', 'tagged', '2026-01-01T00:00:00.000Z',
                   '2026-01-01T00:00:00.000Z', '{\"customer\":\"acme\"}');
         INSERT INTO run_tags (run_id, tag) VALUES ('bg_tagged', 'customer=acme');",
    )
    .unwrap();
    let tagged: String = o
        .query_row(
            "SELECT run_id FROM run_tags WHERE tag = 'customer=acme'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tagged, "bg_tagged");
    o.execute_batch("DELETE FROM runs WHERE id IN ('bg_old', 'bg_tagged')")
        .unwrap();
    let left: i64 = o
        .query_row("SELECT count(*) FROM run_tags", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0, "a deleted run's tags go with it");
}

/// Migration 15 as files had it (version 14 above, then this).
const MIGRATION_15: &str = include_str!("../../migrations/015_tags_traces.sql");

/// Version 15 -> 16 (issue 38): each run's result.json blob row moves into `runs.result`,
/// the table of blob rows is renamed `blob_rows` without a copy, and the view `blobs` shows
/// the same rows as before, results included; `toolq`'s reader finds the moved result, a
/// hand-written delete of a run still takes its blob rows, and a blob that is not a run's
/// result stays a row.
#[test]
fn a_version_15_file_keeps_its_results_beside_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("v15.db"), dir.path().join("new.db"));
    let view = |c: &Connection| -> Vec<(String, String, i64)> {
        c.prepare("SELECT path, CAST(content AS TEXT), size FROM blobs ORDER BY path")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let before = {
        let c = Connection::open(&old).unwrap();
        c.execute_batch(SCHEMA_V9).unwrap();
        apply_steps(
            &c,
            &[
                MIGRATION_10,
                MIGRATION_11,
                MIGRATION_12,
                MIGRATION_13,
                MIGRATION_14,
                MIGRATION_15,
            ],
        );
        c.execute_batch(
            "PRAGMA user_version = 15;
             INSERT INTO runs (id, session_id, tool, args, title, state, attempt, run_at, created_at, finished_at)
               VALUES ('bg_done', 's1', 'echo', '{}', 'done', 'completed', 1, '2026-01-01T00:00:00.000Z',
                       '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z'),
                      ('bg_queued', 's1', 'echo', '{}', 'queued', 'queued', 0, '2026-01-01T00:00:00.000Z',
                       '2026-01-01T00:00:00.000Z', NULL);
             INSERT INTO blobs (session_id, path, run_id, content, size, created_at, updated_at)
               VALUES ('s1', '/.background/bg_done/result.json', 'bg_done', CAST('{\"ok\":1}' AS BLOB), 8,
                       '2026-01-01T00:00:01.000Z', '2026-01-01T00:00:01.000Z'),
                      ('s1', '/.background/bg_done/output.log', 'bg_done', CAST('hello' AS BLOB), 5,
                       '2026-01-01T00:00:01.000Z', '2026-01-01T00:00:01.000Z'),
                      ('s1', '/notes/result.json', NULL, CAST('mine' AS BLOB), 4,
                       '2026-01-01T00:00:01.000Z', '2026-01-01T00:00:01.000Z');",
        )
        .unwrap();
        view(&c)
    };
    let o = upgrade(&old, &new);
    assert_intact(&o);
    assert_eq!(view(&o), before, "the view shows what the table held");
    let result: Vec<u8> = o
        .query_row("SELECT result FROM runs WHERE id = 'bg_done'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(result, b"{\"ok\":1}");
    let rows: i64 = o
        .query_row("SELECT count(*) FROM blob_rows", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 2, "the log and the blob that is no run's result");
    drop(o);
    let store = Store::open(&old).unwrap();
    let got = store
        .read(|c| toolq::store::sqlite::artifacts::get(c, "s1", "/.background/bg_done/result.json"))
        .unwrap()
        .expect("the moved result");
    assert_eq!((got.content, got.size), (b"{\"ok\":1}".to_vec(), 8));
    drop(store);
    let o = Connection::open(&old).unwrap();
    o.execute_batch("DELETE FROM runs WHERE id = 'bg_done'")
        .unwrap();
    assert_eq!(
        view(&o),
        vec![("/notes/result.json".into(), "mine".into(), 4)],
        "a deleted run's blobs go with it"
    );
    // Writes through the view reach the row behind it: a run's result, or a blob row.
    o.execute_batch(
        "INSERT INTO blobs (session_id, path, run_id, content, size, created_at, updated_at)
           VALUES ('s1', '/.background/bg_queued/result.json', 'bg_queued', CAST('{}' AS BLOB), 2,
                   '2026-01-01T00:00:02.000Z', '2026-01-01T00:00:02.000Z');
         UPDATE blobs SET content = CAST('gone' AS BLOB), size = 4 WHERE path = '/notes/result.json';",
    )
    .unwrap();
    let result: Vec<u8> = o
        .query_row("SELECT result FROM runs WHERE id = 'bg_queued'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(result, b"{}");
    assert_eq!(
        view(&o),
        vec![
            ("/.background/bg_queued/result.json".into(), "{}".into(), 2),
            ("/notes/result.json".into(), "gone".into(), 4),
        ]
    );
    o.execute_batch("DELETE FROM blobs").unwrap();
    assert_eq!(view(&o), vec![], "a delete through the view clears both");
}
