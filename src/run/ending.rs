//! How a run ends when it is not running (cancelled while queued or awaiting approval, denied,
//! expired), and the pieces every end shares: a blank record and an unsuccessful final state
//! with its result and message. Pure: the core formats and writes what these decide.

use serde_json::json;

use super::{ApprovalMark, Fence, FinishRecord, Outcome, Run, RunState};
use crate::inbox::{FinalKind, final_message};

/// A record that changes nothing yet, fenced by `fence`.
pub fn blank(run: &Run, fence: Fence) -> FinishRecord {
    FinishRecord {
        id: run.id.clone(),
        session_id: run.session_id.clone(),
        attempt: run.attempt,
        fence,
        outcome: Outcome::Final(RunState::Completed),
        error: None,
        internal_error: None,
        error_entry: None,
        status_text: None,
        progress: None,
        output_tail: None,
        log: None,
        result: None,
        extra_blobs: Vec::new(),
        message: None,
        message_data: None,
        approval: None,
        steps: Vec::new(),
        batch_id: run.batch_id.clone(),
        parent_run_id: run.parent_run_id.clone(),
    }
}

/// The final state, result and message of an end that is not a success; `attempt` is the
/// attempt the end counts as (the message's).
pub fn end_unsuccessfully(
    mut rec: FinishRecord,
    run: &Run,
    kind: FinalKind,
    error: &str,
    attempt: i64,
) -> FinishRecord {
    let state = if kind == FinalKind::Cancelled {
        RunState::Cancelled
    } else {
        RunState::Failed
    };
    rec.outcome = Outcome::Final(state);
    rec.error = Some(error.to_string());
    rec.result = Some(
        json!({"status": kind.as_str(), "error": error})
            .to_string()
            .into_bytes(),
    );
    if run.signal_on_completion {
        let mut about = run.about();
        about.attempt = attempt;
        rec.message = Some(final_message(kind, &about, error));
    }
    rec
}

/// How a run that is not running (queued, or awaiting approval) ends.
#[derive(Debug, Clone)]
pub enum WaitingEnd {
    /// An operator cancelled it.
    Cancelled,
    /// An operator denied its approval.
    Denied {
        /// Who denied it.
        by: String,
        /// Why.
        reason: Option<String>,
    },
    /// Its approval deadline passed.
    Expired,
}

/// Turns the end of a run that is not running into the records to write (pure). The end
/// counts as the run's next attempt, fenced by its current state and attempt.
pub fn decide_waiting(run: &Run, end: WaitingEnd) -> FinishRecord {
    let mut rec = blank(run, Fence::Waiting(run.state));
    let error = match end {
        WaitingEnd::Cancelled if run.state == RunState::AwaitingApproval => {
            "cancelled by request while awaiting approval".to_string()
        }
        WaitingEnd::Cancelled => "cancelled by request before it started".to_string(),
        WaitingEnd::Denied { by, reason } => {
            let error = match &reason {
                Some(r) => format!("approval denied by {by}: {r}"),
                None => format!("approval denied by {by}"),
            };
            rec.approval = Some(ApprovalMark {
                state: "denied",
                by,
                note: reason,
            });
            error
        }
        WaitingEnd::Expired => {
            let at = run
                .approval_deadline
                .map(crate::clock::ts)
                .unwrap_or_default();
            rec.approval = Some(ApprovalMark {
                state: "expired",
                by: "toolq".into(),
                note: None,
            });
            format!("approval not given before its deadline {at}; expired")
        }
    };
    end_unsuccessfully(rec, run, FinalKind::Cancelled, &error, run.attempt + 1)
}
