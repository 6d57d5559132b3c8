//! `/runs/{id}`: one run with every field, its actions, progress, the live tail of its log,
//! its result, errors and stages, and the inbox messages about it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Result;
use crate::ids::RunId;
use crate::inbox::Message;
use crate::run::{
    DepMode, Dependency, Run, RunEvent, RunLinks, RunState, StepRecord, StepStatus, WaitKind,
};
use crate::web::AppState;
use crate::web::layout::{self, respond, shell};
use crate::web::runs_table::progress_bar;
use crate::web::view::{action, ago, at, cut, encode, json_block, short, state};

/// The most of a log a page shows (its end).
const LOG_SHOWN: usize = 64 * 1024;

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
    /// Its recorded steps, in order.
    pub steps: Vec<StepRecord>,
    /// The events sent to it, oldest first.
    pub events: Vec<RunEvent>,
    /// Its batch, the runs it waits for and that wait for it, the run that spawned it and
    /// the runs it spawned.
    pub links: RunLinks,
    /// The current states of the first linked runs whose state `links` does not carry (the
    /// parents not yet resolved and the dependents), by id.
    pub linked_states: BTreeMap<String, String>,
}

/// The query of `/runs/{id}`: a notice after an action (e.g. an event sent).
#[derive(Debug, Default, Deserialize)]
pub struct RunQuery {
    #[serde(default)]
    notice: Option<String>,
}

/// `GET /runs/{id}`.
pub async fn page(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<RunQuery>, QueryRejection>,
) -> Response {
    // A notice that cannot be read is only left out: the page is what was asked for.
    let notice = q.ok().and_then(|Query(q)| q.notice);
    match read(&st, &id).await {
        Ok(v) => respond(&headers, &v, |v| render(&st, v, notice.as_deref())),
        Err(e) => layout::error(&st, &headers, &e),
    }
}

/// The run, the end of its log, its result, its messages and why it is held.
async fn read(st: &AppState, id: &str) -> Result<RunView> {
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
    let journal = st.client.journal(&id).await?;
    let links = st.client.links(&id).await?;
    let linked_states = linked_states(st, &links).await?;
    Ok(RunView {
        run,
        log,
        log_cut,
        result,
        messages,
        held,
        steps: journal.steps,
        events: journal.events,
        links,
        linked_states,
    })
}

/// The most linked runs of each kind the page reads the state of (and lists).
const LINKS_SHOWN: usize = 50;

