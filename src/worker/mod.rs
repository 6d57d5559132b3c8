//! The worker: claims runnable runs up to its free slots, executes each in its own task,
//! heartbeats leases, flushes live progress, and records each attempt's end in batched,
//! fenced transactions. Shutdown is a parameter ([`CancellationToken`]), never a global.

mod approval;
mod due;
mod execute;
pub mod finish;
pub mod health;
pub mod identity;
mod lease;
pub mod rescue;
mod retention;
pub(crate) mod schedules;
mod wakeup;
mod wal;
#[cfg(target_os = "linux")]
mod wal_watch;
#[cfg(not(target_os = "linux"))]
#[path = "wal_watch_polling.rs"]
mod wal_watch;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, Fault, Result, StoreError};
use crate::ids::WorkerId;
use crate::run::Run;
use crate::store::{self, finish::FinishRecord};
use crate::tool::ToolContext;
use crate::tool::sink::{RunSink, SinkLimits};
use execute::{Executed, StopReason, StopSignal, execute};
use finish::{AttemptEnd, decide};

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

struct InFlight {
    run: Arc<Run>,
    sink: RunSink,
    stop: StopSignal,
    /// Set before the attempt's end goes to the finisher. From then on a heartbeat that no
    /// longer finds the run running may be looking at this worker's own committed end, and
    /// the finisher's fence reports a lost lease itself.
    ended: Arc<std::sync::atomic::AtomicBool>,
}

enum Job {
    Finish(Box<FinishRecord>),
    Release {
        id: String,
        attempt: i64,
        token: String,
    },
}

impl Job {
    fn id(&self) -> &str {
        match self {
            Job::Finish(r) => &r.id,
            Job::Release { id, .. } => id,
        }
    }
}

pub(crate) struct Shared {
    client: Client,
    id: WorkerId,
    opts: WorkerOptions,
    /// The registered tools' names, sorted: this worker claims runs of these only.
    tools: Arc<[String]>,
    in_flight: Mutex<HashMap<String, InFlight>>,
    slot_freed: Notify,
    /// A commit was seen (any process's): the schedule tick looks again for an earlier trigger.
    schedules_changed: Notify,
    /// An attempt set its operation id: the flush loop stores it now.
    flush_now: Arc<Notify>,
    /// Held while free slots are counted, claimed and started, so the claim loop and the
    /// finisher (which claims replacements in its own transaction) never overfill the slots.
    /// Holds the round-robin session cursor.
    gate: tokio::sync::Mutex<Option<String>>,
    last_poll: Mutex<Option<chrono::DateTime<chrono::Utc>>>,
    claimed: AtomicU64,
    recorded: AtomicU64,
    fenced_out: AtomicU64,
    handed_back: AtomicU64,
    metrics: Arc<crate::metrics::Metrics>,
    /// Whether writes currently fail with a storage error (see [`health`]).
    health: Mutex<health::Health>,
    /// Fired when the worker must stop because of `halted` (a damaged file, a stalled drain).
    halt: CancellationToken,
    /// Why the worker stopped on its own, returned by [`Worker::run`].
    halted: Mutex<Option<Error>>,
}

impl Shared {
    fn flights(&self) -> std::sync::MutexGuard<'_, HashMap<String, InFlight>> {
        // Entries are inserted and removed whole; a panic elsewhere cannot leave one half-made.
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn health(&self) -> std::sync::MutexGuard<'_, health::Health> {
        // Every method leaves the state whole.
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the worker with `e` (the first reason wins).
    fn stop_with(&self, e: Error) {
        let mut halted = self.halted.lock().unwrap_or_else(|e| e.into_inner());
        if halted.is_none() {
            *halted = Some(e);
        }
        self.halt.cancel();
    }

