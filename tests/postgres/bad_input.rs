//! Bad database locations on Postgres, through the real binary: a malformed URL, a refused
//! connection, wrong credentials, a database that is not toolq's and a newer schema each give
//! exit 2 or 1, a message that starts `toolq:` and says what is wrong, and never the password.

use std::process::Output;

use crate::support::{TestDb, pg, toolq};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `args` on `url` and checks the common shape of a refusal: exit `code`, one `toolq:`
/// message, no password anywhere in the output; returns stderr.
fn refused(url: &str, args: &[&str], code: i32) -> String {
    let o = toolq(url, args);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(o.status.code(), Some(code), "{args:?} on {url}: {err}");
    assert!(err.starts_with("toolq: "), "{args:?}: {err}");
    for secret in [pg::PASSWORD, "wrong-Pa55"] {
        assert!(
            !err.contains(secret) && !out.contains(secret),
            "{args:?} showed the password: {out}{err}"
        );
    }
    err
}

const COMMANDS: [&[&str]; 3] = [
    &["runs"],
    &["enqueue", "echo", "--args", r#"{"message":"x"}"#],
    &["worker", "--drain"],
];

#[test]
fn a_malformed_url_is_a_usage_error_naming_the_url() {
    for url in [
        format!(
            "postgres://{}:{}@127.0.0.1:notaport/x",
            pg::PASSWORD_ROLE,
            pg::PASSWORD
        ),
        format!("postgresql://{}:{}@[::1/x", pg::PASSWORD_ROLE, pg::PASSWORD),
    ] {
        for args in COMMANDS {
            let err = refused(&url, args, 2);
            assert!(err.contains("***"), "the redacted URL is named: {err}");
        }
    }
}

#[test]
fn a_refused_connection_is_an_operational_error_naming_the_server() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!(
        "postgres://{}:{}@127.0.0.1:{port}/x",
        pg::PASSWORD_ROLE,
        pg::PASSWORD
    );
    // Not `worker`: it waits for the server (postgres_startup.rs).
    for args in &COMMANDS[..2] {
        let err = refused(&url, args, 1);
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
        assert!(err.to_lowercase().contains("refused"), "{err}");
    }
}

#[test]
fn wrong_credentials_are_refused_without_showing_the_password() {
    let s = pg::server();
    for url in [
        format!(
            "postgres://{}:wrong-Pa55@127.0.0.1:{}/postgres",
            pg::PASSWORD_ROLE,
            s.port
        ),
        format!(
            "postgres://{}@127.0.0.1:{}/postgres?password=wrong-Pa55",
            pg::PASSWORD_ROLE,
            s.port
        ),
    ] {
        for args in COMMANDS {
            let err = refused(&url, args, 1);
            assert!(err.contains("password authentication failed"), "{err}");
        }
    }
}

#[test]
fn a_database_holding_other_tables_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    db.exec("CREATE TABLE notes (x text); INSERT INTO notes VALUES ('mine')");
    // Through the password role too, so a message naming the URL has a password to leak.
    db.exec(&format!(
        "GRANT ALL ON SCHEMA public TO {}",
        pg::PASSWORD_ROLE
    ));
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let with_password = format!(
        "postgres://{}:{}@127.0.0.1:{}/{name}",
        pg::PASSWORD_ROLE,
        pg::PASSWORD,
        pg::server().port
    );
    for url in [db.url.as_str(), with_password.as_str()] {
        for args in COMMANDS {
            let err = refused(url, args, 2);
            assert!(err.contains("no toolq schema"), "{err}");
        }
    }
    assert_eq!(
        db.column("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"),
        ["notes"]
    );
    assert_eq!(db.text("SELECT x FROM notes").as_deref(), Some("mine"));
}

#[test]
fn a_newer_schema_is_refused_before_any_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    assert!(toolq(&db, &["init"]).status.success());
    db.exec(
        "INSERT INTO schema_version (version, applied_at) VALUES (99, '2099-01-01T00:00:00.000Z')",
    );
    let tables = db.count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'");
    for args in COMMANDS {
        let err = refused(&db.url, args, 2);
        assert!(err.contains("99") && err.contains("newer"), "{err}");
    }
    assert_eq!(db.count("SELECT count(*) FROM runs"), 0);
    assert_eq!(db.count("SELECT max(version) FROM schema_version"), 99);
    assert_eq!(
        db.count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"),
        tables
    );
}

