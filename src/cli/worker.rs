//! `toolq worker`: run the worker until SIGINT/SIGTERM, or until drained.

use tokio_util::sync::CancellationToken;

use super::{Ctx, render};
use crate::config::Override;
use crate::error::{Error, Result};
use crate::worker::{Worker, WorkerOptions};

/// Flags of `worker`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Exit 0 once nothing is runnable, no retry is waiting for its backoff, and nothing of
    /// this worker's is running.
    #[arg(long)]
    pub drain: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Serve the web dashboard at http://ADDR/ beside the worker (web.token and
    /// web.read_only apply; any address but loopback needs a token).
    #[arg(long, value_name = "ADDR")]
    pub web: Option<String>,
    /// Log lines as text or JSON (on stderr).
    #[arg(long, value_enum, default_value_t = super::logging::LogFormat::Text)]
    pub log_format: super::logging::LogFormat,
    /// Log filter, RUST_LOG syntax (e.g. info, toolq=debug); default: RUST_LOG, else info.
    #[arg(long, value_name = "FILTER")]
    pub log: Option<String>,
    /// Running runs in this process (overrides worker.concurrency).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub concurrency: Option<i64>,
    /// Running runs per session over all workers (overrides worker.per_session).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub per_session: Option<i64>,
    /// How often to look for work when nothing woke the worker, e.g. 500ms (overrides
    /// worker.poll_interval).
    #[arg(long, value_name = "DURATION")]
    pub poll_interval: Option<String>,
    /// On SIGINT/SIGTERM, how long in-flight runs may finish, e.g. 30s (overrides
    /// worker.shutdown_grace).
    #[arg(long, value_name = "DURATION")]
    pub shutdown_grace: Option<String>,
}

impl Args {
    /// The config keys these flags set; validated with the rest of the configuration.
    pub fn overrides(&self) -> Vec<Override> {
        let mut o = Vec::new();
        if let Some(n) = self.concurrency {
            o.push(Override::new("worker.concurrency", n, "--concurrency"));
        }
        if let Some(n) = self.per_session {
            o.push(Override::new("worker.per_session", n, "--per-session"));
        }
        if let Some(d) = &self.poll_interval {
            o.push(Override::new(
                "worker.poll_interval",
                d.as_str(),
                "--poll-interval",
            ));
        }
        if let Some(d) = &self.shutdown_grace {
            o.push(Override::new(
                "worker.shutdown_grace",
                d.as_str(),
                "--shutdown-grace",
            ));
        }
        o
    }
}

/// Runs the worker; the first SIGINT/SIGTERM starts a graceful shutdown.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let shutdown = shutdown_on_signal()?;
    let worker = ctx.client.worker(WorkerOptions { drain: args.drain });
    log_start(ctx, &worker);
    let stop_extras = CancellationToken::new();
    start_extras(ctx, &args, &worker, &stop_extras).await?;
    let report = worker.run(shutdown).await;
    stop_extras.cancel();
    let report = report?;
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

/// A token the first SIGINT or SIGTERM cancels.
fn shutdown_on_signal() -> Result<CancellationToken> {
    let shutdown = CancellationToken::new();
    let signal_token = shutdown.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::io("listen for SIGTERM", e))?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        // Cancel before logging: the log line is the part that can go wrong.
        signal_token.cancel();
        tracing::info!("shutdown requested: no new claims; in-flight runs get the grace period");
    });
    Ok(shutdown)
}

/// The "worker starting" line: who, on which database and config, with which tools.
fn log_start(ctx: &Ctx, worker: &Worker) {
    let cfg = &ctx.client.config().worker;
    let tools: Vec<String> = ctx
        .client
        .registry()
        .iter()
        .map(|e| e.def.name.clone())
        .collect();
    tracing::info!(
        worker_id = %worker.id(),
        db = %ctx.client.engine().location(),
        config = %ctx.config_file,
        concurrency = cfg.concurrency,
        per_session = cfg.per_session,
        tools = %tools.join(","),
        "worker starting"
    );
}

/// What runs beside the worker until `stop`: the metrics endpoint (`--metrics`), the
/// dashboard (`--web`) and the drain bar (`--drain` on a terminal).
async fn start_extras(
    ctx: &Ctx,
    args: &Args,
    worker: &Worker,
    stop: &CancellationToken,
) -> Result<()> {
    if let Some(addr) = &args.metrics {
        let server = crate::metrics::serve::MetricsServer::bind(addr).await?;
        let bound = server.local_addr()?;
        tracing::info!(address = %bound, "serving metrics at http://{bound}/metrics");
        tokio::spawn(server.serve(ctx.client.clone(), worker.metrics(), stop.clone()));
    }
    if let Some(addr) = &args.web {
        let web =
            crate::web::WebServer::bind(ctx.client.clone(), super::web::options(ctx, addr)).await?;
        let bound = web.local_addr()?;
        tracing::info!(address = %bound, "serving the dashboard at http://{bound}/");
        let stop = stop.clone();
        tokio::spawn(async move {
            if let Err(e) = web.serve(stop).await {
                tracing::warn!(error = %e, "dashboard stopped");
            }
        });
    }
    if let Some(pb) = args
        .drain
        .then(|| super::progress::bar(0, ctx.json, "draining"))
        .flatten()
    {
        tokio::spawn(drain_progress(
            ctx.client.clone(),
            worker.metrics(),
            pb,
            stop.clone(),
        ));
    }
    Ok(())
}

/// How often the drain bar moves (its position comes from the worker's own counters).
const BAR_REDRAW: std::time::Duration = std::time::Duration::from_millis(250);

/// The wait before the drain bar counts the unfinished runs again, after a count that took
/// `took`: at least 40 times as long, so the count (which reads every queued run: ~60 ms of
/// CPU with 1,000,000 queued) keeps under 2.5 % of a reader and of the draining worker's CPU.
fn recount_after(took: std::time::Duration) -> std::time::Duration {
    (took * 40).max(BAR_REDRAW)
}

/// Redraws the drain bar: done = runs this worker finished, total = done + unfinished at the
/// last count. The position moves every redraw; the total is recounted at [`recount_after`].
async fn drain_progress(
    client: crate::client::Client,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    pb: indicatif::ProgressBar,
    stop: CancellationToken,
) {
    let done = || -> u64 {
        ["completed", "failed", "cancelled"]
            .iter()
            .map(|o| metrics.finishes(o))
            .sum()
    };
    let mut next_count = tokio::time::Instant::now();
    loop {
        let now = tokio::time::Instant::now();
        // Also when the bar is full: runs enqueued since the last count raise the total.
        if now >= next_count || done() >= pb.length().unwrap_or(0) {
            let before = done();
            if let Ok(left) = client.engine().run_count_unfinished().await {
                pb.set_length(before + left.max(0) as u64);
            }
            next_count = now + recount_after(now.elapsed());
        }
        pb.set_position(done());
        tokio::select! {
            _ = tokio::time::sleep(BAR_REDRAW) => {}
            _ = stop.cancelled() => break,
        }
    }
    pb.finish_and_clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_slow_count_of_unfinished_runs_is_repeated_less_often() {
        // A count over a small queue is redone at the redraw; one over a deep queue waits
        // 40 times its own duration.
        assert_eq!(recount_after(Duration::from_millis(1)), BAR_REDRAW);
        assert_eq!(
            recount_after(Duration::from_millis(170)),
            Duration::from_millis(6_800)
        );
    }
}
