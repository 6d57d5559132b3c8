//! Opening a Postgres database, beyond `bad_input`: a missing database, read commands on an
//! empty one, `check`, and no output of init, enqueue, worker, stats or config ever showing
//! the password.

use crate::support::{TestDb, pg, toolq};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails unless `out` exited with `code` and one `toolq:` line that says `what` and never
/// shows `secret`.
fn refused(out: &std::process::Output, code: i32, what: &str, secret: &str) -> String {
    let e = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{e}");
    assert!(e.starts_with("toolq: "), "{e}");
    assert!(e.contains(what), "{e}");
    assert!(!e.contains(secret) && !stdout(out).contains(secret), "{e}");
    e
}

#[test]
fn a_missing_database_is_exit_1_saying_to_create_it() {
    let url = pg::server().url("no_such_db");
    refused(&toolq(&url, &["init"]), 1, "createdb", "\u{0}");
}

#[test]
fn read_commands_leave_an_empty_database_empty() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    refused(&toolq(&db.url, &["runs"]), 2, "no toolq schema", "\u{0}");
    assert_eq!(
        db.count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"),
        0
    );
}

#[test]
fn init_config_stats_and_worker_logs_show_the_url_without_its_password() {
    let s = pg::server();
    let name = format!("pw_{}", std::process::id());
    pg::admin(
        s,
        &format!("CREATE DATABASE {name} OWNER {}", pg::PASSWORD_ROLE),
    )
    .unwrap();
    let url = format!(
        "postgres://{}:{}@127.0.0.1:{}/{name}",
        pg::PASSWORD_ROLE,
        pg::PASSWORD,
        s.port
    );
    let shown = format!(
        "postgres://{}:***@127.0.0.1:{}/{name}",
        pg::PASSWORD_ROLE,
        s.port
    );
    for args in [
        &["init"][..],
        &["enqueue", "echo", "--args", r#"{"message":"hi"}"#],
        &["worker", "--drain"],
        &["stats"],
        &["--json", "stats"],
        &["config"],
        &["--json", "config"],
    ] {
        let out = toolq(&url, args);
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(out.status.success(), "{args:?}: {all}");
        assert!(
            !all.contains(pg::PASSWORD),
            "{args:?} shows the password: {all}"
        );
        if args != ["enqueue", "echo", "--args", r#"{"message":"hi"}"#] {
            assert!(all.contains(&shown), "{args:?}: {all}");
        }
    }
    let out = toolq(&url, &["runs", "--state", "completed"]);
    assert!(stdout(&out).contains("echo"), "{}", stdout(&out));
}

#[test]
fn stats_json_names_the_engine_and_the_server_version_not_a_sqlite_version() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    assert!(toolq(&db.url, &["init"]).status.success());
    let out = toolq(&db.url, &["--json", "stats"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["engine"], "postgres", "{v}");
    assert!(v["sqlite"].is_null(), "{v}");
    let version = v["server_version"].as_str().unwrap_or_default();
    assert!(
        version.chars().next().is_some_and(|c| c.is_ascii_digit()),
        "{v}"
    );
}

#[test]
fn check_is_sqlite_only_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    assert!(toolq(&db.url, &["init"]).status.success());
    refused(&toolq(&db.url, &["check"]), 2, "pg_amcheck", "\u{0}");
}
