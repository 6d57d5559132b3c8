//! An agent host's loop over toolq: list the tool specs, run a tool and use its result, hit an
//! approval and approve it, spawn a background run and a cron monitor through
//! `spawn_background`, and deliver the session's inbox by delivery mode (interrupt now,
//! when_idle once the host is idle, silent never announced but marked read).
//! `cargo run --example agent_host`; the test suite runs it.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::store::inbox::{InboxFilter, Message};
use toolq::tool::{ToolHints, ToolPolicy};
use toolq::{
    Client, Config, Delivery, EnqueueRequest, RegistryBuilder, RunId, RunState, ScheduleId, Tool,
    ToolContext, ToolDef, ToolOutcome,
};

const SESSION: &str = "agent-1";

/// Looks a word up (a quick, read-only tool the model waits for).
struct Lookup;

#[async_trait]
impl Tool for Lookup {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "lookup",
            "Looks up a word's length.",
            json!({"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}),
        )
        .hints(ToolHints {
            readonly: true,
            idempotent: true,
            supports_background: false,
        })
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let word = ctx.args["word"].as_str().unwrap_or_default();
        ToolOutcome::ok(json!({"word": word, "length": word.chars().count()}))
    }
}

/// Deploys a service: needs an operator's approval first.
struct Deploy;

#[async_trait]
impl Tool for Deploy {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "deploy",
            "Deploys a service.",
            json!({"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}),
        )
        .policy(ToolPolicy::RequiresApproval)
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        ToolOutcome::ok(json!({"deployed": ctx.args["service"]}))
    }
}

/// Checks a service's health: slow enough to run in the background, and used by monitors.
struct HealthCheck;

#[async_trait]
impl Tool for HealthCheck {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "health_check",
            "Checks a service's health.",
            json!({"type": "object", "properties": {"service": {"type": "string"}}}),
        )
        .hints(ToolHints {
            readonly: true,
            idempotent: true,
            supports_background: true,
        })
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        ctx.sink.status("probing");
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = ctx.cancel.cancelled() => {}
        }
        ToolOutcome::ok(json!({"service": ctx.args["service"], "healthy": true}))
    }
}

/// The host: one session, a busy flag, and the messages it holds back until it is idle.
struct Host {
    client: Client,
    busy: bool,
    after_id: i64,
}

impl Host {
    /// Runs a tool for the model and returns the run once it has ended.
    async fn run_tool(&self, tool: &str, args: Value, delivery: Delivery) -> toolq::Result<RunId> {
        let mut req = EnqueueRequest::new(tool, args).session(SESSION);
        req.delivery = delivery;
        Ok(self.client.enqueue(req).await?.run_id)
    }

    async fn result(&self, id: &RunId) -> Result<Value, Box<dyn std::error::Error>> {
        let run = self.client.wait(id).await?;
        if run.state != RunState::Completed {
            return Err(format!("{id} ended {}: {:?}", run.state, run.error).into());
        }
        let blob = self.client.result(&run).await?.ok_or("no result")?;
        let v: Value = serde_json::from_slice(&blob.content)?;
        Ok(v["result"].clone())
    }

    /// Delivers what the session may see now: interrupt messages always, when_idle ones only
    /// while idle (the rest wait for the next turn); silent ones are marked read unannounced.
    async fn deliver(&mut self) -> toolq::Result<Vec<Message>> {
        let msgs = self
            .client
            .inbox(
                SESSION,
                InboxFilter {
                    after_id: 0,
                    unacked_only: true,
                    limit: 100,
                },
            )
            .await?;
        let mut delivered = Vec::new();
        let (mut ack, mut read) = (Vec::new(), Vec::new());
        for m in msgs {
            self.after_id = self.after_id.max(m.id);
            match m.delivery.as_str() {
                "interrupt" => {
                    println!("deliver (interrupt): {}", first_line(&m.body));
                    ack.push(m.id);
                    delivered.push(m);
                }
                "when_idle" if !self.busy => {
                    println!("deliver (when idle): {}", first_line(&m.body));
                    ack.push(m.id);
                    delivered.push(m);
                }
                "silent" if m.read_at.is_none() => {
                    println!("silent, kept in history: {}", m.kind);
                    read.push(m.id);
                }
                _ => {}
            }
        }
        if !ack.is_empty() {
            self.client.mark_inbox(SESSION, ack, true).await?;
        }
        if !read.is_empty() {
            self.client.mark_inbox(SESSION, read, false).await?;
        }
        Ok(delivered)
    }

