//! `toolq retry RUN`.

use serde_json::json;

use super::{Ctx, render, run_id};
use crate::error::Result;

/// Flags of `retry`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...).
    pub run: String,
}

/// Re-queues a failed or cancelled run as a new attempt.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let id = run_id(&args.run)?;
    ctx.client.retry(&id).await?;
    if ctx.json {
        render::json(&json!({"id": id, "run_id": id, "state": "queued"}));
    } else {
        render::line(&format!("re-queued {id}"));
    }
    Ok(())
}
