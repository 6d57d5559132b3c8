//! `/`: counts by state, queue depth by session and tool, throughput and failures over the
//! last hour and day, busy retries, WAL size, workers by liveness, and what is paused.
//!
//! Counting a million finished runs takes longer than a page may, so the figures are
//! cached: a request older than [`FRESH`] starts one refresh in the background and is
//! answered from the cache meanwhile (only the very first request waits).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::Serialize;

use crate::client::Client;
use crate::error::Result;
use crate::status::Liveness;
use crate::store::QueueDepth;
use crate::web::AppState;
use crate::web::layout::{self, respond, shell};
use crate::web::view::{at, bytes, encode};

/// How long cached figures are served before a refresh starts. At a million runs a refresh
/// reads for about a second (the counts and the day's buckets), so a watched overview costs
/// at most a fifth of a core; the other pages are live to the second.
const FRESH: Duration = Duration::from_secs(5);

/// Finished runs in one bucket of the chart.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Bucket {
    /// The bucket's start.
    pub start: DateTime<Utc>,
    /// Runs completed in it.
    pub completed: i64,
    /// Runs failed in it.
    pub failed: i64,
    /// Runs cancelled in it.
    pub cancelled: i64,
}

/// Throughput over a window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Window {
    /// Bucket length in seconds.
    pub bucket_secs: i64,
    /// Oldest first.
    pub buckets: Vec<Bucket>,
    /// Runs finished in the window.
    pub finished: i64,
    /// Failed runs over finished runs (0 when none finished).
    pub failure_rate: f64,
}

/// Workers by liveness.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerCounts {
    /// Heartbeating and polling.
    pub alive: usize,
    /// Alive, but the claim loop is not polling.
    pub stale: usize,
    /// Gone without a clean exit.
    pub dead: usize,
}

/// The overview's data (also its JSON).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Overview {
    /// When the figures were read.
    pub read_at: DateTime<Utc>,
    /// Runs per state (every state, zeros included).
    pub by_state: BTreeMap<String, i64>,
    /// Unfinished runs by session and tool.
    pub queue_depth: Vec<QueueDepth>,
    /// The last hour in minutes.
    pub last_hour: Window,
    /// The last day in hours.
    pub last_day: Window,
    /// Write transactions retried over the live workers (SQLite: `SQLITE_BUSY`; Postgres: a
    /// serialization failure or deadlock).
    pub busy_retries: i64,
    /// Bytes of the write-ahead log (0 on Postgres, whose server keeps its own).
    pub wal_bytes: u64,
    /// The engine: `sqlite` or `postgres`.
    pub engine: &'static str,
    /// Workers by liveness.
    pub workers: WorkerCounts,
    /// What is paused.
    pub paused: Vec<crate::flow::Pause>,
}

/// The cached overview and whether a refresh is under way.
#[derive(Default)]
pub struct Cache {
    slot: tokio::sync::RwLock<Option<(Instant, Arc<Overview>)>>,
    refreshing: AtomicBool,
    /// Held while the figures are read: one reading at a time (a first visitor waits for
    /// the reading started at start-up instead of starting a second one).
    reading: tokio::sync::Mutex<()>,
}

/// Reads every figure (one pass; several reads).
pub async fn read(client: &Client) -> Result<Overview> {
    let now = client.now();
    let gauges = client.engine().gauges_read(now).await?;
    let mut by_state: BTreeMap<String, i64> = crate::run::RunState::ALL
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
    by_state.extend(gauges.by_state);
    let status = crate::status::status(client, false).await?;
    let count = |l: Liveness| status.workers.iter().filter(|w| w.liveness == l).count();
    Ok(Overview {
        read_at: now,
        by_state,
        queue_depth: gauges.queue_depth,
        last_hour: window(client, now, 60, 60).await?,
        last_day: window(client, now, 3600, 24).await?,
        busy_retries: status.busy_retries,
        wal_bytes: client.engine().wal_bytes(),
        engine: if client.is_postgres() {
            "postgres"
        } else {
            "sqlite"
        },
        workers: WorkerCounts {
            alive: count(Liveness::Alive),
            stale: count(Liveness::Stale),
            dead: count(Liveness::Dead),
        },
        paused: status.paused,
    })
}

