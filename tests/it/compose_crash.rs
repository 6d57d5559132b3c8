//! Batches and chains under kill -9, with real `toolq worker` processes killed at random
//! moments and restarted, then a last worker draining what is left. The guarantees:
//! - every batch completes with exactly one `batch_completed` message and one callback run,
//!   and its counters match its runs' final states;
//! - every chain ends with each link completed, failed, or cancelled naming the parent that
//!   did not complete (a link after a completed one is never cancelled, a link after one that
//!   did not complete never runs);
//! - every run has exactly one final message.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;
use toolq::core::{BatchRequest, OnComplete};
use toolq::{Client, Config, EnqueueRequest, RegistryBuilder, RunId};

use crate::crash::{Setup, setup, spawn_worker, wait_exit};

const BATCHES: usize = 5;
const BATCH_RUNS: usize = 40;
const CHAINS: usize = 5;
const LINKS: usize = 10;
const KILLS: usize = 24;

/// A `sleep` run of `ms`; with `fails`, its timeout is shorter than its sleep and it has one
/// attempt, so it fails.
fn sleep_run(ms: u64, fails: bool) -> EnqueueRequest {
    let mut r = EnqueueRequest::new("sleep", json!({ "ms": ms })).session("crash");
    r.max_attempts = Some(if fails { 1 } else { 6 });
    if fails {
        r.timeout = Some(Duration::from_millis(ms / 4 + 1));
    }
    r
}

fn client(s: &Setup) -> (Client, tokio::runtime::Runtime) {
    let mut config = Config::default();
    s.db.configure(&mut config);
    let registry = RegistryBuilder::new().with_builtins().build().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (Client::open(config, registry).unwrap(), rt)
}