/// Schema version 1 -> 2 (issue 33): `toolq init` adds `runs.background`, 0 for the runs
/// already there (none was started in the background as spawn_background's limits count),
/// and records version 2 (and the later ones); the rows stay and the worker runs them.
#[test]
fn a_version_1_database_gains_the_background_flag_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    db.exec(include_str!("../../migrations/postgres/001_schema.sql"));
    db.exec(
        "CREATE TABLE schema_version (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL);
         INSERT INTO schema_version (version, applied_at) VALUES (1, '2026-01-01T00:00:00.000Z');
         INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at)
           VALUES ('bg_old', 's1', 'echo', '{\"message\":\"hi\"}', 'old one',
                   '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');",
    );
    let o = toolq(&db, &["init"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.count("SELECT max(version) FROM schema_version"),
        toolq::store::postgres::SCHEMA_VERSION
    );
    assert_eq!(
        db.count("SELECT background FROM runs WHERE id = 'bg_old'"),
        0
    );
    assert!(
        db.try_exec("UPDATE runs SET background = 2 WHERE id = 'bg_old'")
            .is_err()
    );
    let o = toolq(&db, &["worker", "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.text("SELECT state FROM runs WHERE id = 'bg_old'")
            .as_deref(),
        Some("completed")
    );
}

/// Schema version 2 -> 3 (issue 35): `toolq init` adds the wait columns (no run waits, none
/// snoozed), `step_records`, `run_events` and their views, and records version 3; the rows
/// stay and the worker runs them.
#[test]
fn a_version_2_database_gains_durable_runs_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    db.exec(include_str!("../../migrations/postgres/001_schema.sql"));
    db.exec(include_str!(
        "../../migrations/postgres/002_background_runs.sql"
    ));
    db.exec(
        "CREATE TABLE schema_version (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL);
         INSERT INTO schema_version (version, applied_at) VALUES (1, '2026-01-01T00:00:00.000Z'),
           (2, '2026-01-02T00:00:00.000Z');
         INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at)
           VALUES ('dr_old', 's1', 'echo', '{\"message\":\"hi\"}', 'old one',
                   '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');",
    );
    let o = toolq(&db, &["init"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.count("SELECT max(version) FROM schema_version"),
        toolq::store::postgres::SCHEMA_VERSION
    );
    assert_eq!(
        db.count("SELECT count(*) FROM runs WHERE id = 'dr_old' AND wait_kind IS NULL AND wait_event IS NULL AND snoozes = 0"),
        1
    );
    assert_eq!(db.count("SELECT count(*) FROM waiting_runs"), 0);
    assert_eq!(db.count("SELECT count(*) FROM run_steps"), 0);
    assert!(
        db.try_exec("UPDATE runs SET wait_kind = 'nap' WHERE id = 'dr_old'")
            .is_err()
    );
    db.exec(
        "INSERT INTO run_events (run_id, name, sent_at) VALUES ('dr_old', 'go', '2026-01-01T00:00:00.000Z')",
    );
    let o = toolq(&db, &["worker", "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.text("SELECT state FROM runs WHERE id = 'dr_old'")
            .as_deref(),
        Some("completed")
    );
    assert_eq!(
        db.text("SELECT payload FROM run_events WHERE run_id = 'dr_old'")
            .as_deref(),
        Some("null")
    );
}

/// Schema version 3 -> 4 (issue 36): `toolq init` adds composition (`runs.batch_id`,
/// `parent_run_id`, `deps_pending`; `batches`, `run_deps` and their views) and widens the
/// wait, inbox and step kinds; the rows stay (in no batch, waiting for no parent) and the
/// worker runs them.
#[test]
fn a_version_3_database_gains_composition_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    db.exec(include_str!("../../migrations/postgres/001_schema.sql"));
    db.exec(include_str!(
        "../../migrations/postgres/002_background_runs.sql"
    ));
    db.exec(include_str!(
        "../../migrations/postgres/003_durable_runs.sql"
    ));
    db.exec(
        "CREATE TABLE schema_version (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL);
         INSERT INTO schema_version (version, applied_at) VALUES (1, '2026-01-01T00:00:00.000Z'),
           (2, '2026-01-02T00:00:00.000Z'), (3, '2026-01-03T00:00:00.000Z');
         INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at)
           VALUES ('bg_old', 's1', 'echo', '{\"message\":\"hi\"}', 'old one',
                   '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');",
    );
    let o = toolq(&db, &["init"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.count("SELECT max(version) FROM schema_version"),
        toolq::store::postgres::SCHEMA_VERSION
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM runs WHERE id = 'bg_old' AND batch_id IS NULL \
             AND parent_run_id IS NULL AND deps_pending = 0"
        ),
        1
    );
    for view in [
        "batches",
        "run_deps",
        "run_edges",
        "batch_progress",
        "blocked_runs",
    ] {
        assert_eq!(
            db.count(&format!("SELECT count(*) FROM {view}")),
            0,
            "{view}"
        );
    }
    // The widened checks take the new kinds and still refuse others.
    db.exec("UPDATE runs SET wait_kind = 'parents' WHERE id = 'bg_old'");
    db.exec("UPDATE runs SET wait_kind = 'children' WHERE id = 'bg_old'");
    assert!(
        db.try_exec("UPDATE runs SET wait_kind = 'nap' WHERE id = 'bg_old'")
            .is_err()
    );
    db.exec("UPDATE runs SET wait_kind = NULL WHERE id = 'bg_old'");
    db.exec(
        "INSERT INTO inbox (session_id, run_id, attempt, kind, body, created_at) \
         VALUES ('s1', NULL, 1, 'batch_completed', 'done', '2026-01-01T00:00:00.000Z')",
    );
    assert!(
        db.try_exec(
            "INSERT INTO inbox (session_id, run_id, attempt, kind, body, created_at) \
             VALUES ('s1', NULL, 1, 'batch_done', 'done', '2026-01-01T00:00:00.000Z')"
        )
        .is_err()
    );
    assert!(
        db.try_exec(
            "INSERT INTO run_deps (child_id, parent_id, mode) VALUES ('bg_old', 'bg_x', 'some')"
        )
        .is_err()
    );
    let o = toolq(&db, &["worker", "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.text("SELECT state FROM runs WHERE id = 'bg_old'")
            .as_deref(),
        Some("completed")
    );
}

