//! `toolq enqueue --file runs.jsonl` (or `-` for stdin): every line a run, validated before
//! any is written, then enqueued in one transaction (all or none). With `--batch` the runs
//! are one batch; lines may name each other (`"ref"`, `"after"`) to form a DAG.

use std::collections::HashMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Args, batch_id, name_fields, parse_dur, run_at, unique};
use crate::cli::{Ctx, progress, render};
use crate::client::EnqueueRequest;
use crate::core::{BatchRequest, OnComplete};
use crate::error::{Error, InputError, Result};
use crate::ids::RunId;

/// Enqueues every run of the file, and prints their ids in file order (with `--batch`, the
/// batch's id).
pub(super) async fn run(ctx: &Ctx, path: &Path, args: &Args) -> Result<()> {
    // Checked before the file is read: a mistake in the flags costs no validation pass.
    let batch = batch_request(args)?;
    let join = batch_id("--batch-id", args.batch_id.as_deref())?;
    let (mut reqs, lines) = read_file(path, ctx)?;
    if let Some(join) = &join {
        for r in &mut reqs {
            r.batch = Some(join.clone());
        }
    }
    let spin = progress::spinner(
        ctx.json,
        format!("writing {} runs in one transaction", reqs.len()),
    );
    let after = format!("{}: after", source_name(path));
    // The store names the batch joined `batch` (--batch-id); the core names a new batch's
    // size `batch` (--batch).
    let joined = [("after", after.as_str()), ("batch", "--batch-id")];
    if let Some(mut batch) = batch {
        if args.session.is_none() {
            batch.session = common_session(&reqs);
        }
        let done = ctx.client.create_batch(batch, reqs).await;
        drop(spin);
        let done = done.map_err(|e| at_line(e, path, &lines)).map_err(|e| {
            name_fields(
                e,
                &[
                    ("after", after.as_str()),
                    ("batch", "--batch"),
                    ("--on-complete: tool", "--on-complete"),
                    ("--on-complete: args", "--on-complete-args"),
                ],
            )
        })?;
        if ctx.json {
            let ids: Vec<&RunId> = done.runs.iter().map(|e| &e.run_id).collect();
            render::json(
                &json!({"batch_id": done.batch_id, "enqueued": done.runs.len(),
                "ids": ids, "runs": done.runs}),
            );
        } else {
            // The batch's id alone, so `toolq batch wait "$(toolq enqueue ... --batch)"` works.
            render::line(done.batch_id.as_str());
        }
        return Ok(());
    }
    let done = ctx.client.enqueue_batch(reqs).await;
    drop(spin);
    let done = done
        .map_err(|e| at_line(e, path, &lines))
        .map_err(|e| name_fields(e, &joined))?;
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

/// The batch `--batch` asks for (`None` without it); `--session` and `--title` name the
/// batch, so without `--batch` they are refused beside `--file` (each line has its own).
fn batch_request(args: &Args) -> Result<Option<BatchRequest>, InputError> {
    if !args.batch {
        for (flag, given) in [
            ("--session", args.session.is_some()),
            ("--title", args.title.is_some()),
        ] {
            if given {
                return Err(InputError::about(
                    "--file",
                    format!(
                        "cannot be used with '{flag}' without --batch: each line carries its \
                         own (\"session\", \"title\"); beside --batch the flag names the batch"
                    ),
                ));
            }
        }
        return Ok(None);
    }
    let on_complete = match &args.on_complete {
        None => None,
        Some(tool) => {
            let text = args.on_complete_args.as_deref().unwrap_or("{}");
            let args: Value = serde_json::from_str(text).map_err(|e| {
                InputError::new(
                    "--on-complete-args",
                    text,
                    format!("is not valid JSON: {e}"),
                )
            })?;
            Some(OnComplete {
                tool: tool.clone(),
                args,
            })
        }
    };
    Ok(Some(BatchRequest {
        session: args.session.clone().unwrap_or_else(|| "default".into()),
        title: args.title.clone(),
        on_complete,
    }))
}

/// The session of every run, when they share one (the batch's message goes where its runs'
/// messages go); else `default`.
fn common_session(reqs: &[EnqueueRequest]) -> String {
    match reqs.split_first() {
        Some((first, rest)) if rest.iter().all(|r| r.session == first.session) => {
            first.session.clone()
        }
        _ => "default".into(),
    }
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
    /// A name other lines' `after` use for this line's run.
    #[serde(rename = "ref")]
    ref_: Option<String>,
    /// Runs it waits for: refs of other lines of the file, or run ids (`bg_…`).
    after: Option<Vec<String>>,
    /// Run once each parent is final, whatever its outcome.
    after_any: Option<bool>,
}

/// A line as parsed: its request, its ref, and the names its `after` gives (resolved once
/// every line's ref is known: a line may wait for a later one).
struct Parsed {
    req: EnqueueRequest,
    ref_: Option<String>,
    after: Vec<String>,
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
    fn parse(mut self, now: DateTime<Utc>) -> Result<Parsed, InputError> {
        let ref_ = self.ref_.take();
        if let Some(r) = &ref_
            && (r.trim().is_empty() || r.starts_with("bg_"))
        {
            return Err(InputError::new(
                "ref",
                r,
                "must be a name that is neither blank nor a run id (bg_...)",
            ));
        }
        let after = self.after.take().unwrap_or_default();
        let after_any = self.after_any.take().unwrap_or(false);
        if after_any && after.is_empty() {
            return Err(InputError::about("after_any", "needs \"after\""));
        }
        let mut req = self.request(now)?;
        req.after_any = after_any;
        Ok(Parsed { req, ref_, after })
    }

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
    let mut parsed = Vec::new();
    // The file line of each request, for errors the batch reports by position.
    let mut lines = Vec::new();
    let total = text.lines().filter(|l| !l.trim().is_empty()).count();
    let bar = progress::bar(total as u64, ctx.json, "validating");
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{name} line {}: ", i + 1);
        parsed.push(parse_line(line, now).map_err(|e| e.within(&at))?);
        lines.push(i + 1);
    }
    if parsed.is_empty() {
        return Err(InputError::new("--file", &name, "holds no runs").into());
    }
    let reqs = resolve(parsed, &lines, &name)?;
    for (req, line) in reqs.iter().zip(&lines) {
        if let Some(b) = &bar {
            b.inc(1);
        }
        ctx.client
            .prepare(req)
            .map_err(|e| e.within(&format!("{name} line {line}: ")))?;
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok((reqs, lines))
}

/// Turns each line's `after` into run ids and indexes of other lines (by their `ref`); a
/// ref no line has, or two lines with one ref, is an error naming the line.
fn resolve(
    parsed: Vec<Parsed>,
    lines: &[usize],
    name: &str,
) -> Result<Vec<EnqueueRequest>, InputError> {
    let mut refs: HashMap<&str, usize> = HashMap::new();
    for (i, p) in parsed.iter().enumerate() {
        if let Some(r) = &p.ref_
            && let Some(first) = refs.insert(r.as_str(), i)
        {
            return Err(InputError::new(
                format!("{name} line {}: ref", lines[i]),
                r,
                format!("is also the ref of line {}", lines[first]),
            ));
        }
    }
    let mut links = Vec::with_capacity(parsed.len());
    for (i, p) in parsed.iter().enumerate() {
        let mut ids = Vec::new();
        let mut indexes = Vec::new();
        for a in &p.after {
            let at = || format!("{name} line {}: after", lines[i]);
            if a.starts_with("bg_") {
                ids.push(
                    a.parse::<RunId>()
                        .map_err(|e| InputError { field: at(), ..e })?,
                );
            } else {
                let j = refs.get(a.as_str()).ok_or_else(|| {
                    InputError::new(
                        at(),
                        a,
                        "is no line's ref in this file (give the \"ref\" of another line, or a run id bg_...)",
                    )
                })?;
                indexes.push(*j);
            }
        }
        links.push((ids, indexes));
    }
    Ok(parsed
        .into_iter()
        .zip(links)
        .map(|(p, (ids, indexes))| {
            let mut req = p.req;
            req.after = ids;
            req.after_requests = indexes;
            req
        })
        .collect())
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

/// One line as a request (errors not yet placed at the line; checked by the client once its
/// `after` is resolved).
fn parse_line(line: &str, now: DateTime<Utc>) -> Result<Parsed, InputError> {
    if !line.trim_start().starts_with('{') {
        return Err(InputError::new(
            "entry",
            line,
            "must be a JSON object: one run per line",
        ));
    }
    let parsed: Line = serde_json::from_str(line)
        .map_err(|e| InputError::new("entry", line, format!("is not a valid run object: {e}")))?;
    parsed.parse(now)
}

/// An error the batch reported for its `request N` (or, for a cycle, `requests 1 -> 3 -> 1`)
/// named by the file lines they came from.
fn at_line(e: Error, path: &std::path::Path, lines: &[usize]) -> Error {
    let Error::Input(mut ie) = e else { return e };
    if ie.field == "after"
        && let Some(cycle) = ie.value.strip_prefix("requests ")
    {
        let named: Vec<String> = cycle
            .split(" -> ")
            .map(|n| {
                n.parse::<usize>()
                    .ok()
                    .and_then(|n| lines.get(n.checked_sub(1)?))
                    .map_or_else(|| n.to_string(), |l| l.to_string())
            })
            .collect();
        ie.field = format!("{}: after", source_name(path));
        ie.value = format!("lines {}", named.join(" -> "));
        return Error::Input(ie);
    }
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
