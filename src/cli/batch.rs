//! `toolq batch list|show|wait|cancel|retry`: batches made by `toolq enqueue --file F --batch`
//! (or `Client::create_batch`).

use std::time::Duration;

use super::input::filter;
use super::{Ctx, bulk, render};
use crate::bulk::BulkOptions;
use crate::config::parse_duration;
use crate::error::{Error, InputError, Result};
use crate::ids::BatchId;
use crate::run::{Batch, BatchFilter, RunFilter};

/// Flags of `batch`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Sub,
}

/// The `batch` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// List batches, newest first.
    #[command(
        after_help = "Examples:\n  toolq batch list --state running\n  toolq --json batch list --session nightly"
    )]
    List(ListArgs),
    /// Show one batch: its counters, its runs by state (blocked ones apart), its first
    /// failures, its callback run and how often it completed.
    #[command(after_help = "Examples:\n  toolq batch show bt_0193...")]
    Show(IdArgs),
    /// Block until every run of the batch is final: exit 0 then (the counts tell how its runs
    /// ended), 1 when --timeout runs out first.
    #[command(
        after_help = "Examples:\n  toolq batch wait \"$(toolq enqueue --file runs.jsonl --batch)\" --timeout 1h"
    )]
    Wait(WaitArgs),
    /// Cancel every queued, blocked, awaiting or running run of the batch (bulk cancel).
    #[command(after_help = "Examples:\n  toolq batch cancel bt_0193... --dry-run")]
    Cancel(ActArgs),
    /// Re-queue every failed or cancelled run of the batch (bulk retry); this reopens the
    /// batch, and its next completion sends a new message.
    #[command(after_help = "Examples:\n  toolq batch retry bt_0193...")]
    Retry(ActArgs),
}

/// Flags of `batch list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this session's batches.
    #[arg(long)]
    pub session: Option<String>,
    /// Only batches in this state: running or completed.
    #[arg(long, value_name = "running|completed")]
    pub state: Option<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 50)]
    pub limit: i64,
}

/// A batch id argument.
#[derive(Debug, clap::Args)]
pub struct IdArgs {
    /// The batch id (bt_...).
    pub batch: String,
}

/// Flags of `batch wait`.
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// The batch id (bt_...).
    pub batch: String,
    /// Give up after this long (e.g. 30s, 10m) and exit 1 naming how many runs are still
    /// going [default: wait as long as it takes].
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
}

/// Flags of `batch cancel` and `batch retry`.
#[derive(Debug, clap::Args)]
pub struct ActArgs {
    /// The batch id (bt_...).
    pub batch: String,
    /// Print how many runs match and the first ids; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs the subcommand.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    match args.command {
        Sub::List(a) => list(ctx, a).await,
        Sub::Show(a) => {
            let batch = ctx.client.batch(&parse(&a.batch)?).await?;
            if ctx.json {
                render::json(&batch);
            } else {
                render::fields(&fields(&batch));
            }
            Ok(())
        }
        Sub::Wait(a) => wait(ctx, a).await,
        Sub::Cancel(a) => act(ctx, a, true).await,
        Sub::Retry(a) => act(ctx, a, false).await,
    }
}

/// The batch id argument (exit 2 when malformed).
fn parse(s: &str) -> Result<BatchId, InputError> {
    s.parse()
}

