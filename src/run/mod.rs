//! Runs: states, the row as the library sees it, enqueue requests, and pure retry decisions.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::str::FromStr;

mod answer;
pub mod artifacts;
pub mod composition;
pub mod delivery;
mod end;
pub mod ending;
mod records;
pub mod request;
pub mod spec;
pub mod steps;
pub mod tags;
mod unique;

pub use answer::{Decision, EnqueueAnswer, EnqueuedMany, RunAnswer, WaitAnswer};
pub use artifacts::{artifact_dir, log_path, result_path};
pub use composition::{
    Batch, BatchFilter, BatchSummary, BatchWaited, Callback, DepMode, Dependency, FailedRun,
    Linked, LinkedResult, LinkedRun, NewBatch, RunLinks,
};
pub use delivery::Delivery;
pub use end::{ApprovalMark, Fence, FinishRecord, Outcome};
pub use records::{Blob, Inserted, ListFilter, RunFilter};
pub use steps::{
    EventSent, Journal, NewEvent, RunEvent, StepEntry, StepKind, StepRecord, StepSave, StepStatus,
    Suspension, WaitKind, Waiting,
};
pub use tags::Tags;
pub use unique::{Unique, UniqueBy, UniqueCheck, unique_key};

use crate::error::InputError;
use crate::ids::{BatchId, RunId, ScheduleId};

/// Where a run is in its lifecycle. The strings match the schema's CHECK constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Waiting to be claimed (possibly not before `run_at`).
    Queued,
    /// Waiting for an operator to approve or deny it.
    AwaitingApproval,
    /// Claimed by a worker, which holds its lease.
    Running,
    /// Finished successfully.
    Completed,
    /// Finished with an error (tool error, timeout, exhausted retries).
    Failed,
    /// Cancelled before or while running.
    Cancelled,
}

impl RunState {
    /// All states, in lifecycle order.
    pub const ALL: [RunState; 6] = [
        RunState::Queued,
        RunState::AwaitingApproval,
        RunState::Running,
        RunState::Completed,
        RunState::Failed,
        RunState::Cancelled,
    ];

    /// The state's name as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::AwaitingApproval => "awaiting_approval",
            RunState::Running => "running",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }

    /// Whether the run has reached a final state.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunState::Completed | RunState::Failed | RunState::Cancelled
        )
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunState {
    type Err = InputError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                InputError::new(
                    "state",
                    s,
                    "must be one of queued, awaiting_approval, running, completed, failed, cancelled",
                )
            })
    }
}

/// Progress reported by a running tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Progress {
    /// Units done so far.
    pub current: f64,
    /// Units in all, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What a unit is ("files", "bytes").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// A short label for the current step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// A run as stored.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Run {
    /// The run's id.
    pub id: RunId,
    /// The owning session.
    pub session_id: String,
    /// The tool to execute.
    pub tool: String,
    /// The validated arguments.
    pub args: Value,
    /// A human title.
    pub title: String,
    /// Current state.
    pub state: RunState,
    /// Higher runs first.
    pub priority: i64,
    /// Attempts started so far.
    pub attempt: i64,
    /// Attempts allowed in all.
    pub max_attempts: i64,
    /// Not before this instant.
    pub run_at: DateTime<Utc>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// Start of the latest attempt.
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached a final state.
    pub finished_at: Option<DateTime<Utc>>,
    /// The worker holding the lease.
    pub lease_owner: Option<String>,
    /// The lease's fencing token.
    #[serde(skip)]
    pub lease_token: Option<String>,
    /// When the lease runs out unless heartbeated.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The latest heartbeat.
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// The idempotency key, when set.
    pub idempotency_key: Option<String>,
    /// Per-run timeout override in milliseconds.
    pub timeout_ms: Option<i64>,
    /// Whether completion posts an inbox message.
    pub signal_on_completion: bool,
    /// Delivery mode of the completion message.
    pub delivery: Delivery,
    /// The schedule that made it.
    pub schedule_id: Option<ScheduleId>,
    /// The schedule tick it stands for.
    pub fire_at: Option<DateTime<Utc>>,
    /// Schedule ticks it stands for (more than 1 for a catch-up run).
    pub ticks: i64,
    /// Latest status line.
    pub status_text: Option<String>,
    /// Latest progress.
    pub progress: Option<Progress>,
    /// The log's last characters.
    pub output_tail: Option<String>,
    /// The error the session may see.
    pub error: Option<String>,
    /// Ops-only error detail.
    pub internal_error: Option<String>,
    /// One entry per failed attempt.
    pub errors: Value,
    /// Async tools: the external operation id.
    pub operation_id: Option<String>,
    /// Async tools: stage history.
    pub stages: Value,
    /// Approval: pending, approved, denied or expired.
    pub approval_state: Option<String>,
    /// Approval deadline, when set.
    pub approval_deadline: Option<DateTime<Utc>>,
    /// Who decided the approval.
    pub approval_by: Option<String>,
    /// When the approval was decided.
    pub approval_at: Option<DateTime<Utc>>,
    /// Why (the note or reason given).
    pub approval_note: Option<String>,
    /// When cancellation was requested for a running run.
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// Started in the background (`spawn_background`, or a Background-mode tool called
    /// through the executor): spawn_background's limits count these runs only.
    pub background: bool,
    /// A suspended run (still `queued`): what it waits for. `None` for a run that is not
    /// queued, or simply waits its turn.
    pub waiting: Option<Waiting>,
    /// Times the run snoozed (`ToolOutcome::Snooze`), bounded by `runs.max_snoozes`.
    pub snoozes: i64,
    /// A running run whose attempt resumed a suspension (a wait, a snooze, a next check):
    /// its log so far is kept and added to.
    #[serde(skip)]
    pub resumed: bool,
    /// The batch it belongs to (`runs.batch_id`), set when it was inserted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<BatchId>,
    /// The run that spawned it (`ctx.spawn_child`, or spawn_background from inside a run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    /// Parents (`--after`) it still waits for; while above 0 it is blocked (queued, waiting
    /// kind `parents`).
    pub deps_pending: i64,
    /// Its tags (`{}` when none): given at enqueue, or copied from the schedule that fired it.
    pub tags: Tags,
    /// The W3C trace context of the span that enqueued it (`runs.traceparent`); the worker's
    /// spans continue that trace. `None`: no trace.
    pub traceparent: Option<String>,
}