    /// Delivers until a message about `run` has been delivered.
    async fn deliver_until(&mut self, run: &str) -> toolq::Result<Message> {
        loop {
            for m in self.deliver().await? {
                if m.run_id.as_deref() == Some(run) {
                    return Ok(m);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

async fn wait_state(client: &Client, id: &RunId, state: RunState) -> toolq::Result<()> {
    while client.get(id).await?.state != state {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut config = Config {
        db_path: dir.path().join("agent.db").display().to_string(),
        ..Config::default()
    };
    config.worker.poll_interval = Duration::from_millis(20);
    let registry = RegistryBuilder::new()
        .with_builtins()
        .tool(Lookup)
        .tool(Deploy)
        .tool(HealthCheck)
        .build()?;
    let client = Client::open(config, registry)?;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(client.worker(Default::default()).run(stop.clone()));
    let mut host = Host {
        client: client.clone(),
        busy: true,
        after_id: 0,
    };

    // 1. The specs the model is offered.
    for e in client.registry().iter() {
        println!("spec: {} - {}", e.def.name, e.def.description);
    }

    // 2. A tool the model waits for; its message is silent (the model already has the result).
    let id = host
        .run_tool("lookup", json!({"word": "toolq"}), Delivery::Silent)
        .await?;
    println!("lookup -> {}", host.result(&id).await?);

    // 3. A tool that needs approval: the session is interrupted with the request, the host
    //    asks its user and approves; the run then executes.
    let id = host
        .run_tool("deploy", json!({"service": "api"}), Delivery::Interrupt)
        .await?;
    wait_state(&client, &id, RunState::AwaitingApproval).await?;
    let request = host.deliver_until(id.as_str()).await?;
    println!("approval needed ({}); the user says yes", request.kind);
    client.approve(&id, "host-user", Some("looks fine")).await?;
    println!("deploy -> {}", host.result(&id).await?);

    // 4. A background run and a cron monitor, through spawn_background as the model calls it.
    let spawn = host
        .run_tool(
            "spawn_background",
            json!({"tool": "health_check", "args": {"service": "api"}, "title": "api health"}),
            Delivery::Silent,
        )
        .await?;
    let reply = host.result(&spawn).await?;
    let background: RunId = reply["run_id"]
        .as_str()
        .ok_or("no run_id in the reply")?
        .parse()?;
    println!("spawned background run {background}");
    let monitor = host
        .run_tool(
            "spawn_background",
            json!({"tool": "health_check", "args": {"service": "db"},
                   "schedule": {"cron_expression": "*/10 * * * *"}}),
            Delivery::Silent,
        )
        .await?;
    let reply = host.result(&monitor).await?;
    let schedule: ScheduleId = reply["schedule_id"]
        .as_str()
        .ok_or("no schedule_id in the reply")?
        .parse()?;
    println!("monitor {schedule} ({})", reply["cron_expression"]);

    // 5. While the model is busy, the background completion (when_idle) waits; once idle it is
    //    delivered.
    client.wait(&background).await?;
    let held = host.deliver().await?;
    assert!(
        held.iter()
            .all(|m| m.run_id.as_deref() != Some(background.as_str())),
        "a when_idle message is not delivered while busy"
    );
    println!("busy: background completion held back");
    host.busy = false;
    let done = host.deliver_until(background.as_str()).await?;
    println!("idle: {} ({})", first_line(&done.body), done.delivery);

    client.cancel_schedule(&schedule).await?;
    stop.cancel();
    worker.await??;
    println!("done");
    Ok(())
}
