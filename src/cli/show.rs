//! `toolq show RUN`: every field of one run.

use std::time::Duration;

use super::input::run_id;
use super::{Ctx, render};
use crate::client::TimeoutSource;
use crate::error::Result;
use crate::run::steps::far_future;
use crate::run::{Dependency, Run, RunEvent, RunLinks, StepRecord, StepStatus, WaitKind};

/// Flags of `show`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...).
    pub run: String,
}

/// Prints the run.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let id = run_id(&args.run)?;
    let detail = ctx.client.run_detail(&id).await?;
    if ctx.json {
        // Through a JSON value: its keys in order, as `show --json` always printed them.
        render::json(&serde_json::to_value(&detail).unwrap_or_default());
        return Ok(());
    }
    let run = &detail.run;
    let timeout = (detail.timeout(), detail.source);
    let mut pairs = request_fields(run);
    pairs.extend(timing_fields(run, ctx.client.now(), timeout));
    pairs.extend(outcome_fields(run));
    pairs.extend(detail.held.clone().map(|h| ("held", h)));
    pairs.extend(origin_fields(run));
    pairs.extend(link_fields(&detail.links));
    pairs.extend(journal_fields(&detail.steps, &detail.events));
    add_errors_and_tail(run, &mut pairs);
    render::fields(&pairs);
    Ok(())
}

/// A time, or "-".
fn at(v: &Option<chrono::DateTime<chrono::Utc>>) -> String {
    v.as_ref().map_or("-".into(), render::time)
}

/// What was asked: the tool, its args, for whom, how many attempts.
fn request_fields(run: &Run) -> Vec<(&'static str, String)> {
    let mut pairs = vec![("id", run.id.to_string()), ("state", run.state.to_string())];
    // A suspended run is queued; say what it waits for right under its state.
    if let Some(w) = &run.waiting {
        let text = match w.kind {
            WaitKind::Parents => format!(
                "blocked by {} {} (it runs once they complete)",
                run.deps_pending,
                if run.deps_pending == 1 {
                    "parent"
                } else {
                    "parents"
                }
            ),
            _ => w.describe(),
        };
        pairs.push(("waiting", text));
    }
    pairs.extend([
        ("tool", run.tool.clone()),
        ("title", run.title.clone()),
        ("session", run.session_id.clone()),
        ("args", run.args.to_string()),
        ("priority", run.priority.to_string()),
        (
            "attempt",
            format!("{} of {}", run.attempt, run.max_attempts),
        ),
    ]);
    if run.snoozes > 0 {
        pairs.push(("snoozes", run.snoozes.to_string()));
    }
    if !run.tags.is_empty() {
        // `key=value, key=value`, as `--tag` takes them.
        let tags: Vec<String> = run.tags.rows().collect();
        pairs.push(("tags", tags.join(", ")));
    }
    if let Some(t) = &run.traceparent {
        pairs.push(("traceparent", t.clone()));
    }
    pairs
}

/// Its batch, the runs it waits for and that wait for it (with how, and how each resolved),
/// the run that spawned it and the runs it spawned; nothing for a run linked to none.
fn link_fields(links: &RunLinks) -> Vec<(&'static str, String)> {
    let mut pairs = Vec::new();
    if let Some(b) = &links.batch_id {
        pairs.push(("batch", b.clone()));
    }
    // A parent's id, how it is waited for, and its outcome (or `waiting` while it runs).
    let edge = |id: &str, d: &Dependency| {
        vec![
            id.to_string(),
            d.mode.edge_kind().to_string(),
            d.resolved.clone().unwrap_or_else(|| "waiting".into()),
        ]
    };
    if !links.parents.is_empty() {
        let rows = links.parents.iter().map(|d| edge(&d.parent, d));
        pairs.push(("parents", indented(rows)));
    }
    if !links.dependents.is_empty() {
        let rows = links.dependents.iter().map(|d| edge(&d.child, d));
        pairs.push(("dependents", indented(rows)));
    }
    if let Some(p) = &links.parent_run_id {
        pairs.push(("spawned_by", p.clone()));
    }
    if !links.children.is_empty() {
        let rows = links
            .children
            .iter()
            .map(|c| vec![c.id.clone(), c.tool.clone(), c.state.clone()]);
        pairs.push(("children", indented(rows)));
    }
    pairs
}

