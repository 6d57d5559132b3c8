//! What an action on one run answers, in the CLI (`cancel`, `retry`, `approve`, `deny` with
//! `--json`) and on the dashboard (`POST /runs/{id}/ACTION` with `Accept: application/json`):
//! one type, so both speak the same shape.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Run, RunState};
use crate::ids::RunId;

/// The run's state after an action on it.
#[derive(Debug, Clone, Serialize)]
pub struct RunAnswer {
    /// The run.
    pub id: RunId,
    /// The same id again: the name the CLI's JSON always had (operators' scripts read it).
    pub run_id: RunId,
    /// Its state after the action (`queued` after a retry or an approval, `awaiting_approval`
    /// after a retry of a run that must be approved again, `cancelled`, or `running` while a
    /// cancel waits for its worker).
    pub state: RunState,
    /// Cancel only: the run was running, and its worker stops it within a heartbeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_requested: Option<bool>,
    /// Approve and deny only: the decision as recorded on the run.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// An approval decision as recorded on the run (approve and deny).
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    /// `approved` or `denied`.
    pub approval_state: Option<String>,
    /// Who decided.
    pub approval_by: Option<String>,
    /// When.
    pub approval_at: Option<DateTime<Utc>>,
    /// The note or reason given.
    pub approval_note: Option<String>,
    /// The error the session sees (a denial's text; none after an approval).
    pub error: Option<String>,
}

impl RunAnswer {
    fn new(id: &RunId, state: RunState) -> Self {
        Self {
            id: id.clone(),
            run_id: id.clone(),
            state,
            cancel_requested: None,
            decision: None,
        }
    }

    /// After a cancel that left the run in `state`.
    pub fn cancelled(id: &RunId, state: RunState) -> Self {
        Self {
            cancel_requested: Some(state == RunState::Running),
            ..Self::new(id, state)
        }
    }

    /// After a retry: the run is queued again, or awaits approval again (`state`).
    pub fn retried(id: &RunId, state: RunState) -> Self {
        Self::new(id, state)
    }

    /// After an approval or a denial: the run as it now is.
    pub fn decided(run: &Run) -> Self {
        Self {
            decision: Some(Decision {
                approval_state: run.approval_state.clone(),
                approval_by: run.approval_by.clone(),
                approval_at: run.approval_at,
                approval_note: run.approval_note.clone(),
                error: run.error.clone(),
            }),
            ..Self::new(&run.id, run.state)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_also_run_id_and_cancel_says_whether_it_waits_for_a_worker() {
        let id: RunId = "bg_01a21b82ddec72588a9511b582966b1f".parse().unwrap();
        let v = serde_json::to_value(RunAnswer::cancelled(&id, RunState::Running)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id": id, "run_id": id, "state": "running", "cancel_requested": true})
        );
        let v = serde_json::to_value(RunAnswer::retried(&id, RunState::Queued)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id": id, "run_id": id, "state": "queued"})
        );
    }
}
