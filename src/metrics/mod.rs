//! Prometheus metrics of a worker: counters it updates as it claims and records runs, and
//! gauges read from the database at scrape time. [`render`] writes the OpenMetrics text;
//! [`serve::MetricsServer`] answers `GET /metrics` over HTTP.

pub mod serve;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::run::RunState;
use crate::store;

type Labels = Vec<(&'static str, String)>;

/// Counters a worker keeps (cheap to clone: all clones share the values).
#[derive(Debug, Clone)]
pub struct Metrics {
    claims: Counter,
    finishes: Family<Labels, Counter>,
    claim_latency: Histogram,
    wal_backlog: Gauge,
    wal_pinned: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            claims: Counter::default(),
            finishes: Family::default(),
            // 0.5 ms .. ~8 s
            claim_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 15)),
            wal_backlog: Gauge::default(),
            wal_pinned: Gauge::default(),
        }
    }
}

impl Metrics {
    /// A claim transaction took `took` and claimed `n` runs.
    pub fn claimed(&self, took: Duration, n: usize) {
        self.claim_latency.observe(took.as_secs_f64());
        self.claims.inc_by(n as u64);
    }

    /// An attempt ended with `outcome` (completed, failed, cancelled, retried,
    /// awaiting_approval, handed_back, fenced_out).
    pub fn finished(&self, outcome: &str) {
        self.finishes
            .get_or_create(&vec![("outcome", outcome.to_string())])
            .inc();
    }

    /// The worker's latest checkpoint left `backlog` frames in the WAL; `pinned` when a
    /// long-lived reader seems to hold it.
    pub fn wal_checked(&self, backlog: i64, pinned: bool) {
        self.wal_backlog.set(backlog);
        self.wal_pinned.set(pinned as i64);
    }

    /// Runs claimed so far.
    pub fn claims(&self) -> u64 {
        self.claims.get()
    }

    /// Attempt ends recorded so far with this outcome.
    pub fn finishes(&self, outcome: &str) -> u64 {
        self.finishes
            .get(&vec![("outcome", outcome.to_string())])
            .map_or(0, |c| c.get())
    }
}

/// Log lines this process could not write (stderr full, closed or broken), process-wide
/// because the log writer is: the subscriber is installed once per process.
static LOG_WRITE_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Counts one log line that could not be written and was dropped.
pub fn log_write_failed() {
    LOG_WRITE_ERRORS.fetch_add(1, Ordering::Relaxed);
}

/// Log lines this process dropped because writing them failed.
pub fn log_write_errors() -> u64 {
    LOG_WRITE_ERRORS.load(Ordering::Relaxed)
}

/// A counter holding a total the store keeps itself.
fn counter(total: u64) -> Counter<u64> {
    let c = Counter::default();
    c.inc_by(total);
    c
}

/// A counter of seconds the store keeps itself.
fn seconds(total: f64) -> Counter<f64, AtomicU64> {
    let c = Counter::default();
    c.inc_by(total);
    c
}

/// The metrics as OpenMetrics text: the worker's counters plus, read from the database now,
/// runs by state, queue depth by session and tool, schedule lag and WAL bytes. The families
/// appear in the order they are registered in.
pub async fn render(core: &Core, metrics: &Metrics) -> Result<String> {
    let now = core.now();
    let g = core.engine().gauges_read(now).await?;
    let mut reg = Registry::default();
    reg.register(
        "toolq_runs",
        "Runs in the database by state",
        runs_gauge(&g.by_state),
    );
    reg.register(
        "toolq_claims",
        "Runs claimed by this worker (rate() gives claims per second)",
        metrics.claims.clone(),
    );
    reg.register(
        "toolq_finishes",
        "Attempt ends recorded by this worker, by outcome",
        metrics.finishes.clone(),
    );
    register_writes(&mut reg, core);
    reg.register(
        "toolq_claim_latency_seconds",
        "Duration of one claim transaction",
        metrics.claim_latency.clone(),
    );
    register_backlog(&mut reg, core, &g.queue_depth, g.schedule_lag_secs);
    register_wal_checks(&mut reg, metrics);
    let mut out = String::new();
    encode(&mut out, &reg).map_err(|e| Error::io("encode metrics", std::io::Error::other(e)))?;
    Ok(out)
}

/// This process's writes: busy retries, dropped log lines, write transactions and the time
/// its writer spent in statements and commits.
fn register_writes(reg: &mut Registry, core: &Core) {
    reg.register(
        "toolq_busy_retries",
        "Write transactions this process retried because the database was busy",
        counter(core.engine().busy_retries()),
    );
    reg.register(
        "toolq_log_write_errors",
        "Log lines this process dropped because stderr could not be written",
        counter(log_write_errors()),
    );
    let stats = core.engine().write_stats();
    reg.register(
        "toolq_write_transactions",
        "Write transactions this process committed",
        counter(stats.transactions),
    );
    reg.register(
        "toolq_write_statement_seconds",
        "Time this process's writer spent in statements (BEGIN to the last statement)",
        seconds(stats.statement_secs),
    );
    reg.register(
        "toolq_write_commit_seconds",
        "Time this process's writer spent committing (WAL writes, fallback checkpoints)",
        seconds(stats.commit_secs),
    );
}

/// What waits: queue depth, schedule lag and the bytes of the WAL.
fn register_backlog(reg: &mut Registry, core: &Core, depth: &[store::QueueDepth], lag: f64) {
    reg.register(
        "toolq_queue_depth",
        "Unfinished runs by session, tool and state",
        queue_gauge(depth),
    );
    let lag_g = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    lag_g.set(lag);
    reg.register(
        "toolq_schedule_lag_seconds",
        "Now minus the oldest due next_trigger_at of an enabled schedule (0 when none is due)",
        lag_g,
    );
    let wal = Gauge::<i64>::default();
    wal.set(core.engine().wal_bytes() as i64);
    reg.register("toolq_wal_bytes", "Bytes of the database's -wal file", wal);
}

/// What the worker's latest WAL checkpoint found.
fn register_wal_checks(reg: &mut Registry, metrics: &Metrics) {
    reg.register(
        "toolq_wal_backlog_frames",
        "WAL frames the worker's latest checkpoint could not copy into the database",
        metrics.wal_backlog.clone(),
    );
    reg.register(
        "toolq_wal_pinned",
        "1 while a long-lived reader keeps the WAL from being checkpointed",
        metrics.wal_pinned.clone(),
    );
}

/// `toolq_runs{state}`: every state, 0 when absent.
fn runs_gauge(counts: &[(String, i64)]) -> Family<Labels, Gauge> {
    let runs = Family::<Labels, Gauge>::default();
    for s in RunState::ALL {
        let n = counts
            .iter()
            .find(|(k, _)| k == s.as_str())
            .map_or(0, |(_, n)| *n);
        runs.get_or_create(&vec![("state", s.as_str().to_string())])
            .set(n);
    }
    runs
}

/// `toolq_queue_depth{session,tool,state}` from the `queue_depth` view.
fn queue_gauge(depth: &[store::QueueDepth]) -> Family<Labels, Gauge> {
    let queue = Family::<Labels, Gauge>::default();
    for d in depth {
        for (state, n) in [
            ("queued", d.queued),
            ("awaiting_approval", d.awaiting_approval),
            ("running", d.running),
        ] {
            queue
                .get_or_create(&vec![
                    ("session", d.session_id.clone()),
                    ("tool", d.tool.clone()),
                    ("state", state.to_string()),
                ])
                .set(n);
        }
    }
    queue
}
