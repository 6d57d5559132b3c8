//! The retention tick: every `[retention] interval`, prune old finished work in batches.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::error::Result;
use crate::retention::{PruneOptions, PruneReport};

/// One retention pass with the configured ages; stops between batches when `stop` fires.
pub(crate) async fn retention_tick(
    sh: &Arc<Shared>,
    stop: &CancellationToken,
) -> Result<PruneReport> {
    let report = sh.core.prune_until(PruneOptions::default(), stop).await?;
    let r = &report.removed;
    if r.total() > 0 {
        tracing::info!(
            runs = r.runs,
            blobs = r.blobs,
            inbox = r.inbox,
            occurrences = r.occurrences,
            workers = r.workers,
            batches = report.batches,
            "retention pruned old rows"
        );
    }
    Ok(report)
}

pub(super) async fn retention_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let cfg = sh.core.config().retention.clone();
    if !cfg.enabled {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(cfg.interval) => {}
            _ = stop.cancelled() => return,
        }
        if let Err(e) = retention_tick(&sh, &stop).await {
            sh.store_failed("retention", e);
        }
    }
}
