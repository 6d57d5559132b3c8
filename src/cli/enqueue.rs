//! `toolq enqueue TOOL --args JSON` and `toolq enqueue --file runs.jsonl`.

mod file;

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::input::as_typed;
use super::{Ctx, render};
use crate::client::{EnqueueRequest, Enqueued};
use crate::error::{Error, InputError, Result, StoreError};
use crate::ids::{BatchId, RunId};
use crate::run::spec::{parse_dur, run_at, unique};
use crate::run::{Delivery, EnqueueAnswer};

/// Flags of `enqueue`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The tool to run (see `toolq tools`).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub tool: Option<String>,
    /// The tool's arguments as a JSON object.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    pub args: String,
    /// The owning session (its inbox gets the completion message) [default: default]. With
    /// `--file --batch`: the batch's session, which gets its completion message [default: the
    /// lines' session when they all share one, else default].
    #[arg(long)]
    pub session: Option<String>,
    /// A title for people. With `--file --batch`: the batch's title [default: "batch of N
    /// runs"].
    #[arg(long)]
    pub title: Option<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// Not before this RFC 3339 instant (e.g. 2026-12-01T09:00:00Z).
    #[arg(long, conflicts_with_all = ["in_", "after"], value_name = "RFC3339")]
    pub at: Option<String>,
    /// Not before this long from now (e.g. 10m, 2h).
    #[arg(
        long = "in",
        id = "in_",
        value_name = "DURATION",
        conflicts_with = "after"
    )]
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
    /// Run only after these runs completed (comma-separated, or the flag repeated); if one
    /// fails or is cancelled, this run is cancelled naming it. It waits blocked, and cannot
    /// also take --at or --in.
    #[arg(long, value_name = "RUN[,RUN...]")]
    pub after: Vec<String>,
    /// With --after: run once every parent is final, whatever its outcome.
    #[arg(long, requires = "after")]
    pub after_any: bool,
    /// Add the run (or every run of --file) to this existing batch (bt_...), which must not
    /// have completed yet.
    #[arg(long, value_name = "BATCH", conflicts_with = "batch")]
    pub batch_id: Option<String>,
    /// Tag the run (repeatable): `--tag customer=acme --tag env=prod`. Keys: 1-64 of
    /// A-Z a-z 0-9 _ . : / - starting with a letter or digit; values: 1-256 characters; at most
    /// 16 tags. `toolq runs --tag` (and cancel/retry) filter by them.
    #[arg(long, value_name = "KEY=VALUE")]
    pub tag: Vec<String>,
    /// Enqueue every line of a JSONL file (all or none), or of stdin with `-`; see the README
    /// for the fields. Each line carries its own options, so the per-run flags are refused
    /// beside it.
    #[arg(long, value_name = "PATH", conflicts_with_all = [
        "args", "priority", "at", "in_", "max_attempts", "timeout", "idempotency_key",
        "unique_by", "unique_for", "unique_states", "no_signal", "delivery", "after", "after_any",
        "tag",
    ])]
    pub file: Option<PathBuf>,
    /// With --file: make one batch of the file's runs, and print the batch's id. Its session
    /// gets one message once every run is final. File-only: a single run joins a batch with
    /// --batch-id.
    #[arg(long, requires = "file")]
    pub batch: bool,
    /// With --batch: enqueue a run of this tool once the batch completes; it reads the
    /// batch's summary as its parent result.
    #[arg(long, value_name = "TOOL", requires = "batch")]
    pub on_complete: Option<String>,
    /// With --on-complete: the callback run's arguments as a JSON object (--args names the
    /// tool's arguments of a single enqueue).
    #[arg(long, value_name = "JSON", requires = "on_complete")]
    pub on_complete_args: Option<String>,
}

