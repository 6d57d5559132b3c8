//! Approvals in the worker: holding a claimed run for approval instead of executing it, and
//! the tick that cancels, as expired, awaiting runs whose approval deadline has passed.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use tokio::sync::mpsc;

use super::{Job, Shared};
use crate::core::Core;
use crate::error::Result;
use crate::run::Run;

/// When `run` needs an approval it does not have, queues the fenced move to
/// `awaiting_approval` (with its request message) instead of executing it; returns true then.
pub(super) fn hold_for_approval(core: &Core, run: &Run, jobs: &mpsc::UnboundedSender<Job>) -> bool {
    let Some(deadline) = crate::approval::gate_of(core.approval_rules(), run, core.now()) else {
        return false;
    };
    let rec = core.finish_record(&run.tool, crate::approval::await_approval(run, deadline));
    if jobs.send(Job::End(Box::new(rec))).is_err() {
        tracing::error!(run_id = %run.id, "finisher is gone; the lease will expire and the run be rescued");
    }
    true
}

/// One pass: expire overdue approvals; returns how many.
pub(crate) async fn approval_tick(sh: &Arc<Shared>) -> Result<usize> {
    sh.core.expire_approvals().await
}

pub(super) async fn approval_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let every = sh.core.config().worker.heartbeat_interval;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        match approval_tick(&sh).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(expired = n, "approvals expired"),
            Err(e) => sh.store_failed("expiring overdue approvals", e),
        }
    }
}
