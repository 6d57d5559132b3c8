//! `toolq prune [--older-than 7d] [--dry-run]`: delete old finished work now.

use super::{Ctx, render};
use crate::config::parse_duration;
use crate::error::{InputError, Result};
use crate::retention::PruneOptions;

/// Flags of `prune`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// One age for everything instead of the `[retention]` ages (e.g. 7d, 12h).
    #[arg(long, value_name = "DURATION")]
    pub older_than: Option<String>,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Prunes and prints the rows removed per table, the runs also by outcome.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let older_than = args
        .older_than
        .as_deref()
        .map(|s| parse_duration(s).map_err(|r| InputError::new("--older-than", s, r)))
        .transpose()?;
    let report = ctx
        .client
        .prune(PruneOptions {
            older_than,
            dry_run: args.dry_run,
        })
        .await?;
    if ctx.json {
        render::json(&report);
        return Ok(());
    }
    let r = &report.removed;
    let verb = if report.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    render::fields(&[
        (
            "runs",
            format!(
                "{} (completed {}, failed {}, cancelled {})",
                r.runs, r.runs_completed, r.runs_failed, r.runs_cancelled
            ),
        ),
        ("blobs", r.blobs.to_string()),
        ("inbox", r.inbox.to_string()),
        ("occurrences", r.occurrences.to_string()),
        ("workers", r.workers.to_string()),
        ("batches", r.batches.to_string()),
        ("finished before", report.runs_before.clone()),
        ("failed before", report.failed_runs_before.clone()),
        ("cancelled before", report.cancelled_runs_before.clone()),
    ]);
    render::note(&format!(
        "{verb} {} rows{}",
        r.total(),
        if report.dry_run {
            String::new()
        } else {
            format!(" in {} transactions", report.batches)
        }
    ));
    Ok(())
}
