//! spawn_background: every seed message, the result fields, and a run through a real worker.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::tool::sink::SinkLimits;
use toolq::{Client, ManualClock, RunId, RunSink, ToolContext, ToolOutcome};

use crate::schedules::{rows, second_client};
use crate::support::{TestEnv, t};

fn ctx(client: Option<Client>, args: Value) -> ToolContext {
    ToolContext {
        run_id: RunId::generate(),
        session_id: "s1".into(),
        title: "Spawn".into(),
        args,
        attempt: 1,
        sink: RunSink::new(SinkLimits::default()),
        cancel: CancellationToken::new(),
        stop: Default::default(),
        operation_id: None,
        clock: client
            .as_ref()
            .map(|c| c.clock().clone())
            .unwrap_or_else(|| Arc::new(ManualClock::new(t("2026-11-01T12:00:00Z")))),
        host: client.map(|c| c.tool_host()),
        durable: Default::default(),
    }
}

async fn spawn(client: &Client, args: Value) -> Result<Value, String> {
    let tool = client
        .registry()
        .get("spawn_background")
        .unwrap()
        .tool
        .clone();
    match tool.call(ctx(Some(client.clone()), args)).await {
        ToolOutcome::Success(s) => Ok(s.value),
        ToolOutcome::ToolError(m) => Err(m),
        other => panic!("unexpected outcome {other:?}"),
    }
}

