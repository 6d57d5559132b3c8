//! `toolq cancel RUN`.

use serde_json::json;

use super::{Ctx, render, run_id};
use crate::error::Result;
use crate::run::RunState;

/// Flags of `cancel`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...).
    pub run: String,
}

/// Cancels at once when waiting; asks a running run to stop.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let id = run_id(&args.run)?;
    let state = ctx.client.cancel(&id).await?;
    let text = match state {
        RunState::Running => {
            format!("cancel requested for {id}; its worker stops it within a heartbeat interval")
        }
        _ => format!("cancelled {id}"),
    };
    if ctx.json {
        render::json(
            &json!({"id": id, "run_id": id, "state": state, "cancel_requested": state == RunState::Running}),
        );
    } else {
        render::line(&text);
    }
    Ok(())
}
