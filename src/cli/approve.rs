//! `toolq approve RUN [--by NAME] [--note TEXT]`: queue an awaiting run to execute.

use super::input::run_id;
use super::{Ctx, render};
use crate::error::Result;
use crate::run::RunAnswer;

/// Flags of `approve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...), in state awaiting_approval.
    pub run: String,
    /// Who approves (kept on the run) [default: $USER, else "operator"].
    #[arg(long)]
    pub by: Option<String>,
    /// Why (kept on the run).
    #[arg(long)]
    pub note: Option<String>,
}

/// The acting operator: `--by`, else `$USER`, else "operator".
pub(crate) fn actor(by: Option<String>) -> String {
    by.or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "operator".into())
}

/// Approves the run; a worker then executes it.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let id = run_id(&args.run)?;
    let by = actor(args.by);
    let run = ctx.client.approve(&id, &by, args.note.as_deref()).await?;
    if ctx.json {
        render::json(&RunAnswer::decided(&run));
    } else {
        render::line(&format!("approved {id} (by {by}); it is queued to run"));
    }
    Ok(())
}
