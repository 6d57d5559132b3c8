//! Inline execution for agent hosts: specs, inline calls, approval interrupts, Background-mode
//! tools queued with their formatter and scheduling, and delivery by mode.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolq::client::SessionActivity;
use toolq::inbox::{InboxFilter, NewMessage};
use toolq::tool::{
    Acknowledgement, ExecContext, FunctionResponseScheduling, ResultFormatter, ToolExecutionMode,
    ToolExecutionOutcome, ToolHints, ToolPolicy, ToolRequest,
};
use toolq::{
    Client, Config, ManualClock, RegistryBuilder, RunState, Tool, ToolContext, ToolDef, ToolOutcome,
};

use crate::support::t;

/// Needs approval by policy.
struct Deploy;
#[async_trait]
impl Tool for Deploy {
    fn definition(&self) -> ToolDef {
        ToolDef::new("deploy", "deploys", json!({"type": "object"}))
            .policy(ToolPolicy::RequiresApproval)
            .hints(ToolHints::default().with_supports_background(true))
    }
    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        ToolOutcome::ok(json!({"deployed": ctx.args}))
    }
}

/// Panics inline.
struct Boom;
#[async_trait]
impl Tool for Boom {
    fn definition(&self) -> ToolDef {
        ToolDef::new("boom", "panics", json!({"type": "object"}))
    }
    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        panic!("boom inline");
    }
}

/// Shapes everything a session sees of `report`.
struct Shout;
impl ResultFormatter for Shout {
    fn acknowledgement(&self, ack: &Acknowledgement) -> Value {
        json!({"started": ack.run_id, "status": "running"})
    }
    fn result(&self, draft: &NewMessage) -> String {
        format!("REPORT {}", draft.kind.to_uppercase())
    }
    fn cancellation(&self, _draft: &NewMessage) -> String {
        "REPORT CANCELLED".into()
    }
}

struct Host {
    _dir: tempfile::TempDir,
    db: crate::support::TestDb,
    client: Client,
}

fn host(config: impl FnOnce(&mut Config)) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let mut c = db.config();
    c.worker.poll_interval = Duration::from_millis(20);
    config(&mut c);
    let registry = RegistryBuilder::new()
        .with_builtins()
        .tool(Deploy)
        .tool(Boom)
        .tool(crate::support::Counter(Default::default()))
        .mode(
            "counter",
            ToolExecutionMode::Background {
                formatter: Some(Arc::new(Shout)),
                scheduling: Some(FunctionResponseScheduling::Interrupt),
            },
        )
        .mode(
            "deploy",
            ToolExecutionMode::background(FunctionResponseScheduling::Silent),
        )
        .build()
        .unwrap();
    let clock = ManualClock::new(t("2026-11-01T12:00:00Z"));
    let client = Client::open_with_clock(c, registry, Arc::new(clock)).unwrap();
    Host {
        _dir: dir,
        db,
        client,
    }
}

impl Host {
    fn count(&self, sql: &str) -> i64 {
        self.db.count(sql)
    }
    async fn drain(&self) {
        let w = self.client.worker(toolq::WorkerOptions { drain: true });
        tokio::time::timeout(Duration::from_secs(60), w.run(Default::default()))
            .await
            .unwrap()
            .unwrap();
    }
}

fn completed(o: ToolExecutionOutcome) -> ToolOutcome {
    match o {
        ToolExecutionOutcome::Completed(o) => o,
        other => panic!("expected Completed, got {other:?}"),
    }
}

