//! The examples, run as real processes: `async_tool` as a demo and as a worker that is killed
//! with SIGKILL mid-operation (the operation is resumed by the next worker, never started
//! twice); `durable_steps` (three steps, a wait for an event, the signal); `agent_host` end
//! to end (its own checks fail it; the test reads its transcript).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::support::TestDb;
use crate::support::{toolq, wait_for};

/// The example's binary, built now: `cargo test` builds the examples, but a filtered run
/// (`cargo test --test it NAME`) does not, and a stale binary would test old code.
pub fn example(name: &str) -> PathBuf {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--quiet", "--example", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    // What cargo sets for a test process only: left in, it would make this build's build
    // scripts (ring, libsqlite3-sys) look changed and rebuild half the tree, twice per run.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        let test_only = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_EXE_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|p| k.starts_with(p))
            || k == "LD_LIBRARY_PATH"
            || k == "CARGO_PRIMARY_PACKAGE"
            || k == "CARGO_TARGET_TMPDIR";
        if test_only {
            cmd.env_remove(&*k);
        }
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "cargo build --example {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deps = std::env::current_exe().unwrap();
    // target/debug/deps/it-HASH -> target/debug/examples/NAME
    let bin = deps
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(bin.exists(), "{} is missing", bin.display());
    bin
}

#[test]
fn the_async_tool_example_runs() {
    let out = Command::new(example("async_tool")).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("completed (operation tx_"), "{stdout}");
    for stage in ["started", "queued", "sending", "completed"] {
        assert!(stdout.contains(stage), "{stage} missing: {stdout}");
    }
}

/// The durable example: two steps, a wait that frees the slot until `Client::signal` sends
/// "go", the third step; each step's closure ran once and the result is the event's payload.
#[test]
fn the_durable_steps_example_runs() {
    let out = Command::new(example("durable_steps")).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "waits for event \"go\"",
        "signalled \"go\" (woke the run: true)",
        "completed after 1 attempt(s): {\"approved_by\":\"demo\"}",
        "3 event:go   {\"event\":{\"approved_by\":\"demo\"}}",
        "4 step3      3",
    ] {
        assert!(stdout.contains(line), "{line:?} missing:\n{stdout}");
    }
    for n in 1..=3 {
        let ran = stdout
            .lines()
            .filter(|l| l.starts_with(&format!("step {n} run ")))
            .count();
        assert_eq!(ran, 1, "step {n} ran {ran} times:\n{stdout}");
    }
}

struct Worker(Child);

