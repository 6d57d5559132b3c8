//! `/runs` (filtered keyset pages, bulk cancel and retry after a confirmation that shows the
//! count) and `/runs/{id}` (every field, progress, live log tail, result, errors, messages).

use std::sync::Arc;

use axum::Form;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::auth::check_csrf;
use super::layout::{self, action, ago, at, json_block, respond, shell, state};
use crate::bulk::{BulkAction, BulkAnswer, BulkOptions, BulkReport};
use crate::error::{InputError, Result};
use crate::ids::RunId;
use crate::inbox::Message;
use crate::run::{Run, RunFilter, RunState};

/// Runs per page.
const PAGE: i64 = 50;
/// The most of a log a page shows (its end).
const LOG_SHOWN: usize = 64 * 1024;

/// The filter fields of `/runs` (query string, and the bulk form's fields).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Filter {
    /// One state.
    #[serde(default)]
    pub state: String,
    /// One tool.
    #[serde(default)]
    pub tool: String,
    /// One session.
    #[serde(default)]
    pub session: String,
    /// One schedule.
    #[serde(default)]
    pub schedule: String,
    /// Created within this long (e.g. `2h`).
    #[serde(default)]
    pub newer_than: String,
    /// Created longer ago than this.
    #[serde(default)]
    pub older_than: String,
}

impl Filter {
    fn to_run_filter(&self, now: DateTime<Utc>) -> Result<RunFilter> {
        let opt = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        let ago = |field: &str, s: &str| -> Result<Option<DateTime<Utc>>> {
            match opt(s) {
                None => Ok(None),
                Some(s) => {
                    let d = crate::clock::parse_duration(&s)
                        .map_err(|r| InputError::new(field, &s, r))?;
                    let t = chrono::Duration::from_std(d)
                        .ok()
                        .and_then(|d| now.checked_sub_signed(d))
                        .ok_or_else(|| InputError::new(field, &s, "is too long"))?;
                    Ok(Some(t))
                }
            }
        };
        let states = match opt(&self.state) {
            None => Vec::new(),
            Some(s) => vec![s.parse::<RunState>().map_err(|_| {
                InputError::new("state", &s, "is not a run state (queued, awaiting_approval, running, completed, failed, cancelled)")
            })?],
        };
        Ok(RunFilter {
            states,
            tool: opt(&self.tool),
            session: opt(&self.session),
            schedule_id: opt(&self.schedule),
            created_after: ago("newer_than", &self.newer_than)?,
            created_before: ago("older_than", &self.older_than)?,
        })
    }

    /// As a query string (for links that keep the filter).
    fn query(&self) -> String {
        let pairs = [
            ("state", &self.state),
            ("tool", &self.tool),
            ("session", &self.session),
            ("schedule", &self.schedule),
            ("newer_than", &self.newer_than),
            ("older_than", &self.older_than),
        ];
        pairs
            .iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, v)| format!("{k}={}", encode(v.trim())))
            .collect::<Vec<_>>()
            .join("&")
    }

    fn hidden(&self) -> Markup {
        html! {
            input type="hidden" name="state" value=(self.state);
            input type="hidden" name="tool" value=(self.tool);
            input type="hidden" name="session" value=(self.session);
            input type="hidden" name="schedule" value=(self.schedule);
            input type="hidden" name="newer_than" value=(self.newer_than);
            input type="hidden" name="older_than" value=(self.older_than);
        }
    }
}

