//! Timeouts, cancellation of queued and running runs, and retries with backoff: a real worker
//! loop in this process, time moved by the manual clock.

use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::{EnqueueRequest, Error, Run, RunId, RunState};

use crate::leases::{enqueue, inbox};
use crate::support::{TestEnv, wait_for};

struct Running {
    shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<toolq::Result<toolq::WorkerReport>>,
}

fn start_worker(env: &TestEnv) -> Running {
    let shutdown = CancellationToken::new();
    let w = env.client.worker(toolq::WorkerOptions::default());
    let handle = tokio::spawn(w.run(shutdown.clone()));
    Running { shutdown, handle }
}

impl Running {
    async fn stop(self) -> toolq::WorkerReport {
        self.shutdown.cancel();
        self.handle.await.unwrap().unwrap()
    }
}

async fn wait_state(env: &TestEnv, id: &RunId, state: RunState, attempt: i64) -> Run {
    wait_for(&format!("{id} {state} at attempt {attempt}"), async || {
        let r = env.client.get(id).await.unwrap();
        let seen = format!("{} attempt {} error {:?}", r.state, r.attempt, r.error);
        (
            (r.state == state && r.attempt == attempt).then_some(r),
            seen,
        )
    })
    .await
}

#[tokio::test]
async fn timeout_fails_with_the_limit_and_retries_with_backoff() {
    let env = TestEnv::new();
    let mut req = EnqueueRequest::new("hang", json!({})).session("s1");
    req.timeout = Some(Duration::from_millis(100));
    req.max_attempts = Some(2);
    let id = env.client.enqueue(req).await.unwrap().run_id;
    let worker = start_worker(&env);

    let r = wait_state(&env, &id, RunState::Queued, 1).await;
    assert_eq!(r.error.as_deref(), Some("timed out after 100ms"));
    let delay = r.run_at - env.client.now();
    assert!(
        delay >= chrono::Duration::milliseconds(500)
            && delay < chrono::Duration::milliseconds(1500),
        "{delay}"
    );
    assert!(inbox(&env).await.is_empty());

    env.clock.advance(chrono::Duration::seconds(2));
    let r = wait_state(&env, &id, RunState::Failed, 2).await;
    assert_eq!(r.error.as_deref(), Some("timed out after 100ms"));
    assert_eq!(r.errors.as_array().unwrap().len(), 2);
    let msgs = inbox(&env).await;
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].kind, "failed");
    assert!(msgs[0].body.contains("timed out after 100ms"));
    let blob = env.client.result(&r).await.unwrap().unwrap();
    let v: Value = serde_json::from_slice(&blob.content).unwrap();
    assert_eq!(
        v,
        json!({"status": "failed", "error": "timed out after 100ms"})
    );
    worker.stop().await;
}

#[tokio::test]
async fn internal_errors_retry_with_growing_backoff_until_max_attempts() {
    let env = TestEnv::new();
    let id = enqueue(&env, "fail", json!({}), None).await;
    let worker = start_worker(&env);
    let base = chrono::Duration::seconds(1);
    for attempt in 1..=2 {
        let r = wait_state(&env, &id, RunState::Queued, attempt).await;
        // base * 2^(attempt-1), jittered by a factor in [0.5, 1.5).
        let nominal = base * 2i32.pow(attempt as u32 - 1);
        let delay = r.run_at - env.client.now();
        assert!(
            delay >= nominal / 2 && delay < nominal * 3 / 2,
            "attempt {attempt}: {delay}"
        );
        env.clock.advance(nominal * 2);
    }
    let r = wait_state(&env, &id, RunState::Failed, 3).await;
    assert_eq!(r.errors.as_array().unwrap().len(), 3);
    assert_eq!(inbox(&env).await.len(), 1);
    worker.stop().await;

    // A tool error never retries.
    let mut req = EnqueueRequest::new("divide", json!({"a": 1, "b": 0})).session("s1");
    req.max_attempts = Some(5);
    let id = env.client.enqueue(req).await.unwrap().run_id;
    env.drain().await;
    let r = env.client.get(&id).await.unwrap();
    assert_eq!((r.state, r.attempt), (RunState::Failed, 1), "{:?}", r.error);
}

