//! `POST /runs/{id}/cancel|retry|approve|deny|signal`: the CLI's actions on one run, with
//! their `--json` answers. Decisions and events are recorded as by `api`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{ID, run_id};
use crate::core::events::Signalled;
use crate::error::Error;
use crate::run::RunAnswer;
use crate::web::AppState;
use crate::web::api::ApiResult;
use crate::web::api::body::{Body, Segments};
use crate::web::api::route::Route;

/// Who the API's decisions and events are recorded as.
const ACTOR: &str = "api";

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route::post("/runs/{id}/cancel", "cancelRun", cancel)
            .doc(
                "runs",
                "Cancel a run",
                "A queued or awaiting run ends `cancelled` at once; a running run is asked \
                 to stop (`state: running`, `cancel_requested: true`) and its worker stops \
                 it within a heartbeat. As `toolq cancel --json`. A run that already ended \
                 is a 409.",
            )
            .param("id", ID)
            .ok::<RunAnswer>()
            .errors(&[404, 409]),
        Route::post("/runs/{id}/retry", "retryRun", retry)
            .doc(
                "runs",
                "Retry a run",
                "Re-queues a failed or cancelled run as a new attempt (`queued`, or \
                 `awaiting_approval` for a tool that needs approval again). As \
                 `toolq retry --json`. Any other state is a 409.",
            )
            .param("id", ID)
            .ok::<RunAnswer>()
            .errors(&[404, 409]),
        Route::post("/runs/{id}/approve", "approveRun", approve)
            .doc(
                "runs",
                "Approve a run",
                "Queues a run that awaits approval; the decision is recorded as by `api` \
                 with the optional `note`. As `toolq approve --json`. A run that does not \
                 await approval is a 409.",
            )
            .param("id", ID)
            .body::<ApproveBody>()
            .ok::<RunAnswer>()
            .errors(&[404, 409, 413, 415]),
        Route::post("/runs/{id}/deny", "denyRun", deny)
            .doc(
                "runs",
                "Deny a run",
                "Cancels a run that awaits approval, telling its session the optional \
                 `reason`; recorded as by `api`. As `toolq deny --json`.",
            )
            .param("id", ID)
            .body::<DenyBody>()
            .ok::<RunAnswer>()
            .errors(&[404, 409, 413, 415]),
        Route::post("/runs/{id}/signal", "signalRun", signal)
            .doc(
                "runs",
                "Send an event to a run",
                "Delivers event `name` with `payload` (default null) to a run that has not \
                 ended: a run waiting for it resumes now (`woke: true`), else the event is \
                 kept until it waits for it. The first event of a name wins. As \
                 `toolq signal --json`.",
            )
            .param("id", ID)
            .body::<SignalBody>()
            .ok::<Signalled>()
            .errors(&[404, 409, 413, 415]),
    ]
}

/// The body of `approve` (may be empty).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApproveBody {
    /// Why (kept on the run).
    #[serde(default)]
    pub note: Option<String>,
}

/// The body of `deny` (may be empty).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DenyBody {
    /// Why (kept on the run and told to its session).
    #[serde(default)]
    pub reason: Option<String>,
}

/// The body of `signal`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignalBody {
    /// The event's name (what the run's `wait_for_event` waits for).
    pub name: String,
    /// The event's JSON payload (default null).
    #[serde(default)]
    pub payload: Value,
}

async fn cancel(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
) -> ApiResult<Json<RunAnswer>> {
    let id = run_id(&id)?;
    let state = st.client.cancel(&id).await?;
    st.api.feed.touch();
    Ok(Json(RunAnswer::cancelled(&id, state)))
}

async fn retry(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
) -> ApiResult<Json<RunAnswer>> {
    let id = run_id(&id)?;
    let state = st.client.retry(&id).await?;
    st.api.feed.touch();
    Ok(Json(RunAnswer::retried(&id, state)))
}

async fn approve(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
    Body(body): Body<ApproveBody>,
) -> ApiResult<Json<RunAnswer>> {
    let id = run_id(&id)?;
    let run = st.client.approve(&id, ACTOR, body.note.as_deref()).await?;
    st.api.feed.touch();
    Ok(Json(RunAnswer::decided(&run)))
}

async fn deny(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
    Body(body): Body<DenyBody>,
) -> ApiResult<Json<RunAnswer>> {
    let id = run_id(&id)?;
    let run = st.client.deny(&id, ACTOR, body.reason.as_deref()).await?;
    st.api.feed.touch();
    Ok(Json(RunAnswer::decided(&run)))
}

async fn signal(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
    Body(body): Body<SignalBody>,
) -> ApiResult<Json<Signalled>> {
    let id = run_id(&id)?;
    let sent = st
        .client
        .signal(&id, &body.name, body.payload, Some(ACTOR.to_string()))
        .await
        .map_err(|e| match e {
            // The library calls the event's name `event`; this body calls it `name`.
            Error::Input(mut ie) if ie.field == "event" => {
                ie.field = "name".into();
                Error::Input(ie)
            }
            e => e,
        })?;
    st.api.feed.touch();
    Ok(Json(sent))
}