impl Run {
    /// What a message about this run (at its current attempt) is about.
    pub fn about(&self) -> crate::inbox::About<'_> {
        crate::inbox::About {
            run_id: &self.id,
            session_id: &self.session_id,
            title: &self.title,
            tool: &self.tool,
            attempt: self.attempt,
            delivery: self.delivery,
        }
    }

    /// Path of the run's log blob.
    pub fn log_path(&self) -> String {
        log_path(&self.id)
    }

    /// Path of the run's result blob.
    pub fn result_path(&self) -> String {
        result_path(&self.id)
    }

    /// The log of this run when it has no log row: empty once the run is finished (an empty
    /// log is stored as no row, so a finish writes none for it), dated `finished_at`; `None`
    /// while it is not finished (its log is not written yet).
    pub fn empty_log(&self) -> Option<Blob> {
        self.state.is_final().then(|| Blob {
            path: self.log_path(),
            content: Vec::new(),
            size: 0,
            truncated: false,
            updated_at: self.finished_at.map(crate::clock::ts).unwrap_or_default(),
        })
    }
}

/// A validated request to insert one run (built by [`crate::EnqueueRequest`] validation).
#[derive(Debug, Clone)]
pub struct NewRun {
    /// Fresh id.
    pub id: RunId,
    /// Owner.
    pub session_id: String,
    /// Tool name.
    pub tool: String,
    /// Arguments, validated and encoded as compact JSON text (the stored form). Encoded when
    /// the request is checked, so the caller's JSON value is freed there, outside the write
    /// transaction.
    pub args: String,
    /// Title.
    pub title: String,
    /// Priority (higher first).
    pub priority: i64,
    /// Attempts allowed.
    pub max_attempts: i64,
    /// Not before.
    pub run_at: DateTime<Utc>,
    /// Now.
    pub created_at: DateTime<Utc>,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// Timeout override in ms.
    pub timeout_ms: Option<i64>,
    /// Post an inbox message on completion.
    pub signal_on_completion: bool,
    /// Delivery mode.
    pub delivery: Delivery,
    /// Set when a schedule made it.
    pub schedule_id: Option<ScheduleId>,
    /// The schedule tick.
    pub fire_at: Option<DateTime<Utc>>,
    /// Ticks it stands for.
    pub ticks: i64,
    /// Return a matching run instead of inserting (unique runs).
    pub unique: Option<UniqueCheck>,
    /// Set when the run needs an operator's approval before it may run: the insert stores it
    /// `awaiting_approval` (approval `pending`) with its request message, in the same
    /// transaction, instead of `queued`. Decided by the creating process's rules
    /// ([`crate::approval::pending_for`]).
    pub approval: Option<PendingApproval>,
    /// The batch it joins (an existing batch, or the one [`crate::store::Engine::batch_insert`]
    /// creates with it).
    pub batch_id: Option<BatchId>,
    /// The run that spawned it.
    pub parent_run_id: Option<RunId>,
    /// The runs it waits for (`--after`): known runs, or runs inserted before it in the same
    /// call. Empty: none.
    pub after: Vec<RunId>,
    /// How it treats each of `after` (all: they must complete; any: any final state).
    pub after_mode: DepMode,
    /// Its tags, already checked (empty: none; no `run_tags` row is written).
    pub tags: Tags,
    /// The W3C trace context of the enqueuing span, stored as `runs.traceparent`.
    pub traceparent: Option<String>,
}

