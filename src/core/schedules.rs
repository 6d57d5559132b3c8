//! Creating schedules: the client's `create_schedule` and the monitors `spawn_background`
//! creates for a tool.

use super::{Core, EnqueueRequest};
use crate::error::{Error, InputError, Result};
use crate::ids::ScheduleId;
use crate::run::NewRun;
use crate::schedule::api::{ScheduleRequest, schedule_limit_message};
use crate::schedule::model::{NewSchedule, Schedule};
use crate::schedule::spec::{ScheduleSpec, validate_window};

impl Core {
    /// Validates and stores a schedule: the tool and args (as for enqueue), the cron and zone
    /// or the one-shot time, the policies, and the per-session limit of active schedules.
    /// Bad input is an error and writes nothing.
    pub async fn create_schedule(&self, req: ScheduleRequest) -> Result<Schedule> {
        let now = self.now();
        let spec = ScheduleSpec::parse(
            req.cron.as_deref(),
            req.at.as_deref(),
            req.timezone.as_deref(),
            now,
        )?;
        // The run template is validated as an enqueue of it would be.
        let row = self.prepare(&EnqueueRequest {
            tool: req.tool.clone(),
            args: req.args.clone(),
            session: req.session.clone(),
            title: req.title.clone(),
            priority: req.priority,
            run_at: None,
            max_attempts: req.max_attempts,
            timeout: req.timeout,
            idempotency_key: None,
            signal_on_completion: req.signal_on_completion,
            delivery: req.delivery,
            tags: req.tags.clone(),
            ..EnqueueRequest::new(req.tool.clone(), serde_json::Value::Null)
        })?;
        let window = catchup_window_ms(req.catchup_window)?;
        let new = new_schedule(row, &req, &spec, window, now);
        let max = self.config().sessions.max_active_schedules;
        let id = new.id.to_string();
        let inserted = self.engine().schedule_insert_within_limit(new, max).await?;
        if !inserted {
            return Err(Error::Conflict(schedule_limit_message(max)));
        }
        self.schedule_row(&id).await
    }

    /// A schedule's row, or not found.
    pub async fn schedule_row(&self, id: &str) -> Result<Schedule> {
        self.engine()
            .schedule_get(id.to_string())
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "schedule",
                id: id.to_string(),
            })
    }
}

/// The catch-up window in milliseconds, validated.
fn catchup_window_ms(window: Option<std::time::Duration>) -> Result<Option<i64>, InputError> {
    let Some(w) = window else {
        return Ok(None);
    };
    let w = chrono::Duration::from_std(w).map_err(|_| {
        InputError::new(
            "catchup_window",
            crate::clock::format_duration(w),
            "is too large",
        )
    })?;
    Ok(Some(validate_window(w)?.num_milliseconds()))
}

/// The schedule row: the validated run template `row`, the spec's timing and the policies.
fn new_schedule(
    row: NewRun,
    req: &ScheduleRequest,
    spec: &ScheduleSpec,
    window: Option<i64>,
    now: chrono::DateTime<chrono::Utc>,
) -> NewSchedule {
    NewSchedule {
        id: ScheduleId::generate(),
        session_id: row.session_id,
        tool: row.tool,
        args: req.args.clone(),
        title: row.title,
        cron_expression: spec.cron_expression().map(str::to_string),
        scheduled_at: spec.scheduled_at(),
        timezone: spec
            .timezone_name()
            .or_else(|| req.timezone.clone().filter(|t| !t.trim().is_empty()))
            .unwrap_or_else(|| "UTC".into()),
        next_trigger_at: spec.next_after(now),
        missed_policy: req.missed,
        catchup_window_ms: window,
        overlap_policy: req.overlap,
        priority: row.priority,
        max_attempts: row.max_attempts,
        timeout_ms: row.timeout_ms,
        signal_on_completion: row.signal_on_completion,
        delivery: row.delivery,
        created_at: now,
        tags: row.tags,
    }
}
