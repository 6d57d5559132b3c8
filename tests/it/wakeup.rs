//! Wake-ups and the finisher's claims: work enqueued through another connection is picked up
//! without waiting for the poll interval, and claiming replacements in the finisher's
//! transaction never runs more than the worker's concurrency.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolq::{Client, EnqueueRequest, RegistryBuilder, RunState, WorkerOptions};

use crate::support::{TestEnv, wait_for};

async fn wait_completed(client: &Client, id: &toolq::RunId) {
    wait_for("run completed", async || {
        let run = client.get(id).await.unwrap();
        (
            (run.state == RunState::Completed).then_some(()),
            run.state.to_string(),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_enqueued_by_another_connection_wakes_an_idle_worker() {
    // An hour-long poll interval: only the data_version probe can wake the worker.
    let env = TestEnv::with_config(|c| c.worker.poll_interval = Duration::from_secs(3600));
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(
        env.client
            .worker(WorkerOptions::default())
            .run(shutdown.clone()),
    );
    // A second client on the same file: its enqueues never touch the first one's in-process
    // notification, as if another process made them.
    let mut config = env.db.config();
    config.worker.poll_interval = Duration::from_secs(3600);
    let other = Client::open_with_clock(
        config,
        RegistryBuilder::new().with_builtins().build().unwrap(),
        Arc::new(env.clock.clone()),
    )
    .unwrap();
    for i in 0..3 {
        let id = other
            .enqueue(EnqueueRequest::new(
                "echo",
                json!({"message": format!("m{i}")}),
            ))
            .await
            .unwrap()
            .run_id;
        wait_completed(&env.client, &id).await;
    }
    shutdown.cancel();
    let report = worker.await.unwrap().unwrap();
    assert_eq!(report.recorded, 3);
    assert_eq!(
        env.count("SELECT count(*) FROM inbox WHERE kind = 'completed'"),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_made_while_recording_ends_never_exceed_the_concurrency() {
    let env = TestEnv::with_config(|c| {
        c.worker.concurrency = 3;
        c.worker.per_session = 10;
    });
    let reqs = (0..24)
        .map(|_| EnqueueRequest::new("sleep", json!({"ms": 5})))
        .collect();
    env.client.enqueue_batch(reqs).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let max_running = Arc::new(AtomicI64::new(0));
    let sampler = {
        let (stop, max_running, db) = (stop.clone(), max_running.clone(), env.db.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = db.count("SELECT count(*) FROM runs WHERE state = 'running'");
                max_running.fetch_max(n, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let report = env.drain().await;
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    assert_eq!(report.claimed, 24);
    assert_eq!(report.recorded, 24);
    assert!(
        max_running.load(Ordering::Relaxed) <= 3,
        "saw {} running at once with concurrency 3",
        max_running.load(Ordering::Relaxed)
    );
    assert_eq!(
        env.count("SELECT count(*) FROM runs WHERE state = 'completed' AND attempt = 1"),
        24
    );
    assert_eq!(
        env.count("SELECT count(*) FROM inbox WHERE kind = 'completed'"),
        24
    );
}
