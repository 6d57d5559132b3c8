//! Schedules as the library sees them: the stored row, a new row to insert, and ledger entries.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::spec::{MissedPolicy, OverlapPolicy};
use crate::ids::{RunId, ScheduleId};
use crate::run::{Delivery, NewRun, PendingApproval};

/// A stored schedule.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Schedule {
    /// `sch_` + uuid v7.
    pub id: ScheduleId,
    /// Owning session: its runs and their inbox messages belong to it.
    pub session_id: String,
    /// Tool each tick runs.
    pub tool: String,
    /// Arguments each run gets.
    pub args: Value,
    /// Title of the schedule and of its runs.
    pub title: String,
    /// `"recurring"` or `"oneshot"`.
    pub schedule_type: &'static str,
    /// 5-field cron or @macro (recurring).
    pub cron_expression: Option<String>,
    /// The one-shot instant.
    pub scheduled_at: Option<DateTime<Utc>>,
    /// IANA zone the cron is evaluated in.
    pub timezone: String,
    /// Whether ticks fire.
    pub enabled: bool,
    /// The next tick; None when disabled or exhausted.
    pub next_trigger_at: Option<DateTime<Utc>>,
    /// The latest tick that started a run.
    pub last_triggered_at: Option<DateTime<Utc>>,
    /// Runs started so far.
    pub trigger_count: i64,
    /// Missed-ticks policy.
    pub missed_policy: MissedPolicy,
    /// Catch-up window in milliseconds; None = one period.
    pub catchup_window_ms: Option<i64>,
    /// Overlap policy.
    pub overlap_policy: OverlapPolicy,
    /// Priority of its runs.
    pub priority: i64,
    /// Attempts of its runs.
    pub max_attempts: i64,
    /// Timeout of its runs.
    pub timeout_ms: Option<i64>,
    /// Whether its runs post completion messages.
    pub signal_on_completion: bool,
    /// Delivery of those messages.
    pub delivery: Delivery,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it was cancelled (cleared by enable).
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Tags copied to every run it fires (`{}` when none).
    pub tags: crate::run::Tags,
}

/// A schedule row to insert (validated by the caller).
#[derive(Debug, Clone)]
pub struct NewSchedule {
    /// Its id.
    pub id: ScheduleId,
    /// Owning session.
    pub session_id: String,
    /// Tool.
    pub tool: String,
    /// Arguments (already validated against the tool's schema).
    pub args: Value,
    /// Title.
    pub title: String,
    /// Cron expression (recurring).
    pub cron_expression: Option<String>,
    /// One-shot instant.
    pub scheduled_at: Option<DateTime<Utc>>,
    /// IANA zone.
    pub timezone: String,
    /// First tick.
    pub next_trigger_at: Option<DateTime<Utc>>,
    /// Missed-ticks policy.
    pub missed_policy: MissedPolicy,
    /// Catch-up window in milliseconds; None = one period.
    pub catchup_window_ms: Option<i64>,
    /// Overlap policy.
    pub overlap_policy: OverlapPolicy,
    /// Priority of its runs.
    pub priority: i64,
    /// Attempts of its runs.
    pub max_attempts: i64,
    /// Timeout of its runs.
    pub timeout_ms: Option<i64>,
    /// Whether its runs post completion messages.
    pub signal_on_completion: bool,
    /// Delivery of those messages.
    pub delivery: Delivery,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Tags copied to every run it fires (checked by the caller).
    pub tags: crate::run::Tags,
}

/// One ledger row: what happened to one expected tick.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Occurrence {
    /// The schedule.
    pub schedule_id: ScheduleId,
    /// The tick's nominal instant.
    pub fire_at: DateTime<Utc>,
    /// `fired`, `skipped_overlap`, `missed`, `coalesced` or `paused`.
    pub outcome: String,
    /// fired: its run; coalesced: the catch-up run it was folded into.
    pub run_id: Option<RunId>,
    /// That run's state now, if it still exists.
    pub run_state: Option<String>,
    /// Why (catch-up size, policy, window).
    pub detail: Option<String>,
    /// When it was recorded.
    pub recorded_at: DateTime<Utc>,
}

/// Whether a run about to be created (with its arguments as given) waits for approval, and
/// what it is stored with then (pure; called inside a schedule claim's transaction for each
/// run a fire makes). The creating process's rules: [`crate::approval::pending_for`].
pub type GateRun =
    Arc<dyn Fn(&NewRun, &serde_json::Value) -> Option<PendingApproval> + Send + Sync>;

/// What one claim of due schedules did (`Engine::schedule_claim_due`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ClaimReport {
    /// Schedules handled.
    pub schedules: usize,
    /// Runs inserted.
    pub runs: Vec<RunId>,
    /// Ledger rows by outcome.
    pub fired: usize,
    /// Ticks folded into a catch-up run.
    pub coalesced: usize,
    /// Ticks with no run (policy or window).
    pub missed: usize,
    /// Ticks skipped because the previous run was still active.
    pub skipped_overlap: usize,
    /// Ticks that would have run but their tool or session (or everything) was paused.
    pub paused: usize,
    /// Schedules disabled because their cron no longer fires (id, reason).
    pub broken: Vec<(String, String)>,
    /// More schedules were due than `limit`: call again.
    pub more: bool,
}