#[tokio::test]
async fn standard_tools_run_inline_and_convert_for_the_host() {
    let h = host(|_| {});
    let ex = h.client.executor();
    let specs = ex.specs();
    assert_eq!(specs.len(), h.client.registry().len());
    assert!(specs.iter().any(|d| d.name == "echo"));
    let ctx = ExecContext::new("s1");

    let out = completed(
        ex.execute(
            ToolRequest::new("c1", "echo", json!({"message": "hi"})),
            &ctx,
        )
        .await,
    );
    let r = out.into_tool_result("c1", "echo");
    assert_eq!(r.content, json!({"echoed": "hi", "length": 2}));
    assert!(!r.is_error);
    // Inline: nothing queued, nothing written.
    assert_eq!(h.count("SELECT count(*) FROM runs"), 0);

    let bad = completed(
        ex.execute(ToolRequest::new("c2", "echo", json!({"msg": "hi"})), &ctx)
            .await,
    );
    let r = bad.into_tool_result("c2", "echo");
    assert!(r.is_error && r.content["error"].as_str().unwrap().contains("message"));
    let unknown = completed(
        ex.execute(ToolRequest::new("c3", "nope", json!({})), &ctx)
            .await,
    );
    assert!(matches!(&unknown, ToolOutcome::ToolError(m) if m.contains("not registered")));
    let panicked = completed(
        ex.execute(ToolRequest::new("c4", "boom", json!({})), &ctx)
            .await,
    );
    assert!(matches!(&panicked, ToolOutcome::Internal(d) if d.contains("panicked")));

    // spawn_background is a Standard tool: inline, it queues its target for the session.
    let args = json!({"tool": "sleep", "args": {"ms": 0}});
    let spawned = completed(
        ex.execute(ToolRequest::new("c5", "spawn_background", args), &ctx)
            .await,
    );
    let r = spawned.into_tool_result("c5", "spawn_background");
    assert_eq!(r.content["status"], "running");
    assert_eq!(
        h.count("SELECT count(*) FROM runs WHERE tool = 'sleep' AND session_id = 's1'"),
        1
    );
}

#[tokio::test]
async fn approval_interrupts_then_execute_approved_runs_the_same_call() {
    let h = host(|c| c.approvals.require = vec!["add".into()]);
    let ex = h.client.executor();
    let ctx = ExecContext::new("s1");
    let call = ToolRequest::new("c1", "add", json!({"a": 2, "b": 3}));
    let ToolExecutionOutcome::Interrupted(approval) = ex.execute(call.clone(), &ctx).await else {
        panic!("add needs approval by config");
    };
    assert_eq!(approval.call_id, "c1");
    assert_eq!(approval.tool, "add");
    assert_eq!(approval.args, json!({"a": 2, "b": 3}));
    assert_eq!(approval.reason, "tool add requires approval");

    let other = ToolRequest::new("c1", "add", json!({"a": 2, "b": 4}));
    let refused = completed(ex.execute_approved(other, &approval, &ctx).await);
    assert!(matches!(refused, ToolOutcome::ToolError(_)), "{refused:?}");
    let ok = completed(ex.execute_approved(call, &approval, &ctx).await);
    assert_eq!(
        ok.into_tool_result("c1", "add").content,
        json!({"result": 5})
    );
}

