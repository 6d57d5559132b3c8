//! `toolq deny RUN [--by NAME] [--reason TEXT]`: cancel an awaiting run with a message.

use super::approve::actor;
use super::input::run_id;
use super::{Ctx, render};
use crate::error::Result;
use crate::run::RunAnswer;

/// Flags of `deny`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...), in state awaiting_approval.
    pub run: String,
    /// Who denies (kept on the run) [default: $USER, else "operator"].
    #[arg(long)]
    pub by: Option<String>,
    /// Why (kept on the run and told to the session).
    #[arg(long)]
    pub reason: Option<String>,
}

/// Denies the run: it ends cancelled and its session gets a message.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let id = run_id(&args.run)?;
    let by = actor(args.by);
    let run = ctx.client.deny(&id, &by, args.reason.as_deref()).await?;
    if ctx.json {
        render::json(&RunAnswer::decided(&run));
    } else {
        render::line(&format!("denied {id} (by {by}); it is cancelled"));
    }
    Ok(())
}
