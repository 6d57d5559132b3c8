//! Schedule requests and details for the library's schedule calls on [`crate::Client`] (in
//! `client/schedules.rs`): create, list, show, cancel, enable, preview, and firing due ticks.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::model::{Occurrence, Schedule};
use super::spec::{MissedPolicy, OverlapPolicy, ScheduleSpec};
use crate::error::{InputError, Result};
use crate::run::Delivery;

pub use super::model::ClaimReport as FireReport;

/// A request to create a schedule: the run each tick makes, and when ticks come.
#[derive(Debug, Clone)]
pub struct ScheduleRequest {
    /// Tool each tick runs.
    pub tool: String,
    /// Its arguments (must match the tool's schema).
    pub args: Value,
    /// Owning session (default "default").
    pub session: String,
    /// Title (default: the tool's display name).
    pub title: Option<String>,
    /// 5-field cron or @macro (exactly one of `cron` and `at`).
    pub cron: Option<String>,
    /// One-shot RFC 3339 instant with an explicit offset.
    pub at: Option<String>,
    /// IANA zone for `cron` (default UTC).
    pub timezone: Option<String>,
    /// Missed-ticks policy (default once).
    pub missed: MissedPolicy,
    /// Overlap policy (default skip).
    pub overlap: OverlapPolicy,
    /// Catch-up window (default one period).
    pub catchup_window: Option<Duration>,
    /// Priority of its runs.
    pub priority: i64,
    /// Attempts of its runs (default from config).
    pub max_attempts: Option<i64>,
    /// Timeout of its runs.
    pub timeout: Option<Duration>,
    /// Whether its runs post completion messages (default true).
    pub signal_on_completion: bool,
    /// Delivery of those messages.
    pub delivery: Delivery,
    /// Tags copied to every run it fires (checked as an enqueue's are).
    pub tags: crate::run::Tags,
}

impl ScheduleRequest {
    /// A recurring schedule in UTC with defaults for everything else.
    pub fn cron(tool: impl Into<String>, args: Value, expr: impl Into<String>) -> Self {
        Self::new(tool, args, Some(expr.into()), None)
    }

    /// A one-shot schedule with defaults for everything else.
    pub fn once(tool: impl Into<String>, args: Value, at: impl Into<String>) -> Self {
        Self::new(tool, args, None, Some(at.into()))
    }

    /// A request with `cron` and `at` as given (validation wants exactly one).
    pub fn new(
        tool: impl Into<String>,
        args: Value,
        cron: Option<String>,
        at: Option<String>,
    ) -> Self {
        Self {
            tool: tool.into(),
            args,
            session: "default".into(),
            title: None,
            cron,
            at,
            timezone: None,
            missed: MissedPolicy::default(),
            overlap: OverlapPolicy::default(),
            catchup_window: None,
            priority: 0,
            max_attempts: None,
            timeout: None,
            signal_on_completion: true,
            delivery: Delivery::WhenIdle,
            tags: crate::run::Tags::new(),
        }
    }

    /// Sets the tags its runs get.
    pub fn tags(mut self, tags: crate::run::Tags) -> Self {
        self.tags = tags;
        self
    }

    /// Sets the zone.
    pub fn timezone(mut self, tz: impl Into<String>) -> Self {
        self.timezone = Some(tz.into());
        self
    }

    /// Sets the session.
    pub fn session(mut self, s: impl Into<String>) -> Self {
        self.session = s.into();
        self
    }
}

/// A schedule with its next fires and recent ledger rows.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ScheduleDetail {
    /// The schedule.
    pub schedule: Schedule,
    /// Up to 5 next fire instants (none when disabled).
    pub next_fires: Vec<DateTime<Utc>>,
    /// Its ledger, newest tick first.
    pub occurrences: Vec<Occurrence>,
}

/// The seed's message for the per-session schedule limit.
pub fn schedule_limit_message(max: i64) -> String {
    format!("Maximum {max} active schedules per session. Cancel an existing schedule first.")
}

/// The next `count` (1-1000) fire instants of a cron expression in a zone, after `from`:
/// [`crate::Client::preview_schedule`] without a database (`toolq schedule preview` needs none).
pub fn preview(
    cron: &str,
    timezone: Option<&str>,
    from: DateTime<Utc>,
    count: usize,
) -> Result<Vec<DateTime<Utc>>> {
    if !(1..=1000).contains(&count) {
        return Err(
            InputError::new("count", count.to_string(), "must be between 1 and 1000").into(),
        );
    }
    let spec = ScheduleSpec::parse(Some(cron), None, timezone, from)?;
    Ok(spec.upcoming(from, count))
}
