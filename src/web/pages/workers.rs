//! `/workers`: every worker process with its liveness, heartbeat age, and the runs it holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde::Serialize;

use crate::error::Result;
use crate::run::{RunFilter, RunState};
use crate::status::{Liveness, WorkerStatus};
use crate::web::AppState;
use crate::web::layout::{self, respond, shell};

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
pub async fn page(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let v = match read(&st).await {
        Ok(v) => v,
        Err(e) => return layout::error(&st, &headers, &e),
    };
    respond(&headers, &v, |v| {
        let main = html! {
            section.card #workers data-live {
                h2 { "Workers" }
                @if v.workers.is_empty() { p.dim { "No worker has run on this database." } }
                @else { (table(&v.workers)) }
            }
        };
        shell(&st, "Workers", "workers", main)
    })
}

/// The workers (at most 100) with the running runs each holds.
async fn read(st: &AppState) -> Result<Workers> {
    let report = crate::status::status(&st.client, true).await?;
    let by_owner = running_by_owner(st).await?;
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
    Ok(Workers { workers })
}

/// How many running runs each lease owner holds (of the first 1000 running runs).
async fn running_by_owner(st: &AppState) -> Result<BTreeMap<String, usize>> {
    let running = RunFilter {
        states: vec![RunState::Running],
        ..RunFilter::default()
    };
    let mut by_owner: BTreeMap<String, usize> = BTreeMap::new();
    for r in &st.client.runs_page(&running, None, 1000).await? {
        if let Some(o) = &r.lease_owner {
            *by_owner.entry(o.clone()).or_default() += 1;
        }
    }
    Ok(by_owner)
}

/// The workers table.
fn table(workers: &[WorkerView]) -> Markup {
    html! {
        table.dense {
            thead { tr { th { "Worker" } th { "Liveness" } th { "Host" } th.n { "Pid" } th { "Heartbeat" } th.n { "Running" } th.n { "Concurrency" } th.n { "Busy retries" } th { "Version" } th { "Tools" } } }
            tbody { @for w in workers {
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

/// A liveness badge, coloured as the run states are.
fn liveness(l: Liveness) -> Markup {
    let class = match l {
        Liveness::Alive => "s-completed",
        Liveness::Stale => "s-awaiting_approval",
        Liveness::Dead => "s-failed",
        Liveness::Stopped => "s-cancelled",
    };
    html! { span class={ "state " (class) } { (l.as_str()) } }
}
