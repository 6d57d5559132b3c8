//! Creating, inspecting, cancelling, enabling and firing schedules.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::ids::{ScheduleId, validate_session};
use crate::schedule::api::{
    FireReport, ScheduleDetail, ScheduleRequest, preview, schedule_limit_message,
};
use crate::schedule::model::Schedule;
use crate::schedule::spec::ScheduleSpec;
use crate::store::ScheduleEnable;
use chrono::{DateTime, Utc};

impl Client {
    /// Validates and stores a schedule: the tool and args (as for enqueue), the cron and zone
    /// or the one-shot time, the policies, and the per-session limit of active schedules.
    /// Bad input is an error and writes nothing.
    pub async fn create_schedule(&self, req: ScheduleRequest) -> Result<Schedule> {
        self.core().create_schedule(req).await
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

    /// Disables an enabled schedule: no more ticks fire until it is enabled again. Unlike
    /// [`Client::cancel_schedule`] it is not marked cancelled (`cancelled_at` stays empty).
    pub async fn disable_schedule(&self, id: &ScheduleId) -> Result<Schedule> {
        let s = self.get_schedule_row(id.as_str()).await?;
        if !s.enabled {
            return Err(Error::Conflict(format!(
                "schedule {id} is not enabled; only enabled schedules can be disabled"
            )));
        }
        let now = self.now();
        let done = self.engine().schedule_disable(id.to_string(), now).await?;
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
        Ok(crate::schedule::tick::schedule_tick(self.core()).await?.0)
    }

    async fn get_schedule_row(&self, id: &str) -> Result<Schedule> {
        self.core().schedule_row(id).await
    }
}
