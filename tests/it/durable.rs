//! Durable runs in a real worker loop: recorded steps replay without running again, a sleep
//! and an event wait free the slot and resume the same attempt, events are stored and the
//! first delivery wins, snoozes use no attempt, and a replay in another order is an error.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::{
    Client, EnqueueRequest, ManualClock, RegistryBuilder, RunId, RunState, Tool, ToolContext,
    ToolDef, ToolOutcome, WaitKind,
};

use crate::support::{t, wait_for};

/// Counts how often each step's closure ran.
#[derive(Default, Clone)]
struct Ran {
    a: Arc<AtomicUsize>,
    b: Arc<AtomicUsize>,
    c: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

/// step a, a durable sleep, step b, a wait for "go", step c; returns what it saw.
struct Journey(Ran);

#[async_trait]
impl Tool for Journey {
    fn definition(&self) -> ToolDef {
        ToolDef::new("journey", "steps and waits", json!({"type": "object"}))
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        let r = &self.0;
        let go = async {
            let a: u64 = ctx
                .step("a", async {
                    r.a.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(1)
                })
                .await?;
            ctx.sleep(Duration::from_secs(3600)).await?;
            let b: u64 = ctx
                .step("b", async {
                    r.b.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(2)
                })
                .await?;
            let payload = ctx.wait_for_event("go", Duration::from_secs(86400)).await?;
            let c: u64 = ctx
                .step("c", async {
                    r.c.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(3)
                })
                .await?;
            Ok::<_, toolq::StepError>(json!({"sum": a + b + c, "payload": payload}))
        };
        match go.await {
            Ok(v) => ToolOutcome::ok(v),
            Err(e) => e.into(),
        }
    }
}

/// Snoozes until its third call, then completes.
struct Poller(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Poller {
    fn definition(&self) -> ToolDef {
        ToolDef::new("poller", "polls until ready", json!({"type": "object"}))
    }

    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        if self.0.fetch_add(1, Ordering::SeqCst) < 2 {
            return ToolOutcome::snooze(Duration::from_secs(60));
        }
        ToolOutcome::ok(json!("ready"))
    }
}

/// Asks for steps in the order its args say.
struct Reorders;

#[async_trait]
impl Tool for Reorders {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "reorders",
            "changes its step order",
            json!({"type": "object"}),
        )
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let first = if ctx.attempt == 1 { "x" } else { "y" };
        let go = async {
            ctx.step(first, async { Ok::<_, String>(1) }).await?;
            if ctx.attempt == 1 {
                return Err(toolq::StepError::Store("fail the first attempt".into()));
            }
            Ok(json!(1))
        };
        match go.await {
            Ok(v) => ToolOutcome::ok(v),
            Err(e) => e.into(),
        }
    }
}

struct Env {
    _dir: tempfile::TempDir,
    db: crate::support::TestDb,
    clock: ManualClock,
    client: Client,
    ran: Ran,
    polls: Arc<AtomicUsize>,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let mut config = db.config();
    config.worker.poll_interval = Duration::from_millis(20);
    config.worker.heartbeat_interval = Duration::from_millis(100);
    config.worker.flush_interval = Duration::from_millis(50);
    config.runs.max_snoozes = 5;
    let ran = Ran::default();
    let polls = Arc::new(AtomicUsize::new(0));
    let registry = RegistryBuilder::new()
        .with_builtins()
        .tool(Journey(ran.clone()))
        .tool(Poller(polls.clone()))
        .tool(Reorders)
        .build()
        .unwrap();
    let clock = ManualClock::new(t("2026-11-01T12:00:00Z"));
    let client = Client::open_with_clock(config, registry, Arc::new(clock.clone())).unwrap();
    Env {
        _dir: dir,
        db,
        clock,
        client,
        ran,
        polls,
    }
}

