//! Approvals: awaiting_approval with a request message, approve / deny / expire, decisions
//! kept on the run, all across a worker restart (a second client and worker on the same file).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use toolq::inbox::{InboxFilter, Message, NewMessage};
use toolq::tool::ToolPolicy;
use toolq::{
    Client, EnqueueRequest, Error, RegistryBuilder, RunState, Tool, ToolContext, ToolDef,
    ToolOutcome,
};

use crate::support::TestEnv;
use crate::tools::sh_tool;

async fn inbox(client: &Client, session: &str) -> Vec<Message> {
    client
        .inbox(
            session,
            InboxFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap()
}

async fn drain(client: &Client) {
    let w = client.worker(toolq::WorkerOptions { drain: true });
    tokio::time::timeout(Duration::from_secs(60), w.run(Default::default()))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn an_approved_run_executes_once_after_a_worker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let setup = |c: &mut toolq::Config| {
        sh_tool(
            c,
            "deploy",
            "echo \"$TOOLQ_RUN_ID\" >> \"$1\"",
            ran.to_str().unwrap(),
        );
        let t = c.tools.get_mut("deploy").unwrap();
        t.requires_approval = true;
    };
    let env = TestEnv::with_config(setup);
    let id = env
        .client
        .enqueue(
            EnqueueRequest::new("deploy", json!({"version": "1.2"}))
                .session("ops")
                .title("Deploy 1.2"),
        )
        .await
        .unwrap()
        .run_id;
    env.drain().await;
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::AwaitingApproval);
    assert_eq!(run.approval_state.as_deref(), Some("pending"));
    assert_eq!(run.attempt, 0, "waiting is not an attempt");
    assert!(!ran.exists(), "must not run before approval");
    let msgs = inbox(&env.client, "ops").await;
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].kind, "approval_request");
    assert_eq!(msgs[0].data["tool"], "deploy");
    assert_eq!(msgs[0].data["args"], json!({"version": "1.2"}));
    assert_eq!(msgs[0].data["title"], "Deploy 1.2");
    assert!(msgs[0].body.contains("toolq approve"), "{}", msgs[0].body);

    // "Restart": a new client and worker on the same database file.
    let mut config = env.db.config();
    config.worker.poll_interval = Duration::from_millis(20);
    setup(&mut config);
    let registry = RegistryBuilder::new()
        .with_builtins()
        .with_config_tools(&config)
        .unwrap()
        .build()
        .unwrap();
    let client = Client::open_with_clock(config, registry, Arc::new(env.clock.clone())).unwrap();
    drain(&client).await;
    assert_eq!(
        client.get(&id).await.unwrap().state,
        RunState::AwaitingApproval
    );
    let approved = client
        .approve(&id, "alice", Some("release window"))
        .await
        .unwrap();
    assert_eq!(approved.state, RunState::Queued);
    drain(&client).await;
    let run = client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    assert_eq!(run.attempt, 1);
    assert_eq!(run.approval_state.as_deref(), Some("approved"));
    assert_eq!(run.approval_by.as_deref(), Some("alice"));
    assert_eq!(run.approval_note.as_deref(), Some("release window"));
    assert!(run.approval_at.is_some());
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap().trim(),
        id.to_string()
    );
    let kinds: Vec<String> = inbox(&client, "ops")
        .await
        .into_iter()
        .map(|m| m.kind)
        .collect();
    assert_eq!(kinds, ["approval_request", "completed"]);
    // Deciding twice is a conflict.
    let e = client.approve(&id, "bob", None).await.unwrap_err();
    assert!(matches!(e, Error::Conflict(_)), "{e}");
}

#[tokio::test]
async fn a_denied_run_is_cancelled_with_a_message() {
    let env = TestEnv::with_config(|c| c.approvals.require = vec!["echo".into()]);
    let id = env
        .client
        .enqueue(EnqueueRequest::new("echo", json!({"message": "x"})).session("s"))
        .await
        .unwrap()
        .run_id;
    env.drain().await;
    assert_eq!(
        env.client.get(&id).await.unwrap().state,
        RunState::AwaitingApproval
    );
    let e = env
        .client
        .deny(&id, " ", None)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("by"), "{e}");
    let run = env
        .client
        .deny(&id, "bob", Some("not today"))
        .await
        .unwrap();
    assert_eq!(run.state, RunState::Cancelled);
    assert_eq!(run.approval_state.as_deref(), Some("denied"));
    assert_eq!(run.approval_by.as_deref(), Some("bob"));
    assert_eq!(run.approval_note.as_deref(), Some("not today"));
    assert_eq!(
        run.error.as_deref(),
        Some("approval denied by bob: not today")
    );
    let msgs = inbox(&env.client, "s").await;
    assert_eq!(msgs.last().unwrap().kind, "cancelled");
    assert!(msgs.last().unwrap().body.contains("not today"));
}