    /// Handles a failed database call of `what`: a damaged file stops the worker; a storage
    /// error (disk full, I/O) logs once when writes start failing, and the loops back off;
    /// anything else is logged, and the next tick tries again.
    pub(crate) fn store_failed(&self, what: &str, e: Error) {
        let fault = match &e {
            Error::Store(s) => s.fault(),
            _ => Fault::Other,
        };
        match fault {
            Fault::Damaged => {
                tracing::error!(error = %e, "{what} failed on a damaged database; stopping");
                self.stop_with(e);
            }
            Fault::Storage => {
                let change = self.health().failed(self.client.now(), &e.to_string());
                if change.is_some() {
                    tracing::error!(error = %e,
                        "database writes are failing ({what}); backing off, and logging again once they succeed");
                } else {
                    tracing::debug!(error = %e, "{what} failed; still backing off");
                }
            }
            Fault::Other => tracing::error!(error = %e, "{what} failed; will retry"),
        }
    }

    /// A write made progress (claimed runs, recorded ends, rescued runs): clears a failing
    /// state, with one line.
    pub(crate) fn progressed(&self) {
        if let Some(health::Change::Cleared(after)) = self.health().progressed(self.client.now()) {
            tracing::info!(
                failed_for_secs = after.as_secs(),
                "database writes succeed again"
            );
        }
    }

    /// With `--drain`: gives up once writes have failed for `worker.stall_timeout`.
    fn check_stall(&self) {
        let timeout = self.client.config().worker.stall_timeout;
        let stalled = self
            .health()
            .stalled(self.client.now(), timeout)
            .map(|(d, last)| (d.as_secs(), last.to_string()));
        if let Some((secs, last)) = stalled {
            self.stop_with(Error::Store(StoreError::Stalled {
                path: self.client.store().path().display().to_string(),
                secs,
                last,
            }));
        }
    }
}

/// A worker bound to a [`Client`]. Start it with [`Worker::run`].
pub struct Worker {
    shared: Arc<Shared>,
}

impl Client {
    /// A worker over this client's database and tools.
    pub fn worker(&self, opts: WorkerOptions) -> Worker {
        Worker {
            shared: Arc::new(Shared {
                client: self.clone(),
                id: WorkerId::generate(),
                opts,
                tools: self.registry().names().into(),
                in_flight: Mutex::new(HashMap::new()),
                slot_freed: Notify::new(),
                schedules_changed: Notify::new(),
                flush_now: Arc::new(Notify::new()),
                gate: tokio::sync::Mutex::new(None),
                last_poll: Mutex::new(None),
                claimed: AtomicU64::new(0),
                recorded: AtomicU64::new(0),
                fenced_out: AtomicU64::new(0),
                handed_back: AtomicU64::new(0),
                metrics: Arc::default(),
                health: Mutex::default(),
                halt: CancellationToken::new(),
                halted: Mutex::new(None),
            }),
        }
    }
}