impl Args {
    fn request(&self, now: DateTime<Utc>) -> Result<EnqueueRequest, InputError> {
        let tool = self.tool.clone().unwrap_or_default();
        let args: Value = serde_json::from_str(&self.args).map_err(|e| {
            InputError::new("--args", &self.args, format!("is not valid JSON: {e}"))
        })?;
        let session = self.session.clone().unwrap_or_else(|| "default".into());
        let mut req = EnqueueRequest::new(tool, args).session(session);
        req.title = self.title.clone();
        req.priority = self.priority;
        req.run_at = run_at(
            now,
            ["--at", "--in"],
            self.at.as_deref(),
            self.in_.as_deref(),
        )?;
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
        req.after = after_ids(&self.after)?;
        req.after_any = self.after_any;
        req.batch = batch_id("--batch-id", self.batch_id.as_deref())?;
        req.tags = crate::run::Tags::parse_all(&self.tag)?;
        req.traceparent = caller_traceparent()?;
        Ok(req)
    }
}

/// The caller's trace context from the `TRACEPARENT` variable (the W3C header's text, as
/// tools like otel-cli set it): the run's spans join that trace. Unset or empty: none.
pub(super) fn caller_traceparent() -> Result<Option<String>, InputError> {
    let Some(tp) = std::env::var("TRACEPARENT").ok().filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    crate::trace::traceparent::check("TRACEPARENT", &tp)?;
    Ok(Some(tp))
}

/// The runs of `--after`: each value a run id or several, comma-separated.
fn after_ids(values: &[String]) -> Result<Vec<RunId>, InputError> {
    let mut ids = Vec::new();
    for v in values {
        for part in v.split(',') {
            let part = part.trim();
            let id = part.parse::<RunId>().map_err(|e| {
                InputError::new(
                    "--after",
                    part,
                    format!("is not a run id: {} (give RUN[,RUN...])", e.reason),
                )
            })?;
            ids.push(id);
        }
    }
    Ok(ids)
}

/// A batch id given as `flag`, checked (a typo is exit 2, not "not found").
pub(super) fn batch_id(flag: &str, s: Option<&str>) -> Result<Option<BatchId>, InputError> {
    s.map(|s| {
        s.parse::<BatchId>().map_err(|e| InputError {
            field: flag.into(),
            ..e
        })
    })
    .transpose()
}

/// A refusal about a request field (the store's, for an unknown `--after` run or batch; or
/// the core's input error) named as the user typed it: `names` pairs the library's field with
/// the flag (or the file's field).
fn name_fields(e: Error, names: &[(&str, &str)]) -> Error {
    let flag_of = |field: &str| names.iter().find(|(f, _)| *f == field).map(|(_, n)| *n);
    match e {
        Error::Store(StoreError::Rejected {
            field,
            value,
            reason,
        }) => match flag_of(&field) {
            Some(flag) => InputError::new(flag, value, reason).into(),
            None => Error::Store(StoreError::Rejected {
                field,
                value,
                reason,
            }),
        },
        Error::Input(mut ie) => {
            if let Some(flag) = flag_of(&ie.field) {
                ie.field = flag.to_string();
            }
            Error::Input(ie)
        }
        e => e,
    }
}

/// Enqueues one run or a file of runs.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    if let Some(path) = &args.file {
        return file::run(ctx, path, &args).await;
    }
    // clap waives `requires = "file"` when the tool (which conflicts with --file) is given.
    if args.batch {
        return Err(InputError::about(
            "--batch",
            "makes one batch of the runs of a --file; a single run joins an existing batch \
             with --batch-id",
        )
        .into());
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
    let batch = req.batch.clone();
    let enqueued = ctx
        .client
        .enqueue(req)
        .await
        .map_err(|e| as_typed(e, &typed))
        .map_err(|e| name_fields(e, &[("after", "--after"), ("batch", "--batch-id")]))?;
    if ctx.json {
        render::json(&EnqueueAnswer::new(&enqueued, &tool, batch));
        return Ok(());
    }
    let Enqueued { run_id, created } = enqueued;
    if created {
        render::line(&run_id.to_string());
    } else {
        render::line(&run_id.to_string());
        render::note(why);
    }
    Ok(())
}
