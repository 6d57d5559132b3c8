//! `toolq status`: worker processes with their last heartbeat and poll, and queued runs of
//! tools no live worker has. The health check: exits 1 when a live worker's claim loop is
//! stale (no poll for 3 poll intervals), or when work waits (queued runs, enabled schedules)
//! and no worker is alive.

use super::{Ctx, render};
use crate::error::{Error, Result};
use crate::status::{Liveness, StatusReport, WorkerStatus, plural, status};

/// The status report with the WAL's health beside it (`--json`).
#[derive(serde::Serialize)]
struct WithWal<'a> {
    #[serde(flatten)]
    report: &'a StatusReport,
    wal: &'a crate::store::WalHealth,
}

/// Flags of `status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Also list workers that stopped (cleanly, or found dead and marked stopped).
    #[arg(long)]
    pub all: bool,
}

/// Lists workers; a stale live worker makes the exit code 1 (after printing the list).
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let report = status(&ctx.client, args.all).await?;
    // A long-lived reader pinning the WAL is worth a warning, not a failing exit code.
    let wal = ctx.client.wal_health().await?;
    if ctx.json {
        render::json(&WithWal {
            report: &report,
            wal: &wal,
        });
    } else {
        print_text(&report, &wal);
    }
    verdict(&report)
}

/// The workers' table, then a note per unserved tool, pause and WAL warning.
fn print_text(report: &StatusReport, wal: &crate::store::WalHealth) {
    let rows: Vec<Vec<String>> = report.workers.iter().map(worker_row).collect();
    render::table(
        &[
            "WORKER",
            "STATE",
            "HOST",
            "PID",
            "STARTED",
            "HEARTBEAT",
            "LAST POLL",
            "BUSY",
        ],
        &rows,
    );
    if report.workers.is_empty() {
        render::note("no worker processes registered (use --all to include stopped ones)");
    }
    for u in &report.unserved_tools {
        render::note(&u.message());
    }
    for p in &report.paused {
        render::note(&format!("paused: {}", super::pause::describe(p)));
    }
    if let Some(w) = &wal.warning {
        render::note(&format!("WARNING: {w}"));
    }
}

/// One worker's row: a stopped worker says why it stopped.
fn worker_row(w: &WorkerStatus) -> Vec<String> {
    let r = &w.row;
    let state = match (&r.stop_reason, w.liveness) {
        (Some(reason), Liveness::Stopped) => format!("stopped ({reason})"),
        (_, l) => l.as_str().to_string(),
    };
    vec![
        r.id.clone(),
        state,
        r.host.clone(),
        r.pid.to_string(),
        r.started_at.clone(),
        r.heartbeat_at.clone(),
        render::opt(&r.last_poll_at),
        r.busy_retries.to_string(),
    ]
}

/// The health check's answer: an error (exit 1) naming stale workers, or work that waits
/// with no live worker.
fn verdict(report: &StatusReport) -> Result<()> {
    let mut problems = Vec::new();
    if report.stale > 0 {
        problems.push(format!(
            "{} live worker(s) stale: no claim poll for 3 poll intervals",
            report.stale
        ));
    }
    if report.unattended() {
        let work: Vec<String> = [
            (report.queued_runs, "queued run"),
            (report.enabled_schedules, "enabled schedule"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, noun)| plural(n, noun))
        .collect();
        problems.push(format!("no live worker for {}", work.join(" and ")));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Conflict(problems.join("; ")))
    }
}
