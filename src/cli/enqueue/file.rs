//! `toolq enqueue --file runs.jsonl` (or `-` for stdin): every line a run, validated before
//! any is written, then enqueued in one transaction (all or none).

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{parse_dur, run_at, unique};
use crate::cli::{Ctx, progress, render};
use crate::client::EnqueueRequest;
use crate::error::{Error, InputError, Result};
use crate::ids::RunId;

/// Enqueues every run of the file, and prints their ids in file order.
pub(super) async fn run(ctx: &Ctx, path: &Path) -> Result<()> {
    let (reqs, lines) = read_file(path, ctx)?;
    let spin = progress::spinner(
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
        return Ok(());
    }
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
    Ok(())
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

fn empty_object() -> Value {
    json!({})
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
    let text = decode(read_input(path)?, &name)?;
    // Editors on Windows may start the file with a byte order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let now = ctx.client.now();
    let mut reqs = Vec::new();
    // The file line of each request, for errors the batch reports by position.
    let mut lines = Vec::new();
    let total = text.lines().filter(|l| !l.trim().is_empty()).count();
    let bar = progress::bar(total as u64, ctx.json, "validating");
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(b) = &bar {
            b.inc(1);
        }
        let at = format!("{name} line {}: ", i + 1);
        reqs.push(parse_line(ctx, line, now).map_err(|e| e.within(&at))?);
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

/// The input as text; bytes that are not UTF-8 are bad input, named by line.
fn decode(bytes: Vec<u8>, name: &str) -> Result<String, InputError> {
    String::from_utf8(bytes).map_err(|e| {
        let bad = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..bad].iter().filter(|b| **b == b'\n').count() + 1;
        InputError::new(
            "--file",
            name,
            format!("is not UTF-8 text (line {line}: {})", e.utf8_error()),
        )
    })
}

/// One line as a request the client would accept (errors not yet placed at the line).
fn parse_line(ctx: &Ctx, line: &str, now: DateTime<Utc>) -> Result<EnqueueRequest, InputError> {
    if !line.trim_start().starts_with('{') {
        return Err(InputError::new(
            "entry",
            line,
            "must be a JSON object: one run per line",
        ));
    }
    let parsed: Line = serde_json::from_str(line)
        .map_err(|e| InputError::new("entry", line, format!("is not a valid run object: {e}")))?;
    let req = parsed.request(now)?;
    ctx.client.prepare(&req)?;
    Ok(req)
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
