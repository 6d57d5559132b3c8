//! `/schedules`, `/schedules/{id}`, `/approvals`, `/sessions/{id}` and `/workers`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::schedule::Zone;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::layout::{self, action, ago, at, json_block, respond, shell, state};
use super::runs::{encode, runs_table};
use crate::error::Error;
use crate::ids::ScheduleId;
use crate::inbox::{InboxPage, Message};
use crate::run::{Run, RunFilter, RunState};
use crate::schedule::model::{Occurrence, Schedule};
use crate::status::{Liveness, WorkerStatus};

/// How many next fires a schedule's page shows.
const NEXT_FIRES: usize = 8;

/// A fire instant in UTC and in the schedule's zone.
#[derive(Debug, Serialize)]
pub struct Fire {
    /// In UTC.
    pub utc: DateTime<Utc>,
    /// In the schedule's zone, with its offset (RFC 3339).
    pub local: String,
    /// The zone's abbreviation then (CET, CEST).
    pub zone: String,
}

fn fires(times: &[DateTime<Utc>], tz: &str) -> Vec<Fire> {
    let zone = Zone::parse(tz);
    times
        .iter()
        .map(|t| match &zone {
            Some(z) => Fire {
                utc: *t,
                local: z.local(*t).format("%Y-%m-%d %H:%M:%S%:z").to_string(),
                zone: z.abbreviation(*t),
            },
            None => Fire {
                utc: *t,
                local: t.format("%Y-%m-%d %H:%M:%S+00:00").to_string(),
                zone: "UTC".into(),
            },
        })
        .collect()
}

