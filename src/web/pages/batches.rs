//! `/batches`: the batches, newest first in keyset pages, filtered by session and state.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde::{Deserialize, Serialize};

use crate::error::{InputError, Result};
use crate::ids::BatchId;
use crate::run::{Batch, BatchFilter};
use crate::web::AppState;
use crate::web::batch_view::batches_table;
use crate::web::layout::{self, respond, shell};
use crate::web::view::encode;

/// Batches per page.
const PAGE: i64 = 50;

/// `/batches` query.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct BatchesQuery {
    /// One session.
    #[serde(default)]
    pub session: String,
    /// `running` or `completed`.
    #[serde(default)]
    pub state: String,
    /// The page after this batch id.
    #[serde(default, skip_serializing)]
    pub before: String,
}

impl BatchesQuery {
    /// The filter as a query string (links that keep it).
    fn query(&self) -> String {
        [("session", &self.session), ("state", &self.state)]
            .iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, v)| format!("{k}={}", encode(v.trim())))
            .collect::<Vec<_>>()
            .join("&")
    }
}

/// `/batches` data.
#[derive(Debug, Serialize)]
pub struct BatchList {
    /// The filter.
    pub filter: BatchesQuery,
    /// This page, newest first (without `states` and `first_failures`: the batch's page
    /// has them).
    pub batches: Vec<Batch>,
    /// The `before` of the next page, if there may be one.
    pub next_before: Option<String>,
}

/// `GET /batches`.
pub async fn page(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    q: Result<Query<BatchesQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return layout::unreadable(&st, &headers, "query", e.body_text()),
    };
    match read(&st, &q).await {
        Ok(d) => respond(&headers, &d, |d| render(&st, d)),
        Err(e) => layout::error(&st, &headers, &e),
    }
}

/// The page of batches the query asks for.
async fn read(st: &AppState, q: &BatchesQuery) -> Result<BatchList> {
    let opt = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
    let state = opt(&q.state);
    if let Some(s) = &state
        && !matches!(s.as_str(), "running" | "completed")
    {
        return Err(InputError::new("state", s, "must be running or completed").into());
    }
    let session = opt(&q.session);
    if let Some(s) = &session {
        crate::ids::validate_session(s)?;
    }
    let before = match opt(&q.before) {
        Some(b) => Some(b.parse::<BatchId>()?),
        None => None,
    };
    let batches = st
        .client
        .batches(BatchFilter {
            session,
            state,
            before,
            limit: PAGE,
        })
        .await?;
    let next_before = (batches.len() as i64 == PAGE)
        .then(|| batches.last().map(|b| b.id.to_string()))
        .flatten();
    Ok(BatchList {
        filter: q.clone(),
        batches,
        next_before,
    })
}

/// The page: the filter form, the batches and the pager.
fn render(st: &AppState, d: &BatchList) -> Markup {
    let f = &d.filter;
    let main = html! {
        h1 { "Batches" }
        form.filters method="get" action="/batches" {
            label { "State " select name="state" {
                option value="" { "any" }
                @for s in ["running", "completed"] {
                    option value=(s) selected[f.state == s] { (s) }
                }
            } }
            label { "Session " input name="session" value=(f.session) size="14"; }
            button type="submit" { "Filter" }
            a.button.plain href="/batches" { "Clear" }
        }
        div #batches data-live {
            (batches_table(st.client.now(), &d.batches))
            @if d.batches.is_empty() { p.dim.empty { "No batches match." } }
        }
        p.pager {
            a href={ "/batches?" (f.query()) } { "Newest" }
            @if let Some(b) = &d.next_before {
                " · " a #older href={ "/batches?" (f.query()) "&before=" (b) } { "Older →" }
            }
        }
    };
    shell(st, "Batches", "batches", main)
}
