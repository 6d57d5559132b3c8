//! `/schedules/{id}`: one schedule, its actions, its fields, its next fires (a week's worth,
//! so a DST change shows whole) and its ledger of ticks.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde::Serialize;

use crate::error::Result;
use crate::ids::ScheduleId;
use crate::schedule::model::{Occurrence, Schedule};
use crate::web::AppState;
use crate::web::fires::{Fire, fires, fires_table};
use crate::web::layout::{self, respond, shell};
use crate::web::view::{action, at, encode, json_block, state};

/// How many next fires a schedule's page shows.
const NEXT_FIRES: usize = 8;

/// `/schedules/{id}` data.
#[derive(Debug, Serialize)]
pub struct ScheduleView {
    /// The schedule.
    pub schedule: Schedule,
    /// Its next fires, in UTC and its zone.
    pub next_fires: Vec<Fire>,
    /// Its ledger, newest tick first.
    pub occurrences: Vec<Occurrence>,
}

/// `GET /schedules/{id}`.
pub async fn page(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let v = match read(&st, &id).await {
        Ok(v) => v,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    respond(&headers, &v, |v| {
        let main = html! {
            (head(&st, &v.schedule))
            div.grid2 {
                (fields(&v.schedule))
                (next(&v.next_fires))
            }
            (ledger(&v.occurrences))
        };
        shell(&st, &v.schedule.title, "schedules", main)
    })
}

/// The schedule, its next fires and its ledger.
async fn read(st: &AppState, id: &str) -> Result<ScheduleView> {
    let id: ScheduleId = id.parse()?;
    let d = st.client.get_schedule(&id).await?;
    let s = &d.schedule;
    // More than the library's five, so a week's fires show a DST change whole.
    let next = match (&s.cron_expression, s.next_trigger_at, s.enabled) {
        (Some(cron), Some(next), true) => st.client.preview_schedule(
            cron,
            Some(&s.timezone),
            Some(next - chrono::Duration::seconds(1)),
            NEXT_FIRES,
        )?,
        _ => d.next_fires.clone(),
    };
    Ok(ScheduleView {
        next_fires: fires(&next, &s.timezone),
        schedule: d.schedule,
        occurrences: d.occurrences,
    })
}

/// The title, whether it is enabled, and the actions.
fn head(st: &AppState, s: &Schedule) -> Markup {
    let sid = s.id.as_str();
    html! {
        div #head data-live {
            h1 { span #title { (s.title) } " "
                @if s.enabled { span.state.s-completed { "enabled" } } @else { span.state.s-cancelled { "disabled" } } }
            p.mono.dim { (sid) }
            div.actions {
                @if s.enabled {
                    (action(st, &format!("/schedules/{sid}"), "Disable", "", html!{ input type="hidden" name="action" value="disable"; }))
                    (action(st, &format!("/schedules/{sid}"), "Cancel", "danger", html!{ input type="hidden" name="action" value="cancel"; }))
                } @else {
                    (action(st, &format!("/schedules/{sid}"), "Enable", "ok", html!{ input type="hidden" name="action" value="enable"; }))
                }
                a.button.plain href={ "/runs?schedule=" (sid) } { "Its runs" }
            }
        }
    }
}

/// Every field, and the args.
fn fields(s: &Schedule) -> Markup {
    html! {
        section.card #fields data-live {
            h2 { "Schedule" }
            table.kv {
                tr { th { "When" } td.mono { (s.cron_expression.clone().unwrap_or_else(|| "once".into())) } }
                tr { th { "Zone" } td { (s.timezone) } }
                @if let Some(t) = s.scheduled_at { tr { th { "At" } td { (at(Some(t))) } } }
                tr { th { "Tool" } td { (s.tool) } }
                tr { th { "Session" } td { a href={ "/sessions/" (encode(&s.session_id)) } { (s.session_id) } } }
                tr { th { "Missed ticks" } td { (s.missed_policy.to_string()) @if let Some(w) = s.catchup_window_ms { " (window " (w / 1000) " s)" } } }
                tr { th { "Overlap" } td { (s.overlap_policy.to_string()) } }
                tr { th { "Fired" } td { (s.trigger_count) " times, last " (at(s.last_triggered_at)) } }
                tr { th { "Created" } td { (at(Some(s.created_at))) } }
                @if let Some(c) = s.cancelled_at { tr { th { "Cancelled" } td { (at(Some(c))) } } }
            }
            h2 { "Args" }
            (json_block(&s.args))
        }
    }
}

/// The next fires.
fn next(next_fires: &[Fire]) -> Markup {
    html! {
        section.card #next data-live {
            h2 { "Next fires" }
            @if next_fires.is_empty() { p.dim { "None (disabled or done)." } } @else { (fires_table(next_fires)) }
        }
    }
}

/// The ledger: each tick, its outcome and its run.
fn ledger(occurrences: &[Occurrence]) -> Markup {
    html! {
        section.card #ledger data-live {
            h2 { "Occurrences" }
            @if occurrences.is_empty() { p.dim { "No tick yet." } }
            @else {
                table.dense {
                    thead { tr { th { "Tick" } th { "Outcome" } th { "Run" } th { "Run state" } th { "Detail" } th { "Recorded" } } }
                    tbody { @for o in occurrences { tr {
                        td { (at(Some(o.fire_at))) }
                        td { span class={ "badge o-" (o.outcome) } { (o.outcome) } }
                        td.mono { @if let Some(r) = &o.run_id { a href={ "/runs/" (r.as_str()) } { (r.as_str()) } } }
                        td { @if let Some(s) = &o.run_state { (state(s)) } }
                        td { @if let Some(d) = &o.detail { (d) } }
                        td { (at(Some(o.recorded_at))) }
                    } } }
                }
            }
        }
    }
}