#[tokio::test]
async fn an_approval_past_its_deadline_expires() {
    let env = TestEnv::with_config(|c| {
        c.approvals.require = vec!["echo".into()];
        c.approvals.deadline = Some(Duration::from_secs(3600));
    });
    let id = env
        .client
        .enqueue(EnqueueRequest::new("echo", json!({"message": "hi"})).session("s"))
        .await
        .unwrap()
        .run_id;
    env.drain().await;
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(
        run.approval_deadline,
        Some(env.client.now() + chrono::Duration::hours(1))
    );
    assert_eq!(env.client.expire_approvals().await.unwrap(), 0);
    env.clock.advance(chrono::Duration::minutes(61));
    assert_eq!(env.client.expire_approvals().await.unwrap(), 1);
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Cancelled);
    assert_eq!(run.approval_state.as_deref(), Some("expired"));
    assert!(run.error.unwrap().contains("expired"));
    assert_eq!(
        inbox(&env.client, "s").await.last().unwrap().kind,
        "cancelled"
    );
    assert_eq!(env.client.expire_approvals().await.unwrap(), 0);
}

/// A tool with its own approval policy and message formatter.
struct Guarded;
#[async_trait]
impl Tool for Guarded {
    fn definition(&self) -> ToolDef {
        ToolDef::new("guarded", "needs approval", json!({"type": "object"}))
            .policy(ToolPolicy::RequiresApproval)
    }
    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        ToolOutcome::ok(json!({"summary": "done"}))
    }
    fn format_message(&self, draft: &NewMessage) -> Option<String> {
        Some(format!(
            "[guarded] {} {}",
            draft.kind,
            draft.data["run_id"].as_str()?
        ))
    }
}

#[tokio::test]
async fn a_tool_policy_and_formatter_shape_the_messages() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let mut config = db.config();
    config.worker.poll_interval = Duration::from_millis(20);
    let registry = RegistryBuilder::new()
        .with_builtins()
        .tool(Guarded)
        .build()
        .unwrap();
    let client = Client::open(config, registry).unwrap();
    let id = client
        .enqueue(EnqueueRequest::new("guarded", json!({})).session("s"))
        .await
        .unwrap()
        .run_id;
    drain(&client).await;
    client.approve(&id, "ops", None).await.unwrap();
    drain(&client).await;
    let other = client
        .enqueue(EnqueueRequest::new("guarded", json!({})).session("s"))
        .await
        .unwrap()
        .run_id;
    client.cancel(&other).await.unwrap();
    let bodies: Vec<String> = inbox(&client, "s")
        .await
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(
        bodies,
        [
            format!("[guarded] approval_request {id}"),
            format!("[guarded] completed {id}"),
            format!("[guarded] approval_request {other}"),
            format!("[guarded] cancelled {other}")
        ]
    );
}

/// A client on `env`'s database with its own approval rules (another process's config).
fn other_client(env: &crate::support::TestEnv, f: impl FnOnce(&mut toolq::Config)) -> Client {
    let mut config = env.client.config().clone();
    f(&mut config);
    let registry = RegistryBuilder::new()
        .with_builtins()
        .with_config_tools(&config)
        .unwrap()
        .build()
        .unwrap();
    Client::open_with_clock(config, registry, Arc::new(env.clock.clone())).unwrap()
}

/// Issue 40 item 6: a run that needs approval waits from its enqueue, without a worker.
#[tokio::test]
async fn a_run_needing_approval_awaits_from_its_enqueue_and_spends_no_attempt() {
    let env = crate::support::TestEnv::with_config(|c| {
        c.approvals.require = vec!["echo".into()];
        c.approvals.deadline = Some(Duration::from_secs(3600));
    });
    let enqueued_at = env.client.now();
    let id = env
        .client
        .enqueue(
            EnqueueRequest::new("echo", json!({"message": "ship"}))
                .session("ops")
                .title("Ship it"),
        )
        .await
        .unwrap()
        .run_id;
    // No worker has run: the run is already waiting, with its request in the inbox.
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::AwaitingApproval);
    assert_eq!(run.approval_state.as_deref(), Some("pending"));
    assert_eq!(run.attempt, 0);
    assert_eq!(run.started_at, None);
    assert_eq!(
        run.approval_deadline,
        Some(enqueued_at + chrono::Duration::hours(1)),
        "the deadline counts from the enqueue"
    );
    let msgs = inbox(&env.client, "ops").await;
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].kind, "approval_request");
    assert_eq!(msgs[0].data["title"], "Ship it");
    assert_eq!(msgs[0].data["args"], json!({"message": "ship"}));
    assert!(msgs[0].body.contains(&format!("toolq approve {id}")));
    // A worker leaves it alone: nothing is claimed, no attempt, no start.
    env.drain().await;
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::AwaitingApproval);
    assert_eq!((run.attempt, run.started_at), (0, None));
    assert_eq!(inbox(&env.client, "ops").await.len(), 1, "asked once");
    // Approving right after the enqueue works, and the run then executes once.
    let approved = env.client.approve(&id, "alice", None).await.unwrap();
    assert_eq!(approved.state, RunState::Queued);
    env.drain().await;
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    assert_eq!(run.attempt, 1);
    assert_eq!(run.approval_state.as_deref(), Some("approved"));
}

