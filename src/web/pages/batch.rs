//! `/batches/{id}`: one batch: its state and progress, its runs counted by state (blocked
//! ones apart), its first failures, its callback run, and its runs (newest first, in keyset
//! pages); the actions that cancel its unfinished runs and retry its failed ones.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::ids::{BatchId, RunId};
use crate::run::{Batch, Run, RunFilter};
use crate::web::AppState;
use crate::web::batch_view::batch_bar;
use crate::web::layout::{self, respond, shell};
use crate::web::runs_table::runs_table;
use crate::web::view::{action, at, encode, json_block, short, state};

/// Runs per page.
const PAGE: i64 = 50;

/// The order the counts by state are listed in (states the batch has none of are left out).
const STATE_ORDER: [&str; 7] = [
    "blocked",
    "queued",
    "awaiting_approval",
    "running",
    "completed",
    "failed",
    "cancelled",
];

/// `/batches/{id}` query.
#[derive(Debug, Default, Deserialize)]
pub struct BatchQuery {
    /// The page of runs after this run id.
    #[serde(default)]
    before: String,
    /// A line to show on top (after an action).
    #[serde(default)]
    notice: Option<String>,
}

/// `/batches/{id}` data: the batch's own fields (as [`Batch`] serializes them), then a page
/// of its runs.
#[derive(Debug, Serialize)]
pub struct BatchView {
    /// The batch.
    #[serde(flatten)]
    pub batch: Batch,
    /// A page of its runs, newest first.
    pub runs: Vec<Run>,
    /// The `before` of the next page, if there may be one.
    pub next_before: Option<String>,
}

/// `GET /batches/{id}`.
pub async fn page(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<BatchQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return layout::unreadable(&st, &headers, "query", e.body_text()),
    };
    match read(&st, &id, &q).await {
        Ok(v) => respond(&headers, &v, |v| render(&st, v, q.notice.as_deref())),
        Err(e) => layout::error(&st, &headers, &e),
    }
}

/// The batch and the page of its runs the query asks for.
async fn read(st: &AppState, id: &str, q: &BatchQuery) -> Result<BatchView> {
    let id: BatchId = id.parse()?;
    let before = match q.before.trim() {
        "" => None,
        b => Some(b.parse::<RunId>()?),
    };
    let batch = st.client.batch(&id).await?;
    let filter = RunFilter {
        batch_id: Some(id.to_string()),
        ..RunFilter::default()
    };
    let runs = st.client.runs_page(&filter, before.as_ref(), PAGE).await?;
    let next_before = (runs.len() as i64 == PAGE)
        .then(|| runs.last().map(|r| r.id.to_string()))
        .flatten();
    Ok(BatchView {
        batch,
        runs,
        next_before,
    })
}

/// The page: head (state, actions, progress), fields and counts, failures, runs.
fn render(st: &AppState, v: &BatchView, notice: Option<&str>) -> Markup {
    let b = &v.batch;
    let id = b.id.as_str();
    let main = html! {
        @if let Some(n) = notice { p.notice #notice { (n) } }
        (head(st, b))
        div.grid2 {
            (fields(b))
            (counts(b))
        }
        (failures(b))
        section.card #bruns data-live {
            h2 { "Runs " a.dim href={ "/runs?batch=" (id) } { "(in the runs list)" } }
            (runs_table(st.client.now(), &v.runs))
            @if v.runs.is_empty() { p.dim.empty { "No runs." } }
            p.pager {
                a href={ "/batches/" (id) } { "Newest" }
                @if let Some(before) = &v.next_before {
                    " · " a #older href={ "/batches/" (id) "?before=" (before) } { "Older →" }
                }
            }
        }
    };
    shell(st, &b.title, "batches", main)
}

