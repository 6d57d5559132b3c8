//! The parameters and results of the contract's upkeep operations: the workers' overview,
//! prunes, stats and gauges, and WAL checkpoints.

use super::types::{Checkpoint, CheckpointMode, PruneCutoffs, QueueDepth, RunsCursor, WorkerRow};

/// What [`Engine::worker_overview`](super::Engine::worker_overview) reads.
#[derive(Debug, Clone, Default)]
pub struct WorkerOverview {
    /// Worker rows.
    pub workers: Vec<WorkerRow>,
    /// Queued runs (due or not) by tool.
    pub queued_by_tool: Vec<(String, i64)>,
    /// Enabled schedules that will fire again.
    pub enabled_schedules: i64,
}

/// What a prune step deletes, in the order a prune runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneStep {
    /// Finished runs with their blobs and messages.
    Runs,
    /// Old acknowledged messages.
    AckedInbox,
    /// Old schedule occurrences.
    Occurrences,
    /// Stopped worker rows.
    Workers,
    /// Completed batches whose runs are all gone.
    Batches,
}

/// Parameters of [`Engine::prune_batch`](super::Engine::prune_batch).
#[derive(Debug, Clone)]
pub struct PruneBatch {
    /// The step.
    pub step: PruneStep,
    /// Cutoffs.
    pub cutoffs: PruneCutoffs,
    /// At most this many rows.
    pub batch: usize,
    /// Where the runs step stands.
    pub cursor: RunsCursor,
}

/// Figures for `toolq stats`.
#[derive(Debug, Clone, Default)]
pub struct StoreStats {
    /// Runs per state (states with none left out).
    pub by_state: Vec<(String, i64)>,
    /// The oldest due queued run's `run_at`.
    pub oldest_queued: Option<String>,
    /// Busy retries summed over every worker row.
    pub busy_retries: i64,
    /// Workers not stopped.
    pub live_workers: usize,
    /// Queued runs that are suspended (a durable sleep, an event wait, a snooze, a next
    /// check): part of the queued count.
    pub waiting: i64,
}

/// Gauges for metrics.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// Runs per state.
    pub by_state: Vec<(String, i64)>,
    /// Queue depth by session and tool.
    pub queue_depth: Vec<QueueDepth>,
    /// Seconds the most overdue schedule is late.
    pub schedule_lag_secs: f64,
}

/// What [`Engine::checkpoint`](super::Engine::checkpoint) did.
#[derive(Debug, Clone)]
pub struct CheckpointTick {
    /// The mode used.
    pub mode: CheckpointMode,
    /// The checkpoint's answer.
    pub checkpoint: Checkpoint,
    /// Bytes of the log afterwards.
    pub wal_bytes: u64,
}
