//! Retention: [`crate::Client::prune`] deletes old finished work in bounded batches, each its own
//! short write transaction, and reports what it removed per table.

use std::time::Duration;

use serde::Serialize;

use crate::store::Removed;

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
    /// Finished runs before this went.
    pub runs_before: String,
    /// Acknowledged messages before this went.
    pub acked_inbox_before: String,
    /// Occurrences before this went.
    pub occurrences_before: String,
}
