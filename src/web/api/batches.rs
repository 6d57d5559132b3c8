//! `/batches`: batches of runs that complete together, as `toolq enqueue --file F --batch`
//! makes them and `toolq batch list|show|wait|cancel|retry` prints them (`--json`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::body::{Body, Params, Segments};
use super::route::Route;
use super::wait::{WaitQuery, hold};
use super::{ApiError, ApiResult};
use crate::bulk::{BulkAction, BulkAnswer, BulkOptions};
use crate::core::{BatchEnqueued, BatchRequest, OnComplete};
use crate::error::{Error, InputError};
use crate::ids::BatchId;
use crate::run::spec::{RunSpec, resolve};
use crate::run::{Batch, BatchFilter, BatchWaited, RunFilter};
use crate::web::AppState;

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route::post("/batches", "createBatch", create)
            .doc(
                "batches",
                "Create a batch",
                "Enqueues `runs` (each an enqueue file line's fields; `ref` and `after` link \
                 runs of this request) as one batch, in one transaction or not at all. Its \
                 session gets one `batch_completed` message once every run is final, and \
                 `on_complete` (a tool and args) is enqueued then. Answers what \
                 `toolq enqueue --file F --batch --json` prints. An error names the run \
                 (`runs[2]: priority`) and writes nothing.",
            )
            .body::<BatchCreate>()
            .answers::<BatchEnqueued>(201)
            .errors(&[413, 415]),
        Route::get("/batches", "listBatches", list)
            .doc(
                "batches",
                "List batches",
                "Batches, newest first, as `toolq batch list --json` prints them (`before` \
                 gives the next page: the last id of this one).",
            )
            .query::<BatchQuery>()
            .ok::<Vec<Batch>>(),
        Route::get("/batches/{id}", "getBatch", get)
            .doc(
                "batches",
                "Get one batch",
                "Its counters, its runs by state, its first failures and its callback run, as \
                 `toolq batch show --json` prints it.",
            )
            .param("id", "The batch id (bt_...)")
            .ok::<Batch>()
            .errors(&[404]),
        Route::get("/batches/{id}/wait", "waitBatch", wait)
            .doc(
                "batches",
                "Wait for a batch",
                "A long poll: answers once every run of the batch is final, or when `timeout` \
                 (default 30s, at most 5m) runs out, with `ended` telling which, as \
                 `toolq batch wait --json` prints it. Repeat it to wait longer.",
            )
            .param("id", "The batch id (bt_...)")
            .query::<WaitQuery>()
            .ok::<BatchWaited>()
            .errors(&[404]),
        Route::post("/batches/{id}/cancel", "cancelBatch", cancel)
            .doc(
                "batches",
                "Cancel a batch's runs",
                "Cancels every queued, blocked, awaiting or running run of the batch (a bulk \
                 cancel), as `toolq batch cancel --json` prints it; `dry_run` counts them only.",
            )
            .param("id", "The batch id (bt_...)")
            .body::<BatchAct>()
            .ok::<BulkAnswer>()
            .errors(&[404, 415]),
        Route::post("/batches/{id}/retry", "retryBatch", retry)
            .doc(
                "batches",
                "Retry a batch's runs",
                "Re-queues every failed or cancelled run of the batch (a bulk retry), which \
                 reopens it: its next completion sends a new message. As \
                 `toolq batch retry --json` prints it; `dry_run` counts them only.",
            )
            .param("id", "The batch id (bt_...)")
            .body::<BatchAct>()
            .ok::<BulkAnswer>()
            .errors(&[404, 415]),
    ]
}

/// A batch to create: `toolq enqueue --file F --batch`'s flags and the file's runs.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchCreate {
    /// The session that gets the batch's completion message (default: the runs' session
    /// when they share one, else `default`).
    #[serde(default)]
    session: Option<String>,
    /// Its title (default `batch of N runs`).
    #[serde(default)]
    title: Option<String>,
    /// A run to enqueue once every run of the batch is final; it reads the batch's summary
    /// as its parent result.
    #[serde(default)]
    on_complete: Option<OnCompleteSpec>,
    /// The runs, in order (their ids come back in this order).
    runs: Vec<RunSpec>,
}

/// The callback run of a batch (`--on-complete TOOL --on-complete-args JSON`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OnCompleteSpec {
    /// The tool.
    tool: String,
    /// Its arguments (default `{}`).
    #[serde(default = "empty_object")]
    args: Value,
}

fn empty_object() -> Value {
    json!({})
}

/// The query of `GET /batches` (`toolq batch list`'s flags).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchQuery {
    /// Only this session's batches.
    #[serde(default)]
    session: Option<String>,
    /// Only batches in this state: `running` or `completed`.
    #[serde(default)]
    state: Option<String>,
    /// At most this many, newest first (1-100000; default 50).
    #[serde(default)]
    limit: Option<i64>,
    /// Only batches older than this one (`bt_...`: the last id of the previous page).
    #[serde(default)]
    before: Option<String>,
}

/// The body of a batch's cancel or retry (optional).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchAct {
    /// Count the runs it would act on and list the first ids; change nothing.
    #[serde(default)]
    dry_run: bool,
}

