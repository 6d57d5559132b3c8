//! `toolq worker`: run the worker until SIGINT/SIGTERM, or until drained.

use tokio_util::sync::CancellationToken;

use super::{Ctx, render};
use crate::error::{Error, Result};
use crate::worker::WorkerOptions;

/// Flags of `worker`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Exit 0 once nothing is runnable, no retry is waiting for its backoff, and nothing of
    /// this worker's is running.
    #[arg(long)]
    pub drain: bool,
}

/// Runs the worker; the first SIGINT/SIGTERM starts a graceful shutdown.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let shutdown = CancellationToken::new();
    let signal_token = shutdown.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::io("listen for SIGTERM", e))?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutdown requested: no new claims; in-flight runs get the grace period");
        signal_token.cancel();
    });
    let worker = ctx.client.worker(WorkerOptions { drain: args.drain });
    let cfg = &ctx.client.config().worker;
    tracing::info!(
        worker_id = %worker.id(),
        db = %ctx.client.store().path().display(),
        concurrency = cfg.concurrency,
        per_session = cfg.per_session,
        "worker starting"
    );
    let report = worker.run(shutdown).await?;
    if ctx.json {
        render::json(&report);
    } else {
        render::note(&format!(
            "worker stopped: {} claimed, {} recorded, {} handed back, {} dropped after losing the lease",
            report.claimed, report.recorded, report.handed_back, report.fenced_out
        ));
    }
    Ok(())
}
