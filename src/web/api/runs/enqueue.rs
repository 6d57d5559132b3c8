//! `POST /runs` (one run) and `POST /runs/many` (many, all or none in one transaction).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::{Error, InputError};
use crate::ids::RunId;
use crate::run::spec::{RunSpec, at_request, resolve};
use crate::run::{EnqueueAnswer, EnqueuedMany};
use crate::web::AppState;
use crate::web::api::ApiResult;
use crate::web::api::body::Body;
use crate::web::api::route::Route;

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route::post("/runs", "enqueueRun", enqueue)
            .doc(
                "runs",
                "Enqueue a run",
                "One run, with the fields of an enqueue file's line (`toolq enqueue --file`). \
                 `after` names run ids (`bg_...`); `ref` only means something in \
                 `POST /runs/many`. Answers 201 with the new run, or 200 with the run an \
                 idempotency key or `unique_by` returned (`created: false`), as \
                 `toolq enqueue --json` prints it. Bad input writes nothing. A W3C \
                 `traceparent` header makes the run's spans join the caller's trace.",
            )
            .body::<RunSpec>()
            .answers::<EnqueueAnswer>(201)
            .errors(&[409, 413, 415]),
        Route::post("/runs/many", "enqueueRuns", enqueue_many)
            .doc(
                "runs",
                "Enqueue many runs in one transaction",
                "Every run of `runs` is validated, then all are written in one transaction, \
                 or none. A run may name others of the same request: its `ref`, and their \
                 refs (or run ids) in `after`. Errors name the run (`runs[2]: timeout`). \
                 Answers 201 when at least one run is new, else 200, with what \
                 `toolq enqueue --file --json` prints.",
            )
            .body::<ManyRuns>()
            .answers::<EnqueuedMany>(201)
            .errors(&[409, 413, 415]),
    ]
}

/// The body of `POST /runs/many`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ManyRuns {
    /// The runs, in order: their ids in the answer keep it.
    pub runs: Vec<RunSpec>,
}

/// 201 when `created`, else 200.
fn status(created: bool) -> StatusCode {
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    }
}

/// The spec's texts that the library only knows parsed (`timeout: "0m"` is echoed as
/// given).
fn typed(spec: &RunSpec) -> [(&'static str, Option<String>); 2] {
    [
        ("timeout", spec.timeout.clone()),
        ("unique_for", spec.unique_for.clone()),
    ]
}

fn echo(e: Error, typed: &[(&'static str, Option<String>)]) -> Error {
    let typed: Vec<(&str, Option<&str>)> = typed.iter().map(|(f, v)| (*f, v.as_deref())).collect();
    e.with_typed_values(&typed)
}

/// The caller's W3C `traceparent` header (the run's spans join its trace); a bad one is a
/// 400 naming it, before anything is written.
fn traceparent(headers: &HeaderMap) -> Result<Option<String>, InputError> {
    let Some(v) = headers.get("traceparent") else {
        return Ok(None);
    };
    let text = v.to_str().map_err(|_| {
        InputError::new(
            "traceparent",
            "(not text)",
            "must be a W3C traceparent header",
        )
    })?;
    crate::trace::traceparent::check("traceparent", text)?;
    Ok(Some(text.to_string()))
}

async fn enqueue(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Body(spec): Body<RunSpec>,
) -> ApiResult<(StatusCode, Json<EnqueueAnswer>)> {
    let typed = typed(&spec);
    let caller = traceparent(&headers)?;
    let parsed = spec.parse(st.client.now())?;
    if let Some(r) = &parsed.ref_ {
        return Err(InputError::new(
            "ref",
            r,
            "names a run for the others of the same request: give it in POST /api/v1/runs/many",
        )
        .into());
    }
    let mut req = parsed.req;
    if caller.is_some() {
        req.traceparent = caller;
    }
    for a in &parsed.after {
        req.after.push(a.parse::<RunId>().map_err(|e| InputError {
            field: "after".into(),
            reason: format!(
                "{} (a single run waits for run ids; refs name runs of the same request in POST /api/v1/runs/many)",
                e.reason
            ),
            ..e
        })?);
    }
    let tool = req.tool.clone();
    let batch = req.batch.clone();
    let done = st.client.enqueue(req).await.map_err(|e| echo(e, &typed))?;
    st.api.feed.touch();
    Ok((
        status(done.created),
        Json(EnqueueAnswer::new(&done, &tool, batch)),
    ))
}

async fn enqueue_many(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Body(body): Body<ManyRuns>,
) -> ApiResult<(StatusCode, Json<EnqueuedMany>)> {
    let caller = traceparent(&headers)?;
    if body.runs.is_empty() {
        return Err(InputError::new("runs", "[]", "holds no runs (give at least one)").into());
    }
    let now = st.client.now();
    let place = |i: usize| format!("runs[{i}]");
    let mut parsed = Vec::with_capacity(body.runs.len());
    for (i, spec) in body.runs.into_iter().enumerate() {
        parsed.push(
            spec.parse(now)
                .map_err(|e| e.within(&format!("{}: ", place(i))))?,
        );
    }
    let mut reqs = resolve(parsed, place, "this request")?;
    for r in reqs.iter_mut().filter(|r| r.traceparent.is_none()) {
        r.traceparent.clone_from(&caller);
    }
    let n = reqs.len();
    let done = st.client.enqueue_batch(reqs).await.map_err(|e| {
        at_request(
            e,
            |i| (i < n).then(|| place(i)),
            |on| {
                let named: Vec<String> = on.iter().map(|i| place(*i)).collect();
                ("runs: after".to_string(), named.join(" -> "))
            },
        )
    })?;
    st.api.feed.touch();
    let created = done.iter().any(|e| e.created);
    Ok((status(created), Json(EnqueuedMany::new(done))))
}
