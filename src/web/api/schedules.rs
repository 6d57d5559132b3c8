//! `/schedules`: cron monitors and one-shots, as `toolq schedule add|list|show|enable|disable|
//! cancel` make and print them (`--json`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::body::{Body, Params, Segments};
use super::route::Route;
use super::{ApiError, ApiResult, Problem};
use crate::config::parse_duration;
use crate::error::{Error, InputError};
use crate::ids::ScheduleId;
use crate::run::Delivery;
use crate::schedule::spec::{MissedPolicy, OverlapPolicy};
use crate::schedule::{Schedule, ScheduleDetail, ScheduleError, ScheduleRequest};
use crate::web::AppState;

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route::post("/schedules", "addSchedule", add)
            .doc(
                "schedules",
                "Add a schedule",
                "A cron monitor (`cron`, `tz`) or a one-shot (`at`): exactly one of `cron` and \
                 `at`. The fields are `toolq schedule add`'s flags; the answer is what \
                 `toolq schedule add --json` prints. A bad cron, an unknown zone or an `at` in \
                 the past is a 400 naming the field and value, and writes nothing.",
            )
            .body::<ScheduleAdd>()
            .answers::<Schedule>(201)
            .errors(&[409, 413, 415]),
        Route::get("/schedules", "listSchedules", list)
            .doc(
                "schedules",
                "List schedules",
                "Schedules, newest first, as `toolq schedule list --json` prints them.",
            )
            .query::<ScheduleQuery>()
            .ok::<Vec<Schedule>>(),
        Route::get("/schedules/{id}", "getSchedule", get)
            .doc(
                "schedules",
                "Get one schedule",
                "The schedule with its next 5 fires and its recent occurrences, as \
                 `toolq schedule show --json` prints it.",
            )
            .param("id", "The schedule id (sch_...)")
            .ok::<ScheduleDetail>()
            .errors(&[404]),
        Route::post("/schedules/{id}/enable", "enableSchedule", enable)
            .doc(
                "schedules",
                "Enable a schedule",
                "Enables a disabled or cancelled schedule from now on (ticks missed meanwhile \
                 are not caught up); answers the schedule. 409 when it is enabled already, or \
                 a one-shot whose time has passed.",
            )
            .param("id", "The schedule id (sch_...)")
            .ok::<Schedule>()
            .errors(&[404, 409]),
        Route::post("/schedules/{id}/disable", "disableSchedule", disable)
            .doc(
                "schedules",
                "Disable a schedule",
                "No more ticks fire until it is enabled again; it is not marked cancelled. \
                 Answers the schedule; 409 when it is not enabled.",
            )
            .param("id", "The schedule id (sch_...)")
            .ok::<Schedule>()
            .errors(&[404, 409]),
        Route::post("/schedules/{id}/cancel", "cancelSchedule", cancel)
            .doc(
                "schedules",
                "Cancel a schedule",
                "No more ticks fire (runs it made are untouched); answers the schedule, as \
                 `toolq schedule cancel --json` prints it. 409 when it is not enabled.",
            )
            .param("id", "The schedule id (sch_...)")
            .ok::<Schedule>()
            .errors(&[404, 409]),
    ]
}

/// A schedule to add: the flags of `toolq schedule add`, by the same names.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleAdd {
    /// The tool each tick runs.
    tool: String,
    /// The tool's arguments (a JSON object; default `{}`).
    #[serde(default = "empty_object")]
    args: Value,
    /// A 5-field cron expression (minute hour day-of-month month day-of-week) or `@hourly`,
    /// `@daily`, ... (exactly one of `cron` and `at`).
    #[serde(default)]
    cron: Option<String>,
    /// The IANA time zone the cron is evaluated in (default `UTC`).
    #[serde(default)]
    tz: Option<String>,
    /// A one-shot instant, RFC 3339 with an offset (`2026-12-01T09:00:00-06:00`).
    #[serde(default)]
    at: Option<String>,
    /// The owning session (default `default`): its inbox gets the completion messages.
    #[serde(default)]
    session: Option<String>,
    /// A title (default: the tool's display name).
    #[serde(default)]
    title: Option<String>,
    /// After downtime: skip missed ticks, run `once` for all of them (default), or `all`.
    #[serde(default)]
    missed: Option<MissedPolicy>,
    /// A tick while the previous run is still active: `skip` it (default) or `allow` another.
    #[serde(default)]
    overlap: Option<OverlapPolicy>,
    /// How old the latest missed tick may be to be caught up (`30m`; default one period).
    #[serde(default)]
    catchup_window: Option<String>,
    /// Priority of each run it starts (default 0).
    #[serde(default)]
    priority: Option<i64>,
    /// Attempts in all of each run it starts (default from the config).
    #[serde(default)]
    max_attempts: Option<i64>,
    /// Timeout of each run it starts (`30s`, `5m`; default the tool's, else the config's).
    #[serde(default)]
    timeout: Option<String>,
    /// Post no inbox message when a run it starts ends (default false).
    #[serde(default)]
    no_signal: bool,
    /// How those messages are delivered: `interrupt`, `when_idle` (default), `silent`.
    #[serde(default)]
    delivery: Option<Delivery>,
    /// Tags copied to every run it starts (`{"customer": "acme"}`; the rules of a run's tags).
    #[serde(default)]
    tags: Option<std::collections::BTreeMap<String, String>>,
}

