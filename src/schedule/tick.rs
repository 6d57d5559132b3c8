//! The schedule tick: fires due schedules (runs + ledger rows + advance, one transaction per
//! batch) and wakes this process's workers.

use chrono::{DateTime, Utc};

use crate::core::Core;
use crate::error::Result;
use crate::store::{ClaimDue, ClaimReport, GateRun};

/// Schedules handled per transaction (keeps each write short).
const BATCH: usize = 100;
/// Batches per tick before yielding to the sleep (the rest is handled next tick).
const MAX_BATCHES: usize = 20;

/// One tick: if a schedule is due (a read), claims due schedules in batches, wakes this
/// process's workers when runs were inserted, and returns what it did with the earliest tick
/// still ahead.
pub(crate) async fn schedule_tick(core: &Core) -> Result<(ClaimReport, Option<DateTime<Utc>>)> {
    let cfg = &core.config().schedules;
    let spacing = chrono::Duration::milliseconds(1000 / cfg.catchup_starts_per_second.max(1));
    let late_after =
        chrono::Duration::from_std(cfg.late_after).unwrap_or(chrono::Duration::minutes(1));
    let mut total = ClaimReport::default();
    // A cheap read first: most ticks find nothing due and should not take the write lock.
    let next = core.engine().schedule_next_due().await?;
    if next.is_none_or(|n| n > core.now()) {
        return Ok((total, next));
    }
    let gate = approval_gate(core);
    for _ in 0..MAX_BATCHES {
        let p = ClaimDue {
            now: core.now(),
            limit: BATCH,
            late_after,
            catchup_spacing: spacing,
        };
        let r = core.engine().schedule_claim_due(p, gate.clone()).await?;
        for (id, why) in &r.broken {
            tracing::error!(schedule_id = %id, reason = %why, "schedule disabled: it no longer fires");
        }
        let more = r.more;
        add_batch(&mut total, r);
        if !more {
            break;
        }
    }
    if !total.runs.is_empty() {
        tracing::debug!(
            runs = total.runs.len(),
            missed = total.missed,
            "schedules fired"
        );
        core.wake_workers();
    }
    let next = core.engine().schedule_next_due().await?;
    Ok((total, next))
}

/// The approval gate of the runs a fire makes: they wait for approval as this process's
/// rules say (see `approval::pending_for`), like the runs it enqueues.
fn approval_gate(core: &Core) -> GateRun {
    let core = core.clone();
    std::sync::Arc::new(move |row, args| {
        crate::approval::pending_for(core.approval_rules(), row, args)
    })
}

/// Adds one batch's report to the tick's.
fn add_batch(total: &mut ClaimReport, r: ClaimReport) {
    total.schedules += r.schedules;
    total.runs.extend(r.runs);
    total.fired += r.fired;
    total.coalesced += r.coalesced;
    total.missed += r.missed;
    total.skipped_overlap += r.skipped_overlap;
    total.paused += r.paused;
    total.broken.extend(r.broken);
    total.more = r.more;
}
