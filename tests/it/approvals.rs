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
            format!("[guarded] cancelled {other}")
        ]
    );
}