async fn list(ctx: &Ctx, a: ListArgs) -> Result<()> {
    if !(1..=100_000).contains(&a.limit) {
        return Err(InputError::new(
            "--limit",
            a.limit.to_string(),
            "must be between 1 and 100000",
        )
        .into());
    }
    let state = match a.state.as_deref() {
        None => None,
        Some(s @ ("running" | "completed")) => Some(s.to_string()),
        Some(s) => {
            return Err(InputError::new("--state", s, "must be running or completed").into());
        }
    };
    let batches = ctx
        .client
        .batches(BatchFilter {
            session: filter("--session", a.session)?,
            state,
            before: None,
            limit: a.limit,
        })
        .await?;
    if ctx.json {
        render::json(&batches);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = batches
        .iter()
        .map(|b| {
            vec![
                b.id.to_string(),
                b.state.to_string(),
                b.session_id.clone(),
                format!("{}/{}", b.total - b.pending, b.total),
                b.completed.to_string(),
                b.failed.to_string(),
                b.cancelled.to_string(),
                render::time(&b.created_at),
                b.title.clone(),
            ]
        })
        .collect();
    render::table(
        &[
            "ID",
            "STATE",
            "SESSION",
            "DONE",
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "CREATED",
            "TITLE",
        ],
        &rows,
    );
    Ok(())
}

/// A batch as `key: value` lines.
fn fields(b: &Batch) -> Vec<(&'static str, String)> {
    let mut pairs = vec![
        ("id", b.id.to_string()),
        ("state", b.state.to_string()),
        ("title", b.title.clone()),
        ("session", b.session_id.clone()),
        (
            "progress",
            format!("{} of {} runs final", b.total - b.pending, b.total),
        ),
        (
            "ended",
            format!(
                "{} completed, {} failed, {} cancelled",
                b.completed, b.failed, b.cancelled
            ),
        ),
    ];
    if !b.states.is_empty() {
        let by_state: Vec<String> = b.states.iter().map(|(s, n)| format!("{s} {n}")).collect();
        pairs.push(("runs", by_state.join(", ")));
    }
    pairs.push(("created_at", render::time(&b.created_at)));
    pairs.push((
        "completed_at",
        b.completed_at.as_ref().map_or("-".into(), render::time),
    ));
    pairs.push(("completions", b.completions.to_string()));
    if let Some(cb) = &b.on_complete {
        pairs.push(("on_complete", format!("{} {}", cb.tool, cb.args)));
    }
    if let Some(r) = &b.callback_run_id {
        pairs.push(("callback_run", r.clone()));
    }
    if !b.first_failures.is_empty() {
        let rows = b.first_failures.iter().map(|f| {
            vec![
                f.id.clone(),
                f.tool.clone(),
                f.state.clone(),
                f.error
                    .as_deref()
                    .map(super::show::summary)
                    .unwrap_or_default(),
            ]
        });
        pairs.push(("first_failures", super::show::indented(rows)));
    }
    pairs
}

/// The first pause between two looks at the batch (as `toolq wait` polls a run).
const FIRST_POLL: Duration = Duration::from_millis(50);
/// The longest pause between two looks.
const MAX_POLL: Duration = Duration::from_millis(500);

/// Polls the batch (one indexed read) until it completed or `--timeout` ran out, with the
/// backoff of [`crate::Client::wait`]: it needs nothing from the workers, which may be
/// elsewhere.
async fn wait(ctx: &Ctx, a: WaitArgs) -> Result<()> {
    let id = parse(&a.batch)?;
    let timeout = match &a.timeout {
        Some(t) => Some(parse_duration(t).map_err(|r| InputError::new("--timeout", t, r))?),
        None => None,
    };
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut pause = FIRST_POLL;
    let batch = loop {
        let batch = ctx.client.batch(&id).await?;
        let now = tokio::time::Instant::now();
        if batch.is_complete() || deadline.is_some_and(|d| now >= d) {
            break batch;
        }
        let mut nap = pause;
        if let Some(d) = deadline {
            nap = nap.min(d.saturating_duration_since(now));
        }
        tokio::time::sleep(nap).await;
        pause = (pause * 2).min(MAX_POLL);
    };
    if ctx.json {
        render::json_sorted(&batch.waited());
    } else {
        render::fields(&fields(&batch));
    }
    if !batch.is_complete() {
        return Err(Error::Conflict(format!(
            "timed out after {}; batch {} still going: {} of {} runs not final",
            a.timeout.unwrap_or_default(),
            batch.id,
            batch.pending,
            batch.total
        )));
    }
    Ok(())
}

/// A bulk cancel or retry of the batch's runs, through the filters' machinery.
async fn act(ctx: &Ctx, a: ActArgs, cancel: bool) -> Result<()> {
    let id = parse(&a.batch)?;
    // An unknown batch is "not found" (exit 1), not "0 runs match".
    ctx.client.batch(&id).await?;
    let filter = RunFilter {
        batch_id: Some(id.to_string()),
        ..RunFilter::default()
    };
    let opts = BulkOptions {
        dry_run: a.dry_run,
        ..BulkOptions::default()
    };
    let report = if cancel {
        ctx.client.cancel_where(&filter, opts).await?
    } else {
        ctx.client.retry_where(&filter, opts).await?
    };
    bulk::show(
        ctx,
        &report,
        if cancel { "cancelled" } else { "retried" },
        cancel,
    );
    Ok(())
}
