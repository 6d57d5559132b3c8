//! The worker: claims runnable runs up to its free slots (`claim`), executes each in its own
//! task (`start`, `execute`), heartbeats leases, flushes live progress (`lease`), and records
//! each attempt's end in batched, fenced transactions (`finisher`). What its tasks share is in
//! `shared`. Shutdown is a parameter ([`CancellationToken`]), never a global.

mod approval;
mod claim;
mod due;
mod execute;
pub mod finish;
mod finisher;
pub mod health;
pub mod identity;
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
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::core::Core;
use crate::error::Result;
use crate::ids::WorkerId;
use crate::run::Run;
use crate::store;
use crate::tool::ToolContext;
use crate::tool::sink::{RunSink, SinkLimits};
use claim::{claim, next_due, next_open, runnable};
use execute::{Executed, StopReason, StopSignal, execute};
use finish::{AttemptEnd, decide};
use finisher::finisher_loop;
use shared::{InFlight, Job, Shared};

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
        let core = sh.core.clone();
        let cfg = core.config().worker.clone();
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
        // Background ticks: one line each. Every loop is `sleep(interval)` + `tick(now)` and
        // returns when `background` fires.
        let ticks = vec![
            tokio::spawn(lease::lease_loop(sh.clone(), background.clone())),
            tokio::spawn(lease::flush_loop(sh.clone(), background.clone())),
            tokio::spawn(retention::retention_loop(sh.clone(), background.clone())),
            tokio::spawn(wal::wal_loop(sh.clone(), background.clone())),
            tokio::spawn(approval::approval_loop(sh.clone(), background.clone())),
            tokio::spawn(rescue::rescue_loop(sh.clone(), background.clone())),
            tokio::spawn(schedules::schedule_loop(sh.clone(), background.clone())),
            tokio::spawn(change_feed(sh.clone(), background.clone())),
        ];
        let mut failures = 0u32;
        loop {
            if sh.opts.drain {
                sh.check_stall();
            }
            if shutdown.is_cancelled() || sh.halt.is_cancelled() {
                break;
            }
            // The loop's liveness for `toolq status`, also when all slots are busy.
            *sh.last_poll.lock().unwrap_or_else(|e| e.into_inner()) = Some(core.now());
            let failing = sh.health().is_failing();
            if failing {
                // While writes fail, the finisher's retries are the probe: claiming more runs
                // whose ends cannot be recorded helps nobody. With nothing in flight, a claim
                // (at the backoff) is the probe.
                failures = failures.saturating_add(1);
            }
            let mut cursor = sh.gate.lock().await;
            let free = cfg.concurrency.saturating_sub(sh.flights().len());
            let mut claimed = 0;
            if free > 0 && (!failing || sh.flights().is_empty()) {
                match claim(&sh, free, cursor.clone()).await {
                    Ok(runs) => {
                        failures = 0;
                        claimed = runs.len();
                        // A committed claim shows that a Postgres server answers again. On
                        // SQLite a claim of no rows writes no page, so proves nothing about
                        // a full disk: only a claim that took runs counts there.
                        if claimed > 0 || core.is_postgres() {
                            sh.progressed();
                        }
                        if let Some(last) = runs.last() {
                            *cursor = Some(last.session_id.clone());
                        }
                        for run in runs {
                            start(&sh, run, jobs_tx.clone());
                        }
                    }
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        sh.store_failed("claiming runs", e);
                    }
                }
            }
            if sh.opts.drain && claimed == 0 && sh.flights().is_empty() {
                match runnable(&sh).await {
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(e) => sh.store_failed("looking for runnable runs", e),
                }
            }
            drop(cursor);
            if claimed > 0 && claimed == free {
                continue;
            }
            let backoff = health::claim_backoff(cfg.poll_interval, failures);
            // With a slot free, wake when the next delayed run of ours is due, not at the
            // next poll. A commit (an earlier run enqueued here or elsewhere) wakes the loop
            // through `wake`, and the next turn computes the deadline again.
            let nap = if free > claimed {
                // A rate whose window is full: wake when it opens, not at the next poll.
                let next = match (next_due(&sh).await, next_open(&sh).await) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                due::nap(core.now(), backoff, next)
            } else {
                backoff
            };
            tokio::select! {
                _ = core.woken() => {}
                _ = sh.slot_freed.notified() => {}
                _ = tokio::time::sleep(nap) => {}
                _ = shutdown.cancelled() => {}
                _ = sh.halt.cancelled() => {}
            }
        }
        // Under the gate, so no finisher claim is half-way when claiming stops.
        let gate = sh.gate.lock().await;
        claiming.cancel();
        drop(gate);
        // Stopped on its own: the runs' ends could not be recorded anyway, hand them back now.
        let grace = if sh.halt.is_cancelled() {
            Duration::ZERO
        } else {
            cfg.shutdown_grace
        };
        drain_in_flight(&sh, grace).await;
        drop(jobs_tx);
        if let Err(e) = finisher.await {
            tracing::error!(error = %e, "finisher task failed");
        }
        background.cancel();
        for t in ticks {
            if let Err(e) = t.await {
                tracing::error!(error = %e, "background tick task failed");
            }
        }
        lease::deregister(&sh).await;
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

