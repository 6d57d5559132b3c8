//! Async tools: detached_command records its operation id and stages; after the worker dies
//! (its runtime dropped: no hand-back, like kill -9) and the run is rescued, the next attempt
//! resumes watching the same operation instead of starting the command again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::store::{Claim, Release, Settle, Settlement};
use toolq::{EnqueueRequest, RunState};

use crate::support::{TestEnv, wait_for};

fn env_with_ops(dir: &Path) -> TestEnv {
    let ops = dir.join("ops").display().to_string();
    TestEnv::with_config(|c| {
        c.shell.enabled = true;
        c.shell.state_dir = Some(ops);
    })
}

fn stage_names(stages: &Value) -> Vec<String> {
    stages
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap().to_string())
        .collect()
}

/// A command that counts its starts, reports a stage, then waits for `go` to exist.
fn waiting_command(dir: &Path) -> Value {
    json!({
        "argv": ["sh", "-c",
            "echo x >> \"$1\"; echo building > \"$TOOLQ_OPERATION_DIR/stage\"; echo $$ > \"$3\"; \
             while [ ! -e \"$2\" ]; do sleep 0.02; done; echo finished",
            "sh",
            dir.join("starts").to_str().unwrap(),
            dir.join("go").to_str().unwrap(),
            dir.join("pid").to_str().unwrap()],
        "poll_ms": 20
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_operation_is_resumed_after_the_worker_dies() {
    let dir = tempfile::tempdir().unwrap();
    let env = env_with_ops(dir.path());
    let id = env
        .client
        .enqueue(EnqueueRequest::new(
            "detached_command",
            waiting_command(dir.path()),
        ))
        .await
        .unwrap()
        .run_id;
    // The first worker lives on its own runtime, so dropping that runtime kills every task of
    // it at once, as kill -9 would: nothing is handed back, the lease stays.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.spawn(
        env.client
            .worker(Default::default())
            .run(CancellationToken::new()),
    );
    let run = wait_for("the operation and its stage to be stored", async || {
        let r = env.client.get(&id).await.unwrap();
        let seen = format!("{:?} {}", r.operation_id, r.stages);
        let ok = r.operation_id.is_some() && stage_names(&r.stages).contains(&"building".into());
        (ok.then_some(r), seen)
    })
    .await;
    // Wait until its thread has stopped: a task still being polled could send a claim after
    // the rescue below and take the run again for a worker that no longer exists.
    tokio::task::spawn_blocking(move || rt.shutdown_timeout(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(run.state, RunState::Running);
    let op = run.operation_id.clone().unwrap();

    // Rescue: the dead attempt's lease is given back (fenced by its token).
    let (rid, attempt, token) = (
        run.id.clone(),
        run.attempt,
        run.lease_token.clone().unwrap(),
    );
    let now = env.client.now();
    let settled = env
        .client
        .engine()
        .attempt_settle(Settle {
            batch: Arc::new(vec![Settlement::Release(Release {
                id: rid,
                attempt,
                token,
            })]),
            claim: Claim {
                worker: "wk_test".into(),
                now,
                lease_until: now,
                max: 0,
                per_session: 0,
                after_session: None,
                tools: Vec::new().into(),
                limits: Default::default(),
                background_room: None,
            },
        })
        .await
        .unwrap();
    assert_eq!(settled.applied, [true]);
    std::fs::write(dir.path().join("go"), "").unwrap();
    env.drain().await;

    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    assert_eq!(run.operation_id.as_deref(), Some(op.as_str()));
    let starts = std::fs::read_to_string(dir.path().join("starts")).unwrap();
    assert_eq!(starts.lines().count(), 1, "the command must start once");
    let names = stage_names(&run.stages);
    assert_eq!(
        names.first().map(String::as_str),
        Some("started"),
        "{names:?}"
    );
    assert!(names.contains(&"resumed".into()), "{names:?}");
    assert_eq!(
        names.last().map(String::as_str),
        Some("completed"),
        "{names:?}"
    );
    let result: Value =
        serde_json::from_slice(&env.client.result(&run).await.unwrap().unwrap().content).unwrap();
    assert_eq!(result["result"]["operation_id"], op.as_str());
    assert_eq!(result["result"]["stdout_tail"], "finished\n");
    let log = env.client.log(&run).await.unwrap().unwrap().content;
    let log = String::from_utf8_lossy(&log);
    assert!(
        log.contains("[stdout] finished"),
        "log: {log:?}, stages: {names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_run_ends_the_operation() {
    let dir = tempfile::tempdir().unwrap();
    let env = env_with_ops(dir.path());
    let id = env
        .client
        .enqueue(EnqueueRequest::new(
            "detached_command",
            waiting_command(dir.path()),
        ))
        .await
        .unwrap()
        .run_id;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    wait_for("the operation to start", async || {
        let r = env.client.get(&id).await.unwrap();
        let pid = std::fs::read_to_string(dir.path().join("pid")).ok();
        (
            (r.operation_id.is_some() && pid.is_some()).then_some(()),
            format!("{:?}", r.operation_id),
        )
    })
    .await;
    env.client.cancel(&id).await.unwrap();
    let run = wait_for("the run to end", async || {
        let r = env.client.get(&id).await.unwrap();
        let s = format!("{:?}", r.state);
        ((r.state == RunState::Cancelled).then_some(r), s)
    })
    .await;
    assert!(
        stage_names(&run.stages).contains(&"cancelled".into()),
        "{}",
        run.stages
    );
    let pid = std::fs::read_to_string(dir.path().join("pid")).unwrap();
    wait_for("the operation's process to end", async || {
        let gone =
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).map_or(true, |s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|t| t.trim_start().starts_with('Z'))
            });
        (gone.then_some(()), pid.clone())
    })
    .await;
    stop.cancel();
    worker.await.unwrap().unwrap();
}
