//! `toolq wait RUN... [--timeout DURATION]`: block until the runs end.
//!
//! Exit 0 when every run completed; 1 when one failed or was cancelled, or when `--timeout`
//! ran out first (the message names the runs still going); 2 for a malformed id. Each run's
//! final line (or JSON object) is printed either way.

use std::time::Duration;

use super::input::run_id;
use super::{Ctx, render};
use crate::client::WaitOutcome;
use crate::config::parse_duration;
use crate::error::{Error, InputError, Result};
use crate::run::{Run, RunState, WaitAnswer};

/// Flags of `wait`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  toolq wait \"$(toolq enqueue sleep --args '{\"ms\":1000}')\"
  toolq enqueue --file runs.jsonl | xargs toolq wait --timeout 10m")]
pub struct Args {
    /// The run ids (bg_...).
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<String>,
    /// Give up after this long (e.g. 30s, 10m) and exit 1 naming the runs still going
    /// [default: wait as long as it takes].
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
}

/// Waits for every run, prints how each ended, and fails unless all completed.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let ids = args
        .runs
        .iter()
        .map(|r| run_id(r))
        .collect::<Result<Vec<_>>>()?;
    let timeout = match &args.timeout {
        Some(t) => Some(parse_duration(t).map_err(|r| InputError::new("--timeout", t, r))?),
        None => None,
    };
    // Unknown ids fail before any waiting.
    for id in &ids {
        ctx.client.get(id).await?;
    }
    let outcomes = wait_all(ctx, &ids, timeout).await?;
    print(ctx, &outcomes);
    verdict(&outcomes, args.timeout.unwrap_or_default())
}

/// How each run ended (or where it stands, when the wait timed out).
fn print(ctx: &Ctx, outcomes: &[(Run, bool)]) {
    let now = ctx.client.now();
    if ctx.json {
        let list: Vec<WaitAnswer> = outcomes
            .iter()
            .map(|(run, _)| WaitAnswer::of(run))
            .collect();
        render::json(&list);
        return;
    }
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|(r, _)| {
            vec![
                r.id.to_string(),
                r.state.to_string(),
                render::run_duration(r, now).unwrap_or_else(|| "-".into()),
                render::opt(&r.error),
            ]
        })
        .collect();
    render::table(&["ID", "STATE", "DURATION", "ERROR"], &rows);
}

/// An error (exit 1) naming the runs still going after `timeout` (as typed), else the runs
/// that did not complete.
fn verdict(outcomes: &[(Run, bool)], timeout: String) -> Result<()> {
    let going: Vec<String> = outcomes
        .iter()
        .filter(|(_, ended)| !ended)
        .map(|(r, _)| format!("{} ({})", r.id, r.state))
        .collect();
    if !going.is_empty() {
        return Err(Error::Conflict(format!(
            "timed out after {timeout}; still going: {}",
            going.join(", ")
        )));
    }
    let bad: Vec<String> = outcomes
        .iter()
        .filter(|(r, _)| r.state != RunState::Completed)
        .map(|(r, _)| format!("{} {}", r.id, r.state))
        .collect();
    if !bad.is_empty() {
        return Err(Error::Conflict(format!(
            "{} of {} runs did not complete: {}",
            bad.len(),
            outcomes.len(),
            bad.join(", ")
        )));
    }
    Ok(())
}

/// Waits for the runs one after another against one deadline (a run that ended meanwhile
/// is read at once), so the whole wait is bounded by `--timeout`, not by N times it.
async fn wait_all(
    ctx: &Ctx,
    ids: &[crate::ids::RunId],
    timeout: Option<Duration>,
) -> Result<Vec<(Run, bool)>> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let run = match deadline {
            None => ctx.client.wait(id).await?,
            Some(d) => {
                let left = d.saturating_duration_since(tokio::time::Instant::now());
                match ctx.client.wait_timeout(id, left).await? {
                    WaitOutcome::Ended(run) | WaitOutcome::TimedOut(run) => *run,
                }
            }
        };
        let ended = run.state.is_final();
        out.push((run, ended));
    }
    Ok(out)
}
