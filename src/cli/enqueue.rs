//! `toolq enqueue TOOL --args JSON` and `toolq enqueue --file runs.jsonl`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Ctx, render};
use crate::client::{EnqueueRequest, Enqueued};
use crate::config::parse_duration;
use crate::error::{Error, InputError, Result};
use crate::ids::RunId;
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

/// One line of a `--file` batch.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    tool: String,
    #[serde(default = "empty_object")]
    args: Value,
    session: Option<String>,
    title: Option<String>,
    priority: Option<i64>,
    at: Option<String>,
    #[serde(rename = "in")]
    in_: Option<String>,
    max_attempts: Option<i64>,
    timeout: Option<String>,
    idempotency_key: Option<String>,
    unique_by: Option<String>,
    unique_for: Option<String>,
    unique_states: Option<States>,
    signal_on_completion: Option<bool>,
    delivery: Option<String>,
}

/// States as `"queued,running"` or `["queued", "running"]`.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "unique_states must be a string like \"queued,running\" or a list of state names"
)]
enum States {
    Text(String),
    List(Vec<String>),
}

impl States {
    fn names(&self) -> Vec<String> {
        match self {
            States::Text(s) => s.split(',').map(|x| x.trim().to_string()).collect(),
            States::List(v) => v.clone(),
        }
    }
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

fn empty_object() -> Value {
    json!({})
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

impl Line {
    fn request(self, now: DateTime<Utc>) -> Result<EnqueueRequest, InputError> {
        let mut req = EnqueueRequest::new(self.tool, self.args);
        if let Some(s) = self.session {
            req = req.session(s);
        }
        req.title = self.title;
        req.priority = self.priority.unwrap_or(0);
        req.run_at = run_at(now, self.at.as_deref(), self.in_.as_deref())?;
        req.max_attempts = self.max_attempts;
        req.timeout = self
            .timeout
            .as_deref()
            .map(|t| parse_dur("timeout", t))
            .transpose()?;
        req.idempotency_key = self.idempotency_key;
        req.unique = unique(
            ["unique_by", "unique_for", "unique_states"],
            self.unique_by.as_deref(),
            self.unique_for.as_deref(),
            self.unique_states.as_ref().map(States::names),
        )?;
        req.signal_on_completion = self.signal_on_completion.unwrap_or(true);
        if let Some(d) = self.delivery {
            req.delivery = d.parse()?;
        }
        Ok(req)
    }
}

/// How messages name the `--file` input: its path, or `stdin` for `-`.
fn source_name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "stdin".into()
    } else {
        path.display().to_string()
    }
}

/// The bytes of `--file`: the file, or standard input for `-`. A file that is not there, not
/// readable or a directory is bad input (exit 2); other read failures are I/O errors (exit 1).
fn read_input(path: &Path) -> Result<Vec<u8>> {
    use std::io::{ErrorKind, Read};
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("read stdin (--file -)", e))?;
        return Ok(bytes);
    }
    std::fs::read(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound
        | ErrorKind::PermissionDenied
        | ErrorKind::IsADirectory
        | ErrorKind::InvalidInput => InputError::new(
            "--file",
            path.display().to_string(),
            format!("cannot be read: {e} (give a JSONL file, or - for stdin)"),
        )
        .into(),
        _ => Error::io(format!("read {}", path.display()), e),
    })
}

/// Reads and validates a whole JSONL file (or stdin for `-`); an error names the line.
fn read_file(path: &Path, ctx: &Ctx) -> Result<(Vec<EnqueueRequest>, Vec<usize>)> {
    let name = source_name(path);
    let text = read_input(path)?;
    let text = String::from_utf8(text).map_err(|e| {
        let bad = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..bad].iter().filter(|b| **b == b'\n').count() + 1;
        InputError::new(
            "--file",
            &name,
            format!("is not UTF-8 text (line {line}: {})", e.utf8_error()),
        )
    })?;
    // Editors on Windows may start the file with a byte order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let now = ctx.client.now();
    let mut reqs = Vec::new();
    // The file line of each request, for errors the batch reports by position.
    let mut lines = Vec::new();
    let total = text.lines().filter(|l| !l.trim().is_empty()).count();
    let bar = super::progress::bar(total as u64, ctx.json, "validating");
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(b) = &bar {
            b.inc(1);
        }
        let at = format!("{name} line {}: ", i + 1);
        if !line.trim_start().starts_with('{') {
            return Err(
                InputError::new("entry", line, "must be a JSON object: one run per line")
                    .within(&at)
                    .into(),
            );
        }
        let parsed: Line = serde_json::from_str(line).map_err(|e| {
            InputError::new("entry", line, format!("is not a valid run object: {e}")).within(&at)
        })?;
        let req = parsed.request(now).map_err(|e| e.within(&at))?;
        ctx.client.prepare(&req).map_err(|e| e.within(&at))?;
        reqs.push(req);
        lines.push(i + 1);
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if reqs.is_empty() {
        return Err(InputError::new("--file", &name, "holds no runs").into());
    }
    Ok((reqs, lines))
}

/// An error the batch reported for its `request N` named by the file line it came from.
fn at_line(e: Error, path: &std::path::Path, lines: &[usize]) -> Error {
    let Error::Input(mut ie) = e else { return e };
    let line = ie
        .field
        .strip_prefix("request ")
        .and_then(|rest| rest.split_once(": "))
        .and_then(|(n, tail)| {
            let n = n.parse::<usize>().ok()?.checked_sub(1)?;
            Some((*lines.get(n)?, tail.to_string()))
        });
    if let Some((line, tail)) = line {
        ie.field = format!("{} line {line}: {tail}", source_name(path));
    }
    Error::Input(ie)
}

/// Enqueues one run or a file of runs.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    if let Some(path) = &args.file {
        let (reqs, lines) = read_file(path, ctx)?;
        let spin = super::progress::spinner(
            ctx.json,
            format!("writing {} runs in one transaction", reqs.len()),
        );
        let done = ctx.client.enqueue_batch(reqs).await;
        drop(spin);
        let done = done.map_err(|e| at_line(e, path, &lines))?;
        let created = done.iter().filter(|e| e.created).count();
        if ctx.json {
            let ids: Vec<&RunId> = done.iter().map(|e| &e.run_id).collect();
            render::json(
                &json!({"enqueued": done.len(), "created": created, "ids": ids, "runs": done}),
            );
        } else {
            // The ids on stdout, one per line in file order, so `xargs toolq wait` works.
            for e in &done {
                render::line(e.run_id.as_str());
            }
            if created < done.len() {
                render::note(&format!(
                    "({} of these {} runs already existed by idempotency key or as unique runs; nothing new was enqueued for them)",
                    done.len() - created,
                    done.len()
                ));
            }
        }
        return Ok(());
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
        .map_err(|e| super::as_typed(e, &typed))?;
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