/// Schema version 4 -> 5 (issue 39): `toolq init` adds `runs.tags`, `runs.traceparent`,
/// `schedules.tags` (none for the rows already there) and `run_tags`; a tagged run's tag rows
/// go with it, and the worker runs the old rows.
#[test]
fn a_version_4_database_gains_tags_and_traces_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    for step in [
        include_str!("../../migrations/postgres/001_schema.sql"),
        include_str!("../../migrations/postgres/002_background_runs.sql"),
        include_str!("../../migrations/postgres/003_durable_runs.sql"),
        include_str!("../../migrations/postgres/004_composition.sql"),
    ] {
        db.exec(step);
    }
    db.exec(
        "CREATE TABLE schema_version (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL);
         INSERT INTO schema_version (version, applied_at) VALUES (1, '2026-01-01T00:00:00.000Z'),
           (2, '2026-01-02T00:00:00.000Z'), (3, '2026-01-03T00:00:00.000Z'),
           (4, '2026-01-04T00:00:00.000Z');
         INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at)
           VALUES ('bg_old', 's1', 'echo', '{\"message\":\"hi\"}', 'old one',
                   '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');",
    );
    let o = toolq(&db, &["init"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.count("SELECT max(version) FROM schema_version"),
        toolq::store::postgres::SCHEMA_VERSION
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM runs WHERE id = 'bg_old' AND tags IS NULL \
             AND traceparent IS NULL"
        ),
        1
    );
    assert_eq!(db.count("SELECT count(*) FROM run_tags"), 0);
    assert!(
        db.try_exec("UPDATE runs SET tags = 'not json' WHERE id = 'bg_old'")
            .is_err(),
        "tags are JSON"
    );
    db.exec(
        "INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at, tags, state,
                           finished_at)
           VALUES ('bg_tagged', 's1', 'echo', '{}', 'tagged', '2026-01-01T00:00:00.000Z',
                   '2026-01-01T00:00:00.000Z', '{\"customer\":\"acme\"}', 'completed',
                   '2026-01-01T00:00:01.000Z');
         INSERT INTO run_tags (run_id, tag) VALUES ('bg_tagged', 'customer=acme');
         DELETE FROM runs WHERE id = 'bg_tagged';",
    );
    assert_eq!(db.count("SELECT count(*) FROM run_tags"), 0);
    let o = toolq(&db, &["worker", "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.text("SELECT state FROM runs WHERE id = 'bg_old'")
            .as_deref(),
        Some("completed")
    );
}

