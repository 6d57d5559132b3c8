//! SIGTERM on a real `toolq worker` process: stop claiming, let in-flight runs finish within the
//! grace period, hand the rest back to the queue (without using up an attempt), exit 0.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::wait_until;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn spawn_worker(db: &crate::support::TestDb, config: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_toolq"))
        .arg("--db")
        .arg(db)
        .arg("--config")
        .arg(config)
        .arg("worker")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("worker starts")
}

fn enqueue(db: &crate::support::TestDb, ms: u64) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_toolq"))
        .arg("--db")
        .arg(db)
        .args(["enqueue", "sleep", "--args", &format!("{{\"ms\":{ms}}}")])
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

fn state_of(db: &crate::support::TestDb, id: &str) -> (String, i64) {
    let row = &db.rows(&format!(
        "SELECT state, attempt FROM runs WHERE id = '{id}'"
    ))[0];
    (
        row[0].clone().unwrap(),
        row[1].as_ref().unwrap().parse().unwrap(),
    )
}

fn terminate_and_wait(mut child: Child) -> std::process::ExitStatus {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "worker did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_lets_in_flight_runs_finish_then_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[worker]\npoll_interval = \"20ms\"\nshutdown_grace = \"10s\"\n",
    )
    .unwrap();
    let id = enqueue(&db, 600);
    let child = spawn_worker(&db, &cfg);
    wait_until("the run to start", || state_of(&db, &id).0 == "running");
    let queued_later = enqueue(&db, 10);
    let status = terminate_and_wait(child);
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(
        state_of(&db, &id).0,
        "completed",
        "the in-flight run finished within the grace"
    );
    // Nothing new was claimed after the signal... unless it was claimed before it; either way
    // it is never left running.
    assert_ne!(state_of(&db, &queued_later).0, "running");
}

#[test]
fn runs_past_the_grace_are_handed_back_without_using_an_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[worker]\npoll_interval = \"20ms\"\nshutdown_grace = \"200ms\"\ncancel_grace = \"200ms\"\n").unwrap();
    let id = enqueue(&db, 60_000);
    let child = spawn_worker(&db, &cfg);
    wait_until("the run to start", || state_of(&db, &id).0 == "running");
    let status = terminate_and_wait(child);
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(state_of(&db, &id), ("queued".to_string(), 0));
    let stopped = db.text("SELECT stopped_at FROM workers");
    assert!(stopped.is_some(), "a clean exit marks the worker stopped");
}
