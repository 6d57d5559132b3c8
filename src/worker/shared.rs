//! What a worker's tasks share: the client, the runs in flight, the slot gate and the
//! counters.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::WorkerOptions;
use super::execute::StopSignal;
use crate::client::Client;
use crate::ids::WorkerId;
use crate::run::Run;
use crate::store;
use crate::tool::sink::RunSink;

/// One attempt running in this worker.
pub(super) struct InFlight {
    pub(super) run: Arc<Run>,
    pub(super) sink: RunSink,
    pub(super) stop: StopSignal,
}

/// An attempt's way out of this worker, sent to the finisher.
pub(super) type Job = store::Settlement;

/// What the worker's tasks share.
pub(crate) struct Shared {
    pub(super) client: Client,
    pub(super) id: WorkerId,
    pub(super) opts: WorkerOptions,
    /// The registered tools' names, sorted: this worker claims runs of these only.
    pub(super) tools: Arc<[String]>,
    /// The per-tool limits of this worker's config (see [`crate::flow`]).
    pub(super) limits: Arc<crate::flow::ToolLimits>,
    pub(super) in_flight: Mutex<HashMap<String, InFlight>>,
    pub(super) slot_freed: Notify,
    /// A commit was seen (any process's): the schedule tick looks again for an earlier trigger.
    pub(super) schedules_changed: Notify,
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
}

impl Shared {
    pub(super) fn flights(&self) -> std::sync::MutexGuard<'_, HashMap<String, InFlight>> {
        // Entries are inserted and removed whole; a panic elsewhere cannot leave one half-made.
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Shared {
    /// The state of a new worker of `client`.
    pub(super) fn new(client: &Client, opts: WorkerOptions) -> Self {
        Shared {
            client: client.clone(),
            id: WorkerId::generate(),
            opts,
            tools: client.registry().names().into(),
            limits: Arc::new(client.config().limits.clone()),
            in_flight: Mutex::new(HashMap::new()),
            slot_freed: Notify::new(),
            schedules_changed: Notify::new(),
            gate: tokio::sync::Mutex::new(None),
            last_poll: Mutex::new(None),
            claimed: AtomicU64::new(0),
            recorded: AtomicU64::new(0),
            fenced_out: AtomicU64::new(0),
            handed_back: AtomicU64::new(0),
            metrics: Arc::default(),
        }
    }
}