#[tokio::test]
async fn retry_requeues_failed_and_cancelled_runs_as_new_attempts() {
    let env = TestEnv::new();
    let id = enqueue(&env, "fail", json!({}), Some(1)).await;
    env.drain().await;
    assert_eq!(env.client.get(&id).await.unwrap().state, RunState::Failed);
    env.client.retry(&id).await.unwrap();
    let r = env.client.get(&id).await.unwrap();
    assert_eq!(
        (r.state, r.attempt, r.max_attempts),
        (RunState::Queued, 1, 2)
    );
    env.drain().await;
    let r = env.client.get(&id).await.unwrap();
    assert_eq!((r.state, r.attempt), (RunState::Failed, 2));
    let kinds: Vec<_> = inbox(&env).await.into_iter().map(|m| m.kind).collect();
    assert_eq!(kinds, ["failed", "failed"]);

    let ok = enqueue(&env, "echo", json!({"message": "hi"}), None).await;
    env.drain().await;
    let e = env.client.retry(&ok).await.unwrap_err();
    assert!(matches!(e, Error::Conflict(_)), "{e}");
    assert!(e.to_string().contains("completed"), "{e}");

    let mut req = EnqueueRequest::new("echo", json!({"message": "later"})).session("s1");
    req.run_at = Some(env.client.now() + chrono::Duration::hours(1));
    let later = env.client.enqueue(req).await.unwrap().run_id;
    assert_eq!(
        env.client.cancel(&later).await.unwrap(),
        RunState::Cancelled
    );
    env.client.retry(&later).await.unwrap();
    env.drain().await;
    assert_eq!(
        env.client.get(&later).await.unwrap().state,
        RunState::Completed
    );
}

#[tokio::test]
async fn cancel_queued_at_once_and_running_via_the_heartbeat() {
    let env = TestEnv::new();
    let mut req = EnqueueRequest::new("echo", json!({"message": "hi"})).session("s1");
    req.run_at = Some(env.client.now() + chrono::Duration::hours(1));
    let queued = env.client.enqueue(req).await.unwrap().run_id;
    assert_eq!(
        env.client.cancel(&queued).await.unwrap(),
        RunState::Cancelled
    );
    let r = env.client.get(&queued).await.unwrap();
    assert_eq!(r.state, RunState::Cancelled);
    let blob = env.client.result(&r).await.unwrap().unwrap();
    let v: Value = serde_json::from_slice(&blob.content).unwrap();
    assert_eq!(
        v,
        json!({"status": "cancelled", "error": "cancelled by request before it started"})
    );
    let msgs = inbox(&env).await;
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].kind, "cancelled");
    let e = env.client.cancel(&queued).await.unwrap_err();
    assert!(matches!(e, Error::Conflict(_)), "{e}");

    // One tool that honours cancellation, one that ignores it (aborted after the grace).
    let polite = enqueue(&env, "sleep", json!({"ms": 600_000}), None).await;
    let stubborn = enqueue(&env, "hang", json!({}), None).await;
    let worker = start_worker(&env);
    for id in [&polite, &stubborn] {
        wait_state(&env, id, RunState::Running, 1).await;
        assert_eq!(env.client.cancel(id).await.unwrap(), RunState::Running);
    }
    for id in [&polite, &stubborn] {
        let r = wait_state(&env, id, RunState::Cancelled, 1).await;
        assert_eq!(
            r.error.as_deref(),
            Some("cancelled by request while running")
        );
        let blob = env.client.result(&r).await.unwrap().unwrap();
        let v: Value = serde_json::from_slice(&blob.content).unwrap();
        assert_eq!(v["status"], "cancelled");
    }
    let report = worker.stop().await;
    assert_eq!((report.recorded, report.fenced_out), (2, 0));
    let msgs = inbox(&env).await;
    assert_eq!(msgs.len(), 3);
    assert!(msgs.iter().all(|m| m.kind == "cancelled"), "{msgs:?}");
    assert!(
        msgs[1].body.starts_with("Background run cancelled."),
        "{}",
        msgs[1].body
    );
}
