//! An async tool: `transfer` starts a transfer at an external service and follows it through
//! typed stages until it settles. The "service" is a directory of files, so it outlives any
//! worker: kill the worker with -9 mid-transfer, start another, and the transfer is resumed
//! (stage `resumed`), never started twice (`starts.log` has one line).
//!
//! ```text
//! cargo run --example async_tool                        # a demo in a temp dir
//! async_tool enqueue DB SERVICE_DIR AMOUNT              # prints the run id
//! async_tool worker DB SERVICE_DIR                      # a worker, until SIGTERM / Ctrl-C
//! ```
//!
//! While `SERVICE_DIR/hold` exists the service keeps a transfer in `sending`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::Stream;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::tool::async_tool::AsyncError;
use toolq::tool::{AsyncOutcome, AsyncTool, ProgressStage, ToolStatus};
use toolq::{Client, Config, EnqueueRequest, RegistryBuilder, ToolContext, ToolDef};

/// The stages of a transfer, stored by name.
#[derive(Debug, Clone, Copy)]
enum TransferStage {
    Queued,
    Sending,
}

impl ProgressStage for TransferStage {
    fn as_str(&self) -> &str {
        match self {
            TransferStage::Queued => "queued",
            TransferStage::Sending => "sending",
        }
    }
}

/// What the service says about a transfer.
enum ServiceStatus {
    Queued,
    Sending(f64),
    Settled(String),
    Rejected(String),
}

/// The fake external service: one directory per transfer, state in files, so it survives any
/// process. Each status query moves a transfer one step on (a real service moves on its own).
#[derive(Debug, Clone)]
struct FileService {
    dir: PathBuf,
}

impl FileService {
    /// Starts a transfer. The run id is the idempotency key: asking again for the same run
    /// returns the same transfer.
    fn start(&self, run_id: &str, amount: u64) -> std::io::Result<String> {
        let by_run = self.dir.join("by_run").join(run_id);
        if let Ok(op) = std::fs::read_to_string(&by_run) {
            return Ok(op);
        }
        let op = format!("tx_{}", uuid::Uuid::now_v7().simple());
        std::fs::create_dir_all(self.dir.join(&op))?;
        std::fs::create_dir_all(self.dir.join("by_run"))?;
        std::fs::write(self.dir.join(&op).join("amount"), amount.to_string())?;
        std::fs::write(&by_run, &op)?;
        let mut starts = std::fs::read_to_string(self.dir.join("starts.log")).unwrap_or_default();
        starts.push_str(&format!("{op}\n"));
        std::fs::write(self.dir.join("starts.log"), starts)?;
        Ok(op)
    }

    fn status(&self, op: &str) -> std::io::Result<ServiceStatus> {
        let dir = self.dir.join(op);
        let amount: u64 = std::fs::read_to_string(dir.join("amount"))?
            .trim()
            .parse()
            .map_err(std::io::Error::other)?;
        let polls: u32 = std::fs::read_to_string(dir.join("polls"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0)
            + 1;
        std::fs::write(dir.join("polls.tmp"), polls.to_string())?;
        std::fs::rename(dir.join("polls.tmp"), dir.join("polls"))?;
        Ok(match polls {
            1 => ServiceStatus::Queued,
            _ if amount > 1000 => ServiceStatus::Rejected(format!("{amount} is over the limit")),
            2..=4 => ServiceStatus::Sending(f64::from(polls - 1) / 4.0),
            _ if self.dir.join("hold").exists() => ServiceStatus::Sending(0.75),
            _ => ServiceStatus::Settled(format!("receipt-{op}")),
        })
    }
}

/// Starts a transfer and follows it.
struct Transfer {
    service: FileService,
    poll: Duration,
}

impl AsyncTool for Transfer {
    type Stage = TransferStage;

    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "transfer",
            "Sends an amount through the transfer service and waits until it settles.",
            json!({
                "type": "object",
                "properties": {"amount": {"type": "integer", "minimum": 1}},
                "required": ["amount"],
                "additionalProperties": false
            }),
        )
        .display_name("Transfer")
    }

    async fn execute(&self, ctx: &ToolContext, input: Value) -> Result<AsyncOutcome, AsyncError> {
        let amount = input["amount"].as_u64().unwrap_or_default();
        let op = self.service.start(ctx.run_id.as_str(), amount)?;
        Ok(AsyncOutcome::in_progress(
            op,
            format!("transfer of {amount} initiated"),
        ))
    }

    fn check_status(
        &self,
        _ctx: &ToolContext,
        operation_id: &str,
    ) -> impl Stream<Item = ToolStatus<TransferStage>> + Send {
        let (service, op, poll) = (self.service.clone(), operation_id.to_string(), self.poll);
        futures_util::stream::unfold(Some(true), move |state| {
            let (service, op) = (service.clone(), op.clone());
            async move {
                let first = state?;
                if !first {
                    tokio::time::sleep(poll).await;
                }
                let status = match service.status(&op) {
                    Ok(ServiceStatus::Queued) => ToolStatus::Progress {
                        stage: TransferStage::Queued,
                        message: "waiting for the bank".into(),
                        progress: Some(0.0),
                    },
                    Ok(ServiceStatus::Sending(p)) => ToolStatus::Progress {
                        stage: TransferStage::Sending,
                        message: format!("sending ({:.0}%)", p * 100.0),
                        progress: Some(p),
                    },
                    Ok(ServiceStatus::Settled(receipt)) => {
                        return Some((ToolStatus::completed(json!({"receipt": receipt})), None));
                    }
                    Ok(ServiceStatus::Rejected(why)) => {
                        return Some((ToolStatus::Failed(why), None));
                    }
                    // The service is unreachable: keep asking; the run's timeout bounds this.
                    Err(e) => ToolStatus::Progress {
                        stage: TransferStage::Sending,
                        message: format!("service unreachable: {e}"),
                        progress: None,
                    },
                };
                Some((status, Some(false)))
            }
        })
    }
}

