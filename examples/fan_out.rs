//! Fan-out and fan-in from inside a tool: `fan_out` spawns one `square` child per number
//! (`ctx.spawn_child`, a recorded step each), waits for them without holding a worker slot
//! (`ctx.wait_children`) and sums their squares. With one slot the children still run: the
//! waiting parent is suspended, not running.
//!
//! ```text
//! cargo run --example fan_out                      # a demo in a temp dir
//! cargo run --example fan_out -- enqueue DB P C    # P parents of C children each; prints ids
//! cargo run --example fan_out -- worker DB [N]     # a worker with N slots until SIGTERM
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::{
    Client, Config, EnqueueRequest, RegistryBuilder, RunState, StepError, Tool, ToolContext,
    ToolDef, ToolOutcome,
};

/// Squares `n`, after `pause_ms`.
struct Square;

#[async_trait]
impl Tool for Square {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "square",
            "Squares n.",
            json!({"type": "object", "properties": {"n": {"type": "integer"},
                   "pause_ms": {"type": "integer"}}, "required": ["n"]}),
        )
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let n = ctx.args["n"].as_i64().unwrap_or_default();
        let pause = ctx.args["pause_ms"].as_u64().unwrap_or_default();
        tokio::time::sleep(Duration::from_millis(pause)).await;
        ToolOutcome::ok(json!({ "square": n * n }))
    }
}

/// Spawns a `square` child for each of 1..=children (`pause_ms` apart), waits for them, sums
/// the squares.
struct FanOut;

#[async_trait]
impl Tool for FanOut {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "fan_out",
            "Squares 1..=children in child runs and sums them.",
            json!({"type": "object", "properties": {"children": {"type": "integer"},
                   "pause_ms": {"type": "integer"}}, "required": ["children"]}),
        )
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let go = async {
            let pause = ctx.args["pause_ms"].as_u64().unwrap_or_default();
            for n in 1..=ctx.args["children"].as_i64().unwrap_or_default() {
                // A recorded step: a replay (after a wait, a retry or a crash) returns the
                // same child instead of spawning another.
                ctx.spawn_child("square", json!({"n": n, "pause_ms": pause}))
                    .await?;
                // Slow spawning (the crash test's window between spawns).
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            // Suspends the run until every child has ended; the slot is free meanwhile.
            let children = ctx.wait_children().await?;
            let sum: i64 = children
                .iter()
                .filter_map(|c| c.result["result"]["square"].as_i64())
                .sum();
            let failed = children.iter().filter(|c| c.state != "completed").count();
            Ok::<_, StepError>(json!({"sum": sum, "children": children.len(), "failed": failed}))
        };
        match go.await {
            Ok(v) => ToolOutcome::ok(v),
            Err(e) => e.into(),
        }
    }
}

/// A client of `db` (a file, or a postgres:// URL) with both tools.
fn client(db: &Path, concurrency: usize) -> Result<Client, Box<dyn std::error::Error>> {
    let mut config = Config::default();
    let location = db.display().to_string();
    if toolq::db_url::is_postgres(&location) {
        config.db_url = Some(location);
    } else {
        config.db_path = location;
    }
    config.worker.concurrency = concurrency;
    config.worker.poll_interval = Duration::from_millis(20);
    config.worker.heartbeat_interval = Duration::from_millis(100);
    config.worker.flush_interval = Duration::from_millis(50);
    // Every kill -9 of a worker holding a run costs it an attempt.
    config.runs.max_attempts = 1000;
    config.runs.backoff_base = Duration::from_millis(10);
    config.runs.backoff_max = Duration::from_millis(50);
    let registry = RegistryBuilder::new().tool(Square).tool(FanOut).build()?;
    Ok(Client::open(config, registry)?)
}

async fn enqueue(
    db: &Path,
    parents: usize,
    children: u64,
    pause_ms: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = client(db, 1)?;
    let reqs = (0..parents)
        .map(|i| {
            EnqueueRequest::new(
                "fan_out",
                json!({"children": children, "pause_ms": pause_ms}),
            )
            .session(format!("s{}", i % 3))
        })
        .collect();
    for run in client.enqueue_batch(reqs).await? {
        println!("{}", run.run_id);
    }
    Ok(())
}

async fn worker(db: &Path, concurrency: usize) -> Result<(), Box<dyn std::error::Error>> {
    let client = client(db, concurrency)?;
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        on_signal.cancel();
    });
    client.worker(Default::default()).run(stop).await?;
    Ok(())
}

/// One parent of ten children on a worker with one slot; prints the sum and the children.
async fn demo(db: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let client = client(db, 1)?;
    let id = client
        .enqueue(EnqueueRequest::new("fan_out", json!({"children": 10})))
        .await?
        .run_id;
    let worker = client.worker(toolq::WorkerOptions { drain: true });
    tokio::time::timeout(Duration::from_secs(60), worker.run(Default::default())).await??;
    let run = client.get(&id).await?;
    let result: Value = match client.result(&run).await? {
        Some(blob) => serde_json::from_slice(&blob.content)?,
        None => Value::Null,
    };
    println!(
        "run {id} {} after {} attempt(s): {}",
        run.state, run.attempt, result["result"]
    );
    for child in client.links(&id).await?.children {
        println!("  child {} {} {}", child.id, child.tool, child.state);
    }
    if run.state != RunState::Completed || result["result"]["sum"] != json!(385) {
        return Err(format!("the run ended {}: {:?}", run.state, run.error).into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: fan_out [demo DB | enqueue DB PARENTS CHILDREN [PAUSE_MS] | worker DB [CONCURRENCY]]";
    let path = |i: usize| -> Result<PathBuf, String> {
        args.get(i).map(PathBuf::from).ok_or_else(|| usage.into())
    };
    let number = |i: usize, default: Option<u64>| -> Result<u64, String> {
        match (args.get(i), default) {
            (Some(a), _) => a
                .parse()
                .map_err(|_| format!("{a:?} is not a number; {usage}")),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(usage.into()),
        }
    };
    match args.first().map(String::as_str) {
        None => {
            let dir = tempfile::tempdir()?;
            demo(&dir.path().join("fan_out.db")).await
        }
        Some("demo") => demo(&path(1)?).await,
        Some("enqueue") => {
            let parents = usize::try_from(number(2, None)?)?;
            enqueue(&path(1)?, parents, number(3, None)?, number(4, Some(0))?).await
        }
        Some("worker") => worker(&path(1)?, usize::try_from(number(2, Some(4))?)?).await,
        Some(other) => Err(format!("fan_out: unknown command {other:?}; {usage}").into()),
    }
}
