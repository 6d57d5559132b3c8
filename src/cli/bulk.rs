//! The filter flags `cancel` and `retry` share, and the rendering of a bulk report.

use super::input::filter;
use super::{Ctx, render};
use crate::bulk::{BulkAction, BulkAnswer, BulkOptions, BulkReport, DEFAULT_BATCH};
use crate::config::parse_duration;
use crate::error::{InputError, Result};
use crate::run::{RunFilter, RunState};

/// Filters of a bulk `cancel` or `retry`.
#[derive(Debug, clap::Args)]
pub struct Filter {
    /// Only runs in these states (comma-separated).
    #[arg(long, value_name = "STATES")]
    pub state: Option<String>,
    /// Only runs of this tool.
    #[arg(long)]
    pub tool: Option<String>,
    /// Only runs of this session.
    #[arg(long)]
    pub session: Option<String>,
    /// Only runs made by this schedule (sch_...).
    #[arg(long, value_name = "ID")]
    pub schedule: Option<String>,
    /// Only runs created longer ago than this (e.g. 1h, 7d).
    #[arg(long, value_name = "DURATION")]
    pub older_than: Option<String>,
    /// Only runs created less long ago than this (e.g. 30m).
    #[arg(long, value_name = "DURATION")]
    pub newer_than: Option<String>,
    /// Only runs with this tag (repeatable: all must match), e.g. `--tag customer=acme`.
    #[arg(long, value_name = "KEY=VALUE")]
    pub tag: Vec<String>,
    /// Act on every run in the states the command acts on (needed when no filter is given).
    #[arg(long)]
    pub all: bool,
    /// Print how many runs match and the first ids; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Runs per write transaction.
    #[arg(long, default_value_t = DEFAULT_BATCH, value_name = "N")]
    pub batch_size: usize,
}

impl Filter {
    /// Whether any bulk flag was given (then no RUN id may be).
    pub fn any(&self) -> bool {
        self.state.is_some()
            || self.tool.is_some()
            || self.session.is_some()
            || self.schedule.is_some()
            || self.older_than.is_some()
            || self.newer_than.is_some()
            || !self.tag.is_empty()
            || self.all
            || self.dry_run
            || self.batch_size != DEFAULT_BATCH
    }

    /// The library's filter and options; `cmd` names the command in messages.
    pub fn parse(&self, ctx: &Ctx, cmd: &str) -> Result<(RunFilter, BulkOptions)> {
        let now = ctx.client.now();
        let filter = RunFilter {
            states: states(self.state.as_deref())?,
            tool: filter("--tool", self.tool.clone())?,
            session: filter("--session", self.session.clone())?,
            schedule_id: schedule_id(self.schedule.as_deref())?,
            created_before: ago(now, "--older-than", &self.older_than)?,
            created_after: ago(now, "--newer-than", &self.newer_than)?,
            batch_id: None,
            parent_run_id: None,
            tags: crate::run::Tags::parse_all(&self.tag)?,
        };
        if filter.is_empty() && !self.all {
            return Err(InputError::about(
                cmd,
                format!(
                    "give a RUN id, or filters (--state, --tool, --session, --schedule, \
                     --older-than, --newer-than, --tag), or --all to {cmd} every run it can"
                ),
            )
            .into());
        }
        let opts = BulkOptions {
            dry_run: self.dry_run,
            batch_size: self.batch_size,
            ..BulkOptions::default()
        };
        Ok((filter, opts))
    }
}

/// `--state`: comma-separated state names (none: every state the command acts on).
fn states(list: Option<&str>) -> Result<Vec<RunState>, InputError> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    list.split(',')
        .map(|s| {
            s.trim().parse::<RunState>().map_err(|e| InputError {
                field: "--state".into(),
                ..e
            })
        })
        .collect()
}

/// `--schedule`, checked: a typo would match nothing and look like "0 runs match".
fn schedule_id(s: Option<&str>) -> Result<Option<String>, InputError> {
    s.map(|s| {
        s.parse::<crate::ids::ScheduleId>()
            .map(|id| id.to_string())
            .map_err(|e| InputError {
                field: "--schedule".into(),
                ..e
            })
    })
    .transpose()
}

/// The instant `s` (a duration, as `flag` gave it) before `now`.
fn ago(
    now: chrono::DateTime<chrono::Utc>,
    flag: &str,
    s: &Option<String>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, InputError> {
    let Some(s) = s else { return Ok(None) };
    let d = parse_duration(s).map_err(|r| InputError::new(flag, s, r))?;
    let t = chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| now.checked_sub_signed(d))
        .ok_or_else(|| InputError::new(flag, s, "is too long"))?;
    Ok(Some(t))
}

/// Refuses a RUN id given together with bulk flags.
pub fn refuse_mixed(cmd: &str, run: &str) -> InputError {
    InputError::new(
        cmd,
        run,
        "give either a RUN id or filters (--state, --tool, --session, --schedule, --older-than, \
         --newer-than, --all, --dry-run, --batch-size), not both",
    )
}

/// Prints a bulk report; `done` names what `done` counts (`cancelled`, `retried`).
pub fn show(ctx: &Ctx, r: &BulkReport, done: &str, cancel: bool) {
    if ctx.json {
        // The dashboard's shape too (`POST /runs/bulk`).
        let action = if cancel {
            BulkAction::Cancel
        } else {
            BulkAction::Retry
        };
        render::json(&BulkAnswer::new(action, r.clone()));
        return;
    }
    if r.dry_run {
        render::line(&format!("{} runs match; nothing was changed", r.matched));
        for id in &r.ids {
            render::line(&id.to_string());
        }
        if r.ids_truncated {
            render::note(&format!("(first {} shown)", r.ids.len()));
        }
        return;
    }
    let mut text = format!("{done} {} runs", r.done);
    if cancel {
        text.push_str(&format!(
            ", asked {} running runs to stop",
            r.cancel_requested
        ));
    }
    text.push_str(&format!(
        ", skipped {} (changed state meanwhile) in {} batches",
        r.skipped, r.batches
    ));
    render::line(&text);
}