fn client(db: &Path, service: &Path) -> Result<Client, Box<dyn std::error::Error>> {
    let mut config = Config::default();
    // A postgres:// URL in place of the file runs the example on Postgres.
    let location = db.display().to_string();
    if toolq::db_url::is_postgres(&location) {
        config.db_url = Some(location);
    } else {
        config.db_path = location;
    }
    config.worker.poll_interval = Duration::from_millis(50);
    config.worker.heartbeat_interval = Duration::from_millis(200);
    config.worker.flush_interval = Duration::from_millis(100);
    config.runs.backoff_base = Duration::from_millis(100);
    let registry = RegistryBuilder::new()
        .async_tool(Transfer {
            service: FileService {
                dir: service.to_path_buf(),
            },
            poll: Duration::from_millis(50),
        })
        .build()?;
    Ok(Client::open(config, registry)?)
}

async fn enqueue(db: &Path, service: &Path, amount: u64) -> Result<(), Box<dyn std::error::Error>> {
    let client = client(db, service)?;
    let run = client
        .enqueue(EnqueueRequest::new("transfer", json!({"amount": amount})).session("bank"))
        .await?;
    println!("{}", run.run_id);
    Ok(())
}

async fn worker(db: &Path, service: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let client = client(db, service)?;
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        on_signal.cancel();
    });
    client.worker(Default::default()).run(stop).await?;
    Ok(())
}

async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (db, service) = (dir.path().join("toolq.db"), dir.path().join("service"));
    std::fs::create_dir_all(&service)?;
    let client = client(&db, &service)?;
    let run = client
        .enqueue(EnqueueRequest::new("transfer", json!({"amount": 250})).session("bank"))
        .await?;
    let report = client
        .worker(toolq::WorkerOptions { drain: true })
        .run(CancellationToken::new())
        .await?;
    let run = client.get(&run.run_id).await?;
    println!(
        "run {} {} (operation {}), {} attempt(s), {} recorded",
        run.id,
        run.state,
        run.operation_id.as_deref().unwrap_or("-"),
        run.attempt,
        report.recorded
    );
    for st in run.stages.as_array().into_iter().flatten() {
        println!(
            "  {} {:<10} {}",
            st["at"].as_str().unwrap_or("-"),
            st["stage"].as_str().unwrap_or("-"),
            st["message"].as_str().unwrap_or("")
        );
    }
    if run.state != toolq::RunState::Completed {
        return Err(format!("the transfer ended {}: {:?}", run.state, run.error).into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = |i: usize| -> Result<PathBuf, String> {
        args.get(i).map(PathBuf::from).ok_or_else(|| {
            "usage: async_tool [enqueue DB SERVICE AMOUNT | worker DB SERVICE]".into()
        })
    };
    match args.first().map(String::as_str) {
        None => demo().await,
        Some("enqueue") => {
            let amount = args
                .get(3)
                .and_then(|a| a.parse().ok())
                .ok_or("async_tool enqueue: AMOUNT must be a positive integer")?;
            enqueue(&path(1)?, &path(2)?, amount).await
        }
        Some("worker") => worker(&path(1)?, &path(2)?).await,
        Some(other) => Err(format!("async_tool: unknown command {other:?}").into()),
    }
}
