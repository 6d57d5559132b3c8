//! `toolq result RUN`: the run's result JSON.

use super::input::run_id;
use super::{Ctx, render};
use crate::error::{Error, Result};

/// Flags of `result`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...).
    pub run: String,
}

/// Prints the result (pretty JSON either way; it is JSON already).
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let id = run_id(&args.run)?;
    let run = ctx.client.get(&id).await?;
    let Some(blob) = ctx.client.result(&run).await? else {
        return Err(Error::Conflict(format!(
            "run {id} has no result yet (state {})",
            run.state
        )));
    };
    match serde_json::from_slice::<serde_json::Value>(&blob.content) {
        Ok(v) => render::json(&v),
        Err(_) => render::raw(&String::from_utf8_lossy(&blob.content)),
    }
    Ok(())
}
