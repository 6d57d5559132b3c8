//! Claiming: whether this worker has work, when its next delayed run is due, and claiming
//! runs of its tools into free slots.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::shared::Shared;
use crate::error::Result;
use crate::run::Run;
use crate::store;

/// Whether a run of this worker's tools is due, or waits for a retry (a drain waits for it).
/// Runs of tools it lacks are left for a worker that has them.
pub(super) async fn runnable(sh: &Shared) -> Result<bool> {
    let now = sh.core.now();
    Ok(sh.core.engine().run_pending(now, sh.tools.clone()).await?)
}

/// When the next delayed run of this worker's tools is due; on a failed read, none (the
/// poll remains).
pub(super) async fn next_due(sh: &Shared) -> Option<chrono::DateTime<chrono::Utc>> {
    let now = sh.core.now();
    match sh.core.engine().run_next_due(now, sh.tools.clone()).await {
        Ok(at) => at,
        // A storage fault (a lost database connection) is logged once by the health
        // state machine when writes fail; this read fails with it at every poll.
        Err(e) if e.fault() == crate::error::Fault::Storage => {
            tracing::debug!(error = %e, "could not read the next due run; polling");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not read the next due run; polling");
            None
        }
    }
}

/// When the first full rate window of this worker's rate-limited tools lets a start again;
/// on a failed read, none (the poll remains).
pub(super) async fn next_open(sh: &Shared) -> Option<chrono::DateTime<chrono::Utc>> {
    let rates: Vec<_> = sh
        .limits
        .iter()
        .filter(|(tool, _)| sh.tools.contains(tool))
        .filter_map(|(tool, l)| l.rate.map(|r| (tool.clone(), r)))
        .collect();
    if rates.is_empty() {
        return None;
    }
    let now = sh.core.now();
    match sh.core.engine().limit_next_open(now, rates).await {
        Ok(at) => at,
        Err(e) => {
            tracing::warn!(error = %e, "could not read the rate windows; polling");
            None
        }
    }
}

/// What a claim needs besides the time.
pub(super) struct ClaimArgs {
    worker: String,
    lease: chrono::Duration,
    per_session: i64,
    max: usize,
    cursor: Option<String>,
    tools: Arc<[String]>,
    limits: Arc<crate::flow::ToolLimits>,
    background_room: Option<usize>,
}

impl ClaimArgs {
    pub(super) fn new(sh: &Shared, max: usize, cursor: Option<String>) -> Self {
        let cfg = &sh.core.config().worker;
        // The per-worker limit of background runs (the seed's semaphore, claim side): what it
        // leaves after the background runs this worker runs. A claim that cannot reach it
        // (the default: 64 against a few slots) passes none, so its SQL is the plain one.
        let limit =
            usize::try_from(sh.core.config().sessions.max_active_runs_per_worker).unwrap_or(0);
        let held = sh.flights().values().filter(|f| f.run.background).count();
        let room = limit.saturating_sub(held);
        let background_room = (room < max).then_some(room);
        Self {
            worker: sh.id.to_string(),
            lease: chrono::Duration::from_std(cfg.lease).unwrap_or(chrono::Duration::seconds(30)),
            per_session: cfg.per_session,
            max,
            cursor,
            tools: sh.tools.clone(),
            limits: sh.limits.clone(),
            background_room,
        }
    }

    /// The engine's claim parameters at `now` (a claim of 0 runs claims nothing).
    pub(super) fn params(&self, now: chrono::DateTime<chrono::Utc>) -> store::Claim {
        store::Claim {
            worker: self.worker.clone(),
            now,
            lease_until: crate::clock::saturating_add(now, self.lease),
            max: self.max,
            per_session: self.per_session,
            after_session: self.cursor.clone(),
            tools: self.tools.clone(),
            limits: self.limits.clone(),
            background_room: self.background_room,
        }
    }
}

/// Books claimed runs: counters and the last-poll time of the workers row.
pub(super) fn claimed(
    sh: &Shared,
    runs: &[Run],
    now: chrono::DateTime<chrono::Utc>,
    took: std::time::Duration,
) {
    *sh.last_poll.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
    sh.claimed.fetch_add(runs.len() as u64, Ordering::Relaxed);
    sh.metrics.claimed(took, runs.len());
}

pub(super) async fn claim(
    sh: &Arc<Shared>,
    free: usize,
    cursor: Option<String>,
) -> Result<Vec<Run>> {
    let args = ClaimArgs::new(sh, free, cursor);
    let now = sh.core.now();
    let started = std::time::Instant::now();
    let runs = sh.core.engine().attempt_claim(args.params(now)).await?;
    claimed(sh, &runs, now, started.elapsed());
    Ok(runs)
}
