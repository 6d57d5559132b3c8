//! `/approvals`: the runs waiting for approval, each with its args and Approve and Deny.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde::Serialize;

use crate::run::{Run, RunFilter, RunState};
use crate::web::AppState;
use crate::web::layout::{self, respond, shell};
use crate::web::view::{ago, encode, json_block};

/// `/approvals` data.
#[derive(Debug, Serialize)]
pub struct Approvals {
    /// Runs awaiting approval, newest first (at most 200).
    pub waiting: Vec<Run>,
}

/// `GET /approvals`.
pub async fn page(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let filter = RunFilter {
        states: vec![RunState::AwaitingApproval],
        ..RunFilter::default()
    };
    let waiting = match st.client.runs_page(&filter, None, 200).await {
        Ok(w) => w,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    let data = Approvals { waiting };
    respond(&headers, &data, |d| {
        let main = html! {
            section.card #approvals data-live {
                h2 { "Waiting for approval" }
                @if d.waiting.is_empty() { p.dim.empty { "No run is waiting for approval." } }
                @for r in &d.waiting { (one(&st, r)) }
            }
        };
        shell(&st, "Approvals", "approvals", main)
    })
}

/// One waiting run: what it is, its args, and the decision form.
fn one(st: &AppState, r: &Run) -> Markup {
    let now = st.client.now();
    let id = r.id.as_str();
    html! {
        div.approval data-id=(id) {
            div.line {
                a.mono href={ "/runs/" (id) } { (id) } " "
                strong.title { (r.title) } " "
                span.dim { (r.tool) " · session " a href={ "/sessions/" (encode(&r.session_id)) } { (r.session_id) } " · " (ago(now, r.created_at)) }
                @if let Some(d) = r.approval_deadline { " · " span.warn { "expires " (ago(now, d)) } }
            }
            (json_block(&r.args))
            @if crate::web::role::can_act(st) {
                form.inline.decide method="post" {
                    input type="hidden" name="csrf" value=(st.csrf);
                    input type="hidden" name="back" value="/approvals";
                    input name="note" placeholder="note (optional)" size="30";
                    " "
                    button.ok type="submit" formaction={ "/runs/" (id) "/approve" } { "Approve" }
                    " "
                    button.danger type="submit" formaction={ "/runs/" (id) "/deny" } { "Deny" }
                }
            }
        }
    }
}
