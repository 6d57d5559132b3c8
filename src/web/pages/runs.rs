//! `/runs`: the runs a filter matches, newest first in keyset pages, with the filter form
//! and the buttons that cancel or retry every match (after a confirmation, see [`super::bulk`]).

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::ids::RunId;
use crate::run::{Run, RunState};
use crate::web::AppState;
use crate::web::filter::Filter;
use crate::web::layout::{self, respond, shell};
use crate::web::runs_table::runs_table;
use crate::web::view::encode;

/// Runs per page.
const PAGE: i64 = 50;

/// `/runs` query.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    #[serde(flatten)]
    filter: Filter,
    /// The page after this run id.
    before: Option<String>,
    /// A line to show on top (after a bulk action).
    notice: Option<String>,
}

/// `/runs` data.
#[derive(Debug, Serialize)]
pub struct RunList {
    /// The filter.
    pub filter: Filter,
    /// This page, newest first.
    pub runs: Vec<Run>,
    /// The `before` of the next page, if there may be one.
    pub next_before: Option<String>,
}

/// `GET /runs`.
pub async fn page(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return layout::unreadable(&st, &headers, "query", e.body_text()),
    };
    match read(&st, &q).await {
        Ok(data) => respond(&headers, &data, |d| render(&st, d, q.notice.as_deref())),
        Err(e) => layout::error(&st, &headers, &e),
    }
}

/// The page of runs the query asks for.
async fn read(st: &AppState, q: &ListQuery) -> Result<RunList> {
    let filter = q.filter.to_run_filter(st.client.now())?;
    let before = match q.before.as_deref().filter(|s| !s.is_empty()) {
        Some(b) => Some(b.parse::<RunId>()?),
        None => None,
    };
    let runs = st.client.runs_page(&filter, before.as_ref(), PAGE).await?;
    let next_before = (runs.len() as i64 == PAGE)
        .then(|| runs.last().map(|r| r.id.to_string()))
        .flatten();
    Ok(RunList {
        filter: q.filter.clone(),
        runs,
        next_before,
    })
}

/// The page: a notice, the forms, the runs and the pager.
fn render(st: &AppState, d: &RunList, notice: Option<&str>) -> Markup {
    let f = &d.filter;
    let main = html! {
        @if let Some(n) = notice { p.notice { (n) } }
        (filter_form(st, f))
        @if !f.batch.trim().is_empty() {
            p.dim #batchlink { "The runs of batch " a.mono href={ "/batches/" (encode(f.batch.trim())) } { (f.batch.trim()) } "." }
        }
        (bulk_form(st, f))
        div #runs data-live {
            (runs_table(st.client.now(), &d.runs))
            @if d.runs.is_empty() { p.dim.empty { "No runs match." } }
        }
        p.pager {
            a href={ "/runs?" (f.query()) } { "Newest" }
            @if let Some(b) = &d.next_before {
                " · " a #older href={ "/runs?" (f.query()) "&before=" (b) } { "Older →" }
            }
        }
    };
    shell(st, "Runs", "runs", main)
}

/// The filter form (its tool field suggests the registered tools).
fn filter_form(st: &AppState, f: &Filter) -> Markup {
    let tools: Vec<String> = st
        .client
        .registry()
        .iter()
        .map(|e| e.def.name.clone())
        .collect();
    html! {
        form.filters method="get" action="/runs" {
            label { "State " select name="state" {
                option value="" { "any" }
                @for s in RunState::ALL {
                    option value=(s.as_str()) selected[f.state == s.as_str()] { (s.as_str().replace('_', " ")) }
                }
            } }
            label { "Tool " input name="tool" list="tools" value=(f.tool) size="12"; }
            datalist #tools { @for t in &tools { option value=(t) {} } }
            label { "Session " input name="session" value=(f.session) size="12"; }
            label { "Schedule " input name="schedule" value=(f.schedule) size="14"; }
            label { "Batch " input name="batch" value=(f.batch) placeholder="bt_…" size="14"; }
            label title="key=value; several separated by commas, all must match" { "Tag " input name="tag" value=(f.tag) placeholder="key=value" size="14"; }
            label { "Newer than " input name="newer_than" value=(f.newer_than) placeholder="2h" size="5"; }
            label { "Older than " input name="older_than" value=(f.older_than) placeholder="7d" size="5"; }
            button type="submit" { "Filter" }
            a.button.plain href="/runs" { "Clear" }
        }
    }
}

/// Cancel or retry every run the filter matches (nothing under `--read-only`).
fn bulk_form(st: &AppState, f: &Filter) -> Markup {
    html! {
        @if crate::web::role::can_act(st) {
            form.bulk method="post" action="/runs/bulk" {
                input type="hidden" name="csrf" value=(st.csrf);
                (f.hidden())
                // No filter: the buttons mean every run, and say so (the server refuses an
                // empty filter without it).
                @if f.query().is_empty() { input type="hidden" name="all" value="true"; }
                span.dim { "Every run this filter matches: " }
                button type="submit" name="action" value="cancel" class="danger" { "Cancel matching…" }
                " "
                button type="submit" name="action" value="retry" { "Retry matching…" }
            }
        }
    }
}