async fn create(
    State(st): State<Arc<AppState>>,
    Body(body): Body<BatchCreate>,
) -> ApiResult<(StatusCode, Json<BatchEnqueued>)> {
    let now = st.client.now();
    let mut parsed = Vec::with_capacity(body.runs.len());
    for (i, spec) in body.runs.into_iter().enumerate() {
        parsed.push(spec.parse(now).map_err(|e| e.within(&place(i)))?);
    }
    let reqs = resolve(parsed, |i| format!("runs[{i}]"), "this request")?;
    for (i, req) in reqs.iter().enumerate() {
        st.client.prepare(req).map_err(|e| e.within(&place(i)))?;
    }
    let batch = BatchRequest {
        session: body
            .session
            .unwrap_or_else(|| BatchRequest::common_session(&reqs)),
        title: body.title,
        on_complete: body.on_complete.map(|c| OnComplete {
            tool: c.tool,
            args: c.args,
        }),
    };
    let done = st
        .client
        .create_batch(batch, reqs)
        .await
        .map_err(by_place)?;
    st.api.feed.touch();
    Ok((StatusCode::CREATED, Json(done.into())))
}

/// How errors name the `i`th run of the body.
fn place(i: usize) -> String {
    format!("runs[{i}]: ")
}

/// An error the library reported for its `request N` (1-based), or a cycle of
/// `requests 1 -> 3 -> 1`, or the callback (`--on-complete: tool`), named as the body does.
fn by_place(e: Error) -> ApiError {
    let Error::Input(mut ie) = e else {
        return e.into();
    };
    let index = |n: &str| {
        n.parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .map_or_else(|| n.to_string(), |i| format!("runs[{i}]"))
    };
    if ie.field == "after"
        && let Some(cycle) = ie.value.strip_prefix("requests ")
    {
        let named: Vec<String> = cycle.split(" -> ").map(index).collect();
        ie.field = "runs: after".into();
        ie.value = named.join(" -> ");
    } else if let Some((n, tail)) = ie
        .field
        .strip_prefix("request ")
        .and_then(|rest| rest.split_once(": "))
    {
        ie.field = format!("{}: {tail}", index(n));
    } else if let Some(tail) = ie.field.strip_prefix("--on-complete: ") {
        ie.field = format!("on_complete: {tail}");
    } else if ie.field == "batch" {
        ie.field = "runs".into();
    }
    ie.into()
}

async fn list(
    State(st): State<Arc<AppState>>,
    Params(q): Params<BatchQuery>,
) -> ApiResult<Json<Vec<Batch>>> {
    let limit = q.limit.unwrap_or(50);
    if !(1..=100_000).contains(&limit) {
        return Err(
            InputError::new("limit", limit.to_string(), "must be between 1 and 100000").into(),
        );
    }
    let state = match q.state.as_deref() {
        None => None,
        Some(s @ ("running" | "completed")) => Some(s.to_string()),
        Some(s) => return Err(InputError::new("state", s, "must be running or completed").into()),
    };
    if let Some(s) = &q.session
        && s.trim().is_empty()
    {
        return Err(InputError::new(
            "session",
            s,
            "must not be blank: a filter on a blank value matches nothing (leave it out to match all)",
        )
        .into());
    }
    let before = q
        .before
        .as_deref()
        .map(|b| {
            b.parse::<BatchId>().map_err(|e| InputError {
                field: "before".into(),
                ..e
            })
        })
        .transpose()?;
    let batches = st
        .client
        .batches(BatchFilter {
            session: q.session,
            state,
            before,
            limit,
        })
        .await?;
    Ok(Json(batches))
}

/// The `{id}` segment as a batch id (`batch id "bg_...": must start with "bt_"`).
fn batch_id(s: &str) -> Result<BatchId, InputError> {
    s.parse()
}

async fn get(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
) -> ApiResult<Json<Batch>> {
    let id = batch_id(&id)?;
    Ok(Json(st.client.batch(&id).await?))
}

async fn wait(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
    Params(q): Params<WaitQuery>,
) -> ApiResult<Json<BatchWaited>> {
    let id = batch_id(&id)?;
    let length = q.length()?;
    let batch = hold(&st, length, || {
        let (client, id) = (st.client.clone(), id.clone());
        async move {
            let batch = client.batch(&id).await?;
            let done = batch.is_complete();
            Ok((batch, done))
        }
    })
    .await?;
    Ok(Json(batch.waited()))
}

async fn cancel(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
    Body(body): Body<BatchAct>,
) -> ApiResult<Json<BulkAnswer>> {
    act(&st, &id, body, BulkAction::Cancel).await
}

async fn retry(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
    Body(body): Body<BatchAct>,
) -> ApiResult<Json<BulkAnswer>> {
    act(&st, &id, body, BulkAction::Retry).await
}

/// A bulk cancel or retry of the batch's runs, as `toolq batch cancel|retry` does it.
async fn act(
    st: &AppState,
    id: &str,
    body: BatchAct,
    action: BulkAction,
) -> ApiResult<Json<BulkAnswer>> {
    let id = batch_id(id)?;
    // An unknown batch is "not found", not "0 runs match".
    st.client.batch(&id).await?;
    let filter = RunFilter {
        batch_id: Some(id.to_string()),
        ..RunFilter::default()
    };
    let opts = BulkOptions {
        dry_run: body.dry_run,
        ..BulkOptions::default()
    };
    let report = match action {
        BulkAction::Cancel => st.client.cancel_where(&filter, opts).await?,
        BulkAction::Retry => st.client.retry_where(&filter, opts).await?,
    };
    if !body.dry_run {
        st.api.feed.touch();
    }
    Ok(Json(BulkAnswer::new(action, report)))
}
