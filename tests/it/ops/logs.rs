//! The binary's log options and ops commands: JSON log lines carry the run span's fields;
//! `prune --dry-run --json` reports per-table counts; a bad filter is a usage error.

use std::process::Command;

use serde_json::Value;

use crate::support::TestEnv;

fn toolq(env: &TestEnv) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toolq"));
    c.arg("--db").arg(env.db_path()).env_remove("RUST_LOG");
    c
}

#[test]
fn worker_json_logs_carry_run_id_tool_and_session() {
    let env = TestEnv::new();
    let out = toolq(&env)
        .args(["--json", "enqueue", "echo", "--args", r#"{"message":"hi"}"#])
        .args(["--session", "ops-demo"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let run_id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = toolq(&env)
        .args([
            "worker",
            "--drain",
            "--log-format",
            "json",
            "--log",
            "toolq=debug",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!lines.is_empty(), "no JSON lines in:\n{stderr}");
    let in_span = lines
        .iter()
        .find(|l| l["span"]["run_id"] == run_id.as_str())
        .unwrap_or_else(|| panic!("no line in the run's span:\n{stderr}"));
    assert_eq!(in_span["span"]["tool"], "echo");
    assert_eq!(in_span["span"]["session"], "ops-demo");
    assert!(in_span["level"].is_string());
    assert!(in_span["timestamp"].is_string());
}

#[test]
fn bad_log_filter_is_a_usage_error() {
    let env = TestEnv::new();
    let out = toolq(&env)
        .args(["worker", "--drain", "--log", "toolq=loud"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--log") && stderr.contains("toolq=loud"),
        "{stderr}"
    );
}

#[test]
fn prune_cli_reports_counts_and_dry_run_keeps_rows() {
    let env = TestEnv::new();
    let enq = toolq(&env)
        .args(["enqueue", "echo", "--args", r#"{"message":"hi"}"#])
        .output()
        .unwrap();
    assert!(enq.status.success(), "{enq:?}");
    let drained = toolq(&env).args(["worker", "--drain"]).output().unwrap();
    assert!(drained.status.success(), "{drained:?}");
    // The run finished a moment ago: `--older-than 0s` would be rejected; use 1ms.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let out = toolq(&env)
        .args(["--json", "prune", "--older-than", "1ms", "--dry-run"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["removed"]["runs"], 1);
    assert!(v["removed"]["blobs"].as_u64().unwrap() >= 1);
    assert_eq!(v["removed"]["inbox"], 1);
    assert_eq!(env.count("SELECT count(*) FROM runs"), 1);
    let out = toolq(&env)
        .args(["--json", "prune", "--older-than", "1ms"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["removed"]["runs"], 1);
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
    let out = toolq(&env)
        .args(["prune", "--older-than", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn progress_bars_stay_off_when_piped() {
    let env = TestEnv::new();
    let file = env.dir.path().join("runs.jsonl");
    let lines: String = (0..200)
        .map(|i| format!("{{\"tool\":\"echo\",\"args\":{{\"message\":\"{i}\"}}}}\n"))
        .collect();
    std::fs::write(&file, lines).unwrap();
    let out = toolq(&env)
        .arg("enqueue")
        .arg("--file")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = toolq(&env)
        .args(["worker", "--drain", "--log", "off"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("draining") && !stderr.contains('\r'),
        "{stderr}"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM runs WHERE state = 'completed'"),
        200
    );
}

sqlite_only! {
    #[tokio::test]
    async fn sqlite_only_stats_shows_wal_size_and_warns_about_a_pinned_wal() {
        let env = TestEnv::new();
        let config = env.dir.path().join("config.toml");
        std::fs::write(&config, "[wal]\nwarn_frames = 1\n").unwrap();
        let stats = || {
            let out = toolq(&env)
                .arg("--config")
                .arg(&config)
                .args(["--json", "stats"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            serde_json::from_slice::<Value>(&out.stdout).unwrap()
        };
        let v = stats();
        assert!(v["wal_bytes"].is_u64(), "{v}");
        assert!(v["wal_warning"].is_null(), "{v}");

        // An open read transaction (a sqlite3 shell left in BEGIN) while runs are written.
        let reader = rusqlite::Connection::open(env.db_path()).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
            .unwrap();
        let reqs = (0..200)
            .map(|i| toolq::EnqueueRequest::new("echo", serde_json::json!({"message": i.to_string()})))
            .collect();
        env.client.enqueue_batch(reqs).await.unwrap();
        let v = stats();
        assert!(v["wal_bytes"].as_u64().unwrap() > 0, "{v}");
        assert!(v["wal_backlog_frames"].as_i64().unwrap() > 0, "{v}");
        assert!(
            v["wal_warning"]
                .as_str()
                .is_some_and(|w| w.contains("long-lived reader")),
            "{v}"
        );
        reader.execute_batch("COMMIT").unwrap();
        let v = stats();
        assert!(v["wal_warning"].is_null(), "{v}");
    }
}
