//! The tool-side pieces of durable runs in a real worker loop: a command tool snoozes by
//! exiting 75 (bounded by `runs.max_snoozes`), an async tool asks for its next check later
//! and frees its slot meanwhile, and the built-in `await_event` returns an event's payload.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::Stream;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::clock::Clock;
use toolq::tool::async_tool::AsyncError;
use toolq::tool::command::CommandToolConfig;
use toolq::tool::{AsyncAdapter, AsyncOutcome, AsyncTool, ProgressStage, Tool, ToolStatus};
use toolq::{
    Client, Config, EnqueueRequest, ManualClock, RegistryBuilder, RunId, RunState, ToolContext,
    ToolDef, ToolOutcome, WaitKind,
};

use crate::support::{t, wait_for};

const START: &str = "2026-11-01T12:00:00Z";

/// A command tool running `sh -c script sh ARG`.
fn command_tool(name: &str, script: &str, arg: &Path) -> CommandToolConfig {
    CommandToolConfig {
        name: name.into(),
        command: vec![
            "sh".into(),
            "-c".into(),
            script.into(),
            "sh".into(),
            arg.display().to_string(),
        ],
        description: String::new(),
        args_schema: json!({"type": "object"}),
        cwd: None,
        env: Default::default(),
        timeout: None,
        output_cap: None,
        requires_approval: false,
        approval_deadline: None,
        kill_grace: Duration::from_secs(1),
        max_running: None,
    }
}

/// Snoozes for an hour twice (counting its calls in the file `$1`), then succeeds.
const POLL_TWICE: &str = r#"n=$(cat "$1" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$1"
if [ "$n" -le 2 ]; then echo "not yet ($n)"; echo "toolq-snooze: 1h"; exit 75; fi
echo "::toolq::result {\"polls\": $n}""#;

#[derive(Debug, Clone, Copy)]
enum Stage {
    Exporting,
}

impl ProgressStage for Stage {
    fn as_str(&self) -> &str {
        "exporting"
    }
}

/// An operation that reports rarely: its first two checks say "exporting" and ask to be
/// checked again in `later`; the third completes.
struct Rare {
    later: Duration,
    executes: Arc<AtomicUsize>,
    checks: Arc<AtomicUsize>,
}

impl AsyncTool for Rare {
    type Stage = Stage;

    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "rare",
            "an export that reports rarely",
            json!({"type": "object"}),
        )
    }

    async fn execute(&self, ctx: &ToolContext, _input: Value) -> Result<AsyncOutcome, AsyncError> {
        self.executes.fetch_add(1, Ordering::SeqCst);
        Ok(AsyncOutcome::in_progress(
            format!("export-{}", ctx.run_id),
            "export started",
        ))
    }

    fn check_status(
        &self,
        _ctx: &ToolContext,
        operation_id: &str,
    ) -> impl Stream<Item = ToolStatus<Stage>> + Send {
        let items = if self.checks.fetch_add(1, Ordering::SeqCst) < 2 {
            vec![
                ToolStatus::Progress {
                    stage: Stage::Exporting,
                    message: "exporting".into(),
                    progress: None,
                },
                ToolStatus::CheckAgainIn(self.later),
            ]
        } else {
            vec![ToolStatus::completed(json!({"exported": operation_id}))]
        };
        futures_util::stream::iter(items)
    }
}

struct Env {
    dir: tempfile::TempDir,
    db: crate::support::TestDb,
    clock: ManualClock,
    client: Client,
    executes: Arc<AtomicUsize>,
    checks: Arc<AtomicUsize>,
}

fn env_with(tune: impl FnOnce(&mut Config, &Path)) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let mut config = db.config();
    config.worker.poll_interval = Duration::from_millis(20);
    config.worker.heartbeat_interval = Duration::from_millis(100);
    config.worker.flush_interval = Duration::from_millis(50);
    tune(&mut config, dir.path());
    let executes = Arc::new(AtomicUsize::new(0));
    let checks = Arc::new(AtomicUsize::new(0));
    let registry = RegistryBuilder::new()
        .with_builtins()
        .with_config_tools(&config)
        .unwrap()
        .async_tool(Rare {
            later: Duration::from_secs(3600),
            executes: executes.clone(),
            checks: checks.clone(),
        })
        .build()
        .unwrap();
    let clock = ManualClock::new(t(START));
    let client = Client::open_with_clock(config, registry, Arc::new(clock.clone())).unwrap();
    Env {
        dir,
        db,
        clock,
        client,
        executes,
        checks,
    }
}

fn env() -> Env {
    env_with(|_, _| {})
}