async fn window(client: &Client, now: DateTime<Utc>, secs: i64, n: i64) -> Result<Window> {
    // Whole buckets, the last one ending at the current bucket's end.
    let end = DateTime::from_timestamp(now.timestamp() / secs * secs + secs, 0).unwrap_or(now);
    let since = end - chrono::Duration::seconds(secs * n);
    let mut buckets: Vec<Bucket> = (0..n)
        .map(|i| Bucket {
            start: since + chrono::Duration::seconds(secs * i),
            ..Bucket::default()
        })
        .collect();
    for row in client.finished_buckets(since, secs).await? {
        let Some(b) = usize::try_from(row.bucket)
            .ok()
            .and_then(|i| buckets.get_mut(i))
        else {
            continue;
        };
        match row.state.as_str() {
            "completed" => b.completed += row.count,
            "failed" => b.failed += row.count,
            _ => b.cancelled += row.count,
        }
    }
    let finished: i64 = buckets
        .iter()
        .map(|b| b.completed + b.failed + b.cancelled)
        .sum();
    let failed: i64 = buckets.iter().map(|b| b.failed).sum();
    Ok(Window {
        bucket_secs: secs,
        finished,
        failure_rate: if finished > 0 {
            failed as f64 / finished as f64
        } else {
            0.0
        },
        buckets,
    })
}

/// `GET /`.
pub async fn page(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    match cached(&st).await {
        Ok(o) => respond(&headers, &*o, |o| render(&st, o)),
        Err(e) => layout::error(&st, &headers, &e),
    }
}

/// Reads the figures once in the background, so the first visitor of a large database
/// does not wait for them (the server calls this when it starts).
pub fn warm(st: &Arc<AppState>) {
    if st.overview.refreshing.swap(true, Ordering::AcqRel) {
        return;
    }
    let st = st.clone();
    tokio::spawn(async move {
        refresh(&st).await;
        st.overview.refreshing.store(false, Ordering::Release);
    });
}

/// Reads the figures into the cache (one reading at a time).
async fn refresh(st: &AppState) {
    let _reading = st.overview.reading.lock().await;
    match read(&st.client).await {
        Ok(fresh) => *st.overview.slot.write().await = Some((Instant::now(), Arc::new(fresh))),
        Err(e) => tracing::warn!(error = %e, "dashboard overview read failed"),
    }
}

async fn cached(st: &Arc<AppState>) -> Result<Arc<Overview>> {
    let cache = &st.overview;
    if let Some((at, o)) = cache.slot.read().await.as_ref()
        && at.elapsed() < FRESH
    {
        return Ok(o.clone());
    }
    let stale = cache.slot.read().await.as_ref().map(|(_, o)| o.clone());
    match stale {
        Some(o) => {
            if !cache.refreshing.swap(true, Ordering::AcqRel) {
                let st = st.clone();
                tokio::spawn(async move {
                    match read(&st.client).await {
                        Ok(fresh) => {
                            *st.overview.slot.write().await =
                                Some((Instant::now(), Arc::new(fresh)))
                        }
                        Err(e) => tracing::warn!(error = %e, "dashboard overview refresh failed"),
                    }
                    st.overview.refreshing.store(false, Ordering::Release);
                });
            }
            Ok(o)
        }
        None => {
            // Wait for a reading under way (the start-up one), then use it.
            let _reading = cache.reading.lock().await;
            if let Some((_, o)) = cache.slot.read().await.as_ref() {
                return Ok(o.clone());
            }
            let o = Arc::new(read(&st.client).await?);
            *cache.slot.write().await = Some((Instant::now(), o.clone()));
            Ok(o)
        }
    }
}

/// The page: counts by state, the two windows, queue depth and health.
fn render(st: &AppState, o: &Overview) -> Markup {
    let main = html! {
        div #overview data-live {
            (tiles(o))
            div.grid2 {
                (window_card("Last hour", &o.last_hour, "%H:%M"))
                (window_card("Last day", &o.last_day, "%H:00"))
            }
            div.grid2 {
                (queue_depth(o))
                (health(o))
            }
        }
    };
    shell(st, "Overview", "overview", main)
}

