//! The POST actions on one run or one schedule. Each checks the CSRF field, acts through the
//! client, and redirects back (or answers JSON when asked).

use std::sync::Arc;

use axum::Form;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::AppState;
use super::auth::check_csrf;
use super::layout::{self, wants_json};
use crate::error::{Error, InputError, Result};
use crate::ids::{RunId, ScheduleId};

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
}

fn done(
    headers: &HeaderMap,
    form: &ActionForm,
    default: String,
    json: serde_json::Value,
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

async fn on_run<F, Fut>(
    st: Arc<AppState>,
    headers: HeaderMap,
    id: String,
    form: ActionForm,
    act: F,
) -> Response
where
    F: FnOnce(Arc<AppState>, RunId, String) -> Fut,
    Fut: std::future::Future<Output = Result<String>>,
{
    if let Some(r) = check_csrf(&st, &headers, &form.csrf) {
        return r;
    }
    let id: RunId = match id.parse() {
        Ok(id) => id,
        Err(e) => return layout::error(&st, &headers, &Error::from(e)),
    };
    let note = form.note.trim().to_string();
    match act(st.clone(), id.clone(), note).await {
        Ok(state) => done(
            &headers,
            &form,
            format!("/runs/{id}"),
            serde_json::json!({"id": id, "state": state}),
        ),
        Err(e) => layout::error(&st, &headers, &e),
    }
}

fn note(n: &str) -> Option<&str> {
    Some(n).filter(|n| !n.is_empty())
}

/// `POST /runs/{id}/cancel`.
pub async fn cancel(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    on_run(st, headers, id, form, |st, id, _| async move {
        Ok(st.client.cancel(&id).await?.as_str().to_string())
    })
    .await
}

/// `POST /runs/{id}/retry`.
pub async fn retry(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    on_run(st, headers, id, form, |st, id, _| async move {
        st.client.retry(&id).await?;
        Ok("queued".to_string())
    })
    .await
}

/// `POST /runs/{id}/approve`.
pub async fn approve(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    on_run(st, headers, id, form, |st, id, n| async move {
        let run = st.client.approve(&id, BY, note(&n)).await?;
        Ok(run.state.as_str().to_string())
    })
    .await
}

/// `POST /runs/{id}/deny`.
pub async fn deny(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    on_run(st, headers, id, form, |st, id, n| async move {
        let run = st.client.deny(&id, BY, note(&n)).await?;
        Ok(run.state.as_str().to_string())
    })
    .await
}

/// `POST /schedules/{id}` with `action` = `enable`, or `disable`/`cancel` (one operation:
/// no more ticks fire until it is enabled again).
pub async fn schedule(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
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
        Ok((id, s.enabled))
    };
    match run.await {
        Ok((id, enabled)) => done(
            &headers,
            &form,
            format!("/schedules/{id}"),
            serde_json::json!({"id": id, "enabled": enabled}),
        ),
        Err(e) => layout::error(&st, &headers, &e),
    }
}