async fn enqueue(env: &Env, tool: &str, args: Value) -> RunId {
    env.client
        .enqueue(EnqueueRequest::new(tool, args))
        .await
        .unwrap()
        .run_id
}

async fn wait_until(
    env: &Env,
    id: &RunId,
    what: &str,
    f: impl Fn(&toolq::Run) -> bool,
) -> toolq::Run {
    wait_for(what, async || {
        let r = env.client.get(id).await.unwrap();
        let seen = format!(
            "{} attempt {} snoozes {} waiting {:?} error {:?}",
            r.state, r.attempt, r.snoozes, r.waiting, r.error
        );
        (f(&r).then_some(r), seen)
    })
    .await
}

/// The run's result value (`result` of its stored result).
async fn result_of(env: &Env, run: &toolq::Run) -> Value {
    let r = env.client.result(run).await.unwrap().unwrap();
    serde_json::from_slice::<Value>(&r.content).unwrap()["result"].clone()
}

fn waits(run: &toolq::Run, kind: WaitKind) -> bool {
    run.waiting.as_ref().is_some_and(|w| w.kind == kind)
}

type Worker = tokio::task::JoinHandle<toolq::Result<toolq::WorkerReport>>;

fn start_worker(env: &Env) -> (CancellationToken, Worker) {
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    (stop, worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_tool_snoozes_by_exit_75_without_using_an_attempt() {
    let env = env_with(|c, dir| {
        let t = command_tool("poll", POLL_TWICE, &dir.join("count"));
        c.tools.insert(t.name.clone(), t);
    });
    let id = enqueue(&env, "poll", json!({})).await;
    let (stop, worker) = start_worker(&env);
    for n in 1..=2 {
        let run = wait_until(&env, &id, "snoozed", |r| {
            r.snoozes == n && waits(r, WaitKind::Snooze)
        })
        .await;
        assert_eq!(run.attempt, 0, "a snooze gives its attempt back");
        assert_eq!(run.run_at, env.clock.now() + chrono::Duration::hours(1));
        env.clock.advance(chrono::Duration::hours(1));
    }
    let run = wait_until(&env, &id, "completed", |r| r.state == RunState::Completed).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!((run.attempt, run.snoozes), (1, 2));
    assert_eq!(result_of(&env, &run).await, json!({"polls": 3}));
    let count = std::fs::read_to_string(env.dir.path().join("count")).unwrap();
    assert_eq!(count.trim(), "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_snoozes_stop_at_max_snoozes_and_a_bad_line_fails() {
    let env = env_with(|c, dir| {
        c.runs.max_snoozes = 2;
        // Never ready, and says nothing of when to look again: 60 s.
        let t = command_tool("forever", "exit 75", dir);
        c.tools.insert(t.name.clone(), t);
        let t = command_tool("garbled", "echo 'toolq-snooze: soon'; exit 75", dir);
        c.tools.insert(t.name.clone(), t);
    });
    let id = enqueue(&env, "forever", json!({})).await;
    let bad = enqueue(&env, "garbled", json!({})).await;
    let (stop, worker) = start_worker(&env);
    let garbled = wait_until(&env, &bad, "failed", |r| r.state == RunState::Failed).await;
    let err = garbled.error.unwrap();
    assert!(
        err.contains("\"toolq-snooze: soon\"") && err.contains("exited with code 75"),
        "{err}"
    );
    assert_eq!(garbled.snoozes, 0);
    for n in 1..=2 {
        let run = wait_until(&env, &id, "snoozed", |r| {
            r.snoozes == n && waits(r, WaitKind::Snooze)
        })
        .await;
        assert_eq!(run.run_at, env.clock.now() + chrono::Duration::seconds(60));
        env.clock.advance(chrono::Duration::seconds(60));
    }
    let run = wait_until(&env, &id, "failed", |r| r.state == RunState::Failed).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    let err = run.error.unwrap();
    assert!(err.contains("runs.max_snoozes"), "{err}");
    assert_eq!((run.attempt, run.snoozes), (1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_tool_checked_again_later_frees_its_slot_and_resumes_its_operation() {
    let env = env();
    let id = enqueue(&env, "rare", json!({})).await;
    let (stop, worker) = start_worker(&env);
    for n in 1..=2 {
        let run = wait_until(&env, &id, "waiting for the next check", |r| {
            waits(r, WaitKind::Check) && env.checks.load(Ordering::SeqCst) == n
        })
        .await;
        assert_eq!(run.state, RunState::Queued);
        assert_eq!(run.attempt, 0, "a wait gives its attempt back");
        assert!(run.lease_owner.is_none(), "the slot and lease are freed");
        assert_eq!(run.run_at, env.clock.now() + chrono::Duration::hours(1));
        assert_eq!(
            run.operation_id.as_deref(),
            Some(format!("export-{id}").as_str()),
            "the operation id is stored before the run suspends"
        );
        assert_eq!(env.executes.load(Ordering::SeqCst), 1);
        env.clock.advance(chrono::Duration::hours(1));
    }
    let run = wait_until(&env, &id, "completed", |r| r.state == RunState::Completed).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(run.attempt, 1);
    assert_eq!(env.executes.load(Ordering::SeqCst), 1, "executed once");
    assert_eq!(env.checks.load(Ordering::SeqCst), 3);
    assert_eq!(
        result_of(&env, &run).await,
        json!({"exported": format!("export-{id}")})
    );
    // One record per stage entered: the waits add no `resumed` and repeat no stage.
    let stages: Vec<&str> = run
        .stages
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["started", "exporting", "completed"]);
    assert_eq!(
        env.db
            .count(&format!("SELECT count(*) FROM inbox WHERE run_id = '{id}'")),
        1,
        "one final message"
    );
}

#[tokio::test]
async fn an_inline_async_call_waits_for_its_next_check_itself() {
    let executes = Arc::new(AtomicUsize::new(0));
    let checks = Arc::new(AtomicUsize::new(0));
    let tool = AsyncAdapter(Rare {
        later: Duration::from_millis(10),
        executes: executes.clone(),
        checks: checks.clone(),
    });
    let ctx = ToolContext {
        run_id: RunId::generate(),
        session_id: "s".into(),
        title: "rare".into(),
        args: json!({}),
        attempt: 1,
        sink: toolq::tool::RunSink::new(Default::default()),
        cancel: CancellationToken::new(),
        stop: Default::default(),
        operation_id: None,
        host: None,
        clock: Arc::new(ManualClock::new(t(START))),
        durable: toolq::tool::Durable::none(),
    };
    match tool.call(ctx).await {
        ToolOutcome::Success(s) => assert!(s.value["exported"].is_string(), "{:?}", s.value),
        o => panic!("{o:?}"),
    }
    assert_eq!(executes.load(Ordering::SeqCst), 1);
    assert_eq!(checks.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn await_event_returns_the_payload_or_times_out() {
    let env = env();
    let go = enqueue(&env, "await_event", json!({"event": "go", "timeout": "1h"})).await;
    let never = enqueue(&env, "await_event", json!({"event": "never"})).await;
    let (stop, worker) = start_worker(&env);

    let run = wait_until(&env, &go, "waiting for go", |r| waits(r, WaitKind::Event)).await;
    let w = run.waiting.unwrap();
    assert_eq!(w.event.as_deref(), Some("go"));
    assert_eq!(w.until, t(START) + chrono::Duration::hours(1));
    let run = wait_until(&env, &never, "waiting for never", |r| {
        waits(r, WaitKind::Event)
    })
    .await;
    assert_eq!(
        run.waiting.unwrap().until,
        t(START) + chrono::Duration::hours(24),
        "the default timeout is 24h"
    );

    let sent = env
        .client
        .signal(&go, "go", json!({"n": 1}), None)
        .await
        .unwrap();
    assert!(sent.woke);
    let run = wait_until(&env, &go, "completed", |r| r.state == RunState::Completed).await;
    assert_eq!(run.attempt, 1);
    assert_eq!(
        result_of(&env, &run).await,
        json!({"event": "go", "payload": {"n": 1}})
    );

    env.clock.advance(chrono::Duration::hours(24));
    let run = wait_until(&env, &never, "timed out", |r| r.state == RunState::Failed).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(
        run.error.as_deref(),
        Some("no event \"never\" arrived within 1d")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn await_event_refuses_bad_args() {
    let env = env();
    for args in [
        json!({}),
        json!({"event": ""}),
        json!({"event": "x".repeat(201)}),
        json!({"event": "go", "timeout": 60}),
        json!({"event": "go", "extra": 1}),
    ] {
        let e = env
            .client
            .enqueue(EnqueueRequest::new("await_event", args.clone()))
            .await;
        assert!(e.is_err(), "{args} was accepted");
    }
    // What the schema cannot see is the tool's error.
    let id = enqueue(
        &env,
        "await_event",
        json!({"event": "go", "timeout": "soon"}),
    )
    .await;
    let (stop, worker) = start_worker(&env);
    let run = wait_until(&env, &id, "failed", |r| r.state == RunState::Failed).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    let err = run.error.unwrap();
    assert!(err.contains("timeout \"soon\""), "{err}");
}
