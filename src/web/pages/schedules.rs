//! `/schedules`: every schedule with its next fire (in its zone and in UTC), and a box that
//! previews a cron expression's fires.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::schedule::model::Schedule;
use crate::web::AppState;
use crate::web::fires::{Fire, fires, fires_table};
use crate::web::layout::{self, respond, shell};
use crate::web::view::{ago, encode, short};

/// `/schedules` query: the cron preview box.
#[derive(Debug, Default, Deserialize)]
pub struct PreviewQuery {
    #[serde(default)]
    cron: String,
    #[serde(default)]
    tz: String,
}

/// `/schedules` data.
#[derive(Debug, Serialize)]
pub struct ScheduleList {
    /// Every schedule, newest first.
    pub schedules: Vec<Schedule>,
    /// The cron preview's fires, when a cron was given.
    pub preview: Option<Vec<Fire>>,
    /// Why the preview failed.
    pub preview_error: Option<String>,
}

/// `GET /schedules`.
pub async fn page(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    q: Result<Query<PreviewQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return layout::unreadable(&st, &headers, "query", e.body_text()),
    };
    let data = match read(&st, &q).await {
        Ok(d) => d,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    respond(&headers, &data, |d| {
        let main = html! { (list(&st, d)) (preview_box(&q, d)) };
        shell(&st, "Schedules", "schedules", main)
    })
}

/// Every schedule, and the preview's fires (or why there are none).
async fn read(st: &AppState, q: &PreviewQuery) -> Result<ScheduleList> {
    let schedules = st.client.list_schedules(None).await?;
    let (mut preview, mut preview_error) = (None, None);
    if !q.cron.trim().is_empty() {
        let tz = Some(q.tz.trim()).filter(|t| !t.is_empty());
        match st.client.preview_schedule(q.cron.trim(), tz, None, 10) {
            Ok(t) => preview = Some(fires(&t, tz.unwrap_or("UTC"))),
            Err(e) => preview_error = Some(e.to_string()),
        }
    }
    Ok(ScheduleList {
        schedules,
        preview,
        preview_error,
    })
}

/// The schedules table.
fn list(st: &AppState, d: &ScheduleList) -> Markup {
    let now = st.client.now();
    html! {
        section.card #schedules data-live {
            h2 { "Schedules" }
            @if d.schedules.is_empty() { p.dim { "No schedules." } }
            @else {
                table.dense {
                    thead { tr { th { "Schedule" } th { "Title" } th { "Tool" } th { "Session" } th { "When" } th { "Zone" } th { "Next fire (local)" } th { "UTC" } th.n { "Fired" } th { "Enabled" } } }
                    tbody { @for s in &d.schedules { tr {
                        td.mono { a href={ "/schedules/" (s.id.as_str()) } title=(s.id.as_str()) { (short(s.id.as_str())) } }
                        td.title { (s.title) }
                        td { (s.tool) }
                        td { a href={ "/sessions/" (encode(&s.session_id)) } { (s.session_id) } }
                        td.mono { (s.cron_expression.clone().unwrap_or_else(|| "once".into())) }
                        td { (s.timezone) }
                        td.mono { @if let Some(t) = s.next_trigger_at { @for f in fires(&[t], &s.timezone) { (f.local) " " (f.zone) } } }
                        td.mono { @if let Some(t) = s.next_trigger_at { span title=(ago(now, t)) { (t.format("%Y-%m-%d %H:%M:%SZ")) } } }
                        td.n { (s.trigger_count) }
                        td { @if s.enabled { span.state.s-completed { "enabled" } } @else { span.state.s-cancelled { "off" } } }
                    } } }
                }
            }
        }
    }
}

/// The cron preview: its form, and the fires or the error.
fn preview_box(q: &PreviewQuery, d: &ScheduleList) -> Markup {
    html! {
        div.grid2 {
            section.card {
                h2 { "Cron preview" }
                form.filters method="get" action="/schedules" {
                    label { "Cron " input name="cron" value=(q.cron) placeholder="0 9 * * 1-5" size="18"; }
                    label { "Zone " input name="tz" value=(q.tz) placeholder="Europe/Berlin" size="16"; }
                    button type="submit" { "Preview" }
                }
                @if let Some(e) = &d.preview_error { p.error { (e) } }
                @if let Some(p) = &d.preview { (fires_table(p)) }
            }
        }
    }
}
