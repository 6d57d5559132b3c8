//! The `toolq` binary: the happy path and the bad-input matrix (exit code, message, nothing written).

use crate::support::toolq;
use std::process::Output;

use serde_json::Value;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn rows(db: &crate::support::TestDb) -> i64 {
    db.count("SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM inbox) + (SELECT count(*) FROM blobs)")
}

#[test]
fn enqueue_drain_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let o = toolq(
        &db,
        &[
            "--json",
            "enqueue",
            "echo",
            "--args",
            r#"{"message":"hi"}"#,
            "--session",
            "demo",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let id = v["run_id"].as_str().unwrap().to_string();
    assert_eq!(v["created"], true);

    let o = toolq(&db, &["worker", "--drain"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = toolq(&db, &["--json", "show", &id]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["state"], "completed");
    let o = toolq(&db, &["result", &id]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["result"]["echoed"], "hi");
    let o = toolq(&db, &["logs", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = toolq(&db, &["--json", "inbox", "demo", "--unread", "--ack"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert!(
        v[0]["body"]
            .as_str()
            .unwrap()
            .starts_with("Background run completed.")
    );
    let o = toolq(&db, &["--json", "inbox", "demo", "--unread"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v.as_array().unwrap().len(),
        0,
        "acknowledged messages are not unread"
    );
    let o = toolq(&db, &["--json", "stats"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["runs"]["completed"], 1);
    if crate::support::ENGINE == crate::support::Engine::Sqlite {
        assert_eq!(v["journal_mode"], "wal");
        assert_eq!(v["engine"], "sqlite");
        assert!(
            v["sqlite"].as_str().is_some_and(|s| s.starts_with('3')),
            "{v}"
        );
        assert!(v["server_version"].is_null(), "{v}");
    }
    let o = toolq(
        &db,
        &[
            "--json",
            "runs",
            "--state",
            "completed",
            "--session",
            "demo",
        ],
    );
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    // Cancelling a finished run is a clear error.
    let o = toolq(&db, &["cancel", &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already completed"), "{}", stderr(&o));
}

#[test]
fn bad_input_is_refused_with_exit_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    assert!(toolq(&db, &["init"]).status.success());
    let lines = dir.path().join("runs.jsonl");
    std::fs::write(&lines, "{\"tool\":\"get_current_time\"}\n\n{\"tool\":\"add\",\"args\":{\"a\":1,\"b\":2}}\n{\"tool\":\"add\",\"args\":{\"a\":1}}\n").unwrap();
    let lines_s = lines.display().to_string();
    let garbage = dir.path().join("garbage.jsonl");
    std::fs::write(&garbage, "{\"tool\":\"get_current_time\"}\nnot json\n").unwrap();
    let garbage_s = garbage.display().to_string();
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let array_s = file(
        "array.jsonl",
        b"[{\"tool\":\"echo\",\"args\":{\"message\":\"a\"}}]\n",
    );
    let states_s = file(
        "states.jsonl",
        b"{\"tool\":\"echo\",\"args\":{\"message\":\"a\"},\"unique_by\":\"args\",\"unique_states\":[5]}\n",
    );
    let latin1_s = file(
        "latin1.jsonl",
        b"\n{\"tool\":\"echo\",\"args\":{\"message\":\"\xe9\"}}\n",
    );
    // The batch reports its second request; that is the file's third line.
    let same_key_s = file(
        "same_key.jsonl",
        b"{\"tool\":\"echo\",\"args\":{\"message\":\"a\"},\"idempotency_key\":\"k\"}\n\n{\"tool\":\"echo\",\"args\":{\"message\":\"b\"},\"idempotency_key\":\"k\"}\n",
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["enqueue", "nope"], "\"nope\""),
        (vec!["enqueue", "echo", "--args", "{bad"], "--args"),
        (vec!["enqueue", "echo", "--args", "[1,2]"], "JSON object"),
        (vec!["enqueue", "add", "--args", r#"{"a":1}"#], "\"b\""),
        (vec!["enqueue", "add", "--args", r#"{"a":"x","b":1}"#], "/a"),
        (
            vec!["enqueue", "get_current_time", "--priority", "x"],
            "--priority",
        ),
        (
            vec!["enqueue", "get_current_time", "--at", "tomorrow"],
            "--at",
        ),
        (
            vec!["enqueue", "get_current_time", "--at", "2026-12-01T10:00:00"],
            "--at",
        ),
        (vec!["enqueue", "get_current_time", "--in", "soon"], "--in"),
        (
            vec!["enqueue", "get_current_time", "--in", "99999999999d"],
            "--in \"99999999999d\": is longer than 36525 days",
        ),
        (
            vec![
                "enqueue",
                "get_current_time",
                "--at",
                "2026-12-01T10:00:00Z",
                "--in",
                "1m",
            ],
            "--in",
        ),
        (
            vec!["enqueue", "get_current_time", "--timeout", "0s"],
            "--timeout",
        ),
        (
            vec!["enqueue", "get_current_time", "--timeout", "999us"],
            "--timeout \"999us\": must be at least 1ms",
        ),
        (
            vec!["enqueue", "get_current_time", "--max-attempts", "0"],
            "--max-attempts \"0\"",
        ),
        (
            vec!["enqueue", "get_current_time", "--session", ""],
            "--session",
        ),
        (
            vec!["enqueue", "get_current_time", "--delivery", "loud"],
            "--delivery",
        ),
        (
            vec!["enqueue", "get_current_time", "--idempotency-key", ""],
            "--idempotency-key",
        ),
        (vec!["enqueue", "--file", &lines_s], "line 4"),
        (vec!["enqueue", "--file", &garbage_s], "line 2"),
        (vec!["enqueue", "--file", &array_s], "line 1: entry"),
        (
            vec!["enqueue", "--file", &states_s],
            "unique_states must be a string",
        ),
        (
            vec!["enqueue", "--file", &latin1_s],
            "is not UTF-8 text (line 2",
        ),
        (
            vec!["enqueue", "--file", &same_key_s],
            "same_key.jsonl line 3: idempotency key",
        ),
        // A line carries its own options: a flag beside --file would be silently ignored.
        (
            vec!["enqueue", "--file", &lines_s, "--session", "x"],
            "cannot be used with '--session",
        ),
        (
            vec!["enqueue", "--file", &lines_s, "--priority", "9"],
            "cannot be used with '--priority",
        ),
        (vec!["enqueue"], "TOOL"),
        (vec!["runs", "--state", "done"], "--state"),
        (
            vec!["enqueue", "get_current_time", "--session", "  "],
            "--session \"  \": must not be blank",
        ),
        (
            vec!["cancel", "--schedule", "bogus"],
            "--schedule \"bogus\": must start with \"sch_\"",
        ),
        (vec!["runs", "--limit", "0"], "--limit"),
        (vec!["show", "bg_123"], "bg_123"),
        (vec!["logs", "xyz"], "xyz"),
        (vec!["tools", "nope"], "nope"),
        (vec!["frobnicate"], "frobnicate"),
    ];
    for (args, needle) in cases {
        let before = rows(&db);
        let o = toolq(&db, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(needle),
            "{args:?}: stderr should name {needle:?}: {}",
            stderr(&o)
        );
        assert!(stdout(&o).is_empty(), "{args:?}: nothing on stdout");
        assert_eq!(rows(&db), before, "{args:?} wrote rows");
    }
    // Not found is operational (1), not bad input.
    let o = toolq(&db, &["show", "bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not found"));
}

#[test]
fn a_batch_file_is_all_or_nothing_and_then_all() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let f = dir.path().join("ok.jsonl");
    std::fs::write(&f, "{\"tool\":\"echo\",\"args\":{\"message\":\"a\"},\"session\":\"s1\"}\n{\"tool\":\"add\",\"args\":{\"a\":1,\"b\":2},\"priority\":5,\"in\":\"1m\"}\n").unwrap();
    let o = toolq(
        &db,
        &["--json", "enqueue", "--file", &f.display().to_string()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["enqueued"], 2);
    assert_eq!(rows(&db), 2);
    // A byte order mark and CRLF line ends (a file saved on Windows) read the same.
    let bom = dir.path().join("bom.jsonl");
    std::fs::write(
        &bom,
        "\u{feff}{\"tool\":\"echo\",\"args\":{\"message\":\"b\"}}\r\n",
    )
    .unwrap();
    let o = toolq(&db, &["enqueue", "--file", &bom.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(rows(&db), 3);
}

#[test]
fn bad_config_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[worker]\nconcurrency = -1\n").unwrap();
    let o = toolq(&db, &["--config", &cfg.display().to_string(), "stats"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("worker.concurrency"), "{}", stderr(&o));
    assert!(
        !db.has_schema(),
        "a bad config must not create the database"
    );
}

sqlite_only! {
    #[test]
    fn sqlite_only_a_newer_schema_or_a_foreign_file_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        assert!(toolq(&db, &["init"]).status.success());
        {
            let c = rusqlite::Connection::open(&db).unwrap();
            c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE; PRAGMA user_version = 99;").unwrap();
        }
        let before = std::fs::read(&db).unwrap();
        let o = toolq(&db, &["runs"]);
        assert_eq!(o.status.code(), Some(2));
        let e = stderr(&o);
        assert!(e.contains("99") && e.contains("newer"), "{e}");
        assert_eq!(
            std::fs::read(&db).unwrap(),
            before,
            "the newer file was modified"
        );

        let junk = dir.path().join("junk.db");
        std::fs::write(
            &junk,
            b"this is not a database at all, just some text that is long enough",
        )
        .unwrap();
        let before = std::fs::read(&junk).unwrap();
        let o = toolq(&junk, &["runs"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("not a SQLite database"),
            "{}",
            stderr(&o)
        );
        assert_eq!(std::fs::read(&junk).unwrap(), before);

        let other = dir.path().join("other.db");
        rusqlite::Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE notes (x);")
            .unwrap();
        let o = toolq(&other, &["runs"]);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("no toolq schema"), "{}", stderr(&o));
    }
}
