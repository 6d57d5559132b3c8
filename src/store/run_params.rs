//! The parameters and results of the contract's run operations (`run_*`, `inbox_mark`,
//! `schedule_enable_within_limit`): plain values, no engine type.

use chrono::{DateTime, Utc};

use crate::ids::RunId;
use crate::run::{FinishRecord, Inserted, NewRun, PendingApproval, RunFilter, RunState};

/// Parameters of [`Engine::run_insert_within_limit`](super::Engine::run_insert_within_limit).
#[derive(Debug, Clone)]
pub struct RunInsertLimited {
    /// The run.
    pub run: NewRun,
    /// A run not to count (the caller's own).
    pub except: Option<String>,
    /// At most this many active background runs in the run's session; `None`: no limit.
    pub limit: Option<i64>,
    /// Now: a queued run whose `run_at` is later is delayed, not active.
    pub now: DateTime<Utc>,
    /// A host's approval, recorded before the run is queued (as [`Engine::run_insert_preapproved`](super::Engine::run_insert_preapproved)).
    pub approval: Option<RunApprove>,
}

/// What [`Engine::run_insert_within_limit`](super::Engine::run_insert_within_limit) did.
#[derive(Debug, Clone)]
pub enum LimitedInsert {
    /// Inserted (or found by its idempotency key).
    Inserted(Inserted),
    /// Nothing written: the session has this many active background runs.
    OverSession(i64),
}

/// Parameters of [`Engine::run_retry`](super::Engine::run_retry).
#[derive(Debug, Clone)]
pub struct RunRetry {
    /// The run.
    pub id: RunId,
    /// The final state it was read in.
    pub expected: RunState,
    /// Now.
    pub now: DateTime<Utc>,
    /// Set when the retried run must wait for approval again
    /// ([`crate::approval::pending_for_retry`]): it goes to `awaiting_approval` with its
    /// request message, in the same transaction, instead of `queued`.
    pub approval: Option<PendingApproval>,
}

/// Parameters of [`Engine::run_select`](super::Engine::run_select).
#[derive(Debug, Clone)]
pub struct RunSelect {
    /// Which runs.
    pub filter: RunFilter,
    /// Only ids after this one ("" for the first page).
    pub after: String,
    /// At most this many.
    pub limit: i64,
}

/// Parameters of [`Engine::run_page`](super::Engine::run_page).
#[derive(Debug, Clone)]
pub struct RunPage {
    /// Which runs (every state when `states` is empty).
    pub filter: RunFilter,
    /// Only ids before this one (`None`: the first page).
    pub before: Option<String>,
    /// At most this many.
    pub limit: i64,
}

/// One row of [`Engine::run_finished_buckets`](super::Engine::run_finished_buckets).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FinishedBucket {
    /// `completed`, `failed` or `cancelled`.
    pub state: String,
    /// The bucket: 0 starts at `since`, 1 a bucket later, and so on.
    pub bucket: i64,
    /// Runs of that state finished in it.
    pub count: i64,
}

/// Parameters of [`Engine::run_cancel_many`](super::Engine::run_cancel_many).
#[derive(Debug, Clone)]
pub struct RunCancelMany {
    /// Ends of waiting runs (queued or awaiting), each fenced by the state it was read in.
    pub ends: Vec<FinishRecord>,
    /// Running runs to ask to stop.
    pub requests: Vec<RunId>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// What [`Engine::run_cancel_many`](super::Engine::run_cancel_many) did.
#[derive(Debug, Clone, Default)]
pub struct CancelledMany {
    /// Per end, whether its fence held.
    pub ended: Vec<bool>,
    /// Per request, whether the run was still running.
    pub requested: Vec<bool>,
}

/// Parameters of [`Engine::run_retry_many`](super::Engine::run_retry_many).
#[derive(Debug, Clone)]
pub struct RunRetryMany {
    /// Each run with the final state it was read in.
    pub runs: Vec<(RunId, RunState)>,
    /// Now.
    pub now: DateTime<Utc>,
    /// Per run of `runs` (same index; missing: none), as [`RunRetry::approval`].
    pub approvals: Vec<Option<PendingApproval>>,
}

/// Parameters of [`Engine::run_approve`](super::Engine::run_approve).
#[derive(Debug, Clone)]
pub struct RunApprove {
    /// The run.
    pub id: RunId,
    /// Who approved.
    pub by: String,
    /// Their note.
    pub note: Option<String>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// Parameters of [`Engine::inbox_mark`](super::Engine::inbox_mark).
#[derive(Debug, Clone)]
pub struct InboxMark {
    /// The session.
    pub session: String,
    /// Message ids.
    pub ids: Vec<i64>,
    /// Also acknowledge.
    pub ack: bool,
    /// Now.
    pub now: DateTime<Utc>,
}

/// Parameters of [`Engine::schedule_enable_within_limit`](super::Engine::schedule_enable_within_limit).
#[derive(Debug, Clone)]
pub struct ScheduleEnable {
    /// The schedule.
    pub id: String,
    /// Its session.
    pub session: String,
    /// Its next tick.
    pub next: DateTime<Utc>,
    /// Now.
    pub now: DateTime<Utc>,
    /// The session's limit of enabled schedules.
    pub max_active: i64,
}

/// Makes `run` go in queued when a host already approved it (`approval`): its approval
/// request, if any, is dropped; the approval is recorded with it instead.
pub(crate) fn queue_if_approved(run: &mut NewRun, approval: Option<&RunApprove>) {
    if approval.is_some() {
        run.approval = None;
    }
}