/// Percent-encodes a query value.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

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
pub async fn list(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return layout::unreadable(&st, &headers, "query", e.body_text()),
    };
    let read = async {
        let filter = q.filter.to_run_filter(st.client.now())?;
        let before = match q.before.as_deref().filter(|s| !s.is_empty()) {
            Some(b) => Some(b.parse::<RunId>()?),
            None => None,
        };
        let runs = st.client.runs_page(&filter, before.as_ref(), PAGE).await?;
        let next_before = (runs.len() as i64 == PAGE)
            .then(|| runs.last().map(|r| r.id.to_string()))
            .flatten();
        Ok::<_, crate::error::Error>(RunList {
            filter: q.filter.clone(),
            runs,
            next_before,
        })
    };
    match read.await {
        Ok(data) => respond(&headers, &data, |d| {
            render_list(&st, d, q.notice.as_deref())
        }),
        Err(e) => layout::error(&st, &headers, &e),
    }
}

fn render_list(st: &AppState, d: &RunList, notice: Option<&str>) -> Markup {
    let now = st.client.now();
    let f = &d.filter;
    let tools: Vec<String> = st
        .client
        .registry()
        .iter()
        .map(|e| e.def.name.clone())
        .collect();
    let main = html! {
        @if let Some(n) = notice { p.notice { (n) } }
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
            label { "Newer than " input name="newer_than" value=(f.newer_than) placeholder="2h" size="5"; }
            label { "Older than " input name="older_than" value=(f.older_than) placeholder="7d" size="5"; }
            button type="submit" { "Filter" }
            a.button.plain href="/runs" { "Clear" }
        }
        @if !st.read_only {
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
        div #runs data-live {
            (runs_table(now, &d.runs))
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

/// A table of runs (also used by the approvals and session pages).
pub fn runs_table(now: DateTime<Utc>, runs: &[Run]) -> Markup {
    html! {
        @if !runs.is_empty() {
            table.dense.runs {
                thead { tr {
                    th { "Run" } th { "State" } th { "Title" } th { "Tool" } th { "Session" }
                    th.n { "Attempt" } th { "Progress" } th { "Created" } th { "Finished" }
                } }
                tbody {
                    @for r in runs {
                        tr data-id=(r.id.as_str()) {
                            td.mono { a href={ "/runs/" (r.id.as_str()) } { (short(r.id.as_str())) } }
                            td { (state(r.state.as_str())) }
                            td.title { (r.title) }
                            td { (r.tool) }
                            td { a href={ "/sessions/" (encode(&r.session_id)) } { (r.session_id) } }
                            td.n { (r.attempt) "/" (r.max_attempts) }
                            td { (progress_bar(r, true)) }
                            td title=(r.created_at.to_rfc3339()) { (ago(now, r.created_at)) }
                            td { @if let Some(t) = r.finished_at { span title=(t.to_rfc3339()) { (ago(now, t)) } } }
                        }
                    }
                }
            }
        }
    }
}

/// The id's tail: ids share their time prefix within a burst, the end tells them apart.
pub fn short(id: &str) -> String {
    let tail: String = id
        .chars()
        .rev()
        .take(12)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("…{tail}")
}

fn progress_bar(r: &Run, compact: bool) -> Markup {
    let Some(p) = &r.progress else {
        return html! {};
    };
    let pct = p
        .total
        .filter(|t| *t > 0.0)
        .map(|t| (p.current / t * 100.0).clamp(0.0, 100.0));
    html! {
        div.progress title=(format!("{} / {}", p.current, p.total.map(|t| t.to_string()).unwrap_or_else(|| "?".into()))) {
            @if let Some(pct) = pct {
                div.bar { div.fill style={ "width:" (format!("{pct:.1}")) "%" } {} }
                span.pct { (format!("{pct:.0}%")) }
            } @else {
                span { (p.current) }
            }
            @if !compact {
                span.detail {
                    (p.current) @if let Some(t) = p.total { " / " (t) } @if let Some(u) = &p.unit { " " (u) }
                    @if let Some(l) = &p.label { " · " (l) }
                }
            }
        }
    }
}

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
pub async fn bulk(
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
    let run = async {
        if !matches!(form.action.as_str(), "cancel" | "retry") {
            return Err(InputError::new("action", &form.action, "must be cancel or retry").into());
        }
        let filter = form.filter.to_run_filter(st.client.now())?;
        if filter.is_empty() && !form.all()? {
            return Err(InputError::new(
                "all",
                &form.all,
                format!(
                    "give a filter (state, tool, session, schedule, newer_than, older_than), \
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
    };
    let report = match run.await {
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
        return Redirect::to(&format!("/runs?{q}{sep}notice={}", encode(&what))).into_response();
    }
    confirm_page(&st, &form, &report).into_response()
}

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

/// `/runs/{id}` data.
#[derive(Debug, Serialize)]
pub struct RunView {
    /// The run.
    pub run: Run,
    /// The end of its log (at most 64 KiB), if any was written.
    pub log: Option<String>,
    /// Whether the log shown is not the whole log.
    pub log_cut: bool,
    /// Its result, if it has one.
    pub result: Option<Value>,
    /// The inbox messages about it.
    pub messages: Vec<Message>,
    /// Why a due queued run is not starting, if this process can tell.
    pub held: Option<String>,
}

/// `GET /runs/{id}`.
pub async fn one(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let read = async {
        let id: RunId = id.parse()?;
        let run = st.client.get(&id).await?;
        let (log, log_cut) = match st.client.log(&run).await? {
            Some(b) => {
                let from = b.content.len().saturating_sub(LOG_SHOWN);
                (
                    Some(String::from_utf8_lossy(&b.content[from..]).into_owned()),
                    from > 0 || b.truncated,
                )
            }
            None => (None, false),
        };
        let result = st.client.result(&run).await?.map(|b| {
            serde_json::from_slice(&b.content)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&b.content).into()))
        });
        let messages = st.client.run_messages(&id).await?;
        let held = st.client.hold_reason(&run).await?;
        Ok::<_, crate::error::Error>(RunView {
            run,
            log,
            log_cut,
            result,
            messages,
            held,
        })
    };
    match read.await {
        Ok(v) => respond(&headers, &v, |v| render_one(&st, v)),
        Err(e) => layout::error(&st, &headers, &e),
    }
}

fn render_one(st: &AppState, v: &RunView) -> Markup {
    let r = &v.run;
    let now = st.client.now();
    let id = r.id.as_str();
    let running = r.state == RunState::Running;
    let main = html! {
        div #head data-live {
            h1.runtitle { (state(r.state.as_str())) " " span #title { (r.title) } }
            p.mono.dim { (id) }
            @if let Some(h) = &v.held { p.notice { "Held: " (h) } }
            @if let Some(t) = r.cancel_requested_at { @if running { p.notice { "Cancel requested " (ago(now, t)) "; the worker stops it at its next heartbeat." } } }
            div.actions {
                @if matches!(r.state, RunState::Queued | RunState::AwaitingApproval | RunState::Running) && r.cancel_requested_at.is_none() {
                    (action(st, &format!("/runs/{id}/cancel"), "Cancel", "danger", html!{}))
                }
                @if matches!(r.state, RunState::Failed | RunState::Cancelled) {
                    (action(st, &format!("/runs/{id}/retry"), "Retry", "", html!{}))
                }
                @if r.state == RunState::AwaitingApproval {
                    (action(st, &format!("/runs/{id}/approve"), "Approve", "ok", html!{ input name="note" placeholder="note (optional)"; }))
                    (action(st, &format!("/runs/{id}/deny"), "Deny", "danger", html!{ input name="note" placeholder="reason (optional)"; }))
                }
            }
            @if r.progress.is_some() || r.status_text.is_some() {
                div.card.progressbox {
                    (progress_bar(r, false))
                    @if let Some(s) = &r.status_text { div #status.status { (s) } }
                }
            }
        }
        section.card {
            h2 { "Log"
                @if v.log_cut { span.dim { " (the end)" } }
                label.follow { input #follow type="checkbox" checked[!r.state.is_final()]; " follow" }
            }
            pre #log.log data-live data-follow {
                @if let Some(l) = v.log.as_deref().filter(|l| !l.is_empty()) { (l) }
                @else if let Some(t) = r.output_tail.as_deref().filter(|t| !t.is_empty()) { (t) }
                @else { span.dim { (if r.state.is_final() { "(no output)" } else { "(no output yet)" }) } }
            }
        }
        div.grid2 {
            section.card #fields data-live {
                h2 { "Fields" }
                table.kv {
                    tr { th { "Tool" } td { a href={ "/runs?tool=" (encode(&r.tool)) } { (r.tool) } } }
                    tr { th { "Session" } td { a href={ "/sessions/" (encode(&r.session_id)) } { (r.session_id) } } }
                    tr { th { "Attempt" } td { (r.attempt) " of " (r.max_attempts) } }
                    tr { th { "Priority" } td { (r.priority) } }
                    tr { th { "Created" } td { (at(Some(r.created_at))) } }
                    tr { th { "Run at" } td { (at(Some(r.run_at))) } }
                    tr { th { "Started" } td { (at(r.started_at)) } }
                    tr { th { "Finished" } td { (at(r.finished_at)) } }
                    tr { th { "Heartbeat" } td { (at(r.heartbeat_at)) } }
                    tr { th { "Lease" } td { @if let Some(o) = &r.lease_owner { span.mono { (o) } " until " (at(r.lease_expires_at)) } @else { span.dim { "—" } } } }
                    tr { th { "Timeout" } td { @if let Some(ms) = r.timeout_ms { (ms) " ms" } @else { span.dim { "default" } } } }
                    tr { th { "Delivery" } td { (r.delivery.as_str()) @if !r.signal_on_completion { " (no message)" } } }
                    tr { th { "Idempotency key" } td { @if let Some(k) = &r.idempotency_key { (k) } @else { span.dim { "—" } } } }
                    tr { th { "Schedule" } td { @if let Some(s) = &r.schedule_id { a href={ "/schedules/" (s.as_str()) } { (s.as_str()) } " tick " (at(r.fire_at)) } @else { span.dim { "—" } } } }
                    tr { th { "Approval" } td { @if let Some(a) = &r.approval_state { (a) @if let Some(b) = &r.approval_by { " by " (b) } @if let Some(n) = &r.approval_note { ": " (n) } @if let Some(d) = r.approval_deadline { " (deadline " (at(Some(d))) ")" } } @else { span.dim { "—" } } } }
                    tr { th { "Operation" } td { @if let Some(o) = &r.operation_id { span.mono { (o) } } @else { span.dim { "—" } } } }
                    @if let Some(e) = &r.error { tr { th { "Error" } td.error { (e) } } }
                    @if let Some(e) = &r.internal_error { tr { th { "Internal error" } td.error { (e) } } }
                }
            }
            section.card {
                h2 { "Args" }
                (json_block(&r.args))
            }
        }
        div #more data-live {
            @if let Some(res) = &v.result {
                section.card { h2 { "Result" } (json_block(res)) }
            }
            @if r.errors.as_array().is_some_and(|a| !a.is_empty()) {
                section.card { h2 { "Errors per attempt" } (json_block(&r.errors)) }
            }
            @if r.stages.as_array().is_some_and(|a| !a.is_empty()) {
                section.card { h2 { "Stages" } (json_block(&r.stages)) }
            }
            section.card {
                h2 { "Inbox messages" }
                @if v.messages.is_empty() { p.dim { "None." } }
                @for m in &v.messages {
                    div.message {
                        span.badge { (m.kind) } " " span.dim { (m.delivery) " · " (m.created_at) " · " (if m.acked_at.is_some() { "acknowledged" } else if m.read_at.is_some() { "read" } else { "unread" }) }
                        pre.body { (m.body) }
                    }
                }
            }
        }
    };
    shell(st, &r.title, "runs", main)
}
