//! `toolq pause` and `toolq resume`: `--tool T | --session S | --all`.

use serde_json::json;

use super::input::filter;
use super::{Ctx, render};
use crate::error::Result;
use crate::flow::{Pause, PauseScope};

/// What to pause or resume: exactly one of the three.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Scope {
    /// A tool: its queued runs stay queued, its schedules' ticks are recorded as paused.
    #[arg(long, value_name = "TOOL")]
    pub tool: Option<String>,
    /// A session: its queued runs stay queued, its schedules' ticks are recorded as paused.
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Everything.
    #[arg(long)]
    pub all: bool,
}

impl Scope {
    /// The scope; an empty or blank `--tool` or `--session` is refused here, before anything
    /// is printed about it.
    fn scope(&self) -> Result<PauseScope> {
        let tool = filter("--tool", self.tool.clone())?;
        let session = filter("--session", self.session.clone())?;
        Ok(match (tool, session) {
            (Some(t), _) => PauseScope::Tool(t),
            (None, Some(s)) => PauseScope::Session(s),
            (None, None) => PauseScope::All,
        })
    }
}

/// Flags of `pause`.
#[derive(Debug, clap::Args)]
pub struct PauseArgs {
    /// What to pause.
    #[command(flatten)]
    pub scope: Scope,
    /// Who pauses (shown by stats, status and the `paused` view).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Why.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

/// Flags of `resume`.
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// What to resume.
    #[command(flatten)]
    pub scope: Scope,
}

/// One line about a pause: `tool http since ... by alice: API is down`.
pub(crate) fn describe(p: &Pause) -> String {
    let text = format!(
        "{} since {}{}",
        p.scope,
        render::time(&p.since),
        p.by_and_reason()
    );
    render::visible(&text).into_owned()
}

/// Pauses and says what is paused.
pub async fn pause(ctx: &Ctx, args: PauseArgs) -> Result<()> {
    let scope = args.scope.scope()?;
    // A host that embeds toolq may register tools this CLI does not know, so an unknown name
    // is paused as asked, with a note in case it is a typo.
    if let Some(tool) = &args.scope.tool
        && ctx.client.registry().get(tool).is_none()
    {
        render::note(&format!(
            "note: no tool {tool:?} is registered in this configuration (known: {}); pausing it anyway",
            ctx.client.registry().names().join(", ")
        ));
    }
    let done = ctx.client.pause(scope, args.by, args.reason).await?;
    if ctx.json {
        render::json(&json!({"pause": done.pause, "new": done.new}));
    } else if done.new {
        render::line(&format!("paused {}", describe(&done.pause)));
    } else {
        render::line(&format!("already paused: {}", describe(&done.pause)));
    }
    Ok(())
}

/// Resumes; exits 0 also when the scope was not paused (says so).
pub async fn resume(ctx: &Ctx, args: ResumeArgs) -> Result<()> {
    let scope = args.scope.scope()?;
    let lifted = ctx.client.resume(scope.clone()).await?;
    if ctx.json {
        render::json(&json!({"resumed": lifted, "was_paused": lifted.is_some()}));
    } else {
        match lifted {
            Some(p) => render::line(&format!("resumed {}", describe(&p))),
            None => render::line(&format!("{scope} was not paused")),
        }
    }
    Ok(())
}
