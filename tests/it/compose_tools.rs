//! Composition from inside a tool: `ctx.spawn_child` and `ctx.wait_children` give fan-out and
//! fan-in (the parent holds no slot while it waits, a replay never spawns twice, a child's
//! failure is in the results; and with real processes, workers of `examples/fan_out` killed
//! with SIGKILL while parents spawn and wait never leave a child spawned twice),
//! `ctx.parent_results()` in a Rust tool and `TOOLQ_PARENT_RESULTS` in a command tool, and
//! spawn_background inside a run records the run as the new run's parent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::core::{BatchRequest, OnComplete};
use toolq::inbox::InboxFilter;
use toolq::tool::command::CommandToolConfig;
use toolq::tool::{ExecContext, ToolExecutionOutcome, ToolHints, ToolPolicy, ToolRequest};
use toolq::{
    Client, EnqueueRequest, ManualClock, RegistryBuilder, RunId, RunState, StepError, Tool,
    ToolContext, ToolDef, ToolOutcome, WaitKind,
};

use crate::support::{TestDb, t, wait_for};

/// Squares `n`; fails (a tool error, not retried) when `n` is 13.
struct Square;

#[async_trait]
impl Tool for Square {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "square",
            "squares n",
            json!({"type": "object", "properties": {"n": {"type": "integer"}},
                   "required": ["n"]}),
        )
        .hints(ToolHints::default().with_supports_background(true))
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let n = ctx.args["n"].as_i64().unwrap_or_default();
        if n == 13 {
            return ToolOutcome::tool_error("13 is unlucky");
        }
        ToolOutcome::ok(json!({"square": n * n}))
    }
}

/// Waits for an operator's approval (a child that does not end on its own).
struct Gated;

#[async_trait]
impl Tool for Gated {
    fn definition(&self) -> ToolDef {
        ToolDef::new("gated", "needs approval", json!({"type": "object"}))
            .policy(ToolPolicy::RequiresApproval)
    }

    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        ToolOutcome::ok(json!("approved"))
    }
}

/// Spawns `square` for each of `ns`, waits for them and sums their squares. With `fail_first`
/// its first attempt fails internally after spawning (retried); with `timeout_s` it waits at
/// most that long; `child` names another child tool; `bad` spawns with args the child's
/// schema refuses.
struct FanOut {
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for FanOut {
    fn definition(&self) -> ToolDef {
        ToolDef::new("fan_out", "fan-out and fan-in", json!({"type": "object"}))
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let go = async {
            let child = ctx.args["child"].as_str().unwrap_or("square");
            let mut ids = Vec::new();
            for n in ctx.args["ns"].as_array().cloned().unwrap_or_default() {
                let args = if ctx.args["bad"] == json!(true) {
                    json!({"n": "not a number"})
                } else {
                    json!({"n": n})
                };
                ids.push(ctx.spawn_child(child, args).await?);
            }
            if ctx.args["fail_first"] == json!(true) && ctx.attempt == 1 {
                return Err(StepError::Store("the worker trips after spawning".into()));
            }
            let children = match ctx.args["timeout_s"].as_u64() {
                Some(s) => ctx.wait_children_for(Duration::from_secs(s)).await?,
                None => ctx.wait_children().await?,
            };
            let sum: i64 = children
                .iter()
                .filter_map(|c| c.result["result"]["square"].as_i64())
                .sum();
            let failed: Vec<Value> = children
                .iter()
                .filter(|c| c.state != "completed")
                .map(|c| json!({"id": c.id, "state": c.state, "error": c.error}))
                .collect();
            Ok::<_, StepError>(json!({"sum": sum, "spawned": ids, "not_completed": failed}))
        };
        match go.await {
            Ok(v) => ToolOutcome::ok(v),
            Err(e) => e.into(),
        }
    }
}

/// Returns what `ctx.parent_results()` gives.
struct ReadsParents;

#[async_trait]
impl Tool for ReadsParents {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "reads_parents",
            "reads its parents",
            json!({"type": "object"}),
        )
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        match ctx.parent_results().await {
            Ok(p) => ToolOutcome::ok(json!({ "parents": p })),
            Err(e) => e.into(),
        }
    }
}