impl Worker {
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
        let client = sh.client.clone();
        let cfg = client.config().worker.clone();
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
            tokio::spawn(wakeup::wake_loop(sh.clone(), background.clone())),
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
            *sh.last_poll.lock().unwrap_or_else(|e| e.into_inner()) = Some(client.now());
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
                        if claimed > 0 {
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
                        sh.store_failed("claim", e);
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
            let backoff = cfg.poll_interval * 2u32.saturating_pow(failures.min(5));
            // With a slot free, wake when the next delayed run of ours is due, not at the
            // next poll. A commit (an earlier run enqueued here or elsewhere) wakes the loop
            // through `wake`, and the next turn computes the deadline again.
            let nap = if free > claimed {
                due::nap(client.now(), backoff, next_due(&sh).await)
            } else {
                backoff
            };
            tokio::select! {
                _ = client.inner.wake.notified() => {}
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

/// Whether a run of this worker's tools is due, or waits for a retry (a drain waits for it).
/// Runs of tools it lacks are left for a worker that has them.
async fn runnable(sh: &Shared) -> Result<bool> {
    let now = sh.client.now();
    let tools = sh.tools.clone();
    let runnable = sh
        .client
        .store()
        .read_async(move |c| store::due::has_work_for(c, now, &tools))
        .await?;
    Ok(runnable)
}

/// When the next delayed run of this worker's tools is due; on a failed read, none (the
/// poll remains).
async fn next_due(sh: &Shared) -> Option<chrono::DateTime<chrono::Utc>> {
    let now = sh.client.now();
    let tools = sh.tools.clone();
    match sh
        .client
        .store()
        .read_async(move |c| store::due::next_due(c, now, &tools))
        .await
    {
        Ok(at) => at,
        Err(e) => {
            tracing::warn!(error = %e, "could not read the next due run; polling");
            None
        }
    }
}

/// What a claim needs, owned so it can move into a blocking write.
struct ClaimArgs {
    worker: String,
    lease: chrono::Duration,
    per_session: i64,
    max: usize,
    cursor: Option<String>,
    tools: Arc<[String]>,
}

impl ClaimArgs {
    fn new(sh: &Shared, max: usize, cursor: Option<String>) -> Self {
        let cfg = &sh.client.config().worker;
        Self {
            worker: sh.id.to_string(),
            lease: chrono::Duration::from_std(cfg.lease).unwrap_or(chrono::Duration::seconds(30)),
            per_session: cfg.per_session,
            max,
            cursor,
            tools: sh.tools.clone(),
        }
    }

    /// The store's claim parameters at `now` (a claim of 0 runs claims nothing).
    fn params(&self, now: chrono::DateTime<chrono::Utc>) -> store::claim::ClaimParams<'_> {
        store::claim::ClaimParams {
            worker: &self.worker,
            now,
            lease_until: now + self.lease,
            max: self.max,
            per_session: self.per_session,
            after_session: self.cursor.as_deref(),
            tools: &self.tools,
        }
    }
}

/// Books claimed runs: counters and the last-poll time of the workers row.
fn claimed(
    sh: &Shared,
    runs: &[Run],
    now: chrono::DateTime<chrono::Utc>,
    took: std::time::Duration,
) {
    *sh.last_poll.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
    sh.claimed.fetch_add(runs.len() as u64, Ordering::Relaxed);
    sh.metrics.claimed(took, runs.len());
}

async fn claim(sh: &Arc<Shared>, free: usize, cursor: Option<String>) -> Result<Vec<Run>> {
    let args = ClaimArgs::new(sh, free, cursor);
    let now = sh.client.now();
    let started = std::time::Instant::now();
    let runs = sh
        .client
        .store()
        .write_async(move |tx| store::claim::claim(tx, &args.params(now)))
        .await?;
    claimed(sh, &runs, now, started.elapsed());
    Ok(runs)
}

fn start(sh: &Arc<Shared>, run: Run, jobs: mpsc::UnboundedSender<Job>) {
    let client = sh.client.clone();
    if approval::hold_for_approval(&client, &run, &jobs) {
        return;
    }
    let defaults = client.config().runs.clone();
    let sink = RunSink::new(SinkLimits {
        log_cap: defaults.log_cap_bytes,
        tail_chars: defaults.tail_chars,
    })
    .flush_on_operation(sh.flush_now.clone());
    let stop = StopSignal::default();
    let entry = client.registry().get(&run.tool);
    let timeout = run
        .timeout_ms
        .map(|ms| Duration::from_millis(ms as u64))
        .or_else(|| entry.and_then(|e| e.def.timeout))
        .unwrap_or(defaults.timeout);
    let tool = entry.map(|e| e.tool.clone());
    let run = Arc::new(run);
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    sh.flights().insert(
        run.id.to_string(),
        InFlight {
            run: run.clone(),
            sink: sink.clone(),
            stop: stop.clone(),
            ended: ended.clone(),
        },
    );
    let span = tracing::info_span!("run", run_id = %run.id, tool = %run.tool, session = %run.session_id, attempt = run.attempt);
    let grace = client.config().worker.cancel_grace;
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
                        operation_id: run.operation_id.clone(),
                        client: Some(client.clone()),
                        clock: client.clock().clone(),
                    };
                    execute(tool, ctx, timeout, grace, stop).await
                }
            };
            // Stages reported after the last flush still belong in the history.
            lease::flush_operation(&client, &run, &sink).await;
            let job = match executed {
                Executed::End(end) => {
                    if let AttemptEnd::Returned(crate::tool::ToolOutcome::Internal(detail)) | AttemptEnd::Panicked(detail) = &end {
                        tracing::error!(internal_error = %detail, "attempt failed with an internal error");
                    }
                    let mut record = decide(&run, end, sink.final_snapshot(), &defaults, client.now(), rand::random::<f64>());
                    if let (Some(m), Some(e)) = (record.message.as_mut(), client.registry().get(&run.tool)) {
                        e.format_message(m);
                    }
                    record.encode_message();
                    Job::Finish(Box::new(record))
                }
                Executed::HandBack => Job::Release {
                    id: run.id.to_string(),
                    attempt: run.attempt,
                    token: run.lease_token.clone().unwrap_or_default(),
                },
            };
            ended.store(true, Ordering::Release);
            if jobs.send(job).is_err() {
                tracing::error!("finisher is gone; the run's lease will expire and it will be rescued");
            }
        }
        .instrument(span),
    );
}