#[tokio::test]
async fn approving_keeps_a_delayed_run_delayed() {
    let env = crate::support::TestEnv::with_config(|c| c.approvals.require = vec!["echo".into()]);
    let at = env.client.now() + chrono::Duration::hours(2);
    let id = env
        .client
        .enqueue(EnqueueRequest {
            run_at: Some(at),
            ..EnqueueRequest::new("echo", json!({"message": "later"}))
        })
        .await
        .unwrap()
        .run_id;
    assert_eq!(
        env.client.get(&id).await.unwrap().state,
        RunState::AwaitingApproval
    );
    let run = env.client.approve(&id, "alice", None).await.unwrap();
    assert_eq!(run.state, RunState::Queued);
    assert_eq!(
        run.run_at, at,
        "approval does not move a later start forward"
    );
    env.drain().await;
    assert_eq!(env.client.get(&id).await.unwrap().state, RunState::Queued);
    env.clock.advance(chrono::Duration::hours(2));
    env.drain().await;
    assert_eq!(
        env.client.get(&id).await.unwrap().state,
        RunState::Completed
    );
}

#[tokio::test]
async fn a_cancel_while_awaiting_approval_is_a_cancel_not_a_denial() {
    let env = crate::support::TestEnv::with_config(|c| c.approvals.require = vec!["echo".into()]);
    let id = env
        .client
        .enqueue(EnqueueRequest::new("echo", json!({"message": "x"})).session("s"))
        .await
        .unwrap()
        .run_id;
    assert_eq!(
        env.client.get(&id).await.unwrap().state,
        RunState::AwaitingApproval
    );
    assert_eq!(env.client.cancel(&id).await.unwrap(), RunState::Cancelled);
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Cancelled);
    assert_ne!(run.approval_state.as_deref(), Some("denied"));
    assert_eq!(run.approval_by, None);
    assert_eq!(run.approval_at, None);
    assert_eq!(run.started_at, None);
    let error = run.error.unwrap_or_default();
    assert!(error.contains("cancelled"), "{error}");
    assert!(!error.contains("denied"), "{error}");
    let msgs = inbox(&env.client, "s").await;
    let kinds: Vec<&str> = msgs.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(kinds, ["approval_request", "cancelled"]);
    assert!(!msgs[1].body.contains("denied"), "{}", msgs[1].body);
}

#[tokio::test]
async fn batches_schedules_and_spawn_background_await_from_creation() {
    let env = crate::support::TestEnv::with_config(|c| {
        c.approvals.require = vec!["echo".into(), "counter".into()];
        c.approvals.deadline = Some(Duration::from_secs(600));
    });
    let batch = env
        .client
        .enqueue_batch(vec![
            EnqueueRequest::new("echo", json!({"message": "a"})).session("s"),
            EnqueueRequest::new("add", json!({"a": 1, "b": 2})).session("s"),
            EnqueueRequest::new("echo", json!({"message": "b"})).session("s"),
        ])
        .await
        .unwrap();
    let states = async |ids: &[toolq::RunId]| {
        let mut out = Vec::new();
        for id in ids {
            out.push(env.client.get(id).await.unwrap().state);
        }
        out
    };
    let ids: Vec<_> = batch.iter().map(|e| e.run_id.clone()).collect();
    assert_eq!(
        states(&ids).await,
        [
            RunState::AwaitingApproval,
            RunState::Queued,
            RunState::AwaitingApproval
        ]
    );
    // spawn_background, as an agent host calls it.
    let out = env
        .client
        .spawn_background("agent", json!({"tool": "counter", "args": {}}))
        .await;
    let ToolOutcome::Success(v) = out else {
        panic!("{out:?}")
    };
    let spawned: toolq::RunId = v.value["run_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(states(&[spawned]).await, [RunState::AwaitingApproval]);
    // A schedule's fire.
    env.client
        .create_schedule(
            toolq::ScheduleRequest::cron("echo", json!({"message": "tick"}), "*/10 * * * *")
                .session("cron"),
        )
        .await
        .unwrap();
    env.clock.advance(chrono::Duration::minutes(10));
    let fired = env.client.fire_due_schedules().await.unwrap();
    assert_eq!(fired.runs.len(), 1, "{fired:?}");
    let run = env.client.get(&fired.runs[0]).await.unwrap();
    assert_eq!(run.state, RunState::AwaitingApproval);
    assert_eq!(
        run.approval_deadline,
        Some(env.client.now() + chrono::Duration::minutes(10))
    );
    let requests = |session: &'static str| {
        let env = &env;
        async move {
            inbox(&env.client, session)
                .await
                .into_iter()
                .filter(|m| m.kind == "approval_request")
                .count()
        }
    };
    assert_eq!(requests("s").await, 2);
    assert_eq!(requests("agent").await, 1);
    assert_eq!(requests("cron").await, 1);
    // The whole lot expires from creation time, with no worker in between.
    env.clock.advance(chrono::Duration::minutes(21));
    assert_eq!(env.client.expire_approvals().await.unwrap(), 4);
}

