//! `POST /runs/bulk`: cancel or retry every run a filter matches. The first post is a dry run
//! that answers a confirmation page with the count; the confirmed post acts and goes back to
//! `/runs` with a notice. Under `Accept: application/json` it answers the CLI's JSON.

use std::sync::Arc;

use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use crate::bulk::{BulkAction, BulkAnswer, BulkOptions, BulkReport};
use crate::error::{InputError, Result};
use crate::web::AppState;
use crate::web::auth::check_csrf;
use crate::web::filter::Filter;
use crate::web::layout::{self, shell};
use crate::web::view::{encode, short};

/// The bulk form: first a confirmation page with the count, then the action.
#[derive(Debug, Deserialize)]
pub struct BulkForm {
    #[serde(flatten)]
    filter: Filter,
    #[serde(default)]
    csrf: String,
    action: String,
    #[serde(default)]
    confirm: String,
    /// `true` to act on every run the action can when no filter field is given (as the
    /// CLI's `--all`); without it an empty filter is refused.
    #[serde(default)]
    all: String,
}

impl BulkForm {
    /// The `all` field: `true`/`yes`/`on`/`1`, or `false`/`no`/`off`/`0`/empty.
    fn all(&self) -> Result<bool> {
        match self.all.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(true),
            "" | "false" | "no" | "off" | "0" => Ok(false),
            _ => Err(InputError::new("all", &self.all, "must be true or false").into()),
        }
    }
}

/// `POST /runs/bulk`.
pub async fn post(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<BulkForm>, FormRejection>,
) -> Response {
    let form = match form {
        Ok(Form(form)) => form,
        Err(e) => return layout::unreadable(&st, &headers, "form", e.body_text()),
    };
    if let Some(r) = check_csrf(&st, &headers, &form.csrf) {
        return r;
    }
    let confirmed = form.confirm == "yes";
    let report = match act(&st, &form, confirmed).await {
        Ok(r) => r,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    if layout::wants_json(&headers) {
        // The CLI's shape too (`toolq cancel|retry FILTERS --json`).
        let action = if form.action == "cancel" {
            BulkAction::Cancel
        } else {
            BulkAction::Retry
        };
        return axum::Json(BulkAnswer::new(action, report)).into_response();
    }
    if confirmed {
        return Redirect::to(&back_with_notice(&form, &report)).into_response();
    }
    confirm_page(&st, &form, &report).into_response()
}

/// Checks the form and cancels or retries what it matches (counts only, unless confirmed).
async fn act(st: &AppState, form: &BulkForm, confirmed: bool) -> Result<BulkReport> {
    if !matches!(form.action.as_str(), "cancel" | "retry") {
        return Err(InputError::new("action", &form.action, "must be cancel or retry").into());
    }
    let filter = form.filter.to_run_filter(st.client.now())?;
    if filter.is_empty() && !form.all()? {
        return Err(InputError::new(
            "all",
            &form.all,
            format!(
                "give a filter (state, tool, session, schedule, batch, newer_than, older_than), \
                 or all=true to {} every run it can",
                form.action
            ),
        )
        .into());
    }
    let opts = BulkOptions {
        dry_run: !confirmed,
        ..BulkOptions::default()
    };
    match form.action.as_str() {
        "cancel" => st.client.cancel_where(&filter, opts).await,
        "retry" => st.client.retry_where(&filter, opts).await,
        other => Err(InputError::new("action", other, "must be cancel or retry").into()),
    }
}

/// `/runs` with the form's filter and a notice of what was done.
fn back_with_notice(form: &BulkForm, report: &BulkReport) -> String {
    let what = if form.action == "cancel" {
        format!(
            "Cancelled {} runs; asked {} running runs to stop; {} skipped.",
            report.done, report.cancel_requested, report.skipped
        )
    } else {
        format!(
            "Re-queued {} runs; {} skipped.",
            report.done, report.skipped
        )
    };
    let q = form.filter.query();
    let sep = if q.is_empty() { "" } else { "&" };
    format!("/runs?{q}{sep}notice={}", encode(&what))
}

/// The count, the first ids, and the button that confirms.
fn confirm_page(st: &AppState, form: &BulkForm, report: &BulkReport) -> Markup {
    let verb = if form.action == "cancel" {
        "Cancel"
    } else {
        "Retry"
    };
    let main = html! {
        section.card.confirm {
            h1 { (verb) " " span #bulk-count { (report.matched) } " runs?" }
            p { "The filter " code { (if form.filter.query().is_empty() { "(everything)".to_string() } else { form.filter.query() }) }
                " matches " (report.matched) " runs that can be " (if form.action == "cancel" { "cancelled" } else { "retried" }) "." }
            @if !report.ids.is_empty() {
                p.dim { "First: " @for id in report.ids.iter().take(10) { a.mono href={ "/runs/" (id.as_str()) } { (short(id.as_str())) } " " } }
            }
            form method="post" action="/runs/bulk" {
                input type="hidden" name="csrf" value=(st.csrf);
                input type="hidden" name="action" value=(form.action);
                input type="hidden" name="confirm" value="yes";
                (form.filter.hidden())
                input type="hidden" name="all" value=(form.all);
                button #confirm type="submit" class=(if form.action == "cancel" { "danger" } else { "" }) disabled[report.matched == 0] {
                    (verb) " " (report.matched) " runs"
                }
                " "
                a.button.plain href={ "/runs?" (form.filter.query()) } { "Back" }
            }
        }
    };
    shell(st, "Confirm", "runs", main)
}
