//! Deciding how an attempt ends (pure): state, errors, retry time, result and inbox message.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::client::about_of;
use crate::config::RunDefaults;
use crate::inbox::{FinalKind, final_message, summary_of};
use crate::run::{Jitter, Run, RunState, backoff, should_retry};
use crate::store::finish::{FinishRecord, Outcome};
use crate::tool::sink::SinkSnapshot;
use crate::tool::{INTERNAL_ERROR_TEXT, ToolOutcome};

/// How an attempt ended, as the worker saw it.
#[derive(Debug, Clone)]
pub enum AttemptEnd {
    /// The tool returned.
    Returned(ToolOutcome),
    /// It ran past its timeout.
    TimedOut(std::time::Duration),
    /// An operator cancelled it.
    Cancelled,
    /// It panicked.
    Panicked(String),
    /// Its worker was lost (process died, or the lease expired): (visible reason, ops detail).
    WorkerLost(String, String),
}

/// Turns an attempt's end into the records to write. `jitter` is the random draw for backoff.
pub fn decide(
    run: &Run,
    end: AttemptEnd,
    snap: SinkSnapshot,
    defaults: &RunDefaults,
    now: DateTime<Utc>,
    jitter: Jitter,
) -> FinishRecord {
    let token = run.lease_token.clone().unwrap_or_default();
    let mut rec = FinishRecord {
        id: run.id.to_string(),
        session_id: run.session_id.clone(),
        attempt: run.attempt,
        token,
        outcome: Outcome::Final(RunState::Completed),
        error: None,
        internal_error: None,
        error_entry: None,
        status_text: snap.status_text,
        progress: snap.progress,
        output_tail: snap.output_tail,
        log: snap.log,
        result: None,
        extra_blobs: Vec::new(),
        message: None,
    };
    // (visible error, ops detail, retryable, final kind)
    let (error, internal, retryable, kind) = match end {
        AttemptEnd::Returned(ToolOutcome::Success(s)) => {
            let mut result = json!({"status": "completed", "result": s.value});
            if !s.images.is_empty() {
                result["images"] = serde_json::to_value(&s.images).unwrap_or(Value::Null);
            }
            if let Some(raw) = s.raw_output {
                rec.extra_blobs.push((
                    format!("/.background/{}/raw_output.txt", run.id),
                    raw.into_bytes(),
                ));
            }
            rec.result = Some(result.to_string().into_bytes());
            if run.signal_on_completion {
                rec.message = Some(final_message(
                    FinalKind::Completed,
                    &about_of(run),
                    &summary_of(&result["result"]),
                ));
            }
            return rec;
        }
        AttemptEnd::Returned(ToolOutcome::ToolError(m)) => (m, None, false, FinalKind::Failed),
        AttemptEnd::Returned(ToolOutcome::Internal(detail)) => (
            INTERNAL_ERROR_TEXT.to_string(),
            Some(detail),
            true,
            FinalKind::Failed,
        ),
        AttemptEnd::Returned(ToolOutcome::ConnectionRequired { provider }) => (
            format!("connection required: connect {provider} and try again"),
            None,
            false,
            FinalKind::Failed,
        ),
        AttemptEnd::Panicked(msg) => (
            INTERNAL_ERROR_TEXT.to_string(),
            Some(format!("tool panicked: {msg}")),
            true,
            FinalKind::Failed,
        ),
        AttemptEnd::TimedOut(limit) => {
            let text = format!("timed out after {}", humantime::format_duration(limit));
            (text.clone(), Some(text), true, FinalKind::Failed)
        }
        AttemptEnd::WorkerLost(reason, detail) => (
            format!("worker lost: {reason}"),
            Some(detail),
            true,
            FinalKind::Failed,
        ),
        AttemptEnd::Cancelled => (
            "cancelled by request while running".to_string(),
            None,
            false,
            FinalKind::Cancelled,
        ),
    };
    rec.error_entry = Some(json!({
        "attempt": run.attempt,
        "at": crate::store::codec::ts(now),
        "error": error,
        "internal_error": internal,
    }));
    rec.error = Some(error.clone());
    rec.internal_error = internal;
    if should_retry(retryable, run.attempt, run.max_attempts) {
        let delay = backoff(
            run.attempt,
            chrono::Duration::from_std(defaults.backoff_base)
                .unwrap_or(chrono::Duration::seconds(1)),
            chrono::Duration::from_std(defaults.backoff_max)
                .unwrap_or(chrono::Duration::minutes(10)),
            jitter,
        );
        rec.outcome = Outcome::Retry(now + delay);
        return rec;
    }
    let state = if kind == FinalKind::Cancelled {
        RunState::Cancelled
    } else {
        RunState::Failed
    };
    rec.outcome = Outcome::Final(state);
    rec.result = Some(
        json!({"status": kind.as_str(), "error": error})
            .to_string()
            .into_bytes(),
    );
    if run.signal_on_completion {
        rec.message = Some(final_message(kind, &about_of(run), &error));
    }
    rec
}
