//! `toolq enqueue TOOL --args JSON` and `toolq enqueue --file runs.jsonl`.

mod file;

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::input::as_typed;
use super::{Ctx, render};
use crate::client::{EnqueueRequest, Enqueued};
use crate::config::parse_duration;
use crate::error::{InputError, Result};
use crate::run::{Delivery, RunState, Unique};

/// Flags of `enqueue`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The tool to run (see `toolq tools`).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub tool: Option<String>,
    /// The tool's arguments as a JSON object.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    pub args: String,
    /// The owning session (its inbox gets the completion message).
    #[arg(long, default_value = "default")]
    pub session: String,
    /// A title for people.
    #[arg(long)]
    pub title: Option<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// Not before this RFC 3339 instant (e.g. 2026-12-01T09:00:00Z).
    #[arg(long, conflicts_with = "in_", value_name = "RFC3339")]
    pub at: Option<String>,
    /// Not before this long from now (e.g. 10m, 2h).
    #[arg(long = "in", id = "in_", value_name = "DURATION")]
    pub in_: Option<String>,
    /// Attempts in all (internal errors, timeouts and lost workers retry).
    #[arg(long)]
    pub max_attempts: Option<i64>,
    /// Timeout of the run (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// A key: enqueueing the same key again returns the existing run.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Unique runs: return a run of the same tool and args (canonical JSON) instead of
    /// enqueueing another. Only `args` is accepted.
    #[arg(long, value_name = "WHAT")]
    pub unique_by: Option<String>,
    /// With --unique-by: only runs created within this long (e.g. 1h) [default: any age].
    #[arg(long, value_name = "DURATION", requires = "unique_by")]
    pub unique_for: Option<String>,
    /// With --unique-by: only runs in these states, comma-separated
    /// [default: queued,awaiting_approval,running].
    #[arg(long, value_name = "STATES", requires = "unique_by")]
    pub unique_states: Option<String>,
    /// Do not post an inbox message when the run ends.
    #[arg(long)]
    pub no_signal: bool,
    /// How the completion message is delivered: interrupt, when_idle, silent.
    #[arg(long, default_value = "when_idle")]
    pub delivery: String,
    /// Enqueue every line of a JSONL file (all or none), or of stdin with `-`; see the README
    /// for the fields. Each line carries its own options, so the per-run flags are refused
    /// beside it.
    #[arg(long, value_name = "PATH", conflicts_with_all = [
        "args", "session", "title", "priority", "at", "in_", "max_attempts", "timeout",
        "idempotency_key", "unique_by", "unique_for", "unique_states", "no_signal", "delivery",
    ])]
    pub file: Option<PathBuf>,
}

/// The [`Unique`] of `--unique-by`, `--unique-for` and `--unique-states`; `names` are how
/// errors call those three (flags, or a file line's fields).
fn unique(
    names: [&str; 3],
    by: Option<&str>,
    within: Option<&str>,
    states: Option<Vec<String>>,
) -> Result<Option<Unique>, InputError> {
    let [by_name, for_name, states_name] = names;
    let Some(by) = by else {
        if within.is_some() || states.is_some() {
            return Err(InputError::about(
                by_name,
                format!("is needed with {for_name} and {states_name}"),
            ));
        }
        return Ok(None);
    };
    let mut u = Unique {
        by: by.parse().map_err(|e: InputError| InputError {
            field: by_name.into(),
            ..e
        })?,
        ..Unique::default()
    };
    if let Some(w) = within {
        u.within = Some(parse_dur(for_name, w)?);
    }
    if let Some(names) = states {
        u.states = names
            .iter()
            .map(|n| {
                n.parse::<RunState>().map_err(|e| InputError {
                    field: states_name.into(),
                    ..e
                })
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(Some(u))
}

fn parse_at(field: &str, s: &str) -> Result<DateTime<Utc>, InputError> {
    DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            InputError::new(
                field,
                s,
                format!(
                    "is not an RFC 3339 instant with an offset, like 2026-12-01T09:00:00Z ({e})"
                ),
            )
        })
}

fn parse_dur(field: &str, s: &str) -> Result<Duration, InputError> {
    parse_duration(s).map_err(|r| InputError::new(field, s, r))
}

fn run_at(
    now: DateTime<Utc>,
    at: Option<&str>,
    in_: Option<&str>,
) -> Result<Option<DateTime<Utc>>, InputError> {
    match (at, in_) {
        (Some(_), Some(_)) => Err(InputError::about("at", "give either at or in, not both")),
        (Some(a), None) => parse_at("--at", a).map(Some),
        (None, Some(d)) => {
            let given = d;
            let d = parse_dur("--in", d)?;
            chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .filter(|t| *t <= crate::clock::latest())
                .map(Some)
                .ok_or_else(|| InputError::new("--in", given, "is too far in the future"))
        }
        (None, None) => Ok(None),
    }
}

impl Args {
    fn request(&self, now: DateTime<Utc>) -> Result<EnqueueRequest, InputError> {
        let tool = self.tool.clone().unwrap_or_default();
        let args: Value = serde_json::from_str(&self.args).map_err(|e| {
            InputError::new("--args", &self.args, format!("is not valid JSON: {e}"))
        })?;
        let mut req = EnqueueRequest::new(tool, args).session(self.session.clone());
        req.title = self.title.clone();
        req.priority = self.priority;
        req.run_at = run_at(now, self.at.as_deref(), self.in_.as_deref())?;
        req.max_attempts = self.max_attempts;
        req.timeout = self
            .timeout
            .as_deref()
            .map(|t| parse_dur("--timeout", t))
            .transpose()?;
        req.idempotency_key = self.idempotency_key.clone();
        req.unique = unique(
            ["--unique-by", "--unique-for", "--unique-states"],
            self.unique_by.as_deref(),
            self.unique_for.as_deref(),
            self.unique_states
                .as_deref()
                .map(|s| s.split(',').map(|x| x.trim().to_string()).collect()),
        )?;
        req.signal_on_completion = !self.no_signal;
        req.delivery = self.delivery.parse::<Delivery>().map_err(|e| InputError {
            field: "--delivery".into(),
            ..e
        })?;
        Ok(req)
    }
}

/// Enqueues one run or a file of runs.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    if let Some(path) = &args.file {
        return file::run(ctx, path).await;
    }
    let req = args.request(ctx.client.now())?;
    let tool = req.tool.clone();
    let why = if req.idempotency_key.is_none() {
        "(an existing run of this tool with the same args; nothing new was enqueued)"
    } else if req.unique.is_none() {
        "(an existing run with this idempotency key; nothing new was enqueued)"
    } else {
        "(an existing run with this idempotency key, or of this tool with the same args; nothing new was enqueued)"
    };
    let typed = [
        ("timeout", args.timeout.as_deref()),
        ("unique_for", args.unique_for.as_deref()),
    ];
    let Enqueued { run_id, created } = ctx
        .client
        .enqueue(req)
        .await
        .map_err(|e| as_typed(e, &typed))?;
    if ctx.json {
        render::json(
            &json!({"id": run_id, "run_id": run_id, "created": created, "tool": tool,
            "result_path": crate::run::result_path(&run_id), "log_path": crate::run::log_path(&run_id)}),
        );
    } else if created {
        render::line(&run_id.to_string());
    } else {
        render::line(&run_id.to_string());
        render::note(why);
    }
    Ok(())
}
