//! An agent host's loop over toolq's executor: list the tool specs, run a tool inline, hit an
//! approval interrupt and approve it, call background tools (through `spawn_background`, a
//! cron monitor, and tools registered in Background mode), and deliver the session's inbox by
//! mode with `Client::deliverable` (interrupt while busy, when_idle once idle, silent into the
//! model's context without a turn).
//! `cargo run --example agent_host`; the test suite runs it.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::client::SessionActivity;
use toolq::inbox::{InboxFilter, Message};
use toolq::tool::{
    BasicToolExecutor, ExecContext, FunctionResponseScheduling as When, ToolExecutionMode,
    ToolExecutionOutcome, ToolHints, ToolPolicy, ToolRequest,
};
use toolq::{
    Client, Config, RegistryBuilder, RunId, ScheduleId, Tool, ToolContext, ToolDef, ToolOutcome,
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

/// The slow variant of `lookup`: background-capable, started through `spawn_background`.
struct LookupSlow;

#[async_trait]
impl Tool for LookupSlow {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "lookup_slow",
            "Looks up a word's length, slowly.",
            json!({"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}),
        )
        .hints(ToolHints::default().with_supports_background(true))
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = ctx.cancel.cancelled() => {}
        }
        let word = ctx.args["word"].as_str().unwrap_or_default();
        ToolOutcome::ok(json!({"word": word, "length": word.chars().count()}))
    }
}

/// Records an audit entry: nobody needs to hear about it.
struct Audit;

#[async_trait]
impl Tool for Audit {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "audit",
            "Records an audit entry.",
            json!({"type": "object"}),
        )
    }

    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        ToolOutcome::ok(json!({"recorded": true}))
    }
}

/// Makes one call as the model would, approving it when the user agrees.
async fn call(
    exec: &BasicToolExecutor,
    ctx: &ExecContext,
    id: &str,
    tool: &str,
    args: Value,
) -> Result<Value, Box<dyn std::error::Error>> {
    let request = ToolRequest::new(id, tool, args);
    let mut done = exec.execute(request.clone(), ctx).await;
    if let ToolExecutionOutcome::Interrupted(approval) = &done {
        println!(
            "{tool}: approval needed ({}); the user says yes",
            approval.reason
        );
        done = exec.execute_approved(request, approval, ctx).await;
    }
    let ToolExecutionOutcome::Completed(outcome) = done else {
        return Err(format!("{tool} was interrupted again").into());
    };
    let result = outcome.into_tool_result(id, tool);
    println!("{tool} -> {}", serde_json::to_string(&result.content)?);
    if result.is_error {
        return Err(format!("{tool} failed: {}", result.content).into());
    }
    Ok(result.content)
}

/// Announces what the session may see now and acknowledges it.
async fn deliver(
    client: &Client,
    activity: SessionActivity,
) -> Result<Vec<Message>, Box<dyn std::error::Error>> {
    let msgs = client.deliverable(SESSION, activity).await?;
    for m in &msgs {
        // A silent message joins the model's context; it starts no turn and tells no user.
        let how = if m.is_silent() { "context" } else { "deliver" };
        println!(
            "{how} ({activity:?}, {}): {}",
            m.delivery,
            m.body.lines().next().unwrap_or_default()
        );
    }
    let ids = msgs.iter().map(|m| m.id).collect();
    client.mark_inbox(SESSION, ids, true).await?;
    Ok(msgs)
}

fn run_id(v: &Value) -> Result<RunId, Box<dyn std::error::Error>> {
    Ok(v["run_id"]
        .as_str()
        .ok_or("no run_id in the reply")?
        .parse()?)
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
        .tool(LookupSlow)
        .tool(Audit)
        // Calls of these are queued and acknowledged at once; the result comes by the inbox.
        .mode(
            "health_check",
            ToolExecutionMode::background(When::Interrupt),
        )
        .mode("audit", ToolExecutionMode::background(When::Silent))
        .build()?;
    let client = Client::open(config, registry)?;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(client.worker(Default::default()).run(stop.clone()));
    let exec = client.executor();
    let ctx = ExecContext::new(SESSION);

    // 1. The specs the model is offered.
    for d in exec.specs() {
        println!("spec: {} - {}", d.name, d.description);
    }

    // 2. An inline call: the model waits for its result.
    call(&exec, &ctx, "call_1", "lookup", json!({"word": "toolq"})).await?;

    // 3. A call that needs approval: interrupted, approved, then run.
    call(&exec, &ctx, "call_2", "deploy", json!({"service": "api"})).await?;

    // 4. Background work: a tool in Background mode (acknowledged at once), a run and a cron
    //    monitor through spawn_background (delivered when idle), and a silent audit.
    let health = call(
        &exec,
        &ctx,
        "call_3",
        "health_check",
        json!({"service": "api"}),
    )
    .await?;
    let health = run_id(&health)?;
    let spawned = call(
        &exec,
        &ctx,
        "call_4",
        "spawn_background",
        json!({"tool": "lookup_slow", "args": {"word": "background"}, "title": "slow lookup"}),
    )
    .await?;
    let spawned = run_id(&spawned)?;
    let monitor = call(
        &exec,
        &ctx,
        "call_5",
        "spawn_background",
        json!({"tool": "health_check", "args": {"service": "db"},
               "schedule": {"cron_expression": "*/10 * * * *"}}),
    )
    .await?;
    let schedule: ScheduleId = monitor["schedule_id"]
        .as_str()
        .ok_or("no schedule_id in the reply")?
        .parse()?;
    let audit = call(&exec, &ctx, "call_6", "audit", json!({})).await?;
    let audit = run_id(&audit)?;
    for id in [&health, &spawned, &audit] {
        client.wait(id).await?;
    }

    // 5. Delivery by mode. Busy (mid-turn): the interrupt message, and the silent audit
    //    into the context.
    let busy = deliver(&client, SessionActivity::Busy).await?;
    if busy.iter().any(|m| m.delivery == "when_idle") {
        return Err("when_idle messages are held back while busy".into());
    }
    if !busy
        .iter()
        .any(|m| m.run_id.as_deref() == Some(health.as_str()))
    {
        return Err("the interrupt message was not delivered while busy".into());
    }
    println!("busy: when_idle messages held back");
    // Idle (between turns): the when_idle one.
    let idle = deliver(&client, SessionActivity::Idle).await?;
    if !idle
        .iter()
        .any(|m| m.run_id.as_deref() == Some(spawned.as_str()))
    {
        return Err("the when_idle message was not delivered when idle".into());
    }
    let history = client
        .inbox(
            SESSION,
            InboxFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await?;
    let silent = history
        .iter()
        .find(|m| m.run_id.as_deref() == Some(audit.as_str()))
        .ok_or("the silent message is not in the history")?;
    if !busy.iter().any(|m| m.id == silent.id && m.is_silent()) || silent.acked_at.is_none() {
        return Err("the silent message joins the context while busy, then is acked".into());
    }
    println!(
        "silent: {} added to the context without a turn",
        silent.kind
    );

    client.cancel_schedule(&schedule).await?;
    stop.cancel();
    worker.await??;
    println!("done");
    Ok(())
}