#[tokio::test]
async fn spawn_background_rejects_with_the_seed_messages() {
    let env = TestEnv::new();
    let c = second_client(&env, |c| {
        c.sessions.max_active_runs = 2;
        c.sessions.max_active_schedules = 1;
    });
    let sched = |s: Value| json!({"tool": "counter", "args": {}, "schedule": s});
    let cases: Vec<(Value, &str)> = vec![
        (json!({"args": {}}), "Missing required parameter: tool"),
        (
            json!({"tool": "counter", "args": [1]}),
            "Missing required parameter: args (object expected)",
        ),
        (
            sched(json!({"scheduled_at": "tomorrow"})),
            "scheduled_at must be RFC3339",
        ),
        (
            sched(json!({"cron_expression": "* * * * *", "scheduled_at": "2026-12-01T00:00:00Z"})),
            "schedule must not include both cron_expression and scheduled_at; provide exactly one",
        ),
        (
            sched(json!({"timezone": "UTC"})),
            "schedule must include exactly one of cron_expression (recurring) or scheduled_at (one-shot)",
        ),
        (json!({"tool": "nope", "args": {}}), "Unknown tool: nope"),
        (
            json!({"tool": "spawn_background", "args": {}}),
            "spawn_background cannot target itself recursively",
        ),
        (
            json!({"tool": "foreground", "args": {}}),
            "Tool does not support background execution: foreground",
        ),
        (
            json!({"tool": "echo", "args": {"message": "hi"}}),
            "Tool does not support background execution: echo",
        ),
        (
            sched(json!({"cron_expression": "61 * * * *"})),
            "cron \"61 * * * *\": minute 61 is outside 0-59",
        ),
        (
            sched(json!({"cron_expression": "0 9 * * *", "timezone": "Mars/Base"})),
            "unknown time zone \"Mars/Base\": give an IANA name such as Europe/Berlin or UTC",
        ),
        (
            sched(json!({"scheduled_at": "2026-11-01T11:00:00Z"})),
            "time \"2026-11-01T11:00:00Z\" is in the past (now is 2026-11-01T12:00:00Z)",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(spawn(&c, args.clone()).await.unwrap_err(), want, "{args}");
    }
    let e = spawn(&c, json!({"tool": "sleep", "args": {"ms": "x"}}))
        .await
        .unwrap_err();
    assert!(e.contains("/ms"), "{e}");
    let tool = c.registry().get("spawn_background").unwrap().tool.clone();
    match tool
        .call(ctx(None, json!({"tool": "counter", "args": {}})))
        .await
    {
        ToolOutcome::ToolError(m) => assert!(m.contains("requires worker-side"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
    assert_eq!(env.count("SELECT count(*) FROM schedules"), 0);

    // Limits: two active runs, one active schedule per session.
    spawn(&c, json!({"tool": "counter", "args": {}}))
        .await
        .unwrap();
    spawn(&c, json!({"tool": "counter", "args": {}}))
        .await
        .unwrap();
    assert_eq!(
        spawn(&c, json!({"tool": "counter", "args": {}}))
            .await
            .unwrap_err(),
        "Maximum 2 active background runs per session. Wait for an existing run to finish before starting another."
    );
    spawn(&c, sched(json!({"cron_expression": "@hourly"})))
        .await
        .unwrap();
    assert_eq!(
        spawn(&c, sched(json!({"cron_expression": "@daily"})))
            .await
            .unwrap_err(),
        "Maximum 1 active schedules per session. Cancel an existing schedule first."
    );
    assert_eq!(env.count("SELECT count(*) FROM runs"), 2);
    assert_eq!(env.count("SELECT count(*) FROM schedules"), 1);
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test]
async fn spawn_background_returns_the_seed_fields() {
    let env = TestEnv::new();
    let v = spawn(&env.client, json!({"tool": "sleep", "args": {"ms": 0}}))
        .await
        .unwrap();
    assert_eq!(
        keys(&v),
        [
            "run_id",
            "resource_id",
            "status",
            "title",
            "tool",
            "signal_on_completion",
            "artifact_dir",
            "log_path",
            "result_path"
        ]
        .map(String::from)
        .into()
    );
    let id = v["run_id"].as_str().unwrap();
    assert_eq!(v["status"], "running");
    assert_eq!(v["resource_id"], id);
    assert_eq!(v["title"], "Sleep");
    assert_eq!(v["artifact_dir"], format!("/.background/{id}"));
    assert_eq!(v["log_path"], format!("/.background/{id}/output.log"));
    assert_eq!(v["result_path"], format!("/.background/{id}/result.json"));
    let v = spawn(
        &env.client,
        json!({"tool": "counter", "args": {}, "signal_on_completion": false}),
    )
    .await
    .unwrap();
    assert_eq!(v["title"], "Background counter");
    assert_eq!(v["signal_on_completion"], false);

    let v = spawn(
        &env.client,
        json!({"tool": "counter", "args": {}, "title": "Chicago check",
               "schedule": {"cron_expression": "0 9 * * *", "timezone": "America/Chicago"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        keys(&v),
        [
            "created",
            "status",
            "title",
            "tool",
            "signal_on_completion",
            "schedule_id",
            "schedule_type",
            "cron_expression",
            "scheduled_at",
            "timezone",
            "next_trigger_at",
            "enabled"
        ]
        .map(String::from)
        .into()
    );
    assert_eq!(v["created"], true);
    assert_eq!(v["signal_on_completion"], true);
    assert_eq!(v["status"], "scheduled");
    assert_eq!(v["schedule_type"], "recurring");
    assert_eq!(v["timezone"], "America/Chicago");
    assert_eq!(v["scheduled_at"], Value::Null);
    assert_eq!(v["next_trigger_at"], "2026-11-01T15:00:00Z");
    assert_eq!(v["enabled"], true);
    let v = spawn(
        &env.client,
        json!({"tool": "counter", "args": {}, "schedule": {"scheduled_at": "2026-11-02T08:00:00+01:00"}}),
    )
    .await
    .unwrap();
    assert_eq!(v["schedule_type"], "oneshot");
    assert_eq!(v["next_trigger_at"], "2026-11-02T07:00:00Z");
}

#[tokio::test]
async fn spawn_background_in_a_worker_runs_the_target_and_signals_the_session() {
    let env = TestEnv::new();
    let mut req = toolq::EnqueueRequest::new(
        "spawn_background",
        json!({"tool": "counter", "args": {"message": "from the background"}}),
    );
    req.session = "agent".into();
    let parent = env.client.enqueue(req).await.unwrap();
    env.drain().await;
    let parent = env.client.get(&parent.run_id).await.unwrap();
    assert_eq!(parent.state, toolq::RunState::Completed);
    let runs = rows(
        &env,
        "SELECT tool, state, session_id FROM runs WHERE tool = 'counter'",
    );
    assert_eq!(
        runs,
        vec![vec![
            "counter".to_string(),
            "completed".into(),
            "agent".into()
        ]]
    );
    // One background run, one message: the spawn_background run's own result is the
    // acknowledgement, not a second completion.
    let msgs: Vec<(String, serde_json::Value)> = rows(
        &env,
        "SELECT kind, data FROM inbox WHERE session_id = 'agent'",
    )
    .into_iter()
    .map(|r| (r[0].clone(), serde_json::from_str(&r[1]).unwrap()))
    .collect();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(
        (msgs[0].0.as_str(), &msgs[0].1["tool"]),
        ("completed", &json!("counter"))
    );
}

#[tokio::test]
async fn an_agent_host_calls_spawn_background_directly() {
    let env = TestEnv::with_config(|c| c.sessions.max_active_runs = 1);
    let ok = env
        .client
        .spawn_background(
            "agent",
            json!({"tool": "counter", "args": {"message": "hi"}}),
        )
        .await;
    let ToolOutcome::Success(v) = ok else {
        panic!("{ok:?}")
    };
    assert_eq!(v.value["status"], "running");
    let again = env
        .client
        .spawn_background("agent", json!({"tool": "counter", "args": {}}))
        .await;
    let ToolOutcome::ToolError(m) = again else {
        panic!("{again:?}")
    };
    assert!(
        m.starts_with("Maximum 1 active background runs per session."),
        "{m}"
    );
    env.drain().await;
    assert_eq!(
        env.count("SELECT count(*) FROM inbox WHERE session_id = 'agent' AND kind = 'completed'"),
        1
    );
}

#[tokio::test]
async fn a_sixth_active_run_per_session_is_rejected_by_default() {
    let env = TestEnv::new();
    for _ in 0..5 {
        spawn(&env.client, json!({"tool": "counter", "args": {}}))
            .await
            .unwrap();
    }
    assert_eq!(
        spawn(&env.client, json!({"tool": "counter", "args": {}}))
            .await
            .unwrap_err(),
        "Maximum 5 active background runs per session. Wait for an existing run to finish before starting another."
    );
    // Finished runs free their slot.
    env.drain().await;
    spawn(&env.client, json!({"tool": "counter", "args": {}}))
        .await
        .unwrap();
}

/// Enqueues `sleep` runs through the CLI: `n` of them, in sessions named `{prefix}{i}`, with
/// `extra` flags (e.g. `--in 1h`).
fn cli_sleeps(env: &TestEnv, n: usize, session: impl Fn(usize) -> String, extra: &[&str]) {
    for i in 0..n {
        let session = session(i);
        let mut args = vec![
            "enqueue",
            "sleep",
            "--args",
            r#"{"ms": 1}"#,
            "--session",
            &session,
        ];
        args.extend_from_slice(extra);
        let out = crate::support::toolq(&env.db, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Issue 33, item 1 (the reproduction): 60 delayed runs queued by an operator in other
/// sessions, then 4 background runs in an empty session; the fifth spawn in that session is
/// accepted (the per-worker limit bounds one worker's running background runs, not the
/// queue), and the sixth meets the per-session limit.
#[tokio::test]
async fn delayed_runs_of_other_sessions_do_not_block_spawn_background() {
    let env = TestEnv::new();
    cli_sleeps(&env, 60, |i| format!("other-{i}"), &["--in", "1h"]);
    assert_eq!(
        env.count("SELECT count(*) FROM runs WHERE state = 'queued'"),
        60
    );
    for _ in 0..5 {
        spawn(&env.client, json!({"tool": "sleep", "args": {"ms": 1}}))
            .await
            .unwrap();
    }
    assert_eq!(
        spawn(&env.client, json!({"tool": "sleep", "args": {"ms": 1}}))
            .await
            .unwrap_err(),
        "Maximum 5 active background runs per session. Wait for an existing run to finish before starting another."
    );
}

/// Runs a session did not start in the background (CLI enqueues, here due now) do not count
/// against its spawn_background limit; neither do background runs of other sessions.
#[tokio::test]
async fn cli_enqueued_runs_do_not_count_against_the_session_limit() {
    let env = TestEnv::with_config(|c| c.sessions.max_active_runs = 2);
    cli_sleeps(&env, 3, |_| "s1".to_string(), &[]);
    for _ in 0..2 {
        spawn(&env.client, json!({"tool": "counter", "args": {}}))
            .await
            .unwrap();
    }
    assert_eq!(
        spawn(&env.client, json!({"tool": "counter", "args": {}}))
            .await
            .unwrap_err(),
        "Maximum 2 active background runs per session. Wait for an existing run to finish before starting another."
    );
    assert_eq!(
        env.count("SELECT count(*) FROM runs WHERE session_id = 's1'"),
        5
    );
}

/// Batch use: with `queue_beyond_limit`, spawn_background queues beyond the session limit.
#[tokio::test]
async fn batch_users_may_queue_beyond_the_session_limit() {
    let env = TestEnv::with_config(|c| {
        c.sessions.max_active_runs = 1;
        c.sessions.queue_beyond_limit = true;
    });
    for _ in 0..3 {
        spawn(&env.client, json!({"tool": "counter", "args": {}}))
            .await
            .unwrap();
    }
    assert_eq!(
        env.count("SELECT count(*) FROM runs WHERE state = 'queued'"),
        3
    );
}

/// The per-worker limit is the claim's: a worker with 4 slots and
/// `max_active_runs_per_worker = 2` runs 2 background runs at once, and its other slots take
/// runs that were not started in the background, though those come later in priority.
#[tokio::test]
async fn a_worker_runs_at_most_its_background_limit_and_fills_the_other_slots() {
    let env = TestEnv::with_config(|c| {
        c.worker.concurrency = 4;
        c.worker.per_session = 10;
        c.worker.shutdown_grace = std::time::Duration::from_millis(100);
        c.sessions.max_active_runs_per_worker = 2;
    });
    let mut background = BTreeSet::new();
    for _ in 0..4 {
        let ack = spawn(
            &env.client,
            json!({"tool": "sleep", "args": {"ms": 60_000}}),
        )
        .await
        .unwrap();
        background.insert(ack["run_id"].as_str().unwrap().to_string());
    }
    for _ in 0..3 {
        let mut req = toolq::EnqueueRequest::new("sleep", json!({"ms": 60_000})).session("s1");
        req.priority = -1;
        env.client.enqueue(req).await.unwrap();
    }
    let stop = CancellationToken::new();
    let worker = env.client.worker(toolq::WorkerOptions { drain: false });
    let running = tokio::spawn(worker.run(stop.clone()));
    crate::support::wait_for("4 running runs", async || {
        let n = env.count("SELECT count(*) FROM runs WHERE state = 'running'");
        ((n >= 4).then_some(()), format!("{n} running"))
    })
    .await;
    // Another claim would find nothing more for this worker to take.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let ids: Vec<String> = rows(&env, "SELECT id FROM runs WHERE state = 'running'")
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert!(ids.len() >= 4, "{ids:?}");
    let bg = ids.iter().filter(|id| background.contains(*id)).count();
    assert_eq!((bg, ids.len() - bg), (2, 2), "running: {ids:?}");
    stop.cancel();
    running.await.unwrap().unwrap();
}
