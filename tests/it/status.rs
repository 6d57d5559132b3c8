//! `toolq status` on real worker processes: alive, stale (exit 1), stopped, dead.

use std::process::Command;
use std::time::{Duration, Instant};

use chrono::Utc;

use crate::crash::{Setup, setup, spawn_worker};

fn status(s: &Setup) -> (i32, serde_json::Value, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_toolq"))
        .arg("--db")
        .arg(&s.db)
        .arg("--config")
        .arg(&s.config)
        .args(["--json", "status", "--all"])
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
    (
        o.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn liveness_of(v: &serde_json::Value, pid: i64) -> String {
    v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["pid"] == pid)
        .map(|w| w["liveness"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

#[test]
fn status_lists_workers_and_exits_1_when_a_live_loop_is_stale() {
    // Stale after 3 * 200ms + 500ms: roomy enough for a loaded machine.
    let s = setup("[worker]\npoll_interval = \"200ms\"\nheartbeat_interval = \"500ms\"\n");
    let mut worker = spawn_worker(&s, false);
    let pid = worker.id() as i64;
    let reader = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // Tolerant: the worker may not have created the schema yet.
            if s.db
                .try_rows(&format!(
                    "SELECT count(*) FROM workers WHERE pid = {pid} AND last_poll_at IS NOT NULL"
                ))
                .is_ok_and(|r| r[0][0].as_deref() == Some("1"))
            {
                break s.db.clone();
            }
            assert!(Instant::now() < deadline, "worker never polled");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let (code, v, err) = status(&s);
    assert_eq!(code, 0, "{err}");
    assert_eq!(liveness_of(&v, pid), "alive", "{v}");

    // A live process whose loop stopped polling a minute ago: status fails and says why.
    let mut hung = Command::new("sleep").arg("30").spawn().unwrap();
    let hung_pid = hung.id() as i64;
    let old = toolq::store::codec::ts(Utc::now() - chrono::Duration::minutes(1));
    let row = toolq::store::WorkerRow {
        id: "wk_hung".into(),
        host: toolq::worker::identity::host(),
        boot_id: toolq::worker::identity::boot_id(),
        pid_namespace: toolq::worker::identity::pid_namespace(),
        pid: hung_pid,
        process_start_time: toolq::worker::identity::process_start_time(hung_pid as u32).unwrap(),
        started_at: old.clone(),
        heartbeat_at: old.clone(),
        last_poll_at: Some(old),
        stopped_at: None,
        stop_reason: None,
        concurrency: 1,
        poll_interval_ms: 20,
        heartbeat_interval_ms: 100,
        lease_ms: 30_000,
        busy_retries: 0,
        version: "test".into(),
        tools: Vec::new(),
    };
    // Plain SQL: the same table and columns on both engines.
    s.db.exec(&format!(
        "INSERT INTO workers (id, host, boot_id, pid_namespace, pid, process_start_time, \
         started_at, heartbeat_at, last_poll_at, concurrency, poll_interval_ms, \
         heartbeat_interval_ms, lease_ms, version, tools) VALUES ('{}', '{}', '{}', '{}', {}, \
         '{}', '{}', '{}', '{}', {}, {}, {}, {}, '{}', '[]')",
        row.id,
        row.host,
        row.boot_id,
        row.pid_namespace,
        row.pid,
        row.process_start_time,
        row.started_at,
        row.heartbeat_at,
        row.last_poll_at.as_deref().unwrap(),
        row.concurrency,
        row.poll_interval_ms,
        row.heartbeat_interval_ms,
        row.lease_ms,
        row.version
    ));
    let (code, v, err) = status(&s);
    assert_eq!(code, 1, "{v}");
    assert!(err.contains("1 live worker(s) stale"), "{err}");
    assert_eq!(liveness_of(&v, hung_pid), "stale", "{v}");
    assert_eq!(v["stale"], 1);

    // Once that process is gone the running worker's rescue marks the row stopped (died).
    hung.kill().unwrap();
    hung.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while reader
        .text("SELECT stop_reason FROM workers WHERE id = 'wk_hung'")
        .is_none()
    {
        assert!(Instant::now() < deadline, "dead row never marked");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, v, err) = status(&s);
    assert_eq!(code, 0, "{err}");
    assert_eq!(liveness_of(&v, hung_pid), "stopped");

    // kill -9 the worker: with nobody left to mark it, status sees its pid gone.
    worker.kill().unwrap();
    worker.wait().unwrap();
    let (code, v, err) = status(&s);
    assert_eq!(code, 0, "{err}");
    assert_eq!(liveness_of(&v, pid), "dead", "{v}");
    assert_eq!(v["live_workers"], 0, "{v}");
    // `stats` counts live workers the same way: the dead row is not one.
    let o = Command::new(env!("CARGO_BIN_EXE_toolq"))
        .arg("--db")
        .arg(&s.db)
        .arg("--config")
        .arg(&s.config)
        .args(["--json", "stats"])
        .output()
        .unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(stats["live_workers"], 0, "{stats}");
}

/// The health check: with runnable work (queued runs or enabled schedules) and no live worker,
/// `toolq status` exits 1 and says why; with nothing to do it exits 0.
#[test]
fn status_exits_1_when_work_waits_and_no_worker_is_alive() {
    let s = setup("");
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_toolq"))
            .arg("--db")
            .arg(&s.db)
            .arg("--config")
            .arg(&s.config)
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // Nothing queued, nothing scheduled, no worker: healthy.
    let (code, err) = run(&["init"]);
    assert_eq!(code, 0, "{err}");
    let (code, err) = run(&["status"]);
    assert_eq!(code, 0, "{err}");

    let (code, err) = run(&[
        "schedule",
        "add",
        "--session",
        "ops",
        "--cron",
        "0 0 1 1 *",
        "echo",
        "--args",
        r#"{"message":"hi"}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, err) = run(&["status"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("toolq: no live worker") && err.contains("1 enabled schedule"),
        "{err}"
    );

    let (code, err) = run(&["enqueue", "echo", "--args", r#"{"message":"hi"}"#]);
    assert_eq!(code, 0, "{err}");
    let (code, err) = run(&["status"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("1 queued run"), "{err}");

    // A worker drains the queue and exits; the schedule alone still needs a live worker.
    let (code, err) = run(&["worker", "--drain"]);
    assert_eq!(code, 0, "{err}");
    let (code, err) = run(&["status"]);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("queued run"), "{err}");
}
