//! Several `toolq worker` processes on one file: the per-session limit holds across processes,
//! no BUSY failure, and no run is claimed twice when no worker dies.

use std::collections::HashMap;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolq::EnqueueRequest;

use crate::crash::{
    assert_recorded_exactly_once, enqueue_with, executions, one, setup, spawn_worker, wait_exit,
};

/// Runs `workers` worker processes over one file with `runs` short runs in 8 sessions and
/// checks the per-session limit (sampled from a reader), no BUSY failure, no double claim.
fn many_workers(workers: usize, runs: usize) {
    const PER_SESSION: i64 = 3;
    // Every execution appends its run id to a file outside the database (O_APPEND lines are
    // atomic), so a run executed twice shows twice whatever the database says.
    let exec_log = tempfile::NamedTempFile::new().unwrap();
    let s = setup(&format!(
        "[worker]\npoll_interval = \"20ms\"\nheartbeat_interval = \"200ms\"\nflush_interval = \"100ms\"\n\
         concurrency = 16\nper_session = {PER_SESSION}\n\n\
         [tools.record]\ncommand = [\"sh\", \"-c\", 'echo \"$TOOLQ_RUN_ID\" >> \"$1\"', \"record\", {:?}]\n",
        exec_log.path().display().to_string()
    ));
    let reqs: Vec<_> = (0..runs)
        .map(|i| EnqueueRequest::new("record", json!({})).session(format!("s{}", i % 8)))
        .collect();
    enqueue_with(&s.db, Some(&s.config), reqs);
    let stop = Arc::new(AtomicBool::new(false));
    let max_running = Arc::new(AtomicI64::new(0));
    let samples = Arc::new(AtomicI64::new(0));
    let sampler = {
        let (stop, max_running, samples, db) = (
            stop.clone(),
            max_running.clone(),
            samples.clone(),
            s.db.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = db.count(
                    "SELECT coalesce(max(n), 0) FROM (SELECT count(*) n FROM runs \
                     WHERE state = 'running' GROUP BY session_id) per_session",
                );
                max_running.fetch_max(n, Ordering::Relaxed);
                samples.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let started = Instant::now();
    let mut children: Vec<Child> = (0..workers).map(|_| spawn_worker(&s, true)).collect();
    for c in &mut children {
        assert!(wait_exit(c, Duration::from_secs(60)).success());
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();

    let c = s.db.clone();
    assert_recorded_exactly_once(&c);
    let by_state: HashMap<String, i64> = c
        .rows("SELECT state, count(*) FROM runs GROUP BY state")
        .into_iter()
        .map(|r| {
            (
                r[0].clone().unwrap(),
                r[1].as_ref().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let busy = one(&c, "SELECT coalesce(sum(busy_retries), 0) FROM workers");
    let owners = one(
        &c,
        "SELECT count(DISTINCT w.id) FROM workers w WHERE w.stop_reason = 'exited'",
    );
    eprintln!(
        "{workers} workers, {runs} runs in {:.1}s: {by_state:?}; max running per session {} \
         (limit {PER_SESSION}, {} samples); busy retries {busy}",
        elapsed.as_secs_f64(),
        max_running.load(Ordering::Relaxed),
        samples.load(Ordering::Relaxed),
    );
    assert_eq!(
        by_state.get("completed").copied(),
        Some(runs as i64),
        "no run failed"
    );
    assert!(max_running.load(Ordering::Relaxed) <= PER_SESSION);
    assert!(samples.load(Ordering::Relaxed) > 0);
    // No worker died, so no run was ever rescued: each was claimed and executed exactly once,
    // by the external execution file, by the workers' own logs and by the database.
    let mut appended: HashMap<String, usize> = HashMap::new();
    for id in std::fs::read_to_string(exec_log.path()).unwrap().lines() {
        *appended.entry(id.to_string()).or_insert(0) += 1;
    }
    assert_eq!(appended.len(), runs, "every run executed");
    let twice: Vec<_> = appended.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "runs executed twice: {twice:?}");
    let execs = executions(&s);
    assert_eq!(execs.len(), runs, "every run's execution was logged");
    assert!(execs.values().all(|n| *n == 1), "a run executed twice");
    assert_eq!(one(&c, "SELECT count(*) FROM runs WHERE attempt != 1"), 0);
    assert_eq!(one(&c, "SELECT count(*) FROM runs WHERE errors != '[]'"), 0);
    assert_eq!(owners, workers as i64, "every worker exited cleanly");
}

#[test]
fn two_worker_processes_share_one_file() {
    many_workers(2, 2000);
}

#[test]
fn four_worker_processes_share_one_file() {
    many_workers(4, 3000);
}
