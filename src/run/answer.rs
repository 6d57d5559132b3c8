//! What an action on one run answers, in the CLI (`cancel`, `retry`, `approve`, `deny` with
//! `--json`) and on the dashboard (`POST /runs/{id}/ACTION` with `Accept: application/json`):
//! one type, so both speak the same shape.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Run, RunState};
use crate::ids::RunId;

/// The run's state after an action on it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
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

/// What an enqueue of one run answers (`toolq enqueue --json`, `POST /api/v1/runs`). Its
/// fields are declared in name order, the order `enqueue --json` always printed them in.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EnqueueAnswer {
    /// The batch it joined, when it joined one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<crate::ids::BatchId>,
    /// False when an idempotency key or a unique run returned an existing run.
    pub created: bool,
    /// The run.
    pub id: RunId,
    /// Where its log is kept.
    pub log_path: String,
    /// Where its result is kept.
    pub result_path: String,
    /// The same id again (the name the CLI's JSON always had).
    pub run_id: RunId,
    /// Its tool.
    pub tool: String,
}

impl EnqueueAnswer {
    /// The answer for `enqueued`, a run of `tool` (in batch `batch`, when it joined one).
    pub fn new(
        enqueued: &super::request::Enqueued,
        tool: &str,
        batch: Option<crate::ids::BatchId>,
    ) -> Self {
        let id = &enqueued.run_id;
        Self {
            batch_id: batch,
            created: enqueued.created,
            id: id.clone(),
            log_path: crate::run::log_path(id),
            result_path: crate::run::result_path(id),
            run_id: id.clone(),
            tool: tool.to_string(),
        }
    }
}

/// What an enqueue of many runs in one transaction answers (`toolq enqueue --file --json`,
/// `POST /api/v1/runs/many`), fields in name order as the CLI printed them.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EnqueuedMany {
    /// How many of them are new (the others existed by idempotency key or as unique runs).
    pub created: usize,
    /// How many runs the request named.
    pub enqueued: usize,
    /// Their ids, in the request's order.
    pub ids: Vec<RunId>,
    /// Each run, in the request's order.
    pub runs: Vec<super::request::Enqueued>,
}

impl EnqueuedMany {
    /// The answer for `runs`, in request order.
    pub fn new(runs: Vec<super::request::Enqueued>) -> Self {
        Self {
            created: runs.iter().filter(|e| e.created).count(),
            enqueued: runs.len(),
            ids: runs.iter().map(|e| e.run_id.clone()).collect(),
            runs,
        }
    }
}

/// Where a waited-for run stands (`toolq wait --json`, one per run; `GET
/// /api/v1/runs/{id}/wait`), fields in name order as the CLI printed them.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct WaitAnswer {
    /// Whether it is final (false: the wait timed out first).
    pub ended: bool,
    /// Its error, when it failed or was cancelled.
    pub error: Option<String>,
    /// The run.
    pub id: RunId,
    /// Its state.
    pub state: RunState,
}

impl WaitAnswer {
    /// Where `run` stands.
    pub fn of(run: &Run) -> Self {
        Self {
            ended: run.state.is_final(),
            error: run.error.clone(),
            id: run.id.clone(),
            state: run.state,
        }
    }
}