/// The current states of the parents not yet resolved and of the dependents (the first
/// [`LINKS_SHOWN`] of each). A run deleted meanwhile (pruned) is left out.
async fn linked_states(st: &AppState, links: &RunLinks) -> Result<BTreeMap<String, String>> {
    let parents = links
        .parents
        .iter()
        .filter(|d| d.resolved.is_none() && d.mode != DepMode::Batch)
        .take(LINKS_SHOWN)
        .map(|d| &d.parent);
    let dependents = links.dependents.iter().take(LINKS_SHOWN).map(|d| &d.child);
    let mut states = BTreeMap::new();
    for id in parents.chain(dependents) {
        let Ok(run_id) = id.parse::<RunId>() else {
            continue;
        };
        match st.client.get(&run_id).await {
            Ok(r) => {
                let s = if r
                    .waiting
                    .as_ref()
                    .is_some_and(|w| w.kind == WaitKind::Parents)
                {
                    "blocked".to_string()
                } else {
                    r.state.as_str().to_string()
                };
                states.insert(id.clone(), s);
            }
            Err(crate::error::Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(states)
}

/// The page: head, log, steps and events, fields and args, then result, errors, stages and
/// messages.
fn render(st: &AppState, v: &RunView, notice: Option<&str>) -> Markup {
    let r = &v.run;
    let main = html! {
        @if let Some(n) = notice { p.notice #notice { (n) } }
        (head(st, v))
        (links(v))
        (log(v))
        (journal(st, v))
        div.grid2 {
            (fields(r))
            section.card {
                h2 { "Args" }
                (json_block(&r.args))
            }
        }
        (more(v))
    };
    shell(st, &r.title, "runs", main)
}

/// State and title, notices, the actions its state allows, and its progress.
fn head(st: &AppState, v: &RunView) -> Markup {
    let r = &v.run;
    let now = st.client.now();
    let id = r.id.as_str();
    let running = r.state == RunState::Running;
    html! {
        div #head data-live {
            h1.runtitle { (state(r.state.as_str())) " " span #title { (r.title) } }
            p.mono.dim { (id) }
            @if !r.tags.is_empty() {
                p #tags { @for (k, v) in r.tags.iter() { (crate::web::runs_table::tag_link(k, v)) " " } }
            }
            @if let Some(w) = &r.waiting {
                @if w.kind == WaitKind::Parents {
                    @let open = v.links.parents.iter().filter(|d| d.resolved.is_none()).count();
                    p.waiting #waiting { "Blocked by its parents: " (open) " of " (v.links.parents.len()) " not ended yet." }
                } @else {
                    p.waiting #waiting { "Waiting: " (w.describe()) }
                }
            }
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
    }
}

/// The most of a step's output, error or an event's payload a table cell shows.
const SUMMARY: usize = 120;

/// The recorded steps and the events sent, and the form that sends one (while the run has
/// not ended; prefilled with the event it waits for).
fn journal(st: &AppState, v: &RunView) -> Markup {
    let r = &v.run;
    let waits_for = r.waiting.as_ref().and_then(|w| w.event.clone());
    html! {
        div #journal data-live {
            section.card #steps {
                h2 { "Steps" }
                @if v.steps.is_empty() { p.dim { "None recorded." } }
                @else {
                    table.dense {
                        thead { tr { th.n { "#" } th { "Name" } th { "Kind" } th { "Status" } th { "Recorded" } th.n { "Attempt" } th { "Output or error" } } }
                        tbody { @for s in &v.steps { (step_row(s)) } }
                    }
                }
            }
            section.card #events {
                h2 { "Events" }
                @if v.events.is_empty() { p.dim { "None sent." } }
                @else {
                    table.dense {
                        thead { tr { th { "Name" } th { "Sent" } th { "By" } th { "Taken" } th { "Payload" } } }
                        tbody {
                            @for e in &v.events {
                                @let payload = e.payload.to_string();
                                tr {
                                    td.mono { (e.name) }
                                    td { (at(Some(e.sent_at))) }
                                    td { @if let Some(b) = &e.sent_by { (b) } @else { span.dim { "—" } } }
                                    td { @if let Some(t) = e.consumed_at { "consumed " (at(Some(t))) } @else { span.st-waiting { "pending" } } }
                                    td.mono.sum title=(payload) { (cut(&payload, SUMMARY)) }
                                }
                            }
                        }
                    }
                }
                @if !r.state.is_final() && crate::web::role::can_act(st) {
                    p.sendhead.dim { "Send an event to this run:" }
                    (action(st, &format!("/runs/{}/signal", r.id.as_str()), "Send event", "", html! {
                        input name="name" placeholder="event name" required value=[waits_for.as_deref()];
                        " "
                        input name="payload" placeholder="JSON payload (optional)";
                        " "
                    }))
                }
            }
        }
    }
}

/// One recorded step; a wait that has not ended says until when.
fn step_row(s: &StepRecord) -> Markup {
    let summary = match (&s.error, &s.output) {
        (Some(e), _) => Some(e.clone()),
        (None, Some(o)) => Some(o.to_string()),
        (None, None) => None,
    };
    html! {
        tr {
            td.n { (s.seq) }
            td.mono { (s.name) }
            td { (s.kind.as_str()) }
            td { span class={ "st-" (s.status.as_str()) } { (s.status.as_str()) } }
            td { (at(Some(s.recorded_at))) }
            td.n { (s.attempt) }
            @match (s.status, &summary, s.wake_at) {
                (_, Some(text), _) => {
                    td.mono.sum.error[s.error.is_some()] title=(text) { (cut(text, SUMMARY)) }
                }
                (StepStatus::Waiting, None, Some(t)) if t >= crate::run::steps::far_future() => { td.dim { "until the event comes (no timeout)" } }
                (StepStatus::Waiting, None, Some(t)) => { td.dim { "until " (at(Some(t))) } }
                _ => { td.dim { "—" } }
            }
        }
    }
}

/// The end of the log (or of the output tail), followed while the run is not final.
fn log(v: &RunView) -> Markup {
    let r = &v.run;
    html! {
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
    }
}

/// Every field of the run.
fn fields(r: &Run) -> Markup {
    html! {
        section.card #fields data-live {
            h2 { "Fields" }
            table.kv {
                tr { th { "Tool" } td { a href={ "/runs?tool=" (encode(&r.tool)) } { (r.tool) } } }
                tr { th { "Session" } td { a href={ "/sessions/" (encode(&r.session_id)) } { (r.session_id) } } }
                tr { th { "Attempt" } td { (r.attempt) " of " (r.max_attempts) } }
                @if r.snoozes > 0 { tr { th { "Snoozes" } td { (r.snoozes) } } }
                tr { th { "Priority" } td { (r.priority) } }
                tr { th { "Created" } td { (at(Some(r.created_at))) } }
                tr { th { "Run at" } td {
                    @if r.waiting.as_ref().is_some_and(|w| w.kind == WaitKind::Parents) { span.dim { "when its parents complete" } }
                    @else { (at(Some(r.run_at))) }
                } }
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
    }
}

/// Its result, its errors per attempt and stages (when it has them), and its messages.
fn more(v: &RunView) -> Markup {
    let r = &v.run;
    html! {
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
    }
}

/// Whether the run is linked to anything (else the page has no Links section).
fn has_links(l: &RunLinks) -> bool {
    l.batch_id.is_some()
        || l.parent_run_id.is_some()
        || !l.parents.is_empty()
        || !l.dependents.is_empty()
        || !l.children.is_empty()
}

/// How an edge reads: `after`, `after any`, `callback`.
fn edge(mode: DepMode) -> &'static str {
    match mode {
        DepMode::All => "after (must complete)",
        DepMode::Any => "after any (any end)",
        DepMode::Batch => "callback of the batch",
    }
}

/// A linked id as a link: a batch's page for a callback's parent, else the run's page.
fn linked(id: &str, mode: DepMode) -> Markup {
    if mode == DepMode::Batch {
        html! { a.mono href={ "/batches/" (encode(id)) } { (id) } }
    } else {
        html! { a.mono href={ "/runs/" (encode(id)) } title=(id) { (short(id)) } }
    }
}

/// A linked run's state: the recorded end, else its current state, else a dash.
fn linked_state(v: &RunView, id: &str, resolved: Option<&str>) -> Markup {
    match resolved.or(v.linked_states.get(id).map(String::as_str)) {
        Some(s) => state(s),
        None => html! { span.dim { "—" } },
    }
}

/// A table of edges: the other end, how, and its state.
fn edges(v: &RunView, rows: &[Dependency], parents: bool) -> Markup {
    html! {
        table.dense.edges {
            thead { tr { th { (if parents { "Parent" } else { "Dependent" }) } th { "Kind" } th { (if parents { "Resolved" } else { "State" }) } } }
            tbody {
                @for d in rows.iter().take(LINKS_SHOWN) {
                    @let other = if parents { &d.parent } else { &d.child };
                    tr data-id=(other) {
                        td { (linked(other, d.mode)) }
                        td { (edge(d.mode)) }
                        td {
                            @if parents {
                                @match &d.resolved {
                                    Some(s) => { (state(s)) }
                                    None => { span.st-waiting { "not ended" } " " (linked_state(v, other, None)) }
                                }
                            } @else {
                                (linked_state(v, other, None))
                            }
                        }
                    }
                }
            }
        }
        @if rows.len() > LINKS_SHOWN { p.dim { "and " (rows.len() - LINKS_SHOWN) " more" } }
    }
}

/// Its batch, parents, dependents, the run that spawned it and the runs it spawned (an
/// empty live part while it has none: a child it spawns shows without a reload).
fn links(v: &RunView) -> Markup {
    html! { div #links data-live { @if has_links(&v.links) { (link_card(v)) } } }
}

/// The Links card.
fn link_card(v: &RunView) -> Markup {
    let l = &v.links;
    html! {
        section.card {
            h2 { "Links" }
            table.kv {
                @if let Some(b) = &l.batch_id {
                    tr { th { "Batch" } td { a.mono #batch href={ "/batches/" (encode(b)) } { (b) } } }
                }
                @if let Some(p) = &l.parent_run_id {
                    tr { th { "Spawned by" } td { a.mono #spawner href={ "/runs/" (encode(p)) } { (p) } } }
                }
            }
            div.linkgrid {
                @if !l.parents.is_empty() {
                    div #parents { h3 { "Waits for (" (l.parents.len()) ")" } (edges(v, &l.parents, true)) }
                }
                @if !l.dependents.is_empty() {
                    div #dependents { h3 { "Waited for by (" (l.dependents.len()) ")" } (edges(v, &l.dependents, false)) }
                }
                @if !l.children.is_empty() {
                    div #children {
                        h3 { "Spawned (" (l.children.len()) ")" }
                        table.dense.edges {
                            thead { tr { th { "Run" } th { "Tool" } th { "State" } } }
                            tbody {
                                @for c in l.children.iter().take(LINKS_SHOWN) {
                                    tr data-id=(c.id) {
                                        td { a.mono href={ "/runs/" (encode(&c.id)) } title=(c.id) { (short(&c.id)) } }
                                        td { (c.tool) }
                                        td { (state(&c.state)) }
                                    }
                                }
                            }
                        }
                        @if l.children.len() > LINKS_SHOWN { p.dim { "and " (l.children.len() - LINKS_SHOWN) " more" } }
                    }
                }
            }
        }
    }
}
