//! `/sessions/{id}`: a session's inbox (newest first, 50 a page) and its latest runs.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::inbox::{InboxPage, Message};
use crate::run::{Run, RunFilter};
use crate::web::AppState;
use crate::web::layout::{self, respond, shell};
use crate::web::runs_table::runs_table;
use crate::web::view::encode;

/// Messages a page of the inbox shows.
const MESSAGES: i64 = 50;

/// `/sessions/{id}` query.
#[derive(Debug, Default, Deserialize)]
pub struct SessionQuery {
    /// The page of messages before this id.
    before: Option<i64>,
}

/// `/sessions/{id}` data.
#[derive(Debug, Serialize)]
pub struct SessionView {
    /// The session.
    pub session: String,
    /// Its inbox, newest first (50 a page).
    pub messages: Vec<Message>,
    /// Its latest runs.
    pub runs: Vec<Run>,
}

/// `GET /sessions/{id}`.
pub async fn page(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<SessionQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return layout::unreadable(&st, &headers, "query", e.body_text()),
    };
    let v = match read(&st, id, &q).await {
        Ok(v) => v,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    respond(&headers, &v, |v| {
        let main = html! {
            h1 { "Session " span #title { (v.session) } }
            (inbox(v))
            section.card #sruns data-live {
                h2 { "Latest runs " a.dim href={ "/runs?session=" (encode(&v.session)) } { "(all)" } }
                (runs_table(st.client.now(), &v.runs))
            }
        };
        shell(&st, &v.session, "", main)
    })
}

/// A page of the session's inbox and its latest 20 runs.
async fn read(st: &AppState, id: String, q: &SessionQuery) -> Result<SessionView> {
    crate::ids::validate_session(&id)?;
    let page = InboxPage {
        before_id: q.before,
        limit: MESSAGES,
        ..InboxPage::default()
    };
    let messages = st.client.inbox_page(&id, page).await?;
    let filter = RunFilter {
        session: Some(id.clone()),
        ..RunFilter::default()
    };
    let runs = st.client.runs_page(&filter, None, 20).await?;
    Ok(SessionView {
        session: id,
        messages,
        runs,
    })
}

/// The inbox table, with a link to the older page when this one is full.
fn inbox(v: &SessionView) -> Markup {
    html! {
        section.card #inbox data-live {
            h2 { "Inbox" }
            @if v.messages.is_empty() { p.dim { "No messages." } }
            @else {
                table.dense {
                    thead { tr { th.n { "#" } th { "Kind" } th { "Delivery" } th { "State" } th { "Run" } th { "Message" } th { "Created" } } }
                    tbody { @for m in &v.messages { (message(m)) } }
                }
                @if v.messages.len() == MESSAGES as usize {
                    @if let Some(last) = v.messages.last() {
                        p.pager { a href={ "/sessions/" (encode(&v.session)) "?before=" (last.id) } { "Older →" } }
                    }
                }
            }
        }
    }
}

/// One message's row.
fn message(m: &Message) -> Markup {
    html! {
        tr {
            td.n { (m.id) }
            td { span.badge { (m.kind) } }
            td { (m.delivery) }
            td { @if let Some(a) = &m.acked_at { span.state.s-completed title=(a) { "acked" } } @else if m.read_at.is_some() { span.state.s-queued { "read" } } @else { span.state.s-running { "unread" } } }
            td.mono { @if let Some(r) = &m.run_id { a href={ "/runs/" (r) } { "…" (r.chars().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<String>()) } } }
            td.body { (m.body) }
            td { (m.created_at) }
        }
    }
}
