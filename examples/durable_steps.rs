//! A durable tool: `journey` records three steps with `ctx.step` and waits for the event
//! `go` between steps 2 and 3 with `ctx.wait_for_event`. While it waits the run is suspended
//! (queued, waiting for "go"): it holds no worker slot and no lease. `Client::signal` delivers
//! the event, the run is claimed again, steps 1 and 2 replay from their records without
//! running, the wait returns the event's payload, and step 3 runs. The result is the payload.
//!
//! Each step appends `step N run RUN_ID` to the file named by the run's `log` argument (when
//! given) before it returns, so a process outside the database can count how often each
//! step's closure ran: once, unless its worker died after the closure finished and before
//! its record committed (`tests/it/durable_crash.rs` kills workers of this example with -9).
//!
//! ```text
//! cargo run --example durable_steps                  # a demo in a temp dir
//! cargo run --example durable_steps -- demo DB       # the demo on DB (say ./durable_steps.db)
//! durable_steps enqueue DB LOG N [PAUSE_MS]          # N runs; prints their ids, one a line
//! durable_steps worker DB [CONCURRENCY]              # a worker, until SIGTERM / Ctrl-C
//! ```
//!
//! `PAUSE_MS`: each step sleeps up to that long (at random) after it appended its line, so a
//! killed worker may leave a step that ran but was not recorded.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::{
    Client, Config, EnqueueRequest, RegistryBuilder, RunState, StepError, Tool, ToolContext,
    ToolDef, ToolOutcome, WaitKind,
};

/// Three recorded steps and a wait for "go" between steps 2 and 3.
struct Journey;

impl Journey {
    /// Step `n`: appends its line to `log` (one write, O_APPEND), then pauses.
    async fn step(
        ctx: &ToolContext,
        n: u32,
        log: Option<&str>,
        pause_ms: u64,
    ) -> Result<u32, StepError> {
        let run = ctx.run_id.to_string();
        ctx.step(&format!("step{n}"), async move {
            if let Some(path) = log {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("open {path}: {e}"))?;
                f.write_all(format!("step {n} run {run}\n").as_bytes())
                    .map_err(|e| format!("append to {path}: {e}"))?;
            }
            if pause_ms > 0 {
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..=pause_ms))).await;
            }
            Ok::<_, String>(n)
        })
        .await
    }
}

#[async_trait]
impl Tool for Journey {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "journey",
            "Three recorded steps, and a wait for the event \"go\" between steps 2 and 3; \
             returns the event's payload.",
            json!({
                "type": "object",
                "properties": {
                    "log": {"type": "string"},
                    "pause_ms": {"type": "integer", "minimum": 0}
                },
                "additionalProperties": false
            }),
        )
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let log = ctx.args["log"].as_str().map(str::to_string);
        let pause_ms = ctx.args["pause_ms"].as_u64().unwrap_or(0);
        let go = async {
            Journey::step(&ctx, 1, log.as_deref(), pause_ms).await?;
            Journey::step(&ctx, 2, log.as_deref(), pause_ms).await?;
            // Suspends the run until "go" arrives (or a day passes): no slot is held meanwhile.
            let payload = ctx
                .wait_for_event("go", Duration::from_secs(86_400))
                .await?
                .ok_or_else(|| StepError::Store("no \"go\" within a day".into()))?;
            Journey::step(&ctx, 3, log.as_deref(), pause_ms).await?;
            Ok::<Value, StepError>(payload)
        };
        match go.await {
            Ok(payload) => ToolOutcome::ok(payload),
            Err(e) => e.into(),
        }
    }
}

/// A client of `db` (a file, or a postgres:// URL) with the `journey` tool.
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
    config.runs.backoff_base = Duration::from_millis(10);
    config.runs.backoff_max = Duration::from_millis(50);
    let registry = RegistryBuilder::new().tool(Journey).build()?;
    Ok(Client::open(config, registry)?)
}

async fn enqueue(
    db: &Path,
    log: &Path,
    n: usize,
    pause_ms: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = client(db, 1)?;
    let reqs = (0..n)
        .map(|i| {
            let mut r = EnqueueRequest::new(
                "journey",
                json!({"log": log.display().to_string(), "pause_ms": pause_ms}),
            )
            .session(format!("s{}", i % 4));
            // Every kill -9 of a worker holding the run costs it an attempt.
            r.max_attempts = Some(1000);
            r
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
    // Registered before the worker starts: a SIGTERM from then on stops it cleanly.
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

/// Enqueues one run, works it in this process, signals "go" once it waits, prints the result.
async fn demo(db: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let client = client(db, 4)?;
    let log = db.with_extension("steps.log");
    let run = client
        .enqueue(EnqueueRequest::new(
            "journey",
            json!({"log": log.display().to_string()}),
        ))
        .await?;
    let id = run.run_id;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(client.worker(Default::default()).run(stop.clone()));

    // Steps 1 and 2 run; then the run waits for "go", holding nothing.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let waiting = loop {
        let run = client.get(&id).await?;
        if let Some(w) = run.waiting.filter(|w| w.kind == WaitKind::Event) {
            break w;
        }
        if run.state.is_final() || tokio::time::Instant::now() > deadline {
            return Err(format!("run {id} never waited: {} {:?}", run.state, run.error).into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!("run {id} waits for {}", waiting.describe());
    let sent = client
        .signal(
            &id,
            "go",
            json!({"approved_by": "demo"}),
            Some("demo".into()),
        )
        .await?;
    println!("signalled \"go\" (woke the run: {})", sent.woke);

    let run = client.wait(&id).await?;
    stop.cancel();
    worker.await??;
    let result: Value = match client.result(&run).await? {
        Some(blob) => serde_json::from_slice(&blob.content)?,
        None => Value::Null,
    };
    println!(
        "run {id} {} after {} attempt(s): {}",
        run.state, run.attempt, result["result"]
    );
    for step in client.journal(&id).await?.steps {
        println!(
            "  {} {:<10} {}",
            step.seq,
            step.name,
            step.output.map(|o| o.to_string()).unwrap_or_default()
        );
    }
    let lines = std::fs::read_to_string(&log)?;
    print!("{lines}");
    if run.state != RunState::Completed {
        return Err(format!("the run ended {}: {:?}", run.state, run.error).into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: durable_steps [demo DB | enqueue DB LOG N [PAUSE_MS] | worker DB [CONCURRENCY]]";
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
            demo(&dir.path().join("durable_steps.db")).await
        }
        Some("demo") => demo(&path(1)?).await,
        Some("enqueue") => {
            let n = usize::try_from(number(3, None)?)?;
            enqueue(&path(1)?, &path(2)?, n, number(4, Some(0))?).await
        }
        Some("worker") => worker(&path(1)?, usize::try_from(number(2, Some(4))?)?).await,
        Some(other) => Err(format!("durable_steps: unknown command {other:?}; {usage}").into()),
    }
}
