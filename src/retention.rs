//! Retention: [`crate::Client::prune`] deletes old finished work in bounded batches, each its own
//! short write transaction, and reports what it removed per table.

use std::time::Duration;

use serde::Serialize;

/// What to prune.
#[derive(Debug, Clone, Default)]
pub struct PruneOptions {
    /// One age for everything (finished runs, unacknowledged runs, acknowledged messages,
    /// occurrences), overriding `[retention]`; `None` uses the configured ages.
    pub older_than: Option<Duration>,
    /// Count what would go, delete nothing.
    pub dry_run: bool,
}

/// What a prune removed (or would remove).
#[derive(Debug, Clone, Serialize)]
pub struct PruneReport {
    /// Rows per table.
    pub removed: Removed,
    /// Nothing was deleted; `removed` is what would have been.
    pub dry_run: bool,
    /// Write transactions used.
    pub batches: u64,
    /// Completed runs before this went (`retention.finished_runs`).
    pub runs_before: String,
    /// Failed runs before this went (`retention.failed_runs`).
    pub failed_runs_before: String,
    /// Cancelled runs before this went (`retention.cancelled_runs`).
    pub cancelled_runs_before: String,
    /// Acknowledged messages before this went.
    pub acked_inbox_before: String,
    /// Occurrences before this went.
    pub occurrences_before: String,
}

/// Rows removed (or, for a dry run, that would be removed), per table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Removed {
    /// `runs` rows.
    pub runs: u64,
    /// Of `runs`: completed ones.
    pub runs_completed: u64,
    /// Of `runs`: failed ones.
    pub runs_failed: u64,
    /// Of `runs`: cancelled ones.
    pub runs_cancelled: u64,
    /// `blobs` rows (logs and results of those runs).
    pub blobs: u64,
    /// `inbox` rows (messages about those runs, and old acknowledged messages).
    pub inbox: u64,
    /// `schedule_occurrences` rows.
    pub occurrences: u64,
    /// `workers` rows of processes that stopped cleanly.
    pub workers: u64,
    /// `batches` rows: completed before the cutoff, with none of their runs left.
    pub batches: u64,
}

impl Removed {
    /// Adds another batch's counts.
    pub fn add(&mut self, o: &Removed) {
        self.runs += o.runs;
        self.runs_completed += o.runs_completed;
        self.runs_failed += o.runs_failed;
        self.runs_cancelled += o.runs_cancelled;
        self.blobs += o.blobs;
        self.inbox += o.inbox;
        self.occurrences += o.occurrences;
        self.workers += o.workers;
        self.batches += o.batches;
    }

    /// Counts `n` runs in the final state `state` (in `runs` and in its outcome's field).
    pub fn add_runs(&mut self, state: &str, n: u64) {
        self.runs += n;
        match state {
            "completed" => self.runs_completed += n,
            "failed" => self.runs_failed += n,
            "cancelled" => self.runs_cancelled += n,
            _ => {}
        }
    }

    /// Rows in all tables (the per-outcome counts are part of `runs`).
    pub fn total(&self) -> u64 {
        self.runs + self.blobs + self.inbox + self.occurrences + self.workers + self.batches
    }
}
