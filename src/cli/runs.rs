//! `toolq runs`: list runs with filters.

use chrono::{DateTime, Utc};

use super::input::filter;
use super::{Ctx, render};
use crate::error::{InputError, Result};
use crate::ids::RunId;
use crate::run::steps::far_future;
use crate::run::{ListFilter, Run, RunState, WaitKind};

/// Flags of `runs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this state: queued, awaiting_approval, running, completed, failed, cancelled.
    #[arg(long)]
    pub state: Option<String>,
    /// Only this session.
    #[arg(long)]
    pub session: Option<String>,
    /// Only this tool.
    #[arg(long)]
    pub tool: Option<String>,
    /// Only runs of this batch (bt_...).
    #[arg(long, value_name = "BATCH")]
    pub batch: Option<String>,
    /// Only runs spawned by this run (bg_...): its children.
    #[arg(long, value_name = "RUN")]
    pub parent: Option<String>,
    /// Only runs with this tag (repeatable: all must match), e.g. `--tag customer=acme`.
    #[arg(long, value_name = "KEY=VALUE")]
    pub tag: Vec<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 50)]
    pub limit: i64,
}

/// Lists runs.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    if !(1..=100_000).contains(&args.limit) {
        return Err(InputError::new(
            "--limit",
            args.limit.to_string(),
            "must be between 1 and 100000",
        )
        .into());
    }
    let runs = ctx
        .client
        .list(ListFilter {
            state: state(args.state.as_deref())?,
            session: filter("--session", args.session)?,
            tool: filter("--tool", args.tool)?,
            schedule_id: None,
            batch_id: super::enqueue::batch_id("--batch", args.batch.as_deref())?
                .map(|b| b.to_string()),
            parent_run_id: args
                .parent
                .as_deref()
                .map(|p| {
                    p.parse::<RunId>().map_err(|e| InputError {
                        field: "--parent".into(),
                        ..e
                    })
                })
                .transpose()?
                .map(|p| p.to_string()),
            tags: crate::run::Tags::parse_all(&args.tag)?,
            limit: args.limit,
        })
        .await?;
    if ctx.json {
        render::json(&runs);
    } else {
        print_table(&runs, ctx.client.now());
    }
    Ok(())
}

/// `--state`, named so when it is not a state.
fn state(s: Option<&str>) -> Result<Option<RunState>, InputError> {
    s.map(|s| {
        s.parse::<RunState>().map_err(|e| InputError {
            field: "--state".into(),
            ..e
        })
    })
    .transpose()
}

fn print_table(runs: &[Run], now: DateTime<Utc>) {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.state.to_string(),
                r.tool.clone(),
                r.session_id.clone(),
                format!("{}/{}", r.attempt, r.max_attempts),
                render::time(&r.created_at),
                run_at(r, now),
                render::run_duration(r, now).unwrap_or_else(|| "-".into()),
                r.title.clone(),
            ]
        })
        .collect();
    render::table(
        &[
            "ID", "STATE", "TOOL", "SESSION", "ATTEMPT", "CREATED", "RUN_AT", "DURATION", "TITLE",
        ],
        &rows,
    );
}

/// When a queued run may start: `ready`, or `delayed 5m` (until its run_at, or its retry
/// backoff); a suspended run says what it waits for (`waits event "go"`, `sleeps 5m`);
/// `-` for runs past the queue.
fn run_at(r: &Run, now: DateTime<Utc>) -> String {
    if r.state != RunState::Queued {
        return "-".into();
    }
    let wait = (r.run_at - now).num_milliseconds();
    if let Some(w) = &r.waiting {
        let left = render::millis(wait);
        return match (w.kind, &w.event) {
            (WaitKind::Event, Some(name)) if w.until >= far_future() => {
                format!("waits event {name:?}")
            }
            (WaitKind::Event, Some(name)) => format!("waits event {name:?} ({left} left)"),
            (WaitKind::Event, None) => format!("waits an event ({left} left)"),
            (WaitKind::Sleep, _) => format!("sleeps {left}"),
            (WaitKind::Snooze, _) => format!("snoozed {left}"),
            (WaitKind::Check, _) => format!("next check in {left}"),
            (WaitKind::Resume, _) => "resumes its steps".to_string(),
            (WaitKind::Children, _) => "waits its children".to_string(),
            (WaitKind::Parents, _) if r.deps_pending == 1 => "blocked (1 parent)".to_string(),
            (WaitKind::Parents, _) => format!("blocked ({} parents)", r.deps_pending),
        };
    }
    if wait <= 0 {
        "ready".into()
    } else {
        format!("delayed {}", render::millis(wait))
    }
}