/// The enqueuer's config decides at enqueue; a worker whose config requires approval still
/// holds a run that was queued without it (an older version, or a process with other rules),
/// and holding it spends no attempt and records no start.
#[tokio::test]
async fn a_worker_still_holds_a_run_its_config_gates_without_spending_an_attempt() {
    let env = crate::support::TestEnv::with_config(|c| c.approvals.require = vec!["echo".into()]);
    let lax = other_client(&env, |c| c.approvals.require.clear());
    let id = lax
        .enqueue(EnqueueRequest::new("echo", json!({"message": "x"})).session("s"))
        .await
        .unwrap()
        .run_id;
    assert_eq!(env.client.get(&id).await.unwrap().state, RunState::Queued);
    env.drain().await;
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::AwaitingApproval);
    assert_eq!(run.approval_state.as_deref(), Some("pending"));
    assert_eq!((run.attempt, run.started_at), (0, None));
    assert_eq!(
        (run.lease_owner.as_deref(), run.heartbeat_at),
        (None, None),
        "nothing ran"
    );
    // And a run gated by the enqueuer waits even for a worker whose config does not gate it.
    let gated = env
        .client
        .enqueue(EnqueueRequest::new("echo", json!({"message": "y"})).session("s"))
        .await
        .unwrap()
        .run_id;
    let w = lax.worker(toolq::WorkerOptions { drain: true });
    tokio::time::timeout(Duration::from_secs(60), w.run(Default::default()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        env.client.get(&gated).await.unwrap().state,
        RunState::AwaitingApproval
    );
    // The run the worker held (as every run was held before issue 40) is approved and runs
    // once, as its first attempt.
    env.client.approve(&id, "alice", None).await.unwrap();
    env.drain().await;
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    assert_eq!(run.attempt, 1);
    assert!(run.started_at.is_some());
}

/// A denied (or cancelled) run that is retried waits for approval again at once, with a new
/// request; a run approved before is not asked again.
#[tokio::test]
async fn a_retried_run_that_needs_approval_awaits_again_at_once() {
    let env = crate::support::TestEnv::with_config(|c| c.approvals.require = vec!["echo".into()]);
    let id = env
        .client
        .enqueue(EnqueueRequest::new("echo", json!({"message": "x"})).session("s"))
        .await
        .unwrap()
        .run_id;
    env.client.deny(&id, "bob", Some("not yet")).await.unwrap();
    assert_eq!(
        env.client.retry(&id).await.unwrap(),
        RunState::AwaitingApproval
    );
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::AwaitingApproval);
    assert_eq!(run.approval_state.as_deref(), Some("pending"));
    assert_eq!((run.approval_by, run.approval_note), (None, None));
    let kinds: Vec<String> = inbox(&env.client, "s")
        .await
        .into_iter()
        .map(|m| m.kind)
        .collect();
    assert_eq!(kinds, ["approval_request", "cancelled", "approval_request"]);
    // Cancelled while waiting, then retried in bulk: waiting again.
    env.client.cancel(&id).await.unwrap();
    let report = env
        .client
        .retry_where(
            &toolq::RunFilter {
                tool: Some("echo".into()),
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(report.done, 1, "{report:?}");
    assert_eq!(
        env.client.get(&id).await.unwrap().state,
        RunState::AwaitingApproval
    );
    env.client.approve(&id, "alice", None).await.unwrap();
    env.drain().await;
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    // Approved once: a retry of a later failure would not ask again (here: the state says so).
    assert_eq!(run.approval_state.as_deref(), Some("approved"));
}