pub(super) fn start(sh: &Arc<Shared>, run: Run, jobs: mpsc::UnboundedSender<Job>) {
    let core = sh.core.clone();
    if approval::hold_for_approval(&core, &run, &jobs) {
        return;
    }
    let defaults = core.config().runs.clone();
    let sink = RunSink::new(SinkLimits {
        log_cap: defaults.log_cap_bytes,
        tail_chars: defaults.tail_chars,
    })
    .flush_on_operation(sh.flush_now.clone());
    let stop = StopSignal::default();
    let entry = core.registry().get(&run.tool);
    let (timeout, _) = crate::tool::time_limit::time_limit(
        run.timeout_ms,
        entry.and_then(|e| e.def.timeout),
        defaults.timeout,
    );
    let tool = entry.map(|e| e.tool.clone());
    let run = Arc::new(run);
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    sh.flights().insert(
        run.id.clone(),
        InFlight {
            run: run.clone(),
            sink: sink.clone(),
            stop: stop.clone(),
            ended: ended.clone(),
        },
    );
    let span = tracing::info_span!("run", run_id = %run.id, tool = %run.tool, session = %run.session_id, attempt = run.attempt);
    let grace = core.config().worker.cancel_grace;
    tokio::spawn(
        async move {
            tracing::debug!("started");
            let executed = match tool {
                None => Executed::End(AttemptEnd::Returned(crate::tool::ToolOutcome::Internal(format!(
                    "tool {:?} is not registered in this worker",
                    run.tool
                )))),
                Some(tool) => {
                    let ctx = ToolContext {
                        run_id: run.id.clone(),
                        session_id: run.session_id.clone(),
                        title: run.title.clone(),
                        args: run.args.clone(),
                        attempt: run.attempt,
                        sink: sink.clone(),
                        cancel: CancellationToken::new(),
                        stop: stop.clone(),
                        operation_id: run.operation_id.clone(),
                        host: Some(Arc::new(core.clone())),
                        clock: core.clock().clone(),
                    };
                    execute(tool, ctx, timeout, grace, stop).await
                }
            };
            // Stages reported after the last flush still belong in the history.
            lease::flush_operation(&core, &run, &sink).await;
            let job = match executed {
                Executed::End(end) => {
                    if let AttemptEnd::Returned(crate::tool::ToolOutcome::Internal(detail)) | AttemptEnd::Panicked(detail) = &end {
                        tracing::error!(internal_error = %detail, "attempt failed with an internal error");
                    }
                    let record = decide(&run, end, sink.final_snapshot(), &defaults, core.now(), rand::random::<f64>());
                    Job::End(Box::new(core.finish_record(&run.tool, record)))
                }
                Executed::HandBack => Job::Release(store::Release {
                    id: run.id.clone(),
                    attempt: run.attempt,
                    token: run.lease_token.clone().unwrap_or_default(),
                }),
            };
            ended.store(true, Ordering::Release);
            if jobs.send(job).is_err() {
                tracing::error!("finisher is gone; the run's lease will expire and it will be rescued");
            }
        }
        .instrument(span),
    );
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