/// What a run that waits for approval from its creation is stored with.
#[derive(Debug, Clone)]
pub struct PendingApproval {
    /// When the approval expires (the run ends cancelled as expired); `None`: never.
    pub deadline: Option<DateTime<Utc>>,
    /// The `approval_request` message to the run's session (attempt 0).
    pub message: crate::inbox::NewMessage,
    /// The message's `data`, encoded as JSON text.
    pub message_data: String,
}

/// A run's args as stored: compact JSON text. Serialised straight into a `String`:
/// `Value::to_string` goes through `fmt::Write`, twice as slow on a batch enqueue's profile.
pub(crate) fn encode_args(args: &Value) -> Result<String, InputError> {
    serde_json::to_string(args).map_err(|e| {
        InputError::new(
            "args",
            "(not shown)",
            format!("cannot be encoded as JSON: {e}"),
        )
    })
}

/// The random draw used for backoff jitter, in [0, 1).
pub type Jitter = f64;

/// Delay before retry number `attempt` (the attempt that just failed, 1-based):
/// `base * 2^(attempt-1)`, capped at `max`, then scaled by a jitter factor in [0.5, 1.5).
pub fn backoff(attempt: i64, base: Duration, max: Duration, jitter: Jitter) -> Duration {
    let exp = attempt.clamp(1, 30) - 1;
    let raw_ms = base.num_milliseconds().saturating_mul(1_i64 << exp);
    let capped_ms = raw_ms.min(max.num_milliseconds()).max(0);
    let factor = 0.5 + jitter.clamp(0.0, 1.0);
    Duration::milliseconds((capped_ms as f64 * factor) as i64)
}

/// Whether a failed attempt should be retried.
pub fn should_retry(retryable: bool, attempt: i64, max_attempts: i64) -> bool {
    retryable && attempt < max_attempts
}

/// A running run at 2026-11-01T12:00:00Z with the given attempt counts, for unit tests.
#[cfg(test)]
pub(crate) fn running_fixture(attempt: i64, max_attempts: i64) -> Run {
    let t = DateTime::parse_from_rfc3339("2026-11-01T12:00:00Z")
        .expect("literal instant")
        .with_timezone(&Utc);
    Run {
        id: RunId::generate(),
        session_id: "s".into(),
        tool: "sleep".into(),
        args: serde_json::json!({}),
        title: "Sleep".into(),
        state: RunState::Running,
        priority: 0,
        attempt,
        max_attempts,
        run_at: t,
        created_at: t,
        started_at: Some(t),
        finished_at: None,
        lease_owner: Some("wk_dead".into()),
        lease_token: Some("tok".into()),
        lease_expires_at: Some(t + Duration::seconds(30)),
        heartbeat_at: None,
        idempotency_key: None,
        timeout_ms: None,
        signal_on_completion: true,
        delivery: Delivery::WhenIdle,
        schedule_id: None,
        fire_at: None,
        ticks: 1,
        status_text: None,
        progress: None,
        output_tail: None,
        error: None,
        internal_error: None,
        errors: serde_json::json!([]),
        operation_id: None,
        stages: serde_json::json!([]),
        approval_state: None,
        approval_deadline: None,
        approval_by: None,
        approval_at: None,
        approval_note: None,
        cancel_requested_at: None,
        background: false,
        waiting: None,
        snoozes: 0,
        resumed: false,
        batch_id: None,
        parent_run_id: None,
        deps_pending: 0,
        tags: Tags::new(),
        traceparent: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        let base = Duration::seconds(1);
        let max = Duration::seconds(60);
        assert_eq!(backoff(1, base, max, 0.5), Duration::seconds(1));
        assert_eq!(backoff(2, base, max, 0.5), Duration::seconds(2));
        assert_eq!(backoff(3, base, max, 0.5), Duration::seconds(4));
        assert_eq!(backoff(10, base, max, 0.5), Duration::seconds(60));
        assert_eq!(backoff(1, base, max, 0.0), Duration::milliseconds(500));
        assert_eq!(backoff(1, base, max, 0.999), Duration::milliseconds(1499));
        assert_eq!(backoff(1000, base, max, 0.5), Duration::seconds(60));
    }

    #[test]
    fn retry_only_when_retryable_and_attempts_remain() {
        assert!(should_retry(true, 1, 3));
        assert!(should_retry(true, 2, 3));
        assert!(!should_retry(true, 3, 3));
        assert!(!should_retry(false, 1, 3));
    }

    #[test]
    fn states_round_trip() {
        for s in RunState::ALL {
            assert_eq!(s.as_str().parse::<RunState>().unwrap(), s);
        }
        assert!("done".parse::<RunState>().is_err());
        assert!(RunState::Cancelled.is_final() && !RunState::Running.is_final());
    }
}
