//! The `AsyncTool` adapter in a real worker loop: execute runs once per run (a retry resumes
//! the stored operation), every stage is kept with its attempt, a failed operation fails the
//! run, and an operator's cancel reaches the tool's `cancel`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::Stream;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::tool::async_tool::AsyncError;
use toolq::tool::{AsyncOutcome, AsyncTool, ProgressStage, ToolStatus};
use toolq::{
    Client, EnqueueRequest, ManualClock, RegistryBuilder, RunId, RunState, ToolContext, ToolDef,
};

use crate::support::{t, wait_for};

#[derive(Debug, Clone, Copy)]
enum Stage {
    Preparing,
    Running,
}

impl ProgressStage for Stage {
    fn as_str(&self) -> &str {
        match self {
            Stage::Preparing => "preparing",
            Stage::Running => "running",
        }
    }
}

/// Behaviour by `args.mode`: `flaky` (attempt 1's status stream ends early, a later attempt
/// completes), `fail` (the operation fails), `quick` (it completes at once), `hang` (it never
/// ends).
#[derive(Default)]
struct Scripted {
    executes: Arc<AtomicUsize>,
    cancels: Arc<AtomicUsize>,
}

impl AsyncTool for Scripted {
    type Stage = Stage;

    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "scripted",
            "a scripted async operation",
            json!({"type": "object", "properties": {"mode": {"type": "string"}}}),
        )
    }

    async fn execute(&self, ctx: &ToolContext, input: Value) -> Result<AsyncOutcome, AsyncError> {
        self.executes.fetch_add(1, Ordering::SeqCst);
        let mode = input["mode"].as_str().unwrap_or_default();
        Ok(AsyncOutcome::in_progress(
            format!("op-{mode}-{}", ctx.run_id),
            format!("{mode} started"),
        ))
    }

    fn check_status(
        &self,
        ctx: &ToolContext,
        operation_id: &str,
    ) -> impl Stream<Item = ToolStatus<Stage>> + Send {
        let mode = operation_id
            .split('-')
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let items: Vec<ToolStatus<Stage>> = match (mode.as_str(), ctx.attempt) {
            ("flaky", 1) => vec![ToolStatus::Progress {
                stage: Stage::Preparing,
                message: "preparing".into(),
                progress: None,
            }],
            ("flaky", _) => vec![
                ToolStatus::Progress {
                    stage: Stage::Running,
                    message: "half way".into(),
                    progress: Some(0.5),
                },
                // A repeat of the same stage moves only the live progress.
                ToolStatus::Progress {
                    stage: Stage::Running,
                    message: "nearly".into(),
                    progress: Some(0.9),
                },
                ToolStatus::completed(json!({"done": operation_id})),
            ],
            ("fail", _) => vec![ToolStatus::Failed("the service refused it".into())],
            ("quick", _) => vec![ToolStatus::completed(json!({"quick": true}))],
            _ => vec![ToolStatus::Progress {
                stage: Stage::Running,
                message: "working".into(),
                progress: None,
            }],
        };
        let hang = mode == "hang";
        futures_util::StreamExt::chain(
            futures_util::stream::iter(items),
            futures_util::stream::unfold((), move |()| async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                None
            }),
        )
    }

    async fn cancel(&self, _ctx: &ToolContext, _operation_id: &str) {
        self.cancels.fetch_add(1, Ordering::SeqCst);
    }
}

struct Env {
    _dir: tempfile::TempDir,
    _db: crate::support::TestDb,
    clock: ManualClock,
    client: Client,
    executes: Arc<AtomicUsize>,
    cancels: Arc<AtomicUsize>,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let mut config = db.config();
    config.worker.poll_interval = Duration::from_millis(20);
    config.worker.heartbeat_interval = Duration::from_millis(100);
    config.worker.flush_interval = Duration::from_millis(50);
    config.worker.cancel_grace = Duration::from_secs(2);
    // A shutdown stops a running operation at once (it is handed back, not waited for).
    config.worker.shutdown_grace = Duration::from_millis(100);
    let tool = Scripted::default();
    let (executes, cancels) = (tool.executes.clone(), tool.cancels.clone());
    let registry = RegistryBuilder::new().async_tool(tool).build().unwrap();
    let clock = ManualClock::new(t("2026-11-01T12:00:00Z"));
    let client = Client::open_with_clock(config, registry, Arc::new(clock.clone())).unwrap();
    Env {
        _dir: dir,
        _db: db,
        clock,
        client,
        executes,
        cancels,
    }
}

async fn enqueue(env: &Env, mode: &str) -> RunId {
    env.client
        .enqueue(EnqueueRequest::new("scripted", json!({ "mode": mode })))
        .await
        .unwrap()
        .run_id
}