fn fires_table(f: &[Fire]) -> Markup {
    html! {
        table.dense.fires {
            thead { tr { th { "Local" } th { "Zone" } th { "UTC" } } }
            tbody { @for x in f { tr {
                td.mono { (x.local) } td { (x.zone) } td.mono { (x.utc.format("%Y-%m-%d %H:%M:%SZ")) }
            } } }
        }
    }
}

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
pub async fn schedules(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    q: Result<Query<PreviewQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return layout::unreadable(&st, &headers, "query", e.body_text()),
    };
    let schedules = match st.client.list_schedules(None).await {
        Ok(s) => s,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    let (mut preview, mut preview_error) = (None, None);
    if !q.cron.trim().is_empty() {
        let tz = Some(q.tz.trim()).filter(|t| !t.is_empty());
        match st.client.preview_schedule(q.cron.trim(), tz, None, 10) {
            Ok(t) => preview = Some(fires(&t, tz.unwrap_or("UTC"))),
            Err(e) => preview_error = Some(e.to_string()),
        }
    }
    let data = ScheduleList {
        schedules,
        preview,
        preview_error,
    };
    respond(&headers, &data, |d| {
        let now = st.client.now();
        let main = html! {
            section.card #schedules data-live {
                h2 { "Schedules" }
                @if d.schedules.is_empty() { p.dim { "No schedules." } }
                @else {
                    table.dense {
                        thead { tr { th { "Schedule" } th { "Title" } th { "Tool" } th { "Session" } th { "When" } th { "Zone" } th { "Next fire (local)" } th { "UTC" } th.n { "Fired" } th { "Enabled" } } }
                        tbody { @for s in &d.schedules { tr {
                            td.mono { a href={ "/schedules/" (s.id.as_str()) } title=(s.id.as_str()) { (super::runs::short(s.id.as_str())) } }
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
        };
        shell(&st, "Schedules", "schedules", main)
    })
}

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
pub async fn schedule(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let read = async {
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
        Ok::<_, Error>(ScheduleView {
            next_fires: fires(&next, &s.timezone),
            schedule: d.schedule,
            occurrences: d.occurrences,
        })
    };
    let v = match read.await {
        Ok(v) => v,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    respond(&headers, &v, |v| {
        let s = &v.schedule;
        let sid = s.id.as_str();
        let main = html! {
            div #head data-live {
                h1 { span #title { (s.title) } " "
                    @if s.enabled { span.state.s-completed { "enabled" } } @else { span.state.s-cancelled { "disabled" } } }
                p.mono.dim { (sid) }
                div.actions {
                    @if s.enabled {
                        (action(&st, &format!("/schedules/{sid}"), "Disable", "", html!{ input type="hidden" name="action" value="disable"; }))
                        (action(&st, &format!("/schedules/{sid}"), "Cancel", "danger", html!{ input type="hidden" name="action" value="cancel"; }))
                    } @else {
                        (action(&st, &format!("/schedules/{sid}"), "Enable", "ok", html!{ input type="hidden" name="action" value="enable"; }))
                    }
                    a.button.plain href={ "/runs?schedule=" (sid) } { "Its runs" }
                }
            }
            div.grid2 {
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
                section.card #next data-live {
                    h2 { "Next fires" }
                    @if v.next_fires.is_empty() { p.dim { "None (disabled or done)." } } @else { (fires_table(&v.next_fires)) }
                }
            }
            section.card #ledger data-live {
                h2 { "Occurrences" }
                @if v.occurrences.is_empty() { p.dim { "No tick yet." } }
                @else {
                    table.dense {
                        thead { tr { th { "Tick" } th { "Outcome" } th { "Run" } th { "Run state" } th { "Detail" } th { "Recorded" } } }
                        tbody { @for o in &v.occurrences { tr {
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
        };
        shell(&st, &s.title, "schedules", main)
    })
}

/// `/approvals` data.
#[derive(Debug, Serialize)]
pub struct Approvals {
    /// Runs awaiting approval, newest first (at most 200).
    pub waiting: Vec<Run>,
}

/// `GET /approvals`.
pub async fn approvals(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
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
        let now = st.client.now();
        let main = html! {
            section.card #approvals data-live {
                h2 { "Waiting for approval" }
                @if d.waiting.is_empty() { p.dim.empty { "No run is waiting for approval." } }
                @for r in &d.waiting {
                    @let id = r.id.as_str();
                    div.approval data-id=(id) {
                        div.line {
                            a.mono href={ "/runs/" (id) } { (id) } " "
                            strong.title { (r.title) } " "
                            span.dim { (r.tool) " · session " a href={ "/sessions/" (encode(&r.session_id)) } { (r.session_id) } " · " (ago(now, r.created_at)) }
                            @if let Some(d) = r.approval_deadline { " · " span.warn { "expires " (ago(now, d)) } }
                        }
                        (json_block(&r.args))
                        @if !st.read_only {
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
        };
        shell(&st, "Approvals", "approvals", main)
    })
}

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
pub async fn session(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<SessionQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return layout::unreadable(&st, &headers, "query", e.body_text()),
    };
    let read = async {
        crate::ids::validate_session(&id)?;
        let messages = st
            .client
            .inbox_page(
                &id,
                InboxPage {
                    before_id: q.before,
                    limit: 50,
                    ..InboxPage::default()
                },
            )
            .await?;
        let filter = RunFilter {
            session: Some(id.clone()),
            ..RunFilter::default()
        };
        let runs = st.client.runs_page(&filter, None, 20).await?;
        Ok::<_, Error>(SessionView {
            session: id.clone(),
            messages,
            runs,
        })
    };
    let v = match read.await {
        Ok(v) => v,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    respond(&headers, &v, |v| {
        let now = st.client.now();
        let main = html! {
            h1 { "Session " span #title { (v.session) } }
            section.card #inbox data-live {
                h2 { "Inbox" }
                @if v.messages.is_empty() { p.dim { "No messages." } }
                @else {
                    table.dense {
                        thead { tr { th.n { "#" } th { "Kind" } th { "Delivery" } th { "State" } th { "Run" } th { "Message" } th { "Created" } } }
                        tbody { @for m in &v.messages { tr {
                            td.n { (m.id) }
                            td { span.badge { (m.kind) } }
                            td { (m.delivery) }
                            td { @if let Some(a) = &m.acked_at { span.state.s-completed title=(a) { "acked" } } @else if m.read_at.is_some() { span.state.s-queued { "read" } } @else { span.state.s-running { "unread" } } }
                            td.mono { @if let Some(r) = &m.run_id { a href={ "/runs/" (r) } { "…" (r.chars().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<String>()) } } }
                            td.body { (m.body) }
                            td { (m.created_at) }
                        } } }
                    }
                    @if v.messages.len() == 50 {
                        @if let Some(last) = v.messages.last() {
                            p.pager { a href={ "/sessions/" (encode(&v.session)) "?before=" (last.id) } { "Older →" } }
                        }
                    }
                }
            }
            section.card #sruns data-live {
                h2 { "Latest runs " a.dim href={ "/runs?session=" (encode(&v.session)) } { "(all)" } }
                (runs_table(now, &v.runs))
            }
        };
        shell(&st, &v.session, "", main)
    })
}

/// One worker on `/workers`.
#[derive(Debug, Serialize)]
pub struct WorkerView {
    /// The row and its liveness.
    #[serde(flatten)]
    pub worker: WorkerStatus,
    /// Seconds since its last heartbeat.
    pub heartbeat_age_secs: Option<i64>,
    /// Runs it holds now.
    pub running: usize,
}

/// `/workers` data.
#[derive(Debug, Serialize)]
pub struct Workers {
    /// Live workers first, then the recently stopped.
    pub workers: Vec<WorkerView>,
}

/// `GET /workers`.
pub async fn workers(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let read = async {
        let report = crate::status::status(&st.client, true).await?;
        let running = st
            .client
            .runs_page(
                &RunFilter {
                    states: vec![RunState::Running],
                    ..RunFilter::default()
                },
                None,
                1000,
            )
            .await?;
        let mut by_owner: BTreeMap<String, usize> = BTreeMap::new();
        for r in &running {
            if let Some(o) = &r.lease_owner {
                *by_owner.entry(o.clone()).or_default() += 1;
            }
        }
        let now = st.client.now();
        let workers = report
            .workers
            .into_iter()
            .take(100)
            .map(|w| WorkerView {
                heartbeat_age_secs: crate::clock::parse_ts(&w.row.heartbeat_at)
                    .map(|t| (now - t).num_seconds()),
                running: by_owner.get(&w.row.id).copied().unwrap_or(0),
                worker: w,
            })
            .collect();
        Ok::<_, Error>(Workers { workers })
    };
    let v = match read.await {
        Ok(v) => v,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    respond(&headers, &v, |v| {
        let main = html! {
            section.card #workers data-live {
                h2 { "Workers" }
                @if v.workers.is_empty() { p.dim { "No worker has run on this database." } }
                @else {
                    table.dense {
                        thead { tr { th { "Worker" } th { "Liveness" } th { "Host" } th.n { "Pid" } th { "Heartbeat" } th.n { "Running" } th.n { "Concurrency" } th.n { "Busy retries" } th { "Version" } th { "Tools" } } }
                        tbody { @for w in &v.workers {
                            @let row = &w.worker.row;
                            tr {
                                td.mono { (row.id) }
                                td { (liveness(w.worker.liveness)) }
                                td { (row.host) }
                                td.n { (row.pid) }
                                td { @if let Some(a) = w.heartbeat_age_secs { (a) "s ago" } }
                                td.n { (w.running) }
                                td.n { (row.concurrency) }
                                td.n { (row.busy_retries) }
                                td { (row.version) }
                                td.tools { (row.tools.join(", ")) }
                            }
                        } }
                    }
                }
            }
        };
        shell(&st, "Workers", "workers", main)
    })
}

fn liveness(l: Liveness) -> Markup {
    let class = match l {
        Liveness::Alive => "s-completed",
        Liveness::Stale => "s-awaiting_approval",
        Liveness::Dead => "s-failed",
        Liveness::Stopped => "s-cancelled",
    };
    html! { span class={ "state " (class) } { (l.as_str()) } }
}

/// Any other path: `page PATH not found`, in the request's format.
pub async fn not_found(State(st): State<Arc<AppState>>, headers: HeaderMap, uri: Uri) -> Response {
    let e = Error::NotFound {
        what: "page",
        id: uri.path().to_string(),
    };
    let mut r = layout::error(&st, &headers, &e);
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.into_response()
}

/// A route asked with a method it does not answer (a GET on an action, a POST on a page):
/// 405 in the request's format; the router adds the `Allow` header.
pub async fn method_not_allowed(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    method: Method,
    uri: Uri,
) -> Response {
    let path = uri.path();
    let text = if method == Method::GET || method == Method::HEAD {
        format!("{path} is an action: it answers POST only (a form with the page's csrf field)")
    } else if method == Method::POST {
        format!("{path} is a page: it answers GET only")
    } else {
        format!("{path} does not answer {method}: only the methods in the Allow header")
    };
    layout::refusal(Some(&st), &headers, StatusCode::METHOD_NOT_ALLOWED, &text)
}
