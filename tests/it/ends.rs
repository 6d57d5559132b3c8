//! Every way a run ends writes the same things: its final state, an output.log (the log so
//! far, or an empty one), a result.json and exactly one final inbox message for the attempt
//! that ended. A retry starts a new attempt, so ending it again never collides with the last.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolq::inbox::{InboxFilter, Message};
use toolq::worker::rescue::rescue_tick;
use toolq::{
    Client, EnqueueRequest, ManualClock, RegistryBuilder, RunId, RunState, Tool, ToolContext,
    ToolDef, ToolOutcome,
};

use crate::support::{t, toolq, wait_for};

fn out(o: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(db: &crate::support::TestDb, args: &[&str]) -> String {
    let o = toolq(db, args);
    assert!(o.status.success(), "toolq {args:?}: {}", out(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn cancel_retry_cancel_of_a_delayed_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let v: Value = serde_json::from_str(&ok(
        &db,
        &[
            "--json",
            "enqueue",
            "echo",
            "--args",
            r#"{"message":"x"}"#,
            "--in",
            "1h",
        ],
    ))
    .unwrap();
    let id = v["run_id"].as_str().unwrap().to_string();
    ok(&db, &["cancel", &id]);
    ok(&db, &["retry", &id]);
    ok(&db, &["cancel", &id]);
    let v: Value = serde_json::from_str(&ok(&db, &["--json", "show", &id])).unwrap();
    assert_eq!(v["state"], "cancelled");
    ok(&db, &["logs", &id]);
    let v: Value = serde_json::from_str(&ok(&db, &["result", &id])).unwrap();
    assert_eq!(v["status"], "cancelled");
    let attempts: Vec<(i64, String)> = db
        .rows(&format!(
            "SELECT attempt, kind FROM inbox WHERE run_id = '{id}' ORDER BY id"
        ))
        .into_iter()
        .map(|r| {
            (
                r[0].as_ref().unwrap().parse().unwrap(),
                r[1].clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        [(1, "cancelled".to_string()), (2, "cancelled".to_string())],
        "one message per attempt"
    );
}

/// A tool whose behaviour a test switches between calls: every end path on one run.
struct Modal {
    name: &'static str,
    mode: Arc<Mutex<&'static str>>,
}

#[async_trait]
impl Tool for Modal {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            self.name,
            "does what the test says",
            json!({"type": "object"}),
        )
    }
    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let mode = *self.mode.lock().unwrap();
        ctx.sink
            .output(toolq::tool::Stream::Stdout, b"started\n".as_slice());
        match mode {
            "ok" => ToolOutcome::ok(json!({"mode": mode})),
            "tool_error" => ToolOutcome::tool_error("bad input"),
            "internal" => ToolOutcome::Internal("secret detail".into()),
            "panic" => panic!("modal panic"),
            _ => {
                std::future::pending::<()>().await;
                ToolOutcome::ok(Value::Null)
            }
        }
    }
}

struct Env {
    _dir: tempfile::TempDir,
    db: crate::support::TestDb,
    clock: ManualClock,
    client: Client,
    mode: Arc<Mutex<&'static str>>,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::support::TestDb::at(dir.path());
        let mut config = db.config();
        config.worker.poll_interval = Duration::from_millis(20);
        config.worker.heartbeat_interval = Duration::from_millis(50);
        config.worker.flush_interval = Duration::from_millis(20);
        config.worker.cancel_grace = Duration::from_millis(50);
        config.approvals.require = vec!["gated".into()];
        config.approvals.deadline = Some(Duration::from_secs(3600));
        let mode = Arc::new(Mutex::new("ok"));
        let registry = RegistryBuilder::new()
            .with_builtins()
            .tool(Modal {
                name: "modal",
                mode: mode.clone(),
            })
            .tool(Modal {
                name: "gated",
                mode: mode.clone(),
            })
            .build()
            .unwrap();
        let clock = ManualClock::new(t("2026-11-01T12:00:00Z"));
        let client = Client::open_with_clock(config, registry, Arc::new(clock.clone())).unwrap();
        Env {
            _dir: dir,
            db,
            clock,
            client,
            mode,
        }
    }

    async fn enqueue(&self, tool: &str) -> RunId {
        let mut req = EnqueueRequest::new(tool, json!({})).session("s");
        req.max_attempts = Some(1);
        req.timeout = Some(Duration::from_millis(300));
        self.client.enqueue(req).await.unwrap().run_id
    }

    async fn drain(&self) {
        let w = self.client.worker(toolq::WorkerOptions { drain: true });
        tokio::time::timeout(Duration::from_secs(60), w.run(Default::default()))
            .await
            .expect("drain finished in time")
            .unwrap();
    }

    async fn state(&self, id: &RunId) -> RunState {
        self.client.get(id).await.unwrap().state
    }

    async fn finals(&self, id: &RunId) -> Vec<Message> {
        let all = self
            .client
            .inbox(
                "s",
                InboxFilter {
                    limit: 1000,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        all.into_iter()
            .filter(|m| m.run_id.as_deref() == Some(id.as_str()) && m.kind != "approval_request")
            .collect()
    }

    /// The end invariant: a final state, both blobs, one final message for the attempt
    /// that ended, `ends` final messages in all, and `logs` and `result` work.
    async fn check(&self, id: &RunId, want: RunState, ends: usize, path: &str) {
        let run = self.client.get(id).await.unwrap();
        assert_eq!(run.state, want, "{path}: {:?}", run.error);
        assert!(
            self.client.log(&run).await.unwrap().is_some(),
            "{path}: output.log"
        );
        let result = self.client.result(&run).await.unwrap();
        let result: Value = serde_json::from_slice(&result.expect("result.json").content).unwrap();
        assert_eq!(result["status"], run.state.as_str(), "{path}: {result}");
        let finals = self.finals(id).await;
        assert_eq!(finals.len(), ends, "{path}: {finals:?}");
        let mine = self.db.column(&format!(
            "SELECT kind FROM inbox WHERE run_id = '{id}' AND attempt = {} \
             AND kind <> 'approval_request'",
            run.attempt
        ));
        assert_eq!(
            mine,
            [run.state.as_str()],
            "{path}: attempt {}",
            run.attempt
        );
        let o = toolq(&self.db, &["logs", id.as_str()]);
        assert!(o.status.success(), "{path}: logs: {}", out(&o));
        let o = toolq(&self.db, &["result", id.as_str()]);
        assert!(o.status.success(), "{path}: result: {}", out(&o));
    }

    /// Ends a queued run of `modal` (or an awaiting run of `gated`) by `path`.
    async fn end(&self, id: &RunId, path: &'static str) -> RunState {
        match path {
            "completed" | "tool_error" | "internal" | "panic" | "timeout" => {
                *self.mode.lock().unwrap() = match path {
                    "completed" => "ok",
                    "timeout" => "hang",
                    other => other,
                };
                self.drain().await;
                if self.state(id).await == RunState::AwaitingApproval {
                    self.client.approve(id, "alice", None).await.unwrap();
                    self.drain().await;
                }
                if path == "completed" {
                    RunState::Completed
                } else {
                    RunState::Failed
                }
            }
            "worker_lost" => {
                // A lease for a worker that has no row: the rescue takes it back at once.
                let now = self.client.now();
                let claim = toolq::store::Claim {
                    worker: "wk_unregistered".into(),
                    now,
                    lease_until: now + chrono::Duration::seconds(30),
                    max: 1,
                    per_session: 5,
                    after_session: None,
                    tools: self.client.registry().names().into(),
                    limits: Default::default(),
                    background_room: None,
                };
                let claimed = self.client.engine().attempt_claim(claim).await.unwrap();
                assert_eq!(claimed.len(), 1);
                assert_eq!(rescue_tick(self.client.core()).await.unwrap().failed, 1);
                RunState::Failed
            }
            "cancel_waiting" => {
                assert_eq!(self.client.cancel(id).await.unwrap(), RunState::Cancelled);
                RunState::Cancelled
            }
            "cancel_running" => {
                *self.mode.lock().unwrap() = "hang";
                let stop = tokio_util::sync::CancellationToken::new();
                let w = self.client.worker(toolq::WorkerOptions::default());
                let worker = tokio::spawn(w.run(stop.clone()));
                wait_for("the run to start", async || {
                    let s = self.state(id).await;
                    ((s == RunState::Running).then_some(()), s.to_string())
                })
                .await;
                assert_eq!(self.client.cancel(id).await.unwrap(), RunState::Running);
                wait_for("the run to be cancelled", async || {
                    let s = self.state(id).await;
                    ((s == RunState::Cancelled).then_some(()), s.to_string())
                })
                .await;
                stop.cancel();
                worker.await.unwrap().unwrap();
                RunState::Cancelled
            }
            "deny" => {
                self.client.deny(id, "bob", Some("no")).await.unwrap();
                RunState::Cancelled
            }
            "expire" => {
                self.clock.advance(chrono::Duration::minutes(61));
                assert_eq!(self.client.expire_approvals().await.unwrap(), 1);
                RunState::Cancelled
            }
            other => panic!("unknown path {other}"),
        }
    }
}

#[tokio::test]
async fn deny_retry_deny() {
    let env = Env::new();
    let id = env.enqueue("gated").await;
    for round in 1..=2 {
        env.drain().await;
        assert_eq!(env.state(&id).await, RunState::AwaitingApproval);
        env.client
            .deny(&id, "bob", Some("not today"))
            .await
            .unwrap();
        env.check(&id, RunState::Cancelled, round, "deny").await;
        if round == 1 {
            env.client.retry(&id).await.unwrap();
        }
    }
}

#[tokio::test]
async fn rescued_and_cancelled_queued_runs_have_a_log_and_expired_ones_a_result() {
    let env = Env::new();
    let lost = env.enqueue("modal").await;
    env.end(&lost, "worker_lost").await;
    env.check(&lost, RunState::Failed, 1, "worker lost").await;
    let cancelled = env.enqueue("modal").await;
    env.end(&cancelled, "cancel_waiting").await;
    env.check(&cancelled, RunState::Cancelled, 1, "cancel queued")
        .await;
    let expired = env.enqueue("gated").await;
    env.drain().await;
    env.end(&expired, "expire").await;
    env.check(&expired, RunState::Cancelled, 1, "expired").await;
}

/// Every end path, each followed by a retry and the next path: the plain tool's paths
/// forwards and then backwards (so each is retried into two different successors), then the
/// approval paths of a gated tool (approval is asked again after a denial, not after an
/// approval, so those come first).
#[tokio::test]
async fn every_end_path_through_retry_cycles_keeps_the_end_invariant() {
    let env = Env::new();
    let plain = [
        "completed",
        "tool_error",
        "internal",
        "panic",
        "timeout",
        "worker_lost",
        "cancel_waiting",
        "cancel_running",
    ];
    let there_and_back: Vec<&str> = plain.iter().chain(plain.iter().rev()).copied().collect();
    let gated = [
        "deny",
        "expire",
        "cancel_waiting",
        "deny",
        "completed",
        "tool_error",
    ];
    for (tool, paths) in [("modal", &there_and_back[..]), ("gated", &gated[..])] {
        let mut id = env.enqueue(tool).await;
        let mut ends = 0;
        for (i, path) in paths.iter().enumerate() {
            // A completed run cannot be retried: the walk goes on with a new run.
            if ends > 0 && env.state(&id).await == RunState::Completed {
                id = env.enqueue(tool).await;
                ends = 0;
            } else if ends > 0 {
                env.client.retry(&id).await.unwrap();
            }
            if tool == "gated" && matches!(*path, "deny" | "expire" | "cancel_waiting") {
                env.drain().await;
                assert_eq!(env.state(&id).await, RunState::AwaitingApproval, "{path}");
            }
            let want = env.end(&id, path).await;
            ends += 1;
            env.check(&id, want, ends, &format!("{tool} step {i} {path}"))
                .await;
        }
    }
}