/// Schema version 5 -> 6 (issue 38): `toolq init` moves each run's result.json blob row into
/// `runs.result`, renames the table of blob rows `blob_rows`, and the view `blobs` shows the
/// same rows as before (results included); a log stays a row, `toolq result` and `toolq logs`
/// read both, and deleting a run by hand still takes its blob rows.
#[test]
fn a_version_5_database_keeps_its_results_beside_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    for step in [
        include_str!("../../migrations/postgres/001_schema.sql"),
        include_str!("../../migrations/postgres/002_background_runs.sql"),
        include_str!("../../migrations/postgres/003_durable_runs.sql"),
        include_str!("../../migrations/postgres/004_composition.sql"),
        include_str!("../../migrations/postgres/005_tags_traces.sql"),
    ] {
        db.exec(step);
    }
    db.exec(
        "CREATE TABLE schema_version (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL);
         INSERT INTO schema_version (version, applied_at) VALUES (1, '2026-01-01T00:00:00.000Z'),
           (2, '2026-01-02T00:00:00.000Z'), (3, '2026-01-03T00:00:00.000Z'),
           (4, '2026-01-04T00:00:00.000Z'), (5, '2026-01-05T00:00:00.000Z');
         INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at, state, attempt,
                           finished_at)
           VALUES ('bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f', 's1', 'echo', '{}', 'done', '2026-01-01T00:00:00.000Z',
                   '2026-01-01T00:00:00.000Z', 'completed', 1, '2026-01-01T00:00:01.000Z'),
                  ('bg_old', 's1', 'echo', '{\"message\":\"hi\"}', 'old one',
                   '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', 'queued', 0, NULL);
         INSERT INTO blobs (session_id, path, run_id, content, size, created_at, updated_at)
           VALUES ('s1', '/.background/bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f/result.json', 'bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f', convert_to('{\"ok\":1}', 'UTF8'),
                   8, '2026-01-01T00:00:01.000Z', '2026-01-01T00:00:01.000Z'),
                  ('s1', '/.background/bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f/output.log', 'bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f', convert_to('hello', 'UTF8'),
                   5, '2026-01-01T00:00:01.000Z', '2026-01-01T00:00:01.000Z');",
    );
    let o = toolq(&db, &["init"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.count("SELECT max(version) FROM schema_version"),
        toolq::store::postgres::SCHEMA_VERSION
    );
    assert_eq!(
        db.text("SELECT convert_from(result, 'UTF8') FROM runs WHERE id = 'bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f'")
            .as_deref(),
        Some("{\"ok\":1}")
    );
    assert_eq!(
        db.count("SELECT count(*) FROM blob_rows"),
        1,
        "the log only"
    );
    assert_eq!(
        db.text(
            "SELECT string_agg(path || '=' || convert_from(content, 'UTF8') || ':' || size, ' ' \
             ORDER BY path) FROM blobs WHERE run_id = 'bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f'"
        )
        .as_deref(),
        Some(
            "/.background/bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f/output.log=hello:5 /.background/bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f/result.json={\"ok\":1}:8"
        )
    );
    let o = toolq(&db, &["result", "bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("\"ok\""),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = toolq(&db, &["worker", "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.count(
            "SELECT count(*) FROM blobs WHERE run_id = 'bg_old' \
             AND path = '/.background/bg_old/result.json'"
        ),
        1,
        "a new end's result shows in the view"
    );
    // Writes through the view reach the row behind it: a run's result, or a blob row.
    db.exec(
        "UPDATE blobs SET content = convert_to('redacted', 'UTF8'), size = 8 \
         WHERE run_id = 'bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f'",
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM runs WHERE id = 'bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f' \
             AND result = convert_to('redacted', 'UTF8')"
        ),
        1
    );
    db.exec("DELETE FROM blobs WHERE path LIKE '%/result.json'");
    assert_eq!(
        db.count("SELECT count(*) FROM runs WHERE result IS NOT NULL"),
        0,
        "a result deleted through the view"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM blob_rows"),
        1,
        "the log stays"
    );
    db.exec("DELETE FROM runs WHERE id = 'bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f'");
    assert_eq!(
        db.count("SELECT count(*) FROM blobs WHERE run_id = 'bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f'"),
        0
    );
}

