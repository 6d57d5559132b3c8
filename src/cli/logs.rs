//! `toolq logs RUN`: the run's log, with non-UTF-8 bytes and control characters escaped.

use serde_json::json;

use super::{Ctx, render, run_id};
use crate::error::{Error, Result};
use crate::tool::sink::escape_bytes;

/// Flags of `logs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...).
    pub run: String,
}

/// Prints the log (live view while running, final log once finished).
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let id = run_id(&args.run)?;
    let run = ctx.client.get(&id).await?;
    let blob = ctx.client.log(&run).await?;
    let Some(blob) = blob else {
        return Err(Error::Conflict(format!(
            "run {id} has no log yet (state {})",
            run.state
        )));
    };
    let text = escape_bytes(&blob.content);
    if ctx.json {
        render::json(
            &json!({"run_id": id, "path": blob.path, "size": blob.size, "truncated": blob.truncated,
            "state": run.state, "content": text}),
        );
    } else {
        render::raw(&text);
    }
    Ok(())
}
