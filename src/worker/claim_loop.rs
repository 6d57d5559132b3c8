//! The claim loop: fills free slots with claimed runs, then naps until work is due, a slot
//! frees or the worker stops. It is the hot path of a drain: each turn is the claim itself
//! and nothing else that allocates, locks or clones.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::attempt::start;
use super::claim::{claim, next_due, next_open, runnable};
use super::shared::{Job, Shared};
use super::{due, health};

/// Claims and starts runs until `shutdown` fires, the worker halts, or (with `drain`)
/// nothing is left.
pub(super) async fn claim_loop(
    sh: &Arc<Shared>,
    jobs: &mpsc::UnboundedSender<Job>,
    shutdown: &CancellationToken,
) {
    let cfg = &sh.core.config().worker;
    let mut failures = 0u32;
    loop {
        if sh.opts.drain {
            sh.check_stall();
        }
        if shutdown.is_cancelled() || sh.halt.is_cancelled() {
            break;
        }
        // The loop's liveness for `toolq status`, also when all slots are busy.
        *sh.last_poll.lock().unwrap_or_else(|e| e.into_inner()) = Some(sh.core.now());
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
            claimed = fill_slots(sh, free, &mut cursor, jobs, &mut failures).await;
        }
        if sh.opts.drain && claimed == 0 && sh.flights().is_empty() && nothing_left(sh).await {
            break;
        }
        drop(cursor);
        if claimed > 0 && claimed == free {
            continue;
        }
        let backoff = health::claim_backoff(cfg.poll_interval, failures);
        let nap = if free > claimed {
            nap_until_due(sh, backoff).await
        } else {
            backoff
        };
        wait_for_work(sh, nap, shutdown).await;
    }
}

/// Claims up to `free` runs after the session `cursor` and starts them; returns how many.
/// Moves the cursor past them, and counts a failed claim in `failures` (a success resets it).
async fn fill_slots(
    sh: &Arc<Shared>,
    free: usize,
    cursor: &mut Option<String>,
    jobs: &mpsc::UnboundedSender<Job>,
    failures: &mut u32,
) -> usize {
    match claim(sh, free, cursor.clone()).await {
        Ok(runs) => {
            *failures = 0;
            let claimed = runs.len();
            // A committed claim shows that a Postgres server answers again. On SQLite a
            // claim of no rows writes no page, so proves nothing about a full disk: only a
            // claim that took runs counts there.
            if claimed > 0 || sh.core.is_postgres() {
                sh.progressed();
            }
            if let Some(last) = runs.last() {
                *cursor = Some(last.session_id.clone());
            }
            for run in runs {
                start(sh, run, jobs.clone());
            }
            claimed
        }
        Err(e) => {
            *failures = failures.saturating_add(1);
            sh.store_failed("claiming runs", e);
            0
        }
    }
}

/// With `--drain`: whether no run of this worker's tools is left (due or waiting for a
/// retry). A failed read counts as work left.
async fn nothing_left(sh: &Shared) -> bool {
    match runnable(sh).await {
        Ok(false) => true,
        Ok(true) => false,
        Err(e) => {
            sh.store_failed("looking for runnable runs", e);
            false
        }
    }
}

/// The nap with a slot free: until the next delayed run of ours is due, or a full rate
/// window opens, instead of the next poll (`backoff`). A commit (an earlier run enqueued here
/// or elsewhere) wakes the loop anyway, and the next turn computes the deadline again.
async fn nap_until_due(sh: &Shared, backoff: Duration) -> Duration {
    let next = match (next_due(sh).await, next_open(sh).await) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    due::nap(sh.core.now(), backoff, next)
}

/// Waits `nap`, or less: until work is enqueued in this process (or the change feed sees a
/// commit), a slot frees, or the worker stops.
async fn wait_for_work(sh: &Shared, nap: Duration, shutdown: &CancellationToken) {
    tokio::select! {
        _ = sh.core.woken() => {}
        _ = sh.slot_freed.notified() => {}
        _ = tokio::time::sleep(nap) => {}
        _ = shutdown.cancelled() => {}
        _ = sh.halt.cancelled() => {}
    }
}
