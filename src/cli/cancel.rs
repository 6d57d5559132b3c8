//! `toolq cancel RUN` and `toolq cancel --state/--tool/... [--dry-run]` (bulk).

use super::input::run_id;
use super::{Ctx, bulk, render};
use crate::error::Result;
use crate::run::{RunAnswer, RunState};

/// Flags of `cancel`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...); or filters instead.
    pub run: Option<String>,
    /// Bulk: which runs.
    #[command(flatten)]
    pub filter: bulk::Filter,
}

/// Cancels at once when waiting; asks a running run to stop. With filters, every match.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let Some(run) = &args.run else {
        let (filter, opts) = args.filter.parse(ctx, "cancel")?;
        let report = ctx.client.cancel_where(&filter, opts).await?;
        bulk::show(ctx, &report, "cancelled", true);
        return Ok(());
    };
    if args.filter.any() {
        return Err(bulk::refuse_mixed("cancel", run).into());
    }
    let id = run_id(run)?;
    let state = ctx.client.cancel(&id).await?;
    let text = match state {
        RunState::Running => {
            format!("cancel requested for {id}; its worker stops it within a heartbeat interval")
        }
        _ => format!("cancelled {id}"),
    };
    if ctx.json {
        render::json(&RunAnswer::cancelled(&id, state));
    } else {
        render::line(&text);
    }
    Ok(())
}
