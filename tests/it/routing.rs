//! Runs go only to workers that have their tool: a worker started without a tool's config
//! leaves its runs queued with their attempts unused, `stats` and `status` name the tool no
//! live worker has, and a worker with the tool then runs them.

use std::process::Command;

use serde_json::json;
use toolq::EnqueueRequest;

use crate::crash::{Setup, enqueue_with, one, setup, spawn_worker};
use crate::support::{Killed, wait_until};

const DISK_CHECK: &str = "[tools.disk_check]\ncommand = [\"sh\", \"-c\", \"echo disk ok\"]\n";

/// Runs `toolq` with the setup's config and returns (exit code, stdout, stderr).
fn cli(s: &Setup, args: &[&str]) -> (i32, String, String) {
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
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_worker_without_a_tool_leaves_its_runs_queued_for_one_that_has_it() {
    let with = setup(DISK_CHECK);
    let without = setup("");
    let db = &with.db;
    // One run of the tool only `with` has, then one of a built-in both have, same session:
    // the disk_check run is older, so a worker that could claim it would have claimed it first.
    let (check, echo) = (
        EnqueueRequest::new("disk_check", json!({})).session("ops"),
        EnqueueRequest::new("echo", json!({"message": "hi"})).session("ops"),
    );
    enqueue_with(db, Some(&with.config), vec![check]);
    enqueue_with(db, Some(&with.config), vec![echo]);
    let without = Setup {
        db: db.clone(),
        ..without
    };

    let lacking = Killed(spawn_worker(&without, false));
    let c = db.clone();
    wait_until("the echo run completes", || {
        one(
            &c,
            "SELECT count(*) FROM runs WHERE tool = 'echo' AND state = 'completed'",
        ) == 1
    });
    assert_eq!(
        one(
            &c,
            "SELECT count(*) FROM runs WHERE tool = 'disk_check' AND state = 'queued' AND attempt = 0"
        ),
        1,
        "the worker without disk_check claimed its run"
    );
    // The worker's row lists what it can run.
    let tools = c
        .text(&format!(
            "SELECT tools FROM workers WHERE pid = {}",
            lacking.0.id()
        ))
        .unwrap();
    let tools: Vec<String> = serde_json::from_str(&tools).unwrap();
    assert!(tools.iter().any(|t| t == "echo"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "disk_check"), "{tools:?}");

    let says = "1 queued run of disk_check: no live worker has this tool";
    let (code, out, err) = cli(&with, &["stats"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(says), "stats: {out}");
    let (_, out, _) = cli(&with, &["--json", "stats"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["unserved_tools"],
        json!([{"tool": "disk_check", "queued": 1}]),
        "{v}"
    );
    let (_, out, err) = cli(&with, &["status"]);
    assert!(
        out.contains(says) || err.contains(says),
        "status: {out} {err}"
    );

    // A worker with the tool runs it.
    let _having = Killed(spawn_worker(&with, false));
    wait_until("the disk_check run completes", || {
        one(
            &c,
            "SELECT count(*) FROM runs WHERE tool = 'disk_check' AND state = 'completed' AND attempt = 1",
        ) == 1
    });
    let (_, out, _) = cli(&with, &["stats"]);
    assert!(!out.contains("no live worker has"), "stats: {out}");
}
