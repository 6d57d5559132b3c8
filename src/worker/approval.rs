//! The approval tick: cancels, as expired, awaiting runs whose approval deadline has passed.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::error::Result;

/// One pass: expire overdue approvals; returns how many.
pub(crate) async fn approval_tick(sh: &Arc<Shared>) -> Result<usize> {
    sh.client.expire_approvals().await
}

pub(super) async fn approval_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let every = sh.client.config().worker.heartbeat_interval;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        match approval_tick(&sh).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(expired = n, "approvals expired"),
            Err(e) => tracing::error!(error = %e, "approval expiry failed"),
        }
    }
}
