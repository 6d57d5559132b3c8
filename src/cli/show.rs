//! `toolq show RUN`: every field of one run.

use super::{Ctx, render, run_id};
use crate::error::Result;
use crate::run::Run;

/// Flags of `show`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run id (bg_...).
    pub run: String,
}

/// Prints the run.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let id = run_id(&args.run)?;
    let run = ctx.client.get(&id).await?;
    let held = ctx.client.hold_reason(&run).await?;
    if ctx.json {
        let mut v = with_paths(&run);
        if let Some(o) = v.as_object_mut() {
            o.insert("held".into(), held.into());
        }
        render::json(&v);
        return Ok(());
    }
    let t = |v: &Option<chrono::DateTime<chrono::Utc>>| v.as_ref().map_or("-".into(), render::time);
    let mut pairs = vec![
        ("id", run.id.to_string()),
        ("state", run.state.to_string()),
        ("tool", run.tool.clone()),
        ("title", run.title.clone()),
        ("session", run.session_id.clone()),
        ("args", run.args.to_string()),
        ("priority", run.priority.to_string()),
        (
            "attempt",
            format!("{} of {}", run.attempt, run.max_attempts),
        ),
        ("created_at", render::time(&run.created_at)),
        ("run_at", render::time(&run.run_at)),
        ("started_at", t(&run.started_at)),
        ("finished_at", t(&run.finished_at)),
        ("lease_owner", render::opt(&run.lease_owner)),
        ("lease_expires_at", t(&run.lease_expires_at)),
        (
            "duration",
            render::run_duration(&run, ctx.client.now()).unwrap_or_else(|| "-".into()),
        ),
        ("timeout", run.timeout_ms.map_or("-".into(), render::millis)),
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
        ("internal_error", render::opt(&run.internal_error)),
        ("result_path", run.result_path()),
        ("log_path", run.log_path()),
    ];
    if let Some(h) = held {
        pairs.push(("held", h));
    }
    if let Some(s) = &run.schedule_id {
        pairs.push(("schedule_id", s.to_string()));
        pairs.push(("fire_at", t(&run.fire_at)));
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
                Some(_) => format!("pending until {}", t(&run.approval_deadline)),
                None => "pending (no deadline)".to_string(),
            },
            _ => format!(
                "{a} by {} at {} ({})",
                render::opt(&run.approval_by),
                t(&run.approval_at),
                render::opt(&run.approval_note)
            ),
        };
        pairs.push(("approval", text));
    }
    if run.errors.as_array().is_some_and(|a| !a.is_empty()) {
        pairs.push(("errors", error_lines(&run.errors)));
    }
    if let Some(tail) = &run.output_tail {
        pairs.push(("output_tail", format!("\n{tail}")));
    }
    render::fields(&pairs);
    Ok(())
}

fn with_paths(run: &Run) -> serde_json::Value {
    let mut v = serde_json::to_value(run).unwrap_or_default();
    v["result_path"] = run.result_path().into();
    v["log_path"] = run.log_path().into();
    v
}

/// The error history, one attempt per line under the key:
/// `attempt 2 at 2026-11-01T12:00:00.000Z: timed out after 2m (internal: ...)`.
fn error_lines(errors: &serde_json::Value) -> String {
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
            if let Some(i) = text(&e["internal_error"]) {
                line.push_str(&format!(" (internal: {i})"));
            }
            format!("\n  {}", line.replace('\n', "\n    "))
        })
        .collect()
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
