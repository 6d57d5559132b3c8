//! The schedule tick: fires due schedules (runs + ledger rows + advance, one transaction per
//! batch) and wakes the claim loop. Runs every poll interval, sooner when a tick is due sooner,
//! and again after any commit (a schedule added or changed here or in another process may
//! fire before the current sleep ends).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::client::Client;
use crate::error::Result;
use crate::store::{self, schedules::ClaimDue, schedules::ClaimReport};

/// Schedules handled per transaction (keeps each write short).
const BATCH: usize = 100;
/// Batches per tick before yielding to the sleep (the rest is handled next tick).
const MAX_BATCHES: usize = 20;

/// One tick: if a schedule is due (a read), claims due schedules in batches, wakes this process's workers when runs were
/// inserted, and returns what it did with the earliest tick still ahead.
pub(crate) async fn schedule_tick(client: &Client) -> Result<(ClaimReport, Option<DateTime<Utc>>)> {
    let cfg = &client.config().schedules;
    let spacing = chrono::Duration::milliseconds(1000 / cfg.catchup_starts_per_second.max(1));
    let late_after =
        chrono::Duration::from_std(cfg.late_after).unwrap_or(chrono::Duration::minutes(1));
    let mut total = ClaimReport::default();
    // A cheap read first: most ticks find nothing due and should not take the write lock.
    let next = client
        .store()
        .read_async(store::schedules::next_due)
        .await?;
    if next.is_none_or(|n| n > client.now()) {
        return Ok((total, next));
    }
    for _ in 0..MAX_BATCHES {
        let p = ClaimDue {
            now: client.now(),
            limit: BATCH,
            late_after,
            catchup_spacing: spacing,
        };
        let r = client
            .store()
            .write_async(move |tx| store::schedules::claim_due(tx, &p))
            .await?;
        for (id, why) in &r.broken {
            tracing::error!(schedule_id = %id, reason = %why, "schedule disabled: it no longer fires");
        }
        total.schedules += r.schedules;
        total.runs.extend(r.runs);
        total.fired += r.fired;
        total.coalesced += r.coalesced;
        total.missed += r.missed;
        total.skipped_overlap += r.skipped_overlap;
        total.broken.extend(r.broken);
        total.more = r.more;
        if !r.more {
            break;
        }
    }
    if !total.runs.is_empty() {
        tracing::debug!(
            runs = total.runs.len(),
            missed = total.missed,
            "schedules fired"
        );
        client.wake_workers();
    }
    let next = client
        .store()
        .read_async(store::schedules::next_due)
        .await?;
    Ok((total, next))
}

pub(super) async fn schedule_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let poll = sh.client.config().worker.poll_interval;
    loop {
        let delay = match schedule_tick(&sh.client).await {
            Ok((r, _)) if r.more => Duration::ZERO,
            Ok((_, Some(next))) => (next - sh.client.now())
                .to_std()
                .unwrap_or(Duration::ZERO)
                .min(poll),
            Ok((_, None)) => poll,
            Err(e) => {
                sh.store_failed("schedule tick", e);
                poll
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(delay.max(Duration::from_millis(1))) => {}
            _ = sh.schedules_changed.notified() => {}
            _ = stop.cancelled() => return,
        }
    }
}
