//! The POST actions on one run, one batch or one schedule. Each checks the CSRF field, acts through the
//! client, and redirects back (or answers JSON when asked).

use std::sync::Arc;

use axum::Form;
use axum::Json;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::AppState;
use super::auth::check_csrf;
use super::layout::{self, wants_json};
use super::view::encode;
use crate::bulk::{BulkAction, BulkAnswer, BulkOptions};
use crate::error::{Error, InputError};
use crate::ids::{BatchId, RunId, ScheduleId};
use crate::run::{RunAnswer, RunFilter};

/// Who the dashboard records as the approver.
const BY: &str = "web";

/// The fields of an action form.
#[derive(Debug, Default, Deserialize)]
pub struct ActionForm {
    #[serde(default)]
    csrf: String,
    /// Approve's note or deny's reason.
    #[serde(default)]
    note: String,
    /// A schedule action: `enable`, `disable` or `cancel`.
    #[serde(default)]
    action: String,
    /// Where to go afterwards (a path on this site).
    #[serde(default)]
    back: String,
    /// Send event's name.
    #[serde(default)]
    name: String,
    /// Send event's JSON payload (empty: `null`).
    #[serde(default)]
    payload: String,
}

fn done(
    headers: &HeaderMap,
    form: &ActionForm,
    default: String,
    json: impl serde::Serialize,
) -> Response {
    if wants_json(headers) {
        return Json(json).into_response();
    }
    // Only a path on this site: never an address elsewhere.
    let back = &form.back;
    let to = if back.starts_with('/') && !back.starts_with("//") && !back.contains('\\') {
        back.clone()
    } else {
        default
    };
    Redirect::to(&to).into_response()
}

/// An action on one run: the last segment of `POST /runs/{id}/{action}`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunAction {
    /// Cancel a queued, waiting or running run.
    Cancel,
    /// Queue a finished run again.
    Retry,
    /// Approve a run that waits for approval (the form's note is recorded).
    Approve,
    /// Deny a run that waits for approval (the form's note is the reason).
    Deny,
    /// Send the event `name` with the JSON `payload` to a run that has not ended.
    Signal,
}

/// `POST /runs/{id}/cancel`, `/retry`, `/approve` and `/deny`: the run's state afterwards;
/// `/signal`: what sending the event did (`toolq signal --json`), back on the run's page
/// with a notice.
pub async fn run(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Path((id, action)): Path<(String, String)>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    let form = match form {
        Ok(Form(form)) => form,
        Err(e) => return layout::unreadable(&st, &headers, "form", e.body_text()),
    };
    // Another last segment is no page of ours (404, as before the routes were one).
    let Ok(action) = serde_json::from_value::<RunAction>(serde_json::Value::String(action)) else {
        return super::pages::fallback::not_found(State(st), headers, uri).await;
    };
    if let Some(r) = check_csrf(&st, &headers, &form.csrf) {
        return r;
    }
    let id: RunId = match id.parse() {
        Ok(id) => id,
        Err(e) => return layout::error(&st, &headers, &Error::from(e)),
    };
    let note = Some(form.note.trim()).filter(|n| !n.is_empty());
    let c = &st.client;
    // The same answer as the CLI's `--json` (one type: `RunAnswer`).
    let answer = match action {
        RunAction::Cancel => c.cancel(&id).await.map(|s| RunAnswer::cancelled(&id, s)),
        RunAction::Retry => c.retry(&id).await.map(|s| RunAnswer::retried(&id, s)),
        RunAction::Approve => c
            .approve(&id, BY, note)
            .await
            .map(|r| RunAnswer::decided(&r)),
        RunAction::Deny => c.deny(&id, BY, note).await.map(|r| RunAnswer::decided(&r)),
        RunAction::Signal => return signal(&st, &headers, &form, &id).await,
    };
    match answer {
        Ok(answer) => done(&headers, &form, format!("/runs/{id}"), answer),
        Err(e) => layout::error(&st, &headers, &e),
    }
}

