//! `toolq retry RUN` and `toolq retry --state/--tool/... [--dry-run]` (bulk).

use super::input::run_id;
use super::{Ctx, bulk, render};
use crate::error::Result;
use crate::run::RunAnswer;

/// Flags of `retry`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...); or filters instead.
    pub run: Option<String>,
    /// Bulk: which runs.
    #[command(flatten)]
    pub filter: bulk::Filter,
}

/// Re-queues a failed or cancelled run as a new attempt. With filters, every match.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let Some(run) = &args.run else {
        let (filter, opts) = args.filter.parse(ctx, "retry")?;
        let report = ctx.client.retry_where(&filter, opts).await?;
        bulk::show(ctx, &report, "retried", false);
        return Ok(());
    };
    if args.filter.any() {
        return Err(bulk::refuse_mixed("retry", run).into());
    }
    let id = run_id(run)?;
    let state = ctx.client.retry(&id).await?;
    if ctx.json {
        render::json(&RunAnswer::retried(&id, state));
    } else if state == crate::run::RunState::AwaitingApproval {
        render::line(&format!("re-queued {id}: awaiting approval"));
    } else {
        render::line(&format!("re-queued {id}"));
    }
    Ok(())
}
