//! What a worker's tasks share: the core, the runs in flight, the slot gate and the
//! counters.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::WorkerOptions;
use super::execute::StopSignal;
use super::health;
use crate::core::Core;
use crate::error::{Error, Fault, StoreError};
use crate::ids::{RunId, WorkerId};
use crate::run::Run;
use crate::store;
use crate::tool::sink::RunSink;

/// One attempt running in this worker.
pub(super) struct InFlight {
    pub(super) run: Arc<Run>,
    pub(super) sink: RunSink,
    pub(super) stop: StopSignal,
    /// Set before the attempt's end goes to the finisher. From then on a heartbeat that no
    /// longer finds the run running may be looking at this worker's own committed end, and
    /// the finisher's fence reports a lost lease itself.
    pub(super) ended: Arc<std::sync::atomic::AtomicBool>,
    /// What the attempt's spans hang under: the run's stored traceparent, or (a run without
    /// one) its claim span, which starts a new trace. Empty when tracing is off.
    pub(super) trace: crate::trace::Span,
}

/// An attempt's way out of this worker, sent to the finisher.
pub(super) type Job = store::Settlement;

/// What the worker's tasks share.
pub(crate) struct Shared {
    pub(super) core: Core,
    /// The handle every attempt's tool gets: built once, cloned per attempt.
    pub(super) host: Arc<dyn crate::tool::ToolHost>,
    pub(super) id: WorkerId,
    pub(super) opts: WorkerOptions,
    /// The registered tools' names, sorted: this worker claims runs of these only.
    pub(super) tools: Arc<[String]>,
    /// The per-tool limits of this worker's config (see [`crate::flow`]).
    pub(super) limits: Arc<crate::flow::ToolLimits>,
    pub(super) in_flight: Mutex<HashMap<RunId, InFlight>>,
    pub(super) slot_freed: Notify,
    /// A commit was seen (any process's): the schedule tick looks again for an earlier trigger.
    pub(super) schedules_changed: Notify,
    /// An attempt set its operation id: the flush loop stores it now.
    pub(super) flush_now: Arc<Notify>,
    /// Held while free slots are counted, claimed and started, so the claim loop and the
    /// finisher (which claims replacements in its own transaction) never overfill the slots.
    /// Holds the round-robin session cursor.
    pub(super) gate: tokio::sync::Mutex<Option<String>>,
    pub(super) last_poll: Mutex<Option<chrono::DateTime<chrono::Utc>>>,
    pub(super) claimed: AtomicU64,
    pub(super) recorded: AtomicU64,
    pub(super) fenced_out: AtomicU64,
    pub(super) handed_back: AtomicU64,
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    /// Whether writes currently fail with a storage error (see [`super::health`]).
    pub(super) health: Mutex<health::Health>,
    /// Fired when the worker must stop because of `halted` (a damaged file, a stalled drain).
    pub(super) halt: CancellationToken,
    /// Why the worker stopped on its own, returned by [`super::Worker::run`].
    pub(super) halted: Mutex<Option<Error>>,
    /// Attempts waiting for their step records to commit, by (run, step seq).
    pub(super) step_acks: Mutex<HashMap<(RunId, i64), tokio::sync::oneshot::Sender<bool>>>,
}

impl Shared {
    pub(super) fn flights(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, InFlight>> {
        // Entries are inserted and removed whole; a panic elsewhere cannot leave one half-made.
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn health(&self) -> std::sync::MutexGuard<'_, health::Health> {
        // Every method leaves the state whole.
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the worker with `e` (the first reason wins).
    pub(super) fn stop_with(&self, e: Error) {
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
                let change = self.health().failed(self.core.now(), &e.to_string());
                if change.is_some() {
                    tracing::error!(db = %self.core.engine().location(), error = %e,
                        "database writes are failing: {what} failed; backing off, and logging again once they succeed");
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
        if let Some(health::Change::Cleared(after)) = self.health().progressed(self.core.now()) {
            tracing::info!(
                failed_for_secs = after.as_secs(),
                "database writes succeed again"
            );
        }
    }

    /// With `--drain`: gives up once writes have failed for `worker.stall_timeout`.
    pub(super) fn check_stall(&self) {
        let timeout = self.core.config().worker.stall_timeout;
        let stalled = self
            .health()
            .stalled(self.core.now(), timeout)
            .map(|(d, last)| (d.as_secs(), last.to_string()));
        if let Some((secs, last)) = stalled {
            self.stop_with(Error::Store(StoreError::Stalled {
                path: self.core.engine().location(),
                secs,
                last,
            }));
        }
    }
}

impl Shared {
    /// Tells the attempt that sent `save` whether its steps were recorded.
    pub(super) fn step_recorded(&self, save: &crate::run::StepSave, ok: bool) {
        let mut acks = self.step_acks.lock().unwrap_or_else(|e| e.into_inner());
        for e in &save.entries {
            if let Some(ack) = acks.remove(&(save.id.clone(), e.seq)) {
                // The tool may be gone (stopped meanwhile): nobody to tell.
                let _ = ack.send(ok);
            }
        }
    }
}

impl Shared {
    /// The state of a new worker of `core`.
    pub(super) fn new(core: &Core, opts: WorkerOptions) -> Self {
        Shared {
            core: core.clone(),
            host: Arc::new(core.clone()),
            id: WorkerId::generate(),
            opts,
            tools: core.registry().names().into(),
            limits: Arc::new(core.config().limits.clone()),
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
            step_acks: Mutex::new(HashMap::new()),
        }
    }
}
