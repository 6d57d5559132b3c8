//! `toolq logs RUN [--follow]`: the run's log, with non-UTF-8 bytes and control characters
//! escaped; `--follow` streams it while the run is unfinished and returns when it ends.

use std::time::Duration;

use serde_json::json;

use super::input::run_id;
use super::{Ctx, render};
use crate::error::{Error, Result};
use crate::ids::RunId;
use crate::tool::sink::escape_bytes;

/// How often `--follow` looks for new output.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// Flags of `logs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...).
    pub run: String,
    /// Keep printing new output until the run finishes.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// Prints the log (live view while running, final log once finished).
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let id = run_id(&args.run)?;
    if args.follow {
        return follow(ctx, &id).await;
    }
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
            &json!({"id": id, "run_id": id, "path": blob.path, "size": blob.size, "truncated": blob.truncated,
            "state": run.state, "content": text}),
        );
    } else {
        render::raw(&text);
    }
    Ok(())
}

/// Prints whole new lines as the live log grows; a new attempt starts a new log. With
/// `--json`, one compact JSON object per chunk.
async fn follow(ctx: &Ctx, id: &RunId) -> Result<()> {
    let mut shown = 0usize;
    let mut attempt = None;
    loop {
        let run = ctx.client.get(id).await?;
        let finished = run.state.is_final();
        let content = ctx
            .client
            .log(&run)
            .await?
            .map(|b| b.content)
            .unwrap_or_default();
        if attempt.is_some_and(|a| a != run.attempt) || content.len() < shown {
            // A retry or rescue writes a fresh log: start over.
            shown = 0;
            emit(
                ctx,
                id,
                run.attempt,
                &format!("--- attempt {} ---\n", run.attempt),
            );
        }
        attempt = Some(run.attempt);
        let new = &content[shown.min(content.len())..];
        // Whole lines only while running, so a character is never split between two reads.
        let upto = if finished {
            new.len()
        } else {
            new.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)
        };
        if upto > 0 {
            emit(ctx, id, run.attempt, &escape_bytes(&new[..upto]));
            shown += upto;
        }
        // Nobody reads the output any more: stop following.
        render::check()?;
        if finished {
            if !ctx.json {
                render::note(&format!("run {id} {}", run.state));
            }
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

fn emit(ctx: &Ctx, id: &RunId, attempt: i64, text: &str) {
    if ctx.json {
        match serde_json::to_string(
            &json!({"id": id, "run_id": id, "attempt": attempt, "content": text}),
        ) {
            Ok(s) => render::line(&s),
            Err(e) => render::note(&format!("could not encode JSON: {e}")),
        }
    } else {
        render::raw(text);
    }
}