/// One tile per state: its count, linking to its runs.
fn tiles(o: &Overview) -> Markup {
    let n = |s: &str| o.by_state.get(s).copied().unwrap_or(0);
    html! {
        section.tiles {
            @for s in ["queued", "awaiting_approval", "running", "completed", "failed", "cancelled"] {
                a.tile href={ "/runs?state=" (s) } {
                    span class={ "num s-" (s) } { (n(s)) }
                    span.label { (s.replace('_', " ")) }
                }
            }
        }
    }
}

/// A window's totals and its chart.
fn window_card(title: &str, w: &Window, label: &str) -> Markup {
    html! {
        section.card {
            h2 { (title) span.dim { " · " (w.finished) " finished, "
                (format!("{:.1}", w.failure_rate * 100.0)) "% failed" } }
            (chart(w, label))
        }
    }
}

/// Unfinished runs by session and tool.
fn queue_depth(o: &Overview) -> Markup {
    html! {
        section.card {
            h2 { "Queue depth" }
            @if o.queue_depth.is_empty() {
                p.dim { "Nothing queued, awaiting or running." }
            } @else {
                table.dense {
                    thead { tr { th { "Session" } th { "Tool" } th.n { "Queued" } th.n { "Awaiting" } th.n { "Running" } } }
                    tbody {
                        @for q in &o.queue_depth {
                            tr {
                                td { a href={ "/sessions/" (encode(&q.session_id)) } { (q.session_id) } }
                                td { a href={ "/runs?tool=" (encode(&q.tool)) } { (q.tool) } }
                                td.n { (q.queued) } td.n { (q.awaiting_approval) } td.n { (q.running) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Workers by liveness, busy retries, WAL size, what is paused, and when this was read.
fn health(o: &Overview) -> Markup {
    html! {
        section.card {
            h2 { "Health" }
            table.kv {
                tr { th { "Workers" } td {
                    a href="/workers" { (o.workers.alive) " alive" }
                    @if o.workers.stale > 0 { ", " span.warn { (o.workers.stale) " stale" } }
                    @if o.workers.dead > 0 { ", " span.bad { (o.workers.dead) " dead" } }
                } }
                tr { th { "Busy retries" } td { (o.busy_retries) } }
                // A Postgres server's WAL is its own, not a file of this database.
                @if o.engine != "postgres" {
                    tr { th { "WAL size" } td { (bytes(o.wal_bytes)) } }
                }
                tr { th { "Paused" } td {
                    @if o.paused.is_empty() { span.dim { "nothing" } }
                    @for p in &o.paused {
                        div { span.badge.paused { (p.scope.to_string()) } " since " (at(Some(p.since))) (p.by_and_reason()) }
                    }
                } }
                tr { th { "Read at" } td { (at(Some(o.read_at))) } }
            }
        }
    }
}

/// Stacked bars (completed, failed, cancelled) as inline SVG.
fn chart(w: &Window, label: &str) -> Markup {
    let (width, height) = (600.0_f64, 120.0_f64);
    let max = w
        .buckets
        .iter()
        .map(|b| b.completed + b.failed + b.cancelled)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let bw = width / w.buckets.len().max(1) as f64;
    let h = |n: i64| n as f64 / max * (height - 14.0);
    html! {
        svg.chart viewBox={ "0 0 " (width) " " (height) } preserveAspectRatio="none" role="img" {
            @for (i, b) in w.buckets.iter().enumerate() {
                @let x = i as f64 * bw;
                @let (hc, hf, hx) = (h(b.completed), h(b.failed), h(b.cancelled));
                g {
                    title { (b.start.format(label)) ": " (b.completed) " completed, " (b.failed) " failed, " (b.cancelled) " cancelled" }
                    rect.c x=(x) y=(height - hc) width=(bw * 0.85) height=(hc) {}
                    rect.f x=(x) y=(height - hc - hf) width=(bw * 0.85) height=(hf) {}
                    rect.x x=(x) y=(height - hc - hf - hx) width=(bw * 0.85) height=(hx) {}
                }
            }
            text x="2" y="10" { "max " (max as i64) }
        }
        div.legend {
            span.k.c {} "completed " span.k.f {} "failed " span.k.x {} "cancelled"
            @if let (Some(a), Some(b)) = (w.buckets.first(), w.buckets.last()) {
                span.dim.right { (a.start.format(label)) " – " (b.start.format(label)) " UTC" }
            }
        }
    }
}