fn empty_object() -> Value {
    json!({})
}

impl ScheduleAdd {
    /// The library's request (durations and the cron/at choice checked; the rest is checked
    /// by [`crate::Client::create_schedule`]).
    fn request(self) -> Result<ScheduleRequest, InputError> {
        match (&self.cron, &self.at) {
            (Some(_), Some(_)) => {
                return Err(InputError::about(
                    "at",
                    "give either cron (recurring) or at (one-shot), not both",
                ));
            }
            (None, None) => {
                return Err(InputError::about(
                    "cron",
                    "give cron (a recurring schedule) or at (a one-shot)",
                ));
            }
            _ => {}
        }
        let duration = |field: &str, v: &Option<String>| {
            v.as_deref()
                .map(|t| parse_duration(t).map_err(|r| InputError::new(field, t, r)))
                .transpose()
        };
        let mut req = ScheduleRequest::new(self.tool, self.args, self.cron, self.at);
        req.catchup_window = duration("catchup_window", &self.catchup_window)?;
        req.timeout = duration("timeout", &self.timeout)?;
        req.timezone = self.tz;
        if let Some(s) = self.session {
            req.session = s;
        }
        req.title = self.title;
        req.missed = self.missed.unwrap_or_default();
        req.overlap = self.overlap.unwrap_or_default();
        req.priority = self.priority.unwrap_or(0);
        req.max_attempts = self.max_attempts;
        req.signal_on_completion = !self.no_signal;
        req.delivery = self.delivery.unwrap_or_default();
        if let Some(tags) = self.tags {
            req.tags = crate::run::Tags::from_map(tags)?;
        }
        Ok(req)
    }
}

/// The query of `GET /schedules`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleQuery {
    /// Only this session's schedules.
    #[serde(default)]
    session: Option<String>,
}

async fn add(
    State(st): State<Arc<AppState>>,
    Body(body): Body<ScheduleAdd>,
) -> ApiResult<(StatusCode, Json<Schedule>)> {
    // The durations as typed, for errors about them (the library shows them normalized).
    let typed = [
        ("timeout", body.timeout.clone()),
        ("catchup_window", body.catchup_window.clone()),
    ];
    let req = body.request()?;
    let s = st
        .client
        .create_schedule(req)
        .await
        .map_err(|e| named(e, &typed))?;
    st.api.feed.touch();
    Ok((StatusCode::CREATED, Json(s)))
}

/// A refusal of `create_schedule` naming the body's field: a bad cron (`cron`), zone (`tz`)
/// or one-shot time (`at`) with the value given; a duration as it was typed.
fn named(e: Error, typed: &[(&str, Option<String>)]) -> ApiError {
    match e {
        Error::Schedule(se) => {
            let (field, value) = match &se {
                ScheduleError::UnknownTimezone(v) => ("tz", v.as_str()),
                ScheduleError::FieldCount { expr, .. }
                | ScheduleError::UnknownMacro { expr }
                | ScheduleError::OutOfRange { expr, .. }
                | ScheduleError::InvalidValue { expr, .. }
                | ScheduleError::InvalidStep { expr, .. }
                | ScheduleError::InvalidRange { expr, .. }
                | ScheduleError::NeverFires { expr } => ("cron", expr.as_str()),
                ScheduleError::MissingOffset { value }
                | ScheduleError::InvalidTimestamp { value }
                | ScheduleError::InPast { value, .. }
                | ScheduleError::TooLate { value } => ("at", value.as_str()),
            };
            let mut p = Problem::input(&InputError::new(field, value, ""));
            p.detail = se.to_string();
            p.into()
        }
        Error::Input(mut ie) => {
            if let Some((_, Some(text))) = typed.iter().find(|(f, _)| *f == ie.field) {
                ie.value = text.clone();
            }
            ie.into()
        }
        e => e.into(),
    }
}

async fn list(
    State(st): State<Arc<AppState>>,
    Params(q): Params<ScheduleQuery>,
) -> ApiResult<Json<Vec<Schedule>>> {
    let session = InputError::non_blank_filter("session", q.session)?;
    Ok(Json(st.client.list_schedules(session.as_deref()).await?))
}

/// The `{id}` segment as a schedule id (`schedule id "bg_...": must start with "sch_"`).
fn schedule_id(s: &str) -> Result<ScheduleId, InputError> {
    s.parse()
}

async fn get(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
) -> ApiResult<Json<ScheduleDetail>> {
    let id = schedule_id(&id)?;
    Ok(Json(st.client.get_schedule(&id).await?))
}

async fn enable(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
) -> ApiResult<Json<Schedule>> {
    let id = schedule_id(&id)?;
    let s = st.client.enable_schedule(&id).await?;
    st.api.feed.touch();
    Ok(Json(s))
}

async fn disable(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
) -> ApiResult<Json<Schedule>> {
    let id = schedule_id(&id)?;
    let s = st.client.disable_schedule(&id).await?;
    st.api.feed.touch();
    Ok(Json(s))
}

async fn cancel(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
) -> ApiResult<Json<Schedule>> {
    let id = schedule_id(&id)?;
    let s = st.client.cancel_schedule(&id).await?;
    st.api.feed.touch();
    Ok(Json(s))
}