/// The id of each run in `toolq --json runs` with `args`, in the order printed.
fn listed(db: &TestDb, args: &[&str]) -> Vec<String> {
    let mut all = vec!["--json", "runs"];
    all.extend_from_slice(args);
    let o = toolq(db, &all);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("runs --json");
    v.as_array()
        .expect("an array of runs")
        .iter()
        .map(|r| r["id"].as_str().expect("an id").to_string())
        .collect()
}

/// Schema version 6 -> 7 (issue 38): the two indexes of `runs` in creation order give way to
/// `run_order`, filled from the runs there are, and `toolq runs` lists newest first (in all,
/// by session, by state) as before. Runs inserted, deleted or re-dated by hand keep it whole.
#[test]
fn a_version_6_database_lists_its_runs_through_run_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    for step in [
        include_str!("../../migrations/postgres/001_schema.sql"),
        include_str!("../../migrations/postgres/002_background_runs.sql"),
        include_str!("../../migrations/postgres/003_durable_runs.sql"),
        include_str!("../../migrations/postgres/004_composition.sql"),
        include_str!("../../migrations/postgres/005_tags_traces.sql"),
        include_str!("../../migrations/postgres/006_result_beside_run.sql"),
    ] {
        db.exec(step);
    }
    let run = |id: &str, session: &str, created: &str, state: &str| {
        format!(
            "('{id}', '{session}', 'echo', '{{}}', '{id}', '{created}', '{created}', '{state}')"
        )
    };
    db.exec(&format!(
        "CREATE TABLE schema_version (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL);
         INSERT INTO schema_version (version, applied_at) VALUES (1, '2026-01-01T00:00:00.000Z'),
           (2, '2026-01-02T00:00:00.000Z'), (3, '2026-01-03T00:00:00.000Z'),
           (4, '2026-01-04T00:00:00.000Z'), (5, '2026-01-05T00:00:00.000Z'),
           (6, '2026-01-06T00:00:00.000Z');
         INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at, state)
           VALUES {}, {}, {};",
        run("bg_a", "s1", "2026-01-01T00:00:01.000Z", "completed"),
        run("bg_c", "s2", "2026-01-01T00:00:03.000Z", "queued"),
        run("bg_b", "s1", "2026-01-01T00:00:02.000Z", "queued"),
    ));
    let o = toolq(&db, &["init"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        db.count("SELECT max(version) FROM schema_version"),
        toolq::store::postgres::SCHEMA_VERSION
    );
    assert_eq!(db.count("SELECT count(*) FROM run_order"), 3);
    assert_eq!(
        db.count(
            "SELECT count(*) FROM pg_indexes WHERE indexname IN \
             ('runs_created_idx', 'runs_session_created_idx')"
        ),
        0,
        "no index of runs in creation order is left to write on every claim and end"
    );
    assert_eq!(listed(&db, &[]), ["bg_c", "bg_b", "bg_a"]);
    assert_eq!(listed(&db, &["--session", "s1"]), ["bg_b", "bg_a"]);
    assert_eq!(
        listed(&db, &["--state", "queued", "--limit", "1"]),
        ["bg_c"]
    );
    // What toolq writes from now on, and what a script writes by hand, is listed too.
    let o = toolq(
        &db,
        &[
            "enqueue",
            "echo",
            "--session",
            "s1",
            "--args",
            r#"{"message":"x"}"#,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    db.exec(&format!(
        "INSERT INTO runs (id, session_id, tool, args, title, run_at, created_at, state) VALUES {}",
        run("bg_old", "s3", "2025-01-01T00:00:00.000Z", "failed")
    ));
    let all = listed(&db, &[]);
    assert_eq!(all.len(), 5, "{all:?}");
    assert!(all[0].starts_with("bg_0"), "the new run first: {all:?}");
    assert_eq!(all[1..], ["bg_c", "bg_b", "bg_a", "bg_old"]);
    db.exec("UPDATE runs SET created_at = '2027-01-01T00:00:00.000Z', session_id = 's9' WHERE id = 'bg_a'");
    assert_eq!(listed(&db, &["--limit", "1"]), ["bg_a"]);
    assert_eq!(listed(&db, &["--session", "s9"]), ["bg_a"]);
    assert_eq!(listed(&db, &["--session", "s1"]).len(), 2);
    db.exec("DELETE FROM runs WHERE id IN ('bg_a', 'bg_old')");
    assert_eq!(db.count("SELECT count(*) FROM run_order"), 3);
    assert_eq!(
        db.count("SELECT count(*) FROM run_order o JOIN runs r ON r.id = o.id"),
        3,
        "one row per run, and none without its run"
    );
}
