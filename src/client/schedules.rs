//! Creating, inspecting, cancelling, enabling and firing schedules.

use crate::client::{Client, EnqueueRequest};
use crate::error::{Error, InputError, Result};
use crate::ids::{ScheduleId, validate_session};
use crate::schedule::api::{
    FireReport, ScheduleDetail, ScheduleRequest, preview, schedule_limit_message,
};
use crate::schedule::model::{NewSchedule, Schedule};
use crate::schedule::spec::{ScheduleSpec, validate_window};
use crate::store::ScheduleEnable;
use chrono::{DateTime, Utc};

impl Client {
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
            unique: None,
        })?;
        let window = match req.catchup_window {
            Some(w) => {
                let w = chrono::Duration::from_std(w).map_err(|_| {
                    InputError::new(
                        "catchup_window",
                        crate::clock::format_duration(w),
                        "is too large",
                    )
                })?;
                Some(validate_window(w)?.num_milliseconds())
            }
            None => None,
        };
        let new = NewSchedule {
            id: ScheduleId::generate(),
            session_id: row.session_id,
            tool: row.tool,
            args: req.args,
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
        };
        let max = self.config().sessions.max_active_schedules;
        let id = new.id.to_string();
        let inserted = self.engine().schedule_insert_within_limit(new, max).await?;
        if !inserted {
            return Err(Error::Conflict(schedule_limit_message(max)));
        }
        self.get_schedule_row(&id).await
    }

    /// Lists schedules of one session (or of all), newest first.
    pub async fn list_schedules(&self, session: Option<&str>) -> Result<Vec<Schedule>> {
        if let Some(s) = session {
            validate_session(s)?;
        }
        Ok(self
            .engine()
            .schedule_list(session.map(str::to_string), 10_000)
            .await?)
    }

    /// A schedule with its next 5 fires and its 20 most recent ledger rows.
    pub async fn get_schedule(&self, id: &ScheduleId) -> Result<ScheduleDetail> {
        let schedule = self.get_schedule_row(id.as_str()).await?;
        let next_fires = match schedule.next_trigger_at {
            Some(next) if schedule.enabled => {
                let spec = ScheduleSpec::from_stored(
                    schedule.cron_expression.as_deref(),
                    schedule.scheduled_at,
                    &schedule.timezone,
                    next - chrono::Duration::seconds(1),
                )?;
                let mut v = vec![next];
                v.extend(spec.upcoming(next, 4));
                v
            }
            _ => Vec::new(),
        };
        let occurrences = self
            .engine()
            .schedule_occurrences(id.to_string(), 20)
            .await?;
        Ok(ScheduleDetail {
            schedule,
            next_fires,
            occurrences,
        })
    }

    /// Cancels an enabled schedule: no more ticks fire (runs already made are untouched).
    pub async fn cancel_schedule(&self, id: &ScheduleId) -> Result<Schedule> {
        let s = self.get_schedule_row(id.as_str()).await?;
        if !s.enabled {
            return Err(Error::Conflict(format!(
                "schedule {id} is not enabled; only enabled schedules can be cancelled"
            )));
        }
        let now = self.now();
        let done = self.engine().schedule_cancel(id.to_string(), now).await?;
        if !done {
            return Err(Error::Conflict(format!(
                "schedule {id} changed meanwhile; try again"
            )));
        }
        self.get_schedule_row(id.as_str()).await
    }

    /// Enables a disabled or cancelled schedule from now on (ticks while it was disabled are
    /// not caught up). A one-shot whose time has passed cannot be enabled again.
    pub async fn enable_schedule(&self, id: &ScheduleId) -> Result<Schedule> {
        let s = self.get_schedule_row(id.as_str()).await?;
        if s.enabled {
            return Err(Error::Conflict(format!("schedule {id} is already enabled")));
        }
        let now = self.now();
        let spec = ScheduleSpec::from_stored(
            s.cron_expression.as_deref(),
            s.scheduled_at,
            &s.timezone,
            now,
        )?;
        let Some(next) = spec.next_after(now) else {
            return Err(Error::Conflict(format!(
                "schedule {id} is a one-shot whose time has passed; create a new schedule"
            )));
        };
        let max = self.config().sessions.max_active_schedules;
        let res = self
            .engine()
            .schedule_enable_within_limit(ScheduleEnable {
                id: id.to_string(),
                session: s.session_id.clone(),
                next,
                now,
                max_active: max,
            })
            .await?;
        match res {
            None => Err(Error::Conflict(schedule_limit_message(max))),
            Some(false) => Err(Error::Conflict(format!(
                "schedule {id} changed meanwhile; try again"
            ))),
            Some(true) => self.get_schedule_row(id.as_str()).await,
        }
    }

    /// The next `count` (1-1000) fire instants of a cron expression in a zone, after `from`
    /// (default now). Validates like [`Client::create_schedule`]; writes nothing.
    pub fn preview_schedule(
        &self,
        cron: &str,
        timezone: Option<&str>,
        from: Option<DateTime<Utc>>,
        count: usize,
    ) -> Result<Vec<DateTime<Utc>>> {
        preview(cron, timezone, from.unwrap_or_else(|| self.now()), count)
    }

    /// Fires every due schedule now (workers do this every poll interval): inserts their runs
    /// and ledger rows and wakes this process's workers.
    pub async fn fire_due_schedules(&self) -> Result<FireReport> {
        Ok(crate::schedule::tick::schedule_tick(self).await?.0)
    }

    async fn get_schedule_row(&self, id: &str) -> Result<Schedule> {
        self.engine()
            .schedule_get(id.to_string())
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "schedule",
                id: id.to_string(),
            })
    }
}