/// Scheduler turns the finisher waits for more attempt ends before it commits a batch.
const GATHER_TURNS: u32 = 3;

/// Records attempt ends in batches: everything that arrived while the previous batch was
/// being written goes into the next transaction. The same transaction claims replacements for
/// the slots the batch frees (one commit per cycle instead of two), unless claiming stopped.
async fn finisher_loop(
    sh: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Job>,
    jobs: mpsc::WeakUnboundedSender<Job>,
    claiming: CancellationToken,
    shutdown: CancellationToken,
) {
    let concurrency = sh.client.config().worker.concurrency;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        // Runs started together tend to end together: give the others a few scheduler turns
        // to join this commit, while they keep arriving, instead of one commit each.
        let mut turns = 0;
        while batch.len() < 512 {
            match rx.try_recv() {
                Ok(j) => {
                    batch.push(j);
                    turns = 0;
                }
                Err(_) if turns < GATHER_TURNS && batch.len() < sh.flights().len() => {
                    turns += 1;
                    tokio::task::yield_now().await;
                }
                Err(_) => break,
            }
        }
        let batch = Arc::new(batch);
        let mut cursor = sh.gate.lock().await;
        // The batch's runs are still in `flights`; their slots are free once it commits.
        let free = if claiming.is_cancelled() {
            0
        } else {
            concurrency.saturating_sub(sh.flights().len().saturating_sub(batch.len()))
        };
        let args = Arc::new(ClaimArgs::new(&sh, free, cursor.clone()));
        let mut delay = Duration::from_millis(50);
        let started = std::time::Instant::now();
        let (applied, runs, now, gave_up) = loop {
            let now = sh.client.now();
            let (b, a) = (batch.clone(), args.clone());
            let res = sh
                .client
                .store()
                .write_async(move |tx| {
                    let applied = b
                        .iter()
                        .map(|job| match job {
                            Job::Finish(r) => store::finish::finish_state(tx, r, now),
                            Job::Release { id, attempt, token } => {
                                store::claim::release(tx, id, *attempt, token, now)
                            }
                        })
                        .collect::<Result<Vec<bool>, _>>()?;
                    // The blobs and messages of every recorded end, a few statements for all.
                    let done: Vec<&FinishRecord> = b
                        .iter()
                        .zip(&applied)
                        .filter_map(|(job, &ok)| match job {
                            Job::Finish(r) if ok => Some(&**r),
                            _ => None,
                        })
                        .collect();
                    store::finish::write_artifacts_many(tx, &done, now)?;
                    let runs = store::claim::claim(tx, &a.params(now))?;
                    Ok((applied, runs))
                })
                .await;
            let e = match res {
                Ok((applied, runs)) => {
                    sh.progressed();
                    break (applied, runs, now, false);
                }
                Err(e) => e,
            };
            let fault = e.fault();
            let what = format!("recording {} attempt ends", batch.len());
            if fault == Fault::Storage {
                sh.store_failed(&what, e.into());
                // This loop holds the gate the claim loop waits on: it watches the stall too.
                if sh.opts.drain {
                    sh.check_stall();
                }
                let stopping = claiming.is_cancelled() || shutdown.is_cancelled();
                // A storage error outlasts any fixed number of retries: keep the batch (its
                // leases stay heartbeated) until writes work again or the worker stops.
                if sh.halt.is_cancelled() || (stopping && delay >= Duration::from_secs(10)) {
                    tracing::error!(
                        "gave up {what}; their leases will expire and the runs be rescued"
                    );
                    break (vec![false; batch.len()], Vec::new(), now, true);
                }
                tokio::select! {
                    _ = tokio::time::sleep(delay.min(Duration::from_secs(10))) => {}
                    _ = sh.halt.cancelled() => {}
                }
                delay = delay.saturating_mul(2);
                continue;
            }
            let keep_trying =
                !sh.halt.is_cancelled() && fault == Fault::Other && delay < Duration::from_secs(10);
            if !keep_trying {
                if fault == Fault::Damaged {
                    sh.store_failed(&what, e.into());
                } else {
                    tracing::error!(error = %e,
                        "gave up {what}; their leases will expire and the runs be rescued");
                }
                break (vec![false; batch.len()], Vec::new(), now, true);
            }
            sh.store_failed(&what, e.into());
            tokio::select! {
                _ = tokio::time::sleep(delay.min(Duration::from_secs(10))) => {}
                _ = sh.halt.cancelled() => {}
            }
            delay = delay.saturating_mul(2);
        };
        // Taken while the batch still holds slots, so the claim loop's sender is still alive
        // (it is dropped only once nothing is in flight).
        let sender = jobs.upgrade();
        {
            let mut flights = sh.flights();
            for (job, ok) in batch.iter().zip(applied) {
                let flight = flights.remove(job.id());
                if gave_up {
                    // Not recorded, and not fenced out either: logged once above.
                    continue;
                }
                sh.metrics.finished(outcome_label(job, ok));
                if ok {
                    log_end(job, flight.as_ref(), now);
                }
                match (job, ok) {
                    (Job::Finish(_), true) => sh.recorded.fetch_add(1, Ordering::Relaxed),
                    (Job::Release { .. }, true) => sh.handed_back.fetch_add(1, Ordering::Relaxed),
                    (_, false) => {
                        tracing::warn!(
                            run_id = job.id(),
                            "lease lost before the end was recorded; dropped (the run was rescued or cancelled)"
                        );
                        sh.fenced_out.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }
        if !runs.is_empty() {
            claimed(&sh, &runs, now, started.elapsed());
            if let Some(last) = runs.last() {
                *cursor = Some(last.session_id.clone());
            }
            match &sender {
                Some(tx) => {
                    for run in runs {
                        start(&sh, run, tx.clone());
                    }
                }
                None => tracing::error!(
                    "claimed {} runs after the worker stopped; their leases will expire and they be rescued",
                    runs.len()
                ),
            }
        }
        drop(sender);
        drop(cursor);
        sh.slot_freed.notify_one();
    }
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
        *sh.last_poll.lock().unwrap_or_else(|e| e.into_inner()) = Some(sh.client.now());
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

/// The one INFO line of an attempt end, once its fenced write has committed (a fenced-out
/// end gets the warning instead). Hand-backs and holds for approval are not ends.
fn log_end(job: &Job, flight: Option<&InFlight>, now: chrono::DateTime<chrono::Utc>) {
    let (Job::Finish(r), Some(f)) = (job, flight) else {
        return;
    };
    let outcome = match &r.outcome {
        store::finish::Outcome::Final(s) => s.as_str(),
        store::finish::Outcome::Retry(_) => "retried",
        store::finish::Outcome::AwaitApproval { .. } => return,
    };
    let took = f
        .run
        .started_at
        .and_then(|s| (now - s).to_std().ok())
        .unwrap_or_default();
    // Whole milliseconds: `1.234s`, not nanoseconds.
    let took = Duration::from_millis(took.as_millis() as u64);
    // Its own target, so busy workers can drop these (`--log info,toolq::run_end=off`).
    tracing::info!(
        target: "toolq::run_end",
        run_id = %r.id,
        tool = %f.run.tool,
        session = %r.session_id,
        outcome = %outcome,
        attempt = r.attempt,
        duration = %humantime::format_duration(took),
        "run ended"
    );
}

/// The `outcome` label of an attempt end in metrics.
fn outcome_label(job: &Job, applied: bool) -> &'static str {
    match (job, applied) {
        (_, false) => "fenced_out",
        (Job::Release { .. }, true) => "handed_back",
        (Job::Finish(r), true) => match &r.outcome {
            store::finish::Outcome::Final(s) => s.as_str(),
            store::finish::Outcome::Retry(_) => "retried",
            store::finish::Outcome::AwaitApproval { .. } => "awaiting_approval",
        },
    }
}