async fn enqueue(env: &Env, tool: &str) -> RunId {
    env.client
        .enqueue(EnqueueRequest::new(tool, json!({})))
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
            "{} attempt {} waiting {:?} error {:?}",
            r.state, r.attempt, r.waiting, r.error
        );
        (f(&r).then_some(r), seen)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_replay_and_waits_free_the_slot_then_resume_the_same_attempt() {
    let env = env();
    let id = enqueue(&env, "journey").await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));

    let run = wait_until(&env, &id, "asleep", |r| {
        r.waiting
            .as_ref()
            .is_some_and(|w| w.kind == WaitKind::Sleep)
    })
    .await;
    assert_eq!(run.state, RunState::Queued);
    assert_eq!(run.attempt, 0, "a suspension gives its attempt back");
    assert!(run.lease_owner.is_none());
    assert_eq!(run.run_at, t("2026-11-01T13:00:00Z"));
    let journal = env.client.journal(&id).await.unwrap();
    let names: Vec<(&str, &str)> = journal
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.status.as_str()))
        .collect();
    assert_eq!(names, [("a", "done"), ("sleep#1", "waiting")]);

    // An event sent before the run waits for it is kept for its wait.
    let early = env
        .client
        .signal(&id, "go", json!({"x": 1}), Some("test".into()))
        .await
        .unwrap();
    assert!(!early.woke);
    let again = env
        .client
        .signal(&id, "go", json!(2), None)
        .await
        .unwrap_err();
    assert!(
        again.to_string().contains("already sent") && again.to_string().contains("by test"),
        "{again}"
    );

    env.clock.advance(chrono::Duration::hours(1));
    let run = wait_until(&env, &id, "completed", |r| r.state == RunState::Completed).await;
    stop.cancel();
    worker.await.unwrap().unwrap();

    assert_eq!(run.attempt, 1, "waits used no attempt");
    assert_eq!(env.ran.a.load(Ordering::SeqCst), 1, "step a ran once");
    assert_eq!(env.ran.b.load(Ordering::SeqCst), 1);
    assert_eq!(env.ran.c.load(Ordering::SeqCst), 1);
    assert_eq!(
        env.ran.calls.load(Ordering::SeqCst),
        2,
        "invoked once per wake"
    );
    let result: Value =
        serde_json::from_slice(&env.client.result(&run).await.unwrap().unwrap().content).unwrap();
    assert_eq!(result["result"], json!({"sum": 6, "payload": {"x": 1}}));
    let journal = env.client.journal(&id).await.unwrap();
    let names: Vec<(&str, &str)> = journal
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.status.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("a", "done"),
            ("sleep#1", "done"),
            ("b", "done"),
            ("event:go", "done"),
            ("c", "done")
        ]
    );
    assert!(journal.events[0].consumed_at.is_some());
    assert_eq!(
        env.db
            .count(&format!("SELECT count(*) FROM inbox WHERE run_id = '{id}'")),
        1,
        "one final message"
    );
    let err = env
        .client
        .signal(&id, "late", json!(null), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("already completed"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_wakes_a_waiting_run_at_once() {
    let env = env();
    let id = enqueue(&env, "journey").await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    wait_until(&env, &id, "asleep", |r| r.waiting.is_some()).await;
    env.clock.advance(chrono::Duration::hours(1));
    let run = wait_until(&env, &id, "waiting for go", |r| {
        r.waiting
            .as_ref()
            .is_some_and(|w| w.kind == WaitKind::Event)
    })
    .await;
    let w = run.waiting.unwrap();
    assert_eq!(w.event.as_deref(), Some("go"));
    assert_eq!(w.until, t("2026-11-02T13:00:00Z"));
    assert_eq!(
        env.db
            .count("SELECT count(*) FROM waiting_runs WHERE wait_kind = 'event'"),
        1
    );
    let sent = env
        .client
        .signal(&id, "go", json!("now"), None)
        .await
        .unwrap();
    assert!(sent.woke);
    let run = wait_until(&env, &id, "completed", |r| r.state == RunState::Completed).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(run.attempt, 1);
    assert_eq!(env.ran.b.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snoozes_use_no_attempt_and_are_counted() {
    let env = env();
    let id = enqueue(&env, "poller").await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    for n in 1..=2 {
        let run = wait_until(&env, &id, "snoozed", |r| {
            r.snoozes == n && r.waiting.is_some()
        })
        .await;
        assert_eq!(run.waiting.unwrap().kind, WaitKind::Snooze);
        env.clock.advance(chrono::Duration::seconds(60));
    }
    let run = wait_until(&env, &id, "completed", |r| r.state == RunState::Completed).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!((run.attempt, run.snoozes), (1, 2));
    assert_eq!(env.polls.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_in_another_order_fails_naming_both_steps() {
    let env = env();
    let id = enqueue(&env, "reorders").await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    wait_until(&env, &id, "retry", |r| {
        r.state == RunState::Queued && r.attempt == 1
    })
    .await;
    env.clock.advance(chrono::Duration::seconds(60));
    let run = wait_until(&env, &id, "failed", |r| r.state == RunState::Failed).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    let err = run.error.unwrap();
    assert!(
        err.contains("\"x\"") && err.contains("\"y\"") && err.contains("order"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_run_can_be_cancelled_and_then_takes_no_event() {
    let env = env();
    let id = enqueue(&env, "journey").await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    wait_until(&env, &id, "asleep", |r| r.waiting.is_some()).await;
    assert_eq!(env.client.cancel(&id).await.unwrap(), RunState::Cancelled);
    let run = env.client.get(&id).await.unwrap();
    assert!(run.waiting.is_none());
    assert_eq!(run.attempt, 1, "the cancel is the attempt's end");
    let err = env
        .client
        .signal(&id, "go", json!(1), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("already cancelled"), "{err}");
    env.clock.advance(chrono::Duration::hours(2));
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(
        env.ran.b.load(Ordering::SeqCst),
        0,
        "a cancelled run never resumes"
    );
    assert_eq!(
        env.db
            .count(&format!("SELECT count(*) FROM inbox WHERE run_id = '{id}'")),
        1
    );
    assert_eq!(
        env.db.count(&format!(
            "SELECT count(*) FROM runs WHERE id = '{id}' AND wait_kind IS NULL"
        )),
        1
    );
}

/// Sleeps durably for 300 ms, then completes.
struct Napper;

#[async_trait]
impl Tool for Napper {
    fn definition(&self) -> ToolDef {
        ToolDef::new("napper", "a short durable sleep", json!({"type": "object"}))
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        match ctx.sleep(Duration::from_millis(300)).await {
            Ok(()) => ToolOutcome::ok(json!("rested")),
            Err(e) => e.into(),
        }
    }
}

/// Waits an hour for an event that never comes.
struct Waiter;

#[async_trait]
impl Tool for Waiter {
    fn definition(&self) -> ToolDef {
        ToolDef::new("waiter", "waits for an event", json!({"type": "object"}))
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        match ctx.wait_for_event("never", Duration::from_secs(3600)).await {
            Ok(p) => ToolOutcome::ok(json!(p)),
            Err(e) => e.into(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_waits_for_runs_that_sleep_but_not_for_event_waits() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let mut config = db.config();
    config.worker.poll_interval = Duration::from_millis(20);
    let registry = RegistryBuilder::new()
        .with_builtins()
        .tool(Napper)
        .tool(Waiter)
        .build()
        .unwrap();
    let client = Client::open(config, registry).unwrap();
    let mut ids = Vec::new();
    for tool in ["napper", "waiter"] {
        let r = client.enqueue(EnqueueRequest::new(tool, json!({}))).await;
        ids.push(r.unwrap().run_id);
    }
    let w = client.worker(toolq::WorkerOptions { drain: true });
    tokio::time::timeout(Duration::from_secs(30), w.run(Default::default()))
        .await
        .expect("the drain ends")
        .unwrap();
    let napper = client.get(&ids[0]).await.unwrap();
    assert_eq!(
        napper.state,
        RunState::Completed,
        "the drain waited for the sleep"
    );
    let waiter = client.get(&ids[1]).await.unwrap();
    assert_eq!(waiter.state, RunState::Queued);
    assert_eq!(waiter.waiting.unwrap().kind, WaitKind::Event);
}