/// Sends the form's event to run `id` (recorded as sent by `web`): JSON `Signalled`, or the
/// run's page with a notice that says whether the run resumes now.
async fn signal(st: &AppState, headers: &HeaderMap, form: &ActionForm, id: &RunId) -> Response {
    let text = form.payload.trim();
    let payload = if text.is_empty() {
        Ok(serde_json::Value::Null)
    } else {
        serde_json::from_str(text)
            .map_err(|e| InputError::new("payload", text, format!("is not valid JSON: {e}")))
    };
    let sent = match payload {
        Ok(p) => {
            st.client
                .signal(id, form.name.trim(), p, Some(BY.into()))
                .await
        }
        Err(e) => Err(e.into()),
    };
    match sent {
        Ok(sent) if wants_json(headers) => Json(sent).into_response(),
        Ok(sent) => {
            let what = if sent.woke {
                format!(
                    "Sent event {:?}: the run was waiting for it and resumes now.",
                    sent.event
                )
            } else {
                format!(
                    "Sent event {:?}: kept until the run waits for it.",
                    sent.event
                )
            };
            Redirect::to(&format!("/runs/{id}?notice={}", encode(&what))).into_response()
        }
        Err(e) => layout::error(st, headers, &e),
    }
}

/// `POST /schedules/{id}` with `action` = `enable`, or `disable`/`cancel` (one operation:
/// no more ticks fire until it is enabled again).
pub async fn schedule(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    let form = match form {
        Ok(Form(form)) => form,
        Err(e) => return layout::unreadable(&st, &headers, "form", e.body_text()),
    };
    if let Some(r) = check_csrf(&st, &headers, &form.csrf) {
        return r;
    }
    let run = async {
        let id: ScheduleId = id.parse()?;
        let s = match form.action.as_str() {
            "enable" => st.client.enable_schedule(&id).await?,
            "disable" | "cancel" => st.client.cancel_schedule(&id).await?,
            other => {
                return Err(Error::from(InputError::new(
                    "action",
                    other,
                    "must be enable, disable or cancel",
                )));
            }
        };
        Ok(s)
    };
    // The schedule as it now is: what `toolq schedule cancel|enable --json` prints (its
    // `id` and `enabled` were this answer's only fields before).
    match run.await {
        Ok(s) => done(&headers, &form, format!("/schedules/{}", s.id), s),
        Err(e) => layout::error(&st, &headers, &e),
    }
}

/// An action on one batch: the last segment of `POST /batches/{id}/{action}`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchAction {
    /// Cancel every unfinished run of the batch (running ones are asked to stop).
    Cancel,
    /// Queue every failed or cancelled run of the batch again.
    Retry,
}

/// `POST /batches/{id}/cancel` and `/retry`: the bulk cancel or retry of the batch's runs
/// (`RunFilter { batch_id }`); JSON as `toolq cancel|retry --json` answers, else back on
/// the batch's page with a notice.
pub async fn batch(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Path((id, action)): Path<(String, String)>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    let form = match form {
        Ok(Form(form)) => form,
        Err(e) => return layout::unreadable(&st, &headers, "form", e.body_text()),
    };
    let Ok(action) = serde_json::from_value::<BatchAction>(serde_json::Value::String(action))
    else {
        return super::pages::fallback::not_found(State(st), headers, uri).await;
    };
    if let Some(r) = check_csrf(&st, &headers, &form.csrf) {
        return r;
    }
    let run = async {
        let id: BatchId = id.parse()?;
        // An unknown batch is a 404, not a filter that matches nothing.
        st.client.batch(&id).await?;
        let filter = RunFilter {
            batch_id: Some(id.to_string()),
            ..RunFilter::default()
        };
        let opts = BulkOptions::default();
        let report = match action {
            BatchAction::Cancel => st.client.cancel_where(&filter, opts).await?,
            BatchAction::Retry => st.client.retry_where(&filter, opts).await?,
        };
        Ok::<_, Error>((id, report))
    };
    let (id, report) = match run.await {
        Ok(done) => done,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    let (kind, what) = match action {
        BatchAction::Cancel => (
            BulkAction::Cancel,
            format!(
                "Cancelled {} runs; asked {} running runs to stop; {} skipped.",
                report.done, report.cancel_requested, report.skipped
            ),
        ),
        BatchAction::Retry => (
            BulkAction::Retry,
            format!(
                "Re-queued {} runs; {} skipped.",
                report.done, report.skipped
            ),
        ),
    };
    if wants_json(&headers) {
        return Json(BulkAnswer::new(kind, report)).into_response();
    }
    Redirect::to(&format!("/batches/{id}?notice={}", encode(&what))).into_response()
}
