//! `toolq enqueue --file runs.jsonl` (or `-` for stdin): every line a run, validated before
//! any is written, then enqueued in one transaction (all or none). With `--batch` the runs
//! are one batch; lines may name each other (`"ref"`, `"after"`) to form a DAG.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Args, batch_id, caller_traceparent, name_fields};
use crate::cli::{Ctx, progress, render};
use crate::client::EnqueueRequest;
use crate::core::{BatchEnqueued, BatchRequest, OnComplete};
use crate::error::{Error, InputError, Result};
use crate::run::EnqueuedMany;
use crate::run::spec::{Parsed, RunSpec, at_request, resolve};

/// Enqueues every run of the file, and prints their ids in file order (with `--batch`, the
/// batch's id).
pub(super) async fn run(ctx: &Ctx, path: &Path, args: &Args) -> Result<()> {
    // Checked before the file is read: a mistake in the flags costs no validation pass.
    let batch = batch_request(args)?;
    let join = batch_id("--batch-id", args.batch_id.as_deref())?;
    // Checked before the file is read too: a bad variable costs no validation pass.
    let traceparent = caller_traceparent()?;
    let (mut reqs, lines) = read_file(path, ctx)?;
    for r in &mut reqs {
        if let Some(join) = &join {
            r.batch = Some(join.clone());
        }
        // Every run of the file joins the caller's trace, as a single `enqueue` does.
        r.traceparent = traceparent.clone();
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
            batch.session = BatchRequest::common_session(&reqs);
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
            render::json_sorted(&BatchEnqueued::from(done));
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
        // Through a JSON value: its keys in order, as `enqueue --file --json` always printed.
        render::json(&serde_json::to_value(EnqueuedMany::new(done)).unwrap_or_default());
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
    let reqs = resolve(parsed, |i| format!("{name} line {}", lines[i]), "this file")?;
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
    let parsed: RunSpec = serde_json::from_str(line)
        .map_err(|e| InputError::new("entry", line, format!("is not a valid run object: {e}")))?;
    parsed.parse(now)
}

/// An error the batch reported for its `request N` (or, for a cycle, `requests 1 -> 3 -> 1`)
/// named by the file lines they came from.
fn at_line(e: Error, path: &std::path::Path, lines: &[usize]) -> Error {
    let name = source_name(path);
    at_request(
        e,
        |i| Some(format!("{name} line {}", lines.get(i)?)),
        |on| {
            let named: Vec<String> = on
                .iter()
                .map(|i| {
                    lines
                        .get(*i)
                        .map_or_else(|| (i + 1).to_string(), usize::to_string)
                })
                .collect();
            (
                format!("{name}: after"),
                format!("lines {}", named.join(" -> ")),
            )
        },
    )
}