/// A command tool that reports the path in `TOOLQ_PARENT_RESULTS` and the file's content.
fn cat_parents() -> CommandToolConfig {
    let script = r#"f="${TOOLQ_PARENT_RESULTS:-}"
if [ -z "$f" ]; then echo '::toolq::result {"file": null}'; exit 0; fi
printf '::toolq::result {"file": "%s", "parents": %s}\n' "$f" "$(cat "$f")""#;
    CommandToolConfig {
        name: "cat_parents".into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
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

struct Env {
    _dir: tempfile::TempDir,
    db: TestDb,
    clock: ManualClock,
    client: Client,
    calls: Arc<AtomicUsize>,
}

fn env(concurrency: usize) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    let mut config = db.config();
    config.worker.poll_interval = Duration::from_millis(20);
    config.worker.heartbeat_interval = Duration::from_millis(100);
    config.worker.flush_interval = Duration::from_millis(50);
    config.worker.concurrency = concurrency;
    config.tools.insert("cat_parents".into(), cat_parents());
    let calls = Arc::new(AtomicUsize::new(0));
    let registry = RegistryBuilder::new()
        .with_builtins()
        .with_config_tools(&config)
        .unwrap()
        .tool(Square)
        .tool(Gated)
        .tool(FanOut {
            calls: calls.clone(),
        })
        .tool(ReadsParents)
        .build()
        .unwrap();
    let clock = ManualClock::new(t("2026-11-01T12:00:00Z"));
    let client = Client::open_with_clock(config, registry, Arc::new(clock.clone())).unwrap();
    Env {
        _dir: dir,
        db,
        clock,
        client,
        calls,
    }
}

impl Env {
    async fn enqueue(&self, tool: &str, args: Value) -> RunId {
        self.enqueue_req(EnqueueRequest::new(tool, args).session("s"))
            .await
    }

    async fn enqueue_req(&self, req: EnqueueRequest) -> RunId {
        self.client.enqueue(req).await.unwrap().run_id
    }

    async fn drain(&self) {
        let w = self.client.worker(toolq::WorkerOptions { drain: true });
        tokio::time::timeout(Duration::from_secs(60), w.run(Default::default()))
            .await
            .expect("drain finished in time")
            .unwrap();
    }

    async fn result(&self, id: &RunId) -> Value {
        let run = self.client.get(id).await.unwrap();
        assert_eq!(run.state, RunState::Completed, "{run:?}");
        let blob = self.client.result(&run).await.unwrap().unwrap();
        serde_json::from_slice::<Value>(&blob.content).unwrap()["result"].clone()
    }

    async fn wait_until(
        &self,
        id: &RunId,
        what: &str,
        f: impl Fn(&toolq::Run) -> bool,
    ) -> toolq::Run {
        wait_for(what, async || {
            let r = self.client.get(id).await.unwrap();
            let seen = format!(
                "{} attempt {} waiting {:?} error {:?}",
                r.state, r.attempt, r.waiting, r.error
            );
            (f(&r).then_some(r), seen)
        })
        .await
    }

    fn children_of(&self, id: &RunId) -> i64 {
        self.db.count(&format!(
            "SELECT count(*) FROM runs WHERE parent_run_id = '{id}'"
        ))
    }

    /// The run's steps as (name, kind, status).
    async fn steps(&self, id: &RunId) -> Vec<(String, String, String)> {
        self.client
            .journal(id)
            .await
            .unwrap()
            .steps
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    s.kind.as_str().to_string(),
                    s.status.as_str().to_string(),
                )
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_fan_in_with_one_slot_the_parent_waits_without_holding_it() {
    // One slot: if the waiting parent held it, its children could never run.
    let env = env(1);
    let ns: Vec<i64> = (1..=10).collect();
    let parent = env.enqueue("fan_out", json!({ "ns": ns })).await;
    env.drain().await;

    let out = env.result(&parent).await;
    assert_eq!(out["sum"], json!(385), "{out}");
    assert_eq!(out["not_completed"], json!([]));
    let run = env.client.get(&parent).await.unwrap();
    assert_eq!(run.attempt, 1, "the wait used no attempt");
    assert_eq!(
        env.calls.load(Ordering::SeqCst),
        2,
        "invoked to spawn, and again once the children ended"
    );
    assert_eq!(env.children_of(&parent), 10);

    // Each spawn is a recorded step; the wait's answer is recorded as kind children.
    let steps = env.steps(&parent).await;
    assert_eq!(steps.len(), 11, "{steps:?}");
    for (i, (name, kind, status)) in steps.iter().take(10).enumerate() {
        assert_eq!(
            (name.as_str(), kind.as_str(), status.as_str()),
            (format!("spawn#{}", i + 1).as_str(), "step", "done")
        );
    }
    assert_eq!(
        steps[10],
        ("children#1".into(), "children".into(), "done".into())
    );
    // The ids the parent got are its children, each keyed by its spawn.
    let spawned: Vec<String> = serde_json::from_value(out["spawned"].clone()).unwrap();
    for (i, id) in spawned.iter().enumerate() {
        let id: RunId = id.parse().unwrap();
        let child = env.client.get(&id).await.unwrap();
        assert_eq!(child.parent_run_id.as_ref(), Some(&parent));
        assert_eq!(child.session_id, "s");
        assert_eq!(
            child.idempotency_key.as_deref(),
            Some(format!("toolq:{parent}:spawn:{}", i + 1).as_str())
        );
    }
    let links = env.client.links(&parent).await.unwrap();
    assert_eq!(links.children.len(), 10);
    // The children post nothing: the session hears once, from the parent.
    let msgs = env
        .client
        .inbox(
            "s",
            InboxFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].run_id.as_deref(), Some(parent.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_parent_is_suspended_for_its_children_until_the_last_one_ends() {
    let env = env(4);
    let parent = env
        .enqueue("fan_out", json!({"ns": [1, 2], "child": "gated"}))
        .await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    let run = env
        .wait_until(&parent, "waiting for children", |r| r.waiting.is_some())
        .await;
    let w = run.waiting.unwrap();
    assert_eq!(w.kind, WaitKind::Children);
    assert_eq!(w.describe(), "its children to end");
    assert_eq!(run.state, RunState::Queued);
    assert!(run.lease_owner.is_none(), "it holds no slot");
    let links = env.client.links(&parent).await.unwrap();
    let kids: Vec<RunId> = links
        .children
        .iter()
        .map(|c| c.id.parse().unwrap())
        .collect();
    assert_eq!(kids.len(), 2);

    // One child ends: the parent still waits.
    env.client.approve(&kids[0], "op", None).await.unwrap();
    env.wait_until(&kids[0], "first child done", |r| {
        r.state == RunState::Completed
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let run = env.client.get(&parent).await.unwrap();
    assert!(run.waiting.is_some(), "{run:?}");
    assert_eq!(env.calls.load(Ordering::SeqCst), 1);

    // The last one ends: the parent resumes in the same transaction's wake.
    env.client.approve(&kids[1], "op", None).await.unwrap();
    let run = env
        .wait_until(&parent, "parent completed", |r| {
            r.state == RunState::Completed
        })
        .await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(run.attempt, 1);
    assert_eq!(env.calls.load(Ordering::SeqCst), 2);
    let out = env.result(&parent).await;
    assert_eq!(out["not_completed"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_with_a_timeout_returns_the_children_as_they_stand() {
    let env = env(2);
    let parent = env
        .enqueue(
            "fan_out",
            json!({"ns": [1], "child": "gated", "timeout_s": 3600}),
        )
        .await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    let run = env
        .wait_until(&parent, "waiting for children", |r| r.waiting.is_some())
        .await;
    assert_eq!(run.run_at, t("2026-11-01T13:00:00Z"));
    env.clock.advance(chrono::Duration::hours(1));
    env.wait_until(&parent, "parent completed", |r| {
        r.state == RunState::Completed
    })
    .await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    let out = env.result(&parent).await;
    assert_eq!(out["not_completed"][0]["state"], json!("awaiting_approval"));
    assert_eq!(out["sum"], json!(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_never_spawns_twice_even_when_the_spawn_was_not_recorded() {
    let env = env(2);
    let parent = env
        .enqueue("fan_out", json!({"ns": [1, 2], "fail_first": true}))
        .await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    // The first attempt spawned both children, then failed: it waits for its retry.
    env.wait_until(&parent, "failed once", |r| {
        r.state == RunState::Queued && r.error.is_some()
    })
    .await;
    assert_eq!(env.children_of(&parent), 2);
    // As if the worker had died between the first child's insert and its record: the
    // retry runs that spawn again, and its key gives back the same child.
    env.db.exec(&format!(
        "DELETE FROM step_records WHERE run_id = '{parent}' AND name = 'spawn#1'"
    ));
    env.clock.advance(chrono::Duration::minutes(1));
    env.wait_until(&parent, "parent completed", |r| {
        r.state == RunState::Completed
    })
    .await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(env.children_of(&parent), 2, "no child was spawned twice");
    let out = env.result(&parent).await;
    assert_eq!(out["sum"], json!(5));
    let spawned: Vec<String> = serde_json::from_value(out["spawned"].clone()).unwrap();
    let mut ids: Vec<String> = env.db.column(&format!(
        "SELECT id FROM runs WHERE parent_run_id = '{parent}' ORDER BY id"
    ));
    ids.sort();
    let mut got = spawned.clone();
    got.sort();
    assert_eq!(got, ids);
    assert_eq!(env.calls.load(Ordering::SeqCst), 2);
    let steps = env.steps(&parent).await;
    let names: Vec<&str> = steps.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names, ["spawn#1", "spawn#2", "children#1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_child_is_reported_in_the_results() {
    let env = env(2);
    let parent = env.enqueue("fan_out", json!({"ns": [2, 13, 3]})).await;
    env.drain().await;
    let out = env.result(&parent).await;
    assert_eq!(out["sum"], json!(13));
    let failed = out["not_completed"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{out}");
    assert_eq!(failed[0]["state"], json!("failed"));
    assert_eq!(failed[0]["error"], json!("13 is unlucky"));
    // The parent reports; its children's ends post nothing.
    let msgs = env
        .client
        .inbox(
            "s",
            InboxFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let kinds: Vec<(&str, &str)> = msgs
        .iter()
        .map(|m| (m.kind.as_str(), m.delivery.as_str()))
        .collect();
    assert_eq!(kinds, [("completed", "when_idle")]);
    assert_eq!(msgs[0].run_id.as_deref(), Some(parent.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_spawn_names_the_tool_and_writes_nothing() {
    let env = env(2);
    let bad = env
        .enqueue("fan_out", json!({"ns": [1], "bad": true}))
        .await;
    let unknown = env
        .enqueue("fan_out", json!({"ns": [1], "child": "nope"}))
        .await;
    env.drain().await;
    for (id, tool) in [(&bad, "square"), (&unknown, "nope")] {
        let run = env.client.get(id).await.unwrap();
        assert_eq!(run.state, RunState::Failed, "{run:?}");
        let e = run.error.unwrap_or_default();
        assert!(
            e.contains(&format!("spawn_child({tool:?}) was refused")),
            "{e}"
        );
        assert_eq!(run.attempt, 1, "not retried");
        assert_eq!(env.children_of(id), 0);
        assert!(env.steps(id).await.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_results_in_a_rust_tool_and_a_batch_callback() {
    let env = env(2);
    let a = env.enqueue("square", json!({"n": 4})).await;
    let b = env.enqueue("square", json!({"n": 5})).await;
    let child = env
        .enqueue_req(
            EnqueueRequest::new("reads_parents", json!({}))
                .session("s")
                .after([a.clone(), b.clone()]),
        )
        .await;
    let lonely = env.enqueue("reads_parents", json!({})).await;
    let batch = env
        .client
        .create_batch(
            BatchRequest {
                session: "s".into(),
                title: Some("squares".into()),
                on_complete: Some(OnComplete {
                    tool: "reads_parents".into(),
                    args: json!({}),
                }),
            },
            vec![EnqueueRequest::new("square", json!({"n": 1})).session("s")],
        )
        .await
        .unwrap();
    env.drain().await;

    let out = env.result(&child).await;
    let parents = out["parents"].as_array().unwrap();
    assert_eq!(parents.len(), 2);
    let mut want = [a.to_string(), b.to_string()];
    want.sort();
    assert_eq!(parents[0]["id"], json!(want[0]));
    assert_eq!(parents[1]["id"], json!(want[1]));
    let squares: Vec<i64> = parents
        .iter()
        .map(|p| p["result"]["result"]["square"].as_i64().unwrap())
        .collect();
    assert_eq!(squares.iter().sum::<i64>(), 41);
    assert!(parents.iter().all(|p| p["state"] == "completed"));
    assert_eq!(env.result(&lonely).await["parents"], json!([]));

    let b = env.client.batch(&batch.batch_id).await.unwrap();
    let cb: RunId = b.callback_run_id.unwrap().parse().unwrap();
    let out = env.result(&cb).await;
    let summary = &out["parents"][0];
    assert_eq!(summary["id"], json!(batch.batch_id.as_str()));
    assert_eq!(summary["result"]["completed"], json!(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_tool_reads_its_parent_results_from_the_file_in_its_env() {
    let env = env(2);
    let a = env.enqueue("square", json!({"n": 7})).await;
    let child = env
        .enqueue_req(
            EnqueueRequest::new("cat_parents", json!({}))
                .session("s")
                .after([a.clone()]),
        )
        .await;
    let lonely = env.enqueue("cat_parents", json!({})).await;
    env.drain().await;

    let out = env.result(&child).await;
    assert_eq!(out["parents"][0]["id"], json!(a.as_str()));
    assert_eq!(out["parents"][0]["tool"], json!("square"));
    assert_eq!(out["parents"][0]["state"], json!("completed"));
    assert_eq!(out["parents"][0]["result"]["result"]["square"], json!(49));
    let file = out["file"].as_str().unwrap();
    assert!(file.contains(child.as_str()), "{file}");
    assert!(
        !std::path::Path::new(file).exists(),
        "removed once the command exited"
    );
    assert_eq!(
        env.result(&lonely).await["file"],
        Value::Null,
        "no parents, no variable"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_background_inside_a_run_records_the_run_as_parent() {
    let env = env(2);
    let caller = env
        .enqueue(
            "spawn_background",
            json!({"tool": "square", "args": {"n": 6}}),
        )
        .await;
    env.drain().await;
    let ack = env.result(&caller).await;
    assert_eq!(ack["status"], json!("running"), "the seed's reply: {ack}");
    let started: RunId = ack["run_id"].as_str().unwrap().parse().unwrap();
    let run = env.client.get(&started).await.unwrap();
    assert_eq!(run.parent_run_id.as_ref(), Some(&caller));
    assert_eq!(run.state, RunState::Completed);
    assert!(run.background, "still a background run");
    let links = env.client.links(&caller).await.unwrap();
    assert_eq!(links.children.len(), 1);
    assert_eq!(links.children[0].id, started.as_str());
    // Still one message for the background run, as before.
    let n = env.db.count(&format!(
        "SELECT count(*) FROM inbox WHERE run_id = '{started}'"
    ));
    assert_eq!(n, 1);

    // An inline call has no run: the background run it starts has no parent.
    let ex = env.client.executor();
    let args = json!({"tool": "square", "args": {"n": 2}});
    let ToolExecutionOutcome::Completed(ToolOutcome::Success(s)) = ex
        .execute(
            ToolRequest::new("c1", "spawn_background", args),
            &ExecContext::new("s"),
        )
        .await
    else {
        panic!("spawn_background inline should succeed");
    };
    let id: RunId = s.value["run_id"].as_str().unwrap().parse().unwrap();
    assert!(env.client.get(&id).await.unwrap().parent_run_id.is_none());
}

#[tokio::test]
async fn without_a_queued_run_spawning_and_waiting_are_refused_and_there_are_no_parents() {
    let env = env(1);
    let ctx = ToolContext {
        run_id: RunId::generate(),
        session_id: "s".into(),
        title: "inline".into(),
        args: json!({}),
        attempt: 1,
        sink: toolq::RunSink::new(Default::default()),
        cancel: CancellationToken::new(),
        stop: Default::default(),
        operation_id: None,
        host: Some(Arc::new(env.client.core().clone())),
        clock: Arc::new(env.clock.clone()),
        durable: toolq::tool::Durable::none(),
    };
    let e = ctx
        .spawn_child("square", json!({"n": 1}))
        .await
        .unwrap_err();
    assert!(matches!(e, StepError::NoRun(_)), "{e}");
    assert!(e.to_string().contains("spawn_child(\"square\")"), "{e}");
    let e = ctx.wait_children().await.unwrap_err();
    assert!(e.to_string().contains("wait_children()"), "{e}");
    assert!(ctx.parent_results().await.unwrap().is_empty());
    assert_eq!(env.db.count("SELECT count(*) FROM runs"), 0);
}

/// A worker of `examples/fan_out` with two slots, its log in `dir`.
fn fan_out_worker(
    bin: &std::path::Path,
    db: &TestDb,
    dir: &std::path::Path,
) -> std::process::Child {
    let log =
        std::fs::File::create(dir.join(format!("worker-{}.log", rand::random::<u64>()))).unwrap();
    std::process::Command::new(bin)
        .arg("worker")
        .arg(db)
        .arg("2")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the worker starts")
}

#[test]
fn kill_9_while_parents_spawn_and_wait_never_spawns_a_child_twice() {
    const KILLS: usize = 30;
    const CHILDREN: i64 = 6;
    let bin = crate::examples::example("fan_out");
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    let enqueue = || -> Vec<String> {
        let out = std::process::Command::new(&bin)
            .arg("enqueue")
            .arg(&db)
            .arg("4")
            .arg(CHILDREN.to_string())
            .arg("30")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let mut parents = enqueue();
    let mut worker = fan_out_worker(&bin, &db, dir.path());
    for _ in 0..KILLS {
        let unfinished = db.count(
            "SELECT count(*) FROM runs WHERE state IN ('queued', 'running', 'awaiting_approval')",
        );
        if unfinished == 0 {
            parents.extend(enqueue());
        }
        let pid = worker.id();
        let registered = std::time::Instant::now() + Duration::from_secs(20);
        while db.count(&format!("SELECT count(*) FROM workers WHERE pid = {pid}")) == 0 {
            assert!(
                std::time::Instant::now() < registered,
                "worker {pid} never registered"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(rand::random_range(0..=300u64)));
        // Often while a parent is between spawns: the next worker takes it back and replays.
        worker.kill().unwrap();
        worker.wait().unwrap();
        worker = fan_out_worker(&bin, &db, dir.path());
    }
    // The last worker lives until every run has ended.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while db.count(
        "SELECT count(*) FROM runs WHERE state IN ('queued', 'running', 'awaiting_approval')",
    ) > 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "runs still unfinished: {:?}",
            db.rows(
                "SELECT id, tool, state, wait_kind, run_at FROM runs WHERE state != 'completed'"
            )
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    worker.kill().unwrap();
    worker.wait().unwrap();

    let rescued = db.count("SELECT count(*) FROM runs WHERE tool = 'fan_out' AND attempt > 1");
    eprintln!(
        "{} parents, {rescued} of them attempted again after a kill",
        parents.len()
    );
    let want: i64 = (1..=CHILDREN).map(|n| n * n).sum();
    for p in &parents {
        let state = db.text(&format!("SELECT state FROM runs WHERE id = '{p}'"));
        assert_eq!(state.as_deref(), Some("completed"), "parent {p}");
        let kids = db.count(&format!(
            "SELECT count(*) FROM runs WHERE parent_run_id = '{p}'"
        ));
        assert_eq!(kids, CHILDREN, "parent {p} spawned each child exactly once");
        let result = db
            .text(&format!(
                "SELECT {} FROM blobs WHERE path = '/.background/{p}/result.json'",
                db.blob_as_text("content")
            ))
            .unwrap();
        let result: Value = serde_json::from_str(&result).unwrap();
        assert_eq!(result["result"]["sum"], json!(want), "{result}");
        assert_eq!(result["result"]["failed"], json!(0), "{result}");
    }
    assert_eq!(
        db.count("SELECT count(*) FROM runs WHERE tool = 'square' AND state != 'completed'"),
        0
    );
    // One message per parent; the children post none.
    assert_eq!(
        db.count("SELECT count(*) FROM inbox"),
        parents.len() as i64,
        "{:?}",
        db.rows("SELECT run_id, kind FROM inbox")
    );
}