/// The most of a step's output, error or an event's payload a line shows.
const SUMMARY: usize = 60;

/// `s` on one line, cut to [`SUMMARY`] characters.
pub(super) fn summary(s: &str) -> String {
    let one = s.replace(['\n', '\r', '\t'], " ");
    if one.chars().count() > SUMMARY {
        format!("{}…", one.chars().take(SUMMARY - 1).collect::<String>())
    } else {
        one
    }
}

/// The recorded steps and the events sent, one aligned line each under their key (nothing
/// for a run that has neither).
fn journal_fields(steps: &[StepRecord], events: &[RunEvent]) -> Vec<(&'static str, String)> {
    let mut pairs = Vec::new();
    if !steps.is_empty() {
        pairs.push(("steps", indented(steps.iter().map(step_cells))));
    }
    if !events.is_empty() {
        pairs.push(("events", indented(events.iter().map(event_cells))));
    }
    pairs
}

/// One step: seq, name, kind, status, when recorded, by which attempt, and what it gave.
fn step_cells(s: &StepRecord) -> Vec<String> {
    let what = match (s.status, &s.error, &s.output, s.wake_at) {
        (_, Some(e), _, _) => format!("error: {}", summary(e)),
        (StepStatus::Waiting, _, _, Some(t)) if t >= far_future() => "no timeout".into(),
        (StepStatus::Waiting, _, _, Some(t)) => format!("until {}", render::time(&t)),
        (_, _, Some(o), _) => summary(&o.to_string()),
        _ => "-".into(),
    };
    vec![
        s.seq.to_string(),
        s.name.clone(),
        s.kind.as_str().into(),
        s.status.as_str().into(),
        render::time(&s.recorded_at),
        format!("attempt {}", s.attempt),
        what,
    ]
}

/// One event: name, when sent and by whom, whether a wait took it, and its payload.
fn event_cells(e: &RunEvent) -> Vec<String> {
    vec![
        e.name.clone(),
        render::time(&e.sent_at),
        format!("by {}", e.sent_by.as_deref().unwrap_or("-")),
        match e.consumed_at {
            Some(t) => format!("consumed {}", render::time(&t)),
            None => "pending".into(),
        },
        summary(&e.payload.to_string()),
    ]
}