async fn wait_state(env: &Env, id: &RunId, state: RunState, attempt: i64) -> toolq::Run {
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

fn stages(run: &toolq::Run) -> Vec<(String, i64)> {
    run.stages
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["stage"].as_str().unwrap().to_string(),
                s["attempt"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_tool_starts_once_and_a_retry_resumes_its_operation() {
    let env = env();
    let id = enqueue(&env, "flaky").await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));

    // Attempt 1's status stream ends without an end: an internal error, retried later.
    let run = wait_state(&env, &id, RunState::Queued, 1).await;
    assert!(
        run.internal_error
            .as_deref()
            .is_some_and(|e| e.contains("ended without Completed or Failed")),
        "{:?}",
        run.internal_error
    );
    env.clock.advance(chrono::Duration::seconds(60));
    let run = wait_state(&env, &id, RunState::Completed, 2).await;
    stop.cancel();
    worker.await.unwrap().unwrap();

    assert_eq!(env.executes.load(Ordering::SeqCst), 1, "execute runs once");
    let op = format!("op-flaky-{id}");
    assert_eq!(run.operation_id.as_deref(), Some(op.as_str()));
    let s = |n: &str, a| (n.to_string(), a);
    assert_eq!(
        stages(&run),
        vec![
            s("started", 1),
            s("preparing", 1),
            s("resumed", 2),
            s("running", 2),
            s("completed", 2)
        ]
    );
    let first = &run.stages[0];
    assert_eq!(first["message"], "flaky started");
    assert_eq!(run.stages[3]["progress"], 0.5);
    assert_eq!(run.stages[3]["message"], "half way");
    assert!(
        first["at"]
            .as_str()
            .unwrap()
            .starts_with("2026-11-01T12:00")
    );
    let result: Value =
        serde_json::from_slice(&env.client.result(&run).await.unwrap().unwrap().content).unwrap();
    assert_eq!(result["result"]["done"], op.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_operation_fails_the_run_without_a_retry() {
    let env = env();
    let id = enqueue(&env, "fail").await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    let run = wait_state(&env, &id, RunState::Failed, 1).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(run.error.as_deref(), Some("the service refused it"));
    assert_eq!(
        stages(&run),
        vec![("started".into(), 1), ("failed".into(), 1)]
    );
    assert_eq!(run.stages[1]["message"], "the service refused it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_an_async_run_cancels_its_operation() {
    let env = env();
    let id = enqueue(&env, "hang").await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    wait_for("the operation to report a stage", async || {
        let r = env.client.get(&id).await.unwrap();
        let names: Vec<String> = stages(&r).into_iter().map(|(n, _)| n).collect();
        (
            names.contains(&"running".to_string()).then_some(()),
            format!("{names:?}"),
        )
    })
    .await;
    env.client.cancel(&id).await.unwrap();
    let run = wait_state(&env, &id, RunState::Cancelled, 1).await;
    // The tool's cancel ran within the grace period, and its stage was stored.
    wait_for("the cancelled stage", async || {
        let r = env.client.get(&id).await.unwrap();
        let last = stages(&r).last().map(|(n, _)| n.clone());
        (
            (last.as_deref() == Some("cancelled")).then_some(()),
            format!("{last:?}"),
        )
    })
    .await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(env.cancels.load(Ordering::SeqCst), 1);
    assert_eq!(
        run.operation_id.as_deref(),
        Some(format!("op-hang-{id}").as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_hands_the_operation_to_the_next_worker_on_the_same_attempt() {
    let env = env();
    let id = enqueue(&env, "hang").await;
    let has = |run: &toolq::Run, stage: &str, attempt: i64| {
        stages(run).contains(&(stage.to_string(), attempt))
    };
    for round in 0..2 {
        let stop = CancellationToken::new();
        let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
        let want = if round == 0 { "started" } else { "resumed" };
        wait_for(&format!("round {round}: {want} and running"), async || {
            let r = env.client.get(&id).await.unwrap();
            let seen = format!("{:?}", stages(&r));
            let ok = has(&r, want, 1) && stages(&r).last() == Some(&("running".into(), 1));
            (ok.then_some(()), seen)
        })
        .await;
        // A clean shutdown hands the run back: the same attempt number is claimed again.
        stop.cancel();
        let report = worker.await.unwrap().unwrap();
        assert_eq!(report.handed_back, 1);
    }
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Queued);
    assert_eq!(env.executes.load(Ordering::SeqCst), 1, "execute runs once");
    assert_eq!(
        env.cancels.load(Ordering::SeqCst),
        0,
        "a shutdown is no cancel"
    );
    let s = |n: &str| (n.to_string(), 1);
    assert_eq!(
        stages(&run),
        vec![
            s("started"),
            s("running"),
            s("detached"),
            s("resumed"),
            s("running"),
            s("detached")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_call_of_an_async_tool_is_queued_and_its_operation_stored() {
    use toolq::tool::{ExecContext, ToolExecutionOutcome, ToolOutcome, ToolRequest};
    let env = env();
    assert!(
        env.client
            .registry()
            .get("scripted")
            .unwrap()
            .mode
            .is_background()
    );
    let call = ToolRequest::new("call_1", "scripted", json!({"mode": "quick"}));
    let done = env
        .client
        .executor()
        .execute(call, &ExecContext::new("s1"))
        .await;
    let ToolExecutionOutcome::Completed(ToolOutcome::Success(ack)) = done else {
        panic!("expected an acknowledgement, got {done:?}");
    };
    assert_eq!(ack.value["status"], "running", "{}", ack.value);
    let id: RunId = ack.value["run_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(env.executes.load(Ordering::SeqCst), 0, "nothing ran inline");
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    let run = wait_state(&env, &id, RunState::Completed, 1).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(run.session_id, "s1");
    assert_eq!(env.executes.load(Ordering::SeqCst), 1);
    assert_eq!(
        run.operation_id.as_deref(),
        Some(format!("op-quick-{id}").as_str())
    );
    assert_eq!(
        stages(&run),
        vec![("started".into(), 1), ("completed".into(), 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_of_a_failed_operation_starts_a_new_one() {
    let env = env();
    let id = enqueue(&env, "fail").await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    wait_state(&env, &id, RunState::Failed, 1).await;
    env.client.retry(&id).await.unwrap();
    let run = wait_state(&env, &id, RunState::Failed, 2).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(
        env.executes.load(Ordering::SeqCst),
        2,
        "the retry started the operation again instead of resuming the failed one"
    );
    assert_eq!(
        stages(&run),
        vec![
            ("started".into(), 1),
            ("failed".into(), 1),
            ("started".into(), 2),
            ("failed".into(), 2)
        ]
    );
}
