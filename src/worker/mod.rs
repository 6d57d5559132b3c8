//! The worker: claims runnable runs up to its free slots (`claim_loop`, `claim`), executes
//! each in its own task (`attempt`, `execute`), heartbeats leases, flushes live progress
//! (`lease`), and records each attempt's end in batched, fenced transactions (`finisher`).
//! What its tasks share is in `shared`. Shutdown is a parameter ([`CancellationToken`]),
//! never a global.

mod approval;
mod attempt;
mod claim;
mod claim_loop;
mod due;
mod execute;
pub mod finish;
mod finisher;
pub mod health;
pub mod identity;
mod journal;
mod lease;
pub mod rescue;
mod retention;
mod schedules;
mod shared;
mod wal;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::core::Core;
use crate::error::Result;
use crate::ids::WorkerId;
use crate::store;
use claim_loop::claim_loop;
use execute::StopReason;
use finisher::finisher_loop;
use shared::{Job, Shared};

/// Options of one worker.
#[derive(Debug, Clone, Default)]
pub struct WorkerOptions {
    /// Exit once nothing is runnable and nothing of ours is running.
    pub drain: bool,
}

/// What a worker did, returned when it stops.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerReport {
    /// Attempts claimed.
    pub claimed: u64,
    /// Attempts whose end was recorded.
    pub recorded: u64,
    /// Attempts whose end was dropped because the lease was lost.
    pub fenced_out: u64,
    /// Runs handed back on shutdown.
    pub handed_back: u64,
}

/// A worker bound to a [`Core`] (a client's: [`crate::Client::worker`]). Start it with
/// [`Worker::run`].
pub struct Worker {
    shared: Arc<Shared>,
}

impl Worker {
    /// A worker over `core`'s database and tools (see also [`crate::Client::worker`]).
    pub fn new(core: &Core, opts: WorkerOptions) -> Worker {
        Worker {
            shared: Arc::new(Shared::new(core, opts)),
        }
    }

    /// This worker's id (the `lease_owner` of its runs).
    pub fn id(&self) -> &WorkerId {
        &self.shared.id
    }

    /// This worker's counters (claims, attempt ends, claim latency), for metrics and progress.
    pub fn metrics(&self) -> Arc<crate::metrics::Metrics> {
        self.shared.metrics.clone()
    }

    /// Runs until `shutdown` fires (or, with `drain`, until nothing is left): then stops
    /// claiming, lets in-flight runs finish within the shutdown grace, hands the rest back.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport> {
        let sh = self.shared.clone();
        lease::register(&sh).await?;
        rescue::rescue_once(&sh).await; // instant rescue of runs left by a dead predecessor
        let (jobs_tx, jobs_rx) = mpsc::unbounded_channel::<Job>();
        let claiming = CancellationToken::new();
        let finisher = tokio::spawn(finisher_loop(
            sh.clone(),
            jobs_rx,
            jobs_tx.downgrade(),
            claiming.clone(),
            shutdown.clone(),
        ));
        let background = CancellationToken::new();
        let ticks = spawn_ticks(&sh, &background);
        claim_loop(&sh, &jobs_tx, &shutdown).await;
        // Under the gate, so no finisher claim is half-way when claiming stops.
        let gate = sh.gate.lock().await;
        claiming.cancel();
        drop(gate);
        // Stopped on its own: the runs' ends could not be recorded anyway, hand them back now.
        let grace = if sh.halt.is_cancelled() {
            Duration::ZERO
        } else {
            sh.core.config().worker.shutdown_grace
        };
        drain_in_flight(&sh, grace).await;
        drop(jobs_tx);
        if let Err(e) = finisher.await {
            tracing::error!(error = %e, "finisher task failed");
        }
        stop_ticks(&background, ticks).await;
        lease::deregister(&sh).await;
        report(&sh)
    }
}

/// Background ticks: one line each. Every loop is `sleep(interval)` + `tick(now)` and
/// returns when `background` fires.
fn spawn_ticks(sh: &Arc<Shared>, background: &CancellationToken) -> Vec<JoinHandle<()>> {
    vec![
        tokio::spawn(lease::lease_loop(sh.clone(), background.clone())),
        tokio::spawn(lease::flush_loop(sh.clone(), background.clone())),
        tokio::spawn(retention::retention_loop(sh.clone(), background.clone())),
        tokio::spawn(wal::wal_loop(sh.clone(), background.clone())),
        tokio::spawn(approval::approval_loop(sh.clone(), background.clone())),
        tokio::spawn(rescue::rescue_loop(sh.clone(), background.clone())),
        tokio::spawn(schedules::schedule_loop(sh.clone(), background.clone())),
        tokio::spawn(change_feed(sh.clone(), background.clone())),
    ]
}

/// Stops the background ticks and waits for them.
async fn stop_ticks(background: &CancellationToken, ticks: Vec<JoinHandle<()>>) {
    background.cancel();
    for t in ticks {
        if let Err(e) = t.await {
            tracing::error!(error = %e, "background tick task failed");
        }
    }
}

/// What the worker did, or why it stopped on its own.
fn report(sh: &Shared) -> Result<WorkerReport> {
    if let Some(e) = sh.halted.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(e);
    }
    Ok(WorkerReport {
        claimed: sh.claimed.load(Ordering::Relaxed),
        recorded: sh.recorded.load(Ordering::Relaxed),
        fenced_out: sh.fenced_out.load(Ordering::Relaxed),
        handed_back: sh.handed_back.load(Ordering::Relaxed),
    })
}

/// Wakes the claim loop (and the schedule loop) whenever the engine's change feed reports a
/// commit (another process's enqueue or schedule change, or this one's).
async fn change_feed(sh: Arc<Shared>, stop: CancellationToken) {
    let shared = sh.clone();
    let wake: store::OnChange = Arc::new(move || {
        shared.core.wake_workers();
        shared.schedules_changed.notify_one();
    });
    sh.core.engine().change_feed(wake, stop).await;
}

/// Shutdown: wait for in-flight runs up to `grace`, then ask the rest to stop and hand back.
async fn drain_in_flight(sh: &Arc<Shared>, grace: Duration) {
    let deadline = tokio::time::Instant::now() + grace;
    let mut asked = false;
    loop {
        if sh.flights().is_empty() {
            return;
        }
        // Still looping (shutting down, not stuck): keeps `toolq status` from calling it stale.
        *sh.last_poll.lock().unwrap_or_else(|e| e.into_inner()) = Some(sh.core.now());
        if !asked && tokio::time::Instant::now() >= deadline {
            for f in sh.flights().values() {
                f.stop.stop(StopReason::Shutdown);
            }
            asked = true;
        }
        tokio::select! {
            _ = sh.slot_freed.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}