/// Rows of cells as lines under a field's key: each line indented by two spaces, columns
/// aligned, the last cell as it is.
pub(super) fn indented(rows: impl Iterator<Item = Vec<String>>) -> String {
    let rows: Vec<Vec<String>> = rows.collect();
    let mut widths: Vec<usize> = Vec::new();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            let w = c.chars().count();
            match widths.get_mut(i) {
                Some(x) => *x = (*x).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for r in rows {
        let n = r.len();
        let cells: Vec<String> = r
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                if i + 1 == n {
                    c
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str("\n  ");
        out.push_str(cells.join("  ").trim_end());
    }
    out
}

/// When it was due, started and ended, who holds it, and how long it may take.
fn timing_fields(
    run: &Run,
    now: chrono::DateTime<chrono::Utc>,
    (limit, source): (Duration, TimeoutSource),
) -> Vec<(&'static str, String)> {
    vec![
        ("created_at", render::time(&run.created_at)),
        ("run_at", render::time(&run.run_at)),
        ("started_at", at(&run.started_at)),
        ("finished_at", at(&run.finished_at)),
        ("lease_owner", render::opt(&run.lease_owner)),
        ("lease_expires_at", at(&run.lease_expires_at)),
        (
            "duration",
            render::run_duration(run, now).unwrap_or_else(|| "-".into()),
        ),
        (
            "timeout",
            format!(
                "{} ({})",
                render::duration(limit),
                source.describe(&run.tool)
            ),
        ),
    ]
}

/// How its end is delivered, and what it reported: status, progress, errors, files.
fn outcome_fields(run: &Run) -> Vec<(&'static str, String)> {
    vec![
        ("idempotency_key", render::opt(&run.idempotency_key)),
        ("delivery", run.delivery.as_str().to_string()),
        ("signal_on_completion", run.signal_on_completion.to_string()),
        ("status", render::opt(&run.status_text)),
        (
            "progress",
            run.progress
                .as_ref()
                .map_or("-".into(), |p| serde_json::to_string(p).unwrap_or_default()),
        ),
        ("error", render::opt(&run.error)),
        (
            "internal_error",
            // The same text twice tells nothing more.
            if run.internal_error.is_some() && run.internal_error == run.error {
                "(same as error)".into()
            } else {
                render::opt(&run.internal_error)
            },
        ),
        ("result_path", run.result_path()),
        ("log_path", run.log_path()),
    ]
}

/// The fields only some runs have: the schedule that fired it, its operation, its stages,
/// its approval.
fn origin_fields(run: &Run) -> Vec<(&'static str, String)> {
    let mut pairs = Vec::new();
    if let Some(s) = &run.schedule_id {
        pairs.push(("schedule_id", s.to_string()));
        pairs.push(("fire_at", at(&run.fire_at)));
    }
    if let Some(op) = &run.operation_id {
        pairs.push(("operation_id", op.clone()));
    }
    if run.stages.as_array().is_some_and(|a| !a.is_empty()) {
        pairs.push(("stages", stage_lines(&run.stages)));
    }
    if let Some(a) = &run.approval_state {
        // Pending is no decision yet: say until when, not an empty who and when.
        let text = match run.approval_by.as_deref() {
            None if a == "pending" => match run.approval_deadline {
                Some(_) => format!("pending until {}", at(&run.approval_deadline)),
                None => "pending (no deadline)".to_string(),
            },
            _ => format!(
                "{a} by {} at {} ({})",
                render::opt(&run.approval_by),
                at(&run.approval_at),
                render::opt(&run.approval_note)
            ),
        };
        pairs.push(("approval", text));
    }
    pairs
}

/// The error history and the output tail, last: the history's lines are indented to the
/// value column, which is known only once every key is.
fn add_errors_and_tail(run: &Run, pairs: &mut Vec<(&'static str, String)>) {
    let has_errors = run.errors.as_array().is_some_and(|a| !a.is_empty());
    if has_errors {
        pairs.push(("errors", String::new()));
    }
    if let Some(tail) = &run.output_tail {
        pairs.push(("output_tail", format!("\n{tail}")));
    }
    if has_errors {
        // The first attempt on the key's line, the others under it in the value column
        // (a key with nothing after it read as "no errors").
        let column = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 2;
        if let Some(p) = pairs.iter_mut().find(|(k, _)| *k == "errors") {
            p.1 = error_lines(&run.errors, column);
        }
    }
}

/// The error history, one attempt per line, the first on the key's line and the others
/// indented to `column`: `attempt 2 at 2026-11-01T12:00:00.000Z: timed out after 2m
/// (internal: ...)`, the internal detail only when it says more than the error.
fn error_lines(errors: &serde_json::Value, column: usize) -> String {
    let indent = " ".repeat(column);
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    errors
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut line = format!(
                "attempt {} at {}: {}",
                e["attempt"],
                text(&e["at"]).unwrap_or_else(|| "-".into()),
                text(&e["error"]).unwrap_or_else(|| e["error"].to_string())
            );
            if let Some(i) = text(&e["internal_error"])
                && Some(&i) != text(&e["error"]).as_ref()
            {
                line.push_str(&format!(" (internal: {i})"));
            }
            line.replace('\n', &format!("\n{indent}  "))
        })
        .collect::<Vec<_>>()
        .join(&format!("\n{indent}"))
}

/// One line per stage: `at  attempt N  stage  message  (progress %)`, under the field name.
fn stage_lines(stages: &serde_json::Value) -> String {
    let mut out = String::new();
    for st in stages.as_array().into_iter().flatten() {
        let field = |k: &str| st.get(k).and_then(|v| v.as_str()).unwrap_or("-");
        out.push_str(&format!(
            "\n  {}  attempt {}  {}",
            field("at"),
            st.get("attempt").map_or("-".into(), |a| a.to_string()),
            field("stage")
        ));
        if let Some(m) = st.get("message").and_then(|m| m.as_str()) {
            out.push_str(&format!("  {m}"));
        }
        if let Some(p) = st.get("progress").and_then(|p| p.as_f64()) {
            out.push_str(&format!("  ({:.0}%)", p * 100.0));
        }
    }
    out
}