impl Worker {
    fn spawn(bin: &Path, db: &TestDb, service: &Path, log: &Path) -> Worker {
        let log = std::fs::File::create(log).unwrap();
        Worker(
            Command::new(bin)
                .arg("worker")
                .arg(db)
                .arg(service)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Worker {
    // A failed assertion must not leave a worker behind.
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (state, attempt, operation_id, stages) of the only run.
fn the_run(db: &TestDb) -> Option<(String, i64, Option<String>, Value)> {
    let r = db
        .try_rows("SELECT state, attempt, operation_id, stages FROM runs")
        .ok()?
        .into_iter()
        .next()?;
    Some((
        r[0].clone()?,
        r[1].as_ref()?.parse().ok()?,
        r[2].clone(),
        serde_json::from_str(r[3].as_deref()?).unwrap_or_default(),
    ))
}

fn names(stages: &Value) -> Vec<(String, i64)> {
    stages
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["stage"].as_str().unwrap_or("?").to_string(),
                s["attempt"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_operation_survives_kill_9_of_its_worker() {
    let bin = example("async_tool");
    let dir = tempfile::tempdir().unwrap();
    let (db, service) = (TestDb::at(dir.path()), dir.path().join("service"));
    std::fs::create_dir_all(&service).unwrap();
    // The service holds the transfer in `sending` until the first worker is dead.
    std::fs::write(service.join("hold"), "").unwrap();
    let out = Command::new(&bin)
        .arg("enqueue")
        .arg(&db)
        .arg(&service)
        .arg("250")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let run_id = String::from_utf8(out.stdout).unwrap().trim().to_string();

    let mut first = Worker::spawn(&bin, &db, &service, &dir.path().join("w1.log"));
    let (_, _, op, _) = wait_for("the operation id and a stage stored", async || {
        let r = the_run(&db);
        let seen = format!("{r:?}");
        let ok = r
            .filter(|(_, _, op, st)| op.is_some() && names(st).iter().any(|(n, _)| n == "sending"));
        (ok, seen)
    })
    .await;
    first.0.kill().unwrap(); // SIGKILL: no hand-back, the lease stays with a dead process
    first.0.wait().unwrap();

    std::fs::remove_file(service.join("hold")).unwrap();
    let second = Worker::spawn(&bin, &db, &service, &dir.path().join("w2.log"));
    let (state, attempt, op_after, stages) = wait_for("the run to complete", async || {
        let r = the_run(&db);
        let seen = format!("{r:?}");
        (r.filter(|(s, ..)| s == "completed"), seen)
    })
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(second.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    drop(second);

    assert_eq!(state, "completed");
    assert_eq!(attempt, 2, "the rescue made a second attempt");
    assert_eq!(op_after, op, "the same operation, carried to attempt 2");
    let starts = std::fs::read_to_string(service.join("starts.log")).unwrap();
    assert_eq!(
        starts.lines().count(),
        1,
        "the transfer started once: {starts}"
    );
    let names = names(&stages);
    assert_eq!(
        names.iter().filter(|(n, _)| n == "started").count(),
        1,
        "{names:?}"
    );
    assert_eq!(
        names.first(),
        Some(&("started".to_string(), 1)),
        "{names:?}"
    );
    assert!(names.contains(&("resumed".to_string(), 2)), "{names:?}");
    assert_eq!(
        names.last(),
        Some(&("completed".to_string(), 2)),
        "{names:?}"
    );
    for s in stages.as_array().unwrap() {
        assert!(s["at"].as_str().is_some_and(|t| t.ends_with('Z')), "{s}");
    }

    // The operator's views: show (human and JSON) and the run_stages view.
    let human = toolq(&db, &["show", &run_id]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(human.status.success(), "{human:?}");
    let op = op.unwrap();
    assert!(text.contains(&op), "{text}");
    assert!(text.contains("attempt 2  resumed"), "{text}");
    assert!(text.contains("sending"), "{text}");
    let json = toolq(&db, &["--json", "show", &run_id]);
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["operation_id"], op.as_str());
    assert_eq!(v["stages"].as_array().unwrap().len(), names.len());
    let started = db.count(&format!(
        "SELECT count(*) FROM run_stages WHERE run_id = '{run_id}' AND stage = 'started'"
    ));
    assert_eq!(started, 1);
}

#[test]
fn the_agent_host_example_runs_its_loop() {
    let out = Command::new(example("agent_host")).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "spec: lookup - ",
        "lookup -> {\"length\":5,\"word\":\"toolq\"}",
        "deploy: approval needed (tool deploy requires approval); the user says yes",
        "deploy -> {\"deployed\":\"api\"}",
        "health_check -> {",
        "\"status\":\"running\"",
        "\"schedule_id\":\"sch_",
        "deliver (Busy, interrupt): ",
        "busy: when_idle messages held back",
        "deliver (Idle, when_idle): ",
        "context (Busy, silent): Background run completed.",
        "silent: completed added to the context without a turn",
        "done",
    ] {
        assert!(stdout.contains(line), "{line:?} missing:\n{stdout}");
    }
    // Interrupt first (while busy), when_idle only after the host turned idle, silent into
    // the context (never announced as a delivery).
    let held = stdout.find("busy: when_idle").unwrap();
    assert!(!stdout[..held].contains("when_idle): "), "{stdout}");
    assert!(!stdout.contains("deliver (Busy, silent)"), "{stdout}");
}
