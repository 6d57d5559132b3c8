//! `GET /runs` (keyset pages with the CLI's `runs` filters), `GET /runs/{id}` (what
//! `toolq show --json` prints) and `GET /runs/{id}/wait` (a long poll until the run ends).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ID, run_id};
use crate::client::RunDetail;
use crate::error::InputError;
use crate::ids::{BatchId, RunId};
use crate::run::{Run, RunFilter, RunState, WaitAnswer};
use crate::web::AppState;
use crate::web::api::ApiResult;
use crate::web::api::body::{Params, Segments, TaggedParams};
use crate::web::api::route::Route;
use crate::web::api::wait::{WaitQuery, hold};

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route::get("/runs", "listRuns", list)
            .doc(
                "runs",
                "List runs",
                "Runs newest first, with the filters of `toolq runs` (each run as \
                 `toolq runs --json` prints it), one keyset page at a time: pass the \
                 answer's `next` as `cursor` for the next page; `next` is null on the last \
                 page (a page may also come back empty after a full one).",
            )
            .query::<ListQuery>()
            .ok::<RunsPage>(),
        Route::get("/runs/{id}", "getRun", get)
            .doc(
                "runs",
                "Get a run",
                "Every field of one run, as `toolq show --json` prints it: the run, its \
                 paths, why it is held, its effective timeout, its steps and events, and its \
                 links.",
            )
            .param("id", ID)
            .ok::<RunDetail>()
            .errors(&[404]),
        Route::get("/runs/{id}/wait", "waitRun", wait)
            .doc(
                "runs",
                "Wait for a run to end",
                "A long poll: answers once the run is final, or when `timeout` passes \
                 (default 30s, at most 5m) with `ended: false`. The fields of \
                 `toolq wait --json`, and the run. The wait costs no queries while \
                 nothing commits.",
            )
            .param("id", ID)
            .query::<WaitQuery>()
            .ok::<WaitReply>()
            .errors(&[404]),
    ]
}

/// The filters of `GET /runs` (those of `toolq runs`) and its page.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Only runs in this state, or in any of several comma-separated ones (`queued`,
    /// `awaiting_approval`, `running`, `completed`, `failed`, `cancelled`).
    pub state: Option<String>,
    /// Only this session.
    pub session: Option<String>,
    /// Only this tool.
    pub tool: Option<String>,
    /// Only runs of this batch (`bt_...`).
    pub batch: Option<String>,
    /// Only runs spawned by this run (`bg_...`): its children.
    pub parent: Option<String>,
    /// Only runs with this tag, `key=value` (repeatable: `?tag=customer=acme&tag=env=prod`;
    /// every one must match).
    #[allow(dead_code)] // Documents the parameter: `TaggedParams` takes its values out first.
    pub tag: Option<String>,
    /// At most this many per page, 1 to 1000 (default 50).
    pub limit: Option<i64>,
    /// Where the page starts: the `next` of the previous page.
    pub cursor: Option<String>,
}

/// A page of runs.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RunsPage {
    /// The runs, newest first.
    pub runs: Vec<Run>,
    /// The `cursor` of the next page; null when this page is the last.
    pub next: Option<String>,
}

/// Where a waited-for run stands (`toolq wait --json`), and the run.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct WaitReply {
    /// Whether it ended, its state and error.
    #[serde(flatten)]
    pub at: WaitAnswer,
    /// The run as it is now.
    pub run: Run,
}

/// The filter `q` asks for, checked as `toolq runs` checks its flags.
fn run_filter(q: &ListQuery, tags: &[String]) -> Result<RunFilter, InputError> {
    let states = match &q.state {
        None => Vec::new(),
        Some(s) => s
            .split(',')
            .map(|x| {
                x.trim().parse::<RunState>().map_err(|e| InputError {
                    field: "state".into(),
                    ..e
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let batch_id = q
        .batch
        .as_deref()
        .map(|b| {
            b.parse::<BatchId>().map_err(|e| InputError {
                field: "batch".into(),
                ..e
            })
        })
        .transpose()?
        .map(|b| b.to_string());
    let parent_run_id = q
        .parent
        .as_deref()
        .map(|p| {
            p.parse::<RunId>().map_err(|e| InputError {
                field: "parent".into(),
                ..e
            })
        })
        .transpose()?
        .map(|p| p.to_string());
    Ok(RunFilter {
        states,
        tool: InputError::non_blank_filter("tool", q.tool.clone())?,
        session: InputError::non_blank_filter("session", q.session.clone())?,
        batch_id,
        parent_run_id,
        tags: crate::run::Tags::parse_all(tags)?,
        ..RunFilter::default()
    })
}

async fn list(
    State(st): State<Arc<AppState>>,
    TaggedParams(q, tags): TaggedParams<ListQuery>,
) -> ApiResult<Json<RunsPage>> {
    let filter = run_filter(&q, &tags)?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(
            InputError::new("limit", limit.to_string(), "must be between 1 and 1000").into(),
        );
    }
    let cursor = q
        .cursor
        .as_deref()
        .map(|c| {
            c.parse::<RunId>().map_err(|e| InputError {
                field: "cursor".into(),
                reason: format!("{} (give the `next` of the previous page)", e.reason),
                ..e
            })
        })
        .transpose()?;
    let runs = st.client.runs_page(&filter, cursor.as_ref(), limit).await?;
    let next = if runs.len() as i64 == limit {
        runs.last().map(|r| r.id.to_string())
    } else {
        None
    };
    Ok(Json(RunsPage { runs, next }))
}

async fn get(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
) -> ApiResult<Json<RunDetail>> {
    let id = run_id(&id)?;
    Ok(Json(st.client.run_detail(&id).await?))
}

async fn wait(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
    Params(q): Params<WaitQuery>,
) -> ApiResult<Json<WaitReply>> {
    let id = run_id(&id)?;
    let length = q.length()?;
    let run = hold(&st, length, || {
        let (client, id) = (st.client.clone(), id.clone());
        async move {
            let run = client.get(&id).await?;
            let done = run.state.is_final();
            Ok((run, done))
        }
    })
    .await?;
    Ok(Json(WaitReply {
        at: WaitAnswer::of(&run),
        run,
    }))
}
