//! Per-session and per-worker limits, counted in the database, and fairness between sessions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use serde_json::json;
use toolq::{EnqueueRequest, RunState};

use crate::support::{ClockExt, TestEnv};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_session_stays_within_its_limit_and_others_still_get_slots() {
    let env = TestEnv::new();
    let mut busy = Vec::new();
    for i in 0..8 {
        let r = EnqueueRequest::new("sleep", json!({"ms": 300}))
            .session("busy")
            .title(format!("b{i}"));
        busy.push(env.client.enqueue(r).await.unwrap().run_id);
    }
    let mut other = Vec::new();
    for _ in 0..2 {
        other.push(
            env.client
                .enqueue(EnqueueRequest::new("sleep", json!({"ms": 50})).session("other"))
                .await
                .unwrap()
                .run_id,
        );
    }
    // Sample the running count per session from a separate connection while the worker runs.
    let stop = Arc::new(AtomicBool::new(false));
    let max_busy = Arc::new(AtomicI64::new(0));
    let other_served_early = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (stop, max_busy, early, db) = (
            stop.clone(),
            max_busy.clone(),
            other_served_early.clone(),
            env.db.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let row = &db.rows(
                    "SELECT count(*) FILTER (WHERE session_id = 'busy' AND state = 'running'), \
                     count(*) FILTER (WHERE session_id = 'other' \
                     AND state IN ('running', 'completed')), \
                     count(*) FILTER (WHERE session_id = 'busy' AND state = 'queued') FROM runs",
                )[0];
                let [n, other_started, busy_queued]: [i64; 3] =
                    std::array::from_fn(|i| row[i].as_ref().unwrap().parse().unwrap());
                max_busy.fetch_max(n, Ordering::Relaxed);
                if other_started > 0 && busy_queued > 0 {
                    early.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    env.drain().await;
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let max = max_busy.load(Ordering::Relaxed);
    assert!(max <= 5, "busy session had {max} running at once");
    assert!(max >= 1, "the sampler saw the busy session running");
    assert!(
        other_served_early.load(Ordering::Relaxed),
        "the other session only got slots after the busy session's queue emptied"
    );
    for id in busy.iter().chain(&other) {
        assert_eq!(env.client.get(id).await.unwrap().state, RunState::Completed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_concurrency_caps_running_runs() {
    let env = TestEnv::with_config(|c| {
        c.worker.concurrency = 3;
        c.worker.per_session = 100;
    });
    for _ in 0..9 {
        env.client
            .enqueue(EnqueueRequest::new("sleep", json!({"ms": 100})))
            .await
            .unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let max_running = Arc::new(AtomicI64::new(0));
    let sampler = {
        let (stop, max_running, db) = (stop.clone(), max_running.clone(), env.db.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = db.count("SELECT count(*) FROM runs WHERE state = 'running'");
                max_running.fetch_max(n, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let report = env.drain().await;
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    assert_eq!(report.recorded, 9);
    let max = max_running.load(Ordering::Relaxed);
    assert!((1..=3).contains(&max), "max running was {max}");
}

#[tokio::test]
async fn higher_priority_runs_first() {
    let env = TestEnv::with_config(|c| c.worker.concurrency = 1);
    let low = env
        .client
        .enqueue(EnqueueRequest::new("counter", json!({})))
        .await
        .unwrap()
        .run_id;
    let mut req = EnqueueRequest::new("counter", json!({}));
    req.priority = 10;
    let high = env.client.enqueue(req).await.unwrap().run_id;
    env.drain().await;
    let low = env.client.get(&low).await.unwrap();
    let high = env.client.get(&high).await.unwrap();
    assert!(high.started_at.unwrap() <= low.started_at.unwrap());
    let low_n = serde_json::from_slice::<serde_json::Value>(
        &env.client.result(&low).await.unwrap().unwrap().content,
    )
    .unwrap();
    assert_eq!(low_n["result"]["n"], 2, "the low-priority run ran second");
}

#[tokio::test]
async fn future_runs_wait_for_their_time_and_drain_leaves_them_queued() {
    let env = TestEnv::new();
    let mut req = EnqueueRequest::new("echo", json!({"message": "hi"}));
    req.run_at = Some(env.clock.now_plus_secs(600));
    let later = env.client.enqueue(req).await.unwrap().run_id;
    let report = env.drain().await;
    assert_eq!(report.claimed, 0);
    assert_eq!(
        env.client.get(&later).await.unwrap().state,
        RunState::Queued
    );
    env.clock.advance(chrono::Duration::seconds(601));
    env.drain().await;
    assert_eq!(
        env.client.get(&later).await.unwrap().state,
        RunState::Completed
    );
}

sqlite_only! {
    /// A worker whose every candidate is at its limit (another process holds the session's
    /// one slot) learns it on a reader: its polls and the commits that wake it do not make it
    /// take the database's write lock, which the process holding the slot needs for its next
    /// commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_only_a_worker_whose_candidates_are_at_their_limit_takes_no_write_lock() {
        let env = TestEnv::with_config(|c| {
            c.worker.per_session = 1;
            // No liveness writes in the window below.
            c.worker.heartbeat_interval = std::time::Duration::from_secs(3600);
        });
        let holder = env
            .client
            .enqueue(EnqueueRequest::new("sleep", json!({"ms": 30_000})).session("s"))
            .await
            .unwrap()
            .run_id;
        let stop = tokio_util::sync::CancellationToken::new();
        let a = tokio::spawn(
            env.client
                .worker(toolq::WorkerOptions::default())
                .run(stop.clone()),
        );
        crate::support::wait_for("the first run running", async || {
            let s = env.client.get(&holder).await.unwrap().state;
            ((s == RunState::Running).then_some(()), format!("{s:?}"))
        })
        .await;
        let other = toolq::Client::open_with_clock(
            env.client.config().clone(),
            toolq::RegistryBuilder::new().with_builtins().build().unwrap(),
            Arc::new(env.clock.clone()),
        )
        .unwrap();
        let b = tokio::spawn(other.worker(toolq::WorkerOptions::default()).run(stop.clone()));
        // B registers itself (a write), then polls every 20 ms and is woken by each enqueue.
        crate::support::wait_for("the second worker registered", async || {
            let n = env.count("SELECT count(*) FROM workers");
            ((n == 2).then_some(()), format!("{n} workers"))
        })
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let before = other.store().write_stats().transactions;
        for i in 0..10 {
            env.client
                .enqueue(EnqueueRequest::new("echo", json!({"message": format!("m{i}")})).session("s"))
                .await
                .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        }
        let after = other.store().write_stats().transactions;
        assert_eq!(
            after - before,
            0,
            "the second worker took the write lock to learn that the session is full"
        );
        assert_eq!(env.count("SELECT count(*) FROM runs WHERE state = 'running'"), 1);
        stop.cancel();
        a.await.unwrap().unwrap();
        b.await.unwrap().unwrap();
    }
}
