//! `toolq signal RUN NAME [--payload JSON] [--by WHO]`: deliver an event to a run.

use serde_json::Value;

use super::approve::actor;
use super::input::run_id;
use super::{Ctx, render};
use crate::error::{InputError, Result};

/// Flags of `signal`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...), not yet ended.
    pub run: String,
    /// The event's name (what the run's `wait_for_event` waits for).
    pub name: String,
    /// The event's JSON payload [default: null].
    #[arg(long, value_name = "JSON")]
    pub payload: Option<String>,
    /// Who sends it (kept with the event) [default: $USER, else "operator"].
    #[arg(long)]
    pub by: Option<String>,
}

/// Sends the event: the run resumes now when it waits for it, else the event is kept until
/// it does.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let id = run_id(&args.run)?;
    let payload = match &args.payload {
        Some(text) => serde_json::from_str::<Value>(text)
            .map_err(|e| InputError::new("--payload", text, format!("is not valid JSON: {e}")))?,
        None => Value::Null,
    };
    let sent = ctx
        .client
        .signal(&id, &args.name, payload, Some(actor(args.by)))
        .await?;
    if ctx.json {
        render::json(&sent);
    } else if sent.woke {
        render::line(&format!(
            "sent event {:?} to {id}; the run was waiting for it and resumes now",
            sent.event
        ));
    } else {
        render::line(&format!(
            "sent event {:?} to {id}; kept until the run waits for it",
            sent.event
        ));
    }
    Ok(())
}