#[test]
fn kill_9_during_batches_and_chains_completes_each_batch_once_and_ends_each_chain() {
    let s = setup(
        "[worker]\npoll_interval = \"20ms\"\nheartbeat_interval = \"100ms\"\nlease = \"30s\"\n\
         flush_interval = \"50ms\"\ncancel_grace = \"100ms\"\nconcurrency = 6\nper_session = 6\n\
         [runs]\nbackoff_base = \"10ms\"\nbackoff_max = \"50ms\"\n",
    );
    let (client, rt) = client(&s);
    let mut batches = Vec::new();
    for b in 0..BATCHES {
        let reqs = (0..BATCH_RUNS)
            .map(|i| sleep_run(rand::random_range(10..=150u64), (i + b) % 7 == 0))
            .collect();
        let created = rt
            .block_on(client.create_batch(
                BatchRequest {
                    session: format!("batch-{b}"),
                    title: Some(format!("crash batch {b}")),
                    on_complete: Some(OnComplete {
                        tool: "echo".into(),
                        args: json!({"message": "batch done"}),
                    }),
                },
                reqs,
            ))
            .unwrap();
        batches.push(created.batch_id);
    }
    let mut chains: Vec<Vec<RunId>> = Vec::new();
    for c in 0..CHAINS {
        // One request per link, each after the one before it, in one call.
        let reqs = (0..LINKS)
            .map(|i| {
                let mut r = sleep_run(rand::random_range(10..=80u64), c % 2 == 1 && i == LINKS / 2);
                if i > 0 {
                    r.after_requests = vec![i - 1];
                }
                r
            })
            .collect();
        let ids = rt
            .block_on(client.enqueue_batch(reqs))
            .unwrap()
            .into_iter()
            .map(|e| e.run_id)
            .collect();
        chains.push(ids);
    }

    let mut child = spawn_worker(&s, false);
    let mut hits = 0;
    for kill in 0..KILLS {
        let pid = child.id();
        if kill % 4 != 3 {
            let deadline = Instant::now() + Duration::from_secs(20);
            while s
                .db
                .count(&format!("SELECT count(*) FROM workers WHERE pid = {pid}"))
                == 0
            {
                assert!(Instant::now() < deadline, "worker {pid} never registered");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let running = format!(
            "SELECT count(*) FROM runs r JOIN workers w ON w.id = r.lease_owner \
             WHERE r.state = 'running' AND w.pid = {pid}"
        );
        if kill % 4 == 1 {
            // However slow the machine, some kills land while the worker holds runs.
            let deadline = Instant::now() + Duration::from_secs(20);
            while s.db.count(&running) == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        } else {
            std::thread::sleep(Duration::from_millis(rand::random_range(20..=250u64)));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        hits += s.db.count(&running);
        child = spawn_worker(&s, false);
    }
    assert!(hits > 0, "no kill caught a running run");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut last = spawn_worker(&s, true);
    let status = wait_exit(&mut last, Duration::from_secs(180));
    assert!(
        status.success(),
        "the last worker drains and exits: {status:?}"
    );
    // The callbacks enqueued by the last completions run in a second drain if the first
    // ended before they were claimed.
    let mut again = spawn_worker(&s, true);
    assert!(wait_exit(&mut again, Duration::from_secs(60)).success());

    // Batches: completed once, counters true, one message, one callback that ran.
    for id in &batches {
        let b = rt.block_on(client.batch(id)).unwrap();
        assert_eq!(b.state, "completed", "{b:?}");
        assert_eq!(b.completions, 1, "{b:?}");
        assert_eq!(b.pending, 0, "{b:?}");
        assert_eq!(
            b.completed + b.failed + b.cancelled,
            BATCH_RUNS as i64,
            "{b:?}"
        );
        assert_eq!(
            b.states.get("completed").copied().unwrap_or(0),
            b.completed,
            "{b:?}"
        );
        assert_eq!(
            b.states.get("failed").copied().unwrap_or(0),
            b.failed,
            "{b:?}"
        );
        let msgs = s.db.count(&format!(
            "SELECT count(*) FROM inbox WHERE kind = 'batch_completed' AND session_id = '{}'",
            b.session_id
        ));
        assert_eq!(msgs, 1, "batch {id}: one completion message");
        let callbacks = s.db.count(&format!(
            "SELECT count(*) FROM run_deps WHERE parent_id = '{id}' AND mode = 'batch'"
        ));
        assert_eq!(callbacks, 1, "batch {id}: one callback run");
        let cb = b.callback_run_id.expect("a callback run");
        assert_eq!(
            s.db.text(&format!("SELECT state FROM runs WHERE id = '{cb}'"))
                .as_deref(),
            Some("completed")
        );
    }
    // Chains: each link's end follows its parent's.
    let state = |id: &RunId| -> (String, String) {
        let row = &s.db.rows(&format!(
            "SELECT state, coalesce(error, '') FROM runs WHERE id = '{id}'"
        ))[0];
        (row[0].clone().unwrap(), row[1].clone().unwrap())
    };
    for chain in &chains {
        for pair in chain.windows(2) {
            let (parent, child) = (&pair[0], &pair[1]);
            let (ps, _) = state(parent);
            let (cs, err) = state(child);
            match ps.as_str() {
                "completed" => assert!(
                    cs == "completed" || cs == "failed",
                    "{child} after completed {parent}: {cs} {err}"
                ),
                "failed" | "cancelled" => {
                    assert_eq!(cs, "cancelled", "{child} after {ps} {parent}");
                    assert!(err.contains(parent.as_str()), "{child}: {err}");
                }
                other => panic!("{parent} ended {other}"),
            }
        }
    }
    // One final message per run.
    let per_run: HashMap<String, i64> =
        s.db.rows(
            "SELECT r.id, (SELECT count(*) FROM inbox i WHERE i.run_id = r.id \
             AND i.kind IN ('completed', 'failed', 'cancelled')) FROM runs r",
        )
        .into_iter()
        .map(|r| {
            (
                r[0].clone().unwrap(),
                r[1].clone().unwrap().parse().unwrap(),
            )
        })
        .collect();
    for (id, n) in &per_run {
        assert_eq!(*n, 1, "run {id} has {n} final messages");
    }
    let unfinished = s
        .db
        .count("SELECT count(*) FROM runs WHERE state NOT IN ('completed', 'failed', 'cancelled')");
    assert_eq!(unfinished, 0);
    eprintln!("compose crash: {KILLS} kills caught {hits} running runs");
}