#[tokio::test]
async fn background_tools_acknowledge_at_once_and_deliver_by_their_scheduling() {
    let h = host(|_| {});
    let ex = h.client.executor();
    let ctx = ExecContext::new("agent");
    let ack = completed(
        ex.execute(ToolRequest::new("c1", "counter", json!({})), &ctx)
            .await,
    );
    let ToolOutcome::Success(ack) = ack else {
        panic!("{ack:?}")
    };
    assert_eq!(ack.value["status"], "running");
    let run_id: toolq::RunId = ack.value["started"].as_str().unwrap().parse().unwrap();
    let run = h.client.get(&run_id).await.unwrap();
    assert_eq!(run.state, RunState::Queued);
    assert_eq!(run.session_id, "agent");
    assert_eq!(run.delivery, toolq::Delivery::Interrupt);

    // deploy: Background + Silent, and approval by policy. Approved calls are queued approved.
    let call = ToolRequest::new("c2", "deploy", json!({"env": "prod"}));
    let ToolExecutionOutcome::Interrupted(approval) = ex.execute(call.clone(), &ctx).await else {
        panic!("deploy needs approval");
    };
    let ToolOutcome::Success(ack) = completed(ex.execute_approved(call, &approval, &ctx).await)
    else {
        panic!("approved deploy is queued")
    };
    assert_eq!(ack.value["resource_id"], ack.value["run_id"]);
    h.drain().await;
    assert_eq!(
        h.count("SELECT count(*) FROM runs WHERE state = 'completed' AND session_id = 'agent'"),
        2
    );
    assert_eq!(
        h.count("SELECT count(*) FROM runs WHERE tool = 'deploy' AND approval_state = 'approved'"),
        1
    );

    // The formatter shaped the result text; scheduling became the delivery.
    let busy = h
        .client
        .deliverable("agent", SessionActivity::Busy)
        .await
        .unwrap();
    assert_eq!(busy.len(), 2, "{busy:?}");
    let interrupt: Vec<_> = busy.iter().filter(|m| !m.is_silent()).collect();
    assert_eq!(interrupt.len(), 1, "{busy:?}");
    assert_eq!(interrupt[0].body, "REPORT COMPLETED");
    assert_eq!(interrupt[0].delivery, "interrupt");
    // The silent deploy message is offered too, marked silent, and left for the host to ack.
    let silent: Vec<_> = busy.iter().filter(|m| m.is_silent()).collect();
    assert_eq!(silent.len(), 1);
    assert!(silent[0].acked_at.is_none());
    assert!(silent[0].body.starts_with("Background run completed."));
    let all = h
        .client
        .inbox(
            "agent",
            InboxFilter {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
}

#[tokio::test]
async fn deliverable_follows_interrupt_when_idle_and_silent() {
    let h = host(|_| {});
    for (delivery, n) in [
        (toolq::Delivery::WhenIdle, 1),
        (toolq::Delivery::Interrupt, 2),
        (toolq::Delivery::Silent, 3),
    ] {
        let mut req = toolq::EnqueueRequest::new("add", json!({"a": n, "b": 0})).session("s");
        req.delivery = delivery;
        h.client.enqueue(req).await.unwrap();
    }
    h.drain().await;
    let busy = h
        .client
        .deliverable("s", SessionActivity::Busy)
        .await
        .unwrap();
    let mut busy_modes: Vec<&str> = busy.iter().map(|m| m.delivery.as_str()).collect();
    busy_modes.sort();
    assert_eq!(busy_modes, ["interrupt", "silent"]);
    let idle = h
        .client
        .deliverable("s", SessionActivity::Idle)
        .await
        .unwrap();
    // Oldest first; the worker may finish the runs (and post their messages) in any order.
    assert!(idle.windows(2).all(|w| w[0].id < w[1].id), "{idle:?}");
    let mut modes: Vec<&str> = idle.iter().map(|m| m.delivery.as_str()).collect();
    modes.sort();
    assert_eq!(modes, ["interrupt", "silent", "when_idle"]);
    h.client
        .mark_inbox("s", idle.iter().map(|m| m.id).collect(), true)
        .await
        .unwrap();
    assert!(
        h.client
            .deliverable("s", SessionActivity::Idle)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        h.count("SELECT count(*) FROM inbox WHERE session_id = 's'"),
        3
    );
    assert_eq!(
        h.count("SELECT count(*) FROM inbox WHERE acked_at IS NOT NULL"),
        3
    );
}

#[test]
fn cli_inbox_deliverable_by_mode() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let run = |args: &[&str]| crate::support::toolq(&db, args);
    for (delivery, a) in [("when_idle", "1"), ("interrupt", "2"), ("silent", "3")] {
        let args = format!(r#"{{"a":{a},"b":0}}"#);
        let o = run(&[
            "enqueue",
            "add",
            "--args",
            &args,
            "--session",
            "s",
            "--delivery",
            delivery,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert!(run(&["worker", "--drain"]).status.success());
    let json = |args: &[&str]| -> Value {
        let o = run(args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    // Sorted: the worker may finish the runs (and post their messages) in any order.
    let modes = |v: &Value| -> Vec<String> {
        let mut m: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["delivery"].as_str().unwrap().to_string())
            .collect();
        m.sort();
        m
    };
    let busy = json(&["--json", "inbox", "s", "--deliverable"]);
    assert_eq!(modes(&busy), ["interrupt", "silent"]);
    let idle = json(&["--json", "inbox", "s", "--deliverable", "--idle", "--ack"]);
    assert_eq!(modes(&idle), ["interrupt", "silent", "when_idle"]);
    let again = json(&["--json", "inbox", "s", "--deliverable", "--idle"]);
    assert_eq!(modes(&again), Vec::<String>::new());
    // All three stay in history, acknowledged by --ack.
    let all = json(&["--json", "inbox", "s"]);
    assert_eq!(all.as_array().unwrap().len(), 3);
    for m in all.as_array().unwrap() {
        assert!(!m["acked_at"].is_null(), "{m}");
    }
    let o = run(&["inbox", "s", "--idle"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--deliverable"));
}

#[tokio::test]
async fn the_formatter_shapes_the_cancellation_text() {
    let h = host(|_| {});
    let ex = h.client.executor();
    let ack = completed(
        ex.execute(
            ToolRequest::new("c1", "counter", json!({})),
            &ExecContext::new("s"),
        )
        .await,
    );
    let ToolOutcome::Success(ack) = ack else {
        panic!("{ack:?}")
    };
    let id: toolq::RunId = ack.value["started"].as_str().unwrap().parse().unwrap();
    h.client.cancel(&id).await.unwrap();
    let msgs = h
        .client
        .deliverable("s", SessionActivity::Busy)
        .await
        .unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].kind, "cancelled");
    assert_eq!(msgs[0].body, "REPORT CANCELLED");
}

#[tokio::test]
async fn the_executor_is_usable_through_the_seed_trait() {
    let h = host(|c| c.approvals.require = vec!["echo".into()]);
    let basic = h.client.executor();
    let ex: &dyn toolq::tool::ToolExecutor = &basic;
    assert_eq!(ex.specs().len(), h.client.registry().len());
    let ctx = ExecContext::new("s");
    let call = ToolRequest::new("c1", "echo", json!({"message": "yo"}));
    let ToolExecutionOutcome::Interrupted(approval) = ex.execute(call.clone(), &ctx).await else {
        panic!("echo needs approval by config");
    };
    let out = completed(ex.execute_approved(call, &approval, &ctx).await);
    assert_eq!(
        out.into_tool_result("c1", "echo").content,
        json!({"echoed": "yo", "length": 2})
    );
}

/// Issue 33, item 1: a Background-mode call through the executor is a background run of the
/// session and meets spawn_background's per-session limit, with its message.
#[tokio::test]
async fn background_mode_calls_meet_the_spawn_background_session_limit() {
    let h = host(|c| c.sessions.max_active_runs = 2);
    let ex = h.client.executor();
    let ctx = ExecContext::new("agent");
    for i in 0..2 {
        let ack = completed(
            ex.execute(
                ToolRequest::new(format!("c{i}"), "counter", json!({})),
                &ctx,
            )
            .await,
        );
        assert!(matches!(ack, ToolOutcome::Success(_)), "{ack:?}");
    }
    let over = completed(
        ex.execute(ToolRequest::new("c3", "counter", json!({})), &ctx)
            .await,
    );
    let ToolOutcome::ToolError(message) = over else {
        panic!("{over:?}")
    };
    assert_eq!(
        message,
        "Maximum 2 active background runs per session. Wait for an existing run to finish before starting another."
    );
    // Another session has its own slots.
    let other = completed(
        ex.execute(
            ToolRequest::new("c4", "counter", json!({})),
            &ExecContext::new("other"),
        )
        .await,
    );
    assert!(matches!(other, ToolOutcome::Success(_)), "{other:?}");
}