/// State and title, the actions its counts allow, and the progress bar.
fn head(st: &AppState, b: &Batch) -> Markup {
    let id = b.id.as_str();
    let retryable = b.failed + b.cancelled;
    html! {
        div #head data-live {
            h1.runtitle { (state(b.state)) " " span #title { (b.title) } }
            p.mono.dim { (id) }
            div.actions {
                @if b.pending > 0 {
                    (action(st, &format!("/batches/{id}/cancel"), &format!("Cancel {} unfinished runs", b.pending), "danger", html!{}))
                }
                @if retryable > 0 {
                    (action(st, &format!("/batches/{id}/retry"), &format!("Retry {retryable} failed or cancelled runs"), "", html!{}))
                }
            }
            div.card.progressbox #progress { (batch_bar(b, false)) }
        }
    }
}

/// The batch's fields: session, times, completions, the callback.
fn fields(b: &Batch) -> Markup {
    html! {
        section.card #bfields data-live {
            h2 { "Fields" }
            table.kv {
                tr { th { "Session" } td { a href={ "/sessions/" (encode(&b.session_id)) } { (b.session_id) } } }
                tr { th { "State" } td { (b.state) } }
                tr { th { "Runs" } td { (b.total) } }
                tr { th { "Created" } td { (at(Some(b.created_at))) } }
                tr { th { "Completed" } td { (at(b.completed_at)) } }
                tr { th { "Completions" } td { (b.completions)
                    @if b.completions > 1 { span.dim { " (a retry reopened it)" } } } }
                tr { th { "On complete" } td {
                    @if let Some(c) = &b.on_complete { a href={ "/runs?tool=" (encode(&c.tool)) } { (c.tool) } }
                    @else { span.dim { "—" } }
                } }
                tr { th { "Callback run" } td #callback {
                    @if let Some(r) = &b.callback_run_id { a.mono href={ "/runs/" (r) } { (r) } }
                    @else if b.on_complete.is_some() { span.dim { "enqueued when every run is final" } }
                    @else { span.dim { "—" } }
                } }
            }
            @if let Some(c) = &b.on_complete {
                details { summary.dim { "Callback args" } (json_block(&c.args)) }
            }
        }
    }
}

/// Its runs by current state, each (but blocked) linking to the runs list filtered to it.
fn counts(b: &Batch) -> Markup {
    let id = b.id.as_str();
    // Known states in their order first, then any other the store reports.
    let mut rows: Vec<(&str, i64)> = STATE_ORDER
        .iter()
        .filter_map(|s| b.states.get(*s).map(|n| (*s, *n)))
        .collect();
    for (s, n) in &b.states {
        if !STATE_ORDER.contains(&s.as_str()) {
            rows.push((s.as_str(), *n));
        }
    }
    html! {
        section.card #bcounts data-live {
            h2 { "Runs by state" }
            @if rows.is_empty() { p.dim { "None." } }
            @else {
                table.dense.counts {
                    tbody {
                        @for (s, n) in &rows {
                            tr data-state=(s) {
                                td { (state(s)) }
                                td.n { (n) }
                                td {
                                    @if *s == "blocked" { span.dim { "waiting for their parents" } }
                                    @else { a href={ "/runs?batch=" (id) "&state=" (s) } { "list" } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The first runs that failed or were cancelled, with their errors (an empty live part
/// while there are none, so that the first one shows without a reload).
fn failures(b: &Batch) -> Markup {
    html! {
        div #failures data-live { @if !b.first_failures.is_empty() { section.card {
            h2 { "First failures" }
            table.dense {
                thead { tr { th { "Run" } th { "Tool" } th { "State" } th { "Error" } } }
                tbody {
                    @for f in &b.first_failures {
                        tr {
                            td.mono { a href={ "/runs/" (encode(&f.id)) } { (short(&f.id)) } }
                            td { (f.tool) }
                            td { (state(&f.state)) }
                            td.body.error { @if let Some(e) = &f.error { (e) } }
                        }
                    }
                }
            }
        } } }
    }
}
