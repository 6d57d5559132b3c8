//! The runs table's column list and positions, and the timestamp text both engines store
//! (fixed-width UTC): what the engines' row decoders share, with no engine type in it.

pub use crate::clock::{parse_ts, ts};

/// The column list that each engine's `run_from_row` reads, for `SELECT {RUN_COLUMNS} FROM runs`.
/// It must come first in the select list: `run_from_row` reads by position (the [`col`] constants).
pub const RUN_COLUMNS: &str = "id, session_id, tool, args, title, state, priority, attempt, max_attempts, \
    run_at, created_at, started_at, finished_at, lease_owner, lease_token, lease_expires_at, heartbeat_at, \
    idempotency_key, timeout_ms, signal_on_completion, delivery, schedule_id, fire_at, ticks, status_text, \
    progress, output_tail, error, internal_error, errors, operation_id, stages, approval_state, \
    approval_deadline, approval_by, approval_at, approval_note, cancel_requested_at, background, wait_kind, wait_event, snoozes, batch_id, parent_run_id, deps_pending, tags, traceparent";

/// What a run waits for, from its `wait_kind` and `wait_event` columns: only a queued run
/// waits (the columns of a run that was claimed again are stale until its next end).
pub fn waiting(
    state: crate::run::RunState,
    kind: Option<&str>,
    event: Option<String>,
    run_at: chrono::DateTime<chrono::Utc>,
) -> Option<crate::run::Waiting> {
    if state != crate::run::RunState::Queued {
        return None;
    }
    let kind = kind?.parse().ok()?;
    Some(crate::run::Waiting {
        kind,
        event,
        until: run_at,
    })
}

/// Positions of [`RUN_COLUMNS`]: reading by position instead of by name saves a scan of the
/// column names per value (a third of the cost of decoding a claimed run).
#[allow(missing_docs)]
pub mod col {
    pub const ID: usize = 0;
    pub const SESSION_ID: usize = 1;
    pub const TOOL: usize = 2;
    pub const ARGS: usize = 3;
    pub const TITLE: usize = 4;
    pub const STATE: usize = 5;
    pub const PRIORITY: usize = 6;
    pub const ATTEMPT: usize = 7;
    pub const MAX_ATTEMPTS: usize = 8;
    pub const RUN_AT: usize = 9;
    pub const CREATED_AT: usize = 10;
    pub const STARTED_AT: usize = 11;
    pub const FINISHED_AT: usize = 12;
    pub const LEASE_OWNER: usize = 13;
    pub const LEASE_TOKEN: usize = 14;
    pub const LEASE_EXPIRES_AT: usize = 15;
    pub const HEARTBEAT_AT: usize = 16;
    pub const IDEMPOTENCY_KEY: usize = 17;
    pub const TIMEOUT_MS: usize = 18;
    pub const SIGNAL_ON_COMPLETION: usize = 19;
    pub const DELIVERY: usize = 20;
    pub const SCHEDULE_ID: usize = 21;
    pub const FIRE_AT: usize = 22;
    pub const TICKS: usize = 23;
    pub const STATUS_TEXT: usize = 24;
    pub const PROGRESS: usize = 25;
    pub const OUTPUT_TAIL: usize = 26;
    pub const ERROR: usize = 27;
    pub const INTERNAL_ERROR: usize = 28;
    pub const ERRORS: usize = 29;
    pub const OPERATION_ID: usize = 30;
    pub const STAGES: usize = 31;
    pub const APPROVAL_STATE: usize = 32;
    pub const APPROVAL_DEADLINE: usize = 33;
    pub const APPROVAL_BY: usize = 34;
    pub const APPROVAL_AT: usize = 35;
    pub const APPROVAL_NOTE: usize = 36;
    pub const CANCEL_REQUESTED_AT: usize = 37;
    pub const BACKGROUND: usize = 38;
    pub const WAIT_KIND: usize = 39;
    pub const WAIT_EVENT: usize = 40;
    pub const SNOOZES: usize = 41;
    pub const BATCH_ID: usize = 42;
    pub const PARENT_RUN_ID: usize = 43;
    pub const DEPS_PENDING: usize = 44;
    pub const TAGS: usize = 45;
    pub const TRACEPARENT: usize = 46;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_positions_match_the_column_list() {
        use col::*;
        let names: Vec<&str> = RUN_COLUMNS.split(',').map(str::trim).collect();
        let expect = [
            (ID, "id"),
            (SESSION_ID, "session_id"),
            (TOOL, "tool"),
            (ARGS, "args"),
            (TITLE, "title"),
            (STATE, "state"),
            (PRIORITY, "priority"),
            (ATTEMPT, "attempt"),
            (MAX_ATTEMPTS, "max_attempts"),
            (RUN_AT, "run_at"),
            (CREATED_AT, "created_at"),
            (STARTED_AT, "started_at"),
            (FINISHED_AT, "finished_at"),
            (LEASE_OWNER, "lease_owner"),
            (LEASE_TOKEN, "lease_token"),
            (LEASE_EXPIRES_AT, "lease_expires_at"),
            (HEARTBEAT_AT, "heartbeat_at"),
            (IDEMPOTENCY_KEY, "idempotency_key"),
            (TIMEOUT_MS, "timeout_ms"),
            (SIGNAL_ON_COMPLETION, "signal_on_completion"),
            (DELIVERY, "delivery"),
            (SCHEDULE_ID, "schedule_id"),
            (FIRE_AT, "fire_at"),
            (TICKS, "ticks"),
            (STATUS_TEXT, "status_text"),
            (PROGRESS, "progress"),
            (OUTPUT_TAIL, "output_tail"),
            (ERROR, "error"),
            (INTERNAL_ERROR, "internal_error"),
            (ERRORS, "errors"),
            (OPERATION_ID, "operation_id"),
            (STAGES, "stages"),
            (APPROVAL_STATE, "approval_state"),
            (APPROVAL_DEADLINE, "approval_deadline"),
            (APPROVAL_BY, "approval_by"),
            (APPROVAL_AT, "approval_at"),
            (APPROVAL_NOTE, "approval_note"),
            (CANCEL_REQUESTED_AT, "cancel_requested_at"),
            (BACKGROUND, "background"),
            (WAIT_KIND, "wait_kind"),
            (WAIT_EVENT, "wait_event"),
            (SNOOZES, "snoozes"),
            (BATCH_ID, "batch_id"),
            (PARENT_RUN_ID, "parent_run_id"),
            (DEPS_PENDING, "deps_pending"),
            (TAGS, "tags"),
            (TRACEPARENT, "traceparent"),
        ];
        assert_eq!(names.len(), expect.len());
        for (i, name) in expect {
            assert_eq!(names[i], name, "position {i}");
        }
    }
}
