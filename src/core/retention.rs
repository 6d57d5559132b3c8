//! Pruning old finished work in bounded batches ([`crate::Client::prune`], and the worker's
//! retention tick).

use super::Core;
use crate::clock::ts;
use crate::error::{InputError, Result};
use crate::retention::{PruneOptions, PruneReport};
use crate::store::{PruneBatch, PruneCutoffs, PruneStep, Removed, RunsCursor};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A prune's step, as the engine names it.
type Step = PruneStep;

impl Core {
    /// Prunes as [`crate::Client::prune`] does, stopping between batches once `stop` fires.
    pub async fn prune_until(
        &self,
        opts: PruneOptions,
        stop: &CancellationToken,
    ) -> Result<PruneReport> {
        let cutoffs = self.cutoffs(opts.older_than)?;
        let mut report = PruneReport {
            removed: Removed::default(),
            dry_run: opts.dry_run,
            batches: 0,
            runs_before: ts(cutoffs.runs_before),
            failed_runs_before: ts(cutoffs.failed_runs_before),
            cancelled_runs_before: ts(cutoffs.cancelled_runs_before),
            acked_inbox_before: ts(cutoffs.acked_inbox_before),
            occurrences_before: ts(cutoffs.occurrences_before),
        };
        if opts.dry_run {
            report.removed = self.engine().prune_count(cutoffs.clone()).await?;
            return Ok(report);
        }
        let batch = self.config().retention.batch_size;
        let mut cursor = RunsCursor::default();
        for step in [
            Step::Runs,
            Step::AckedInbox,
            Step::Occurrences,
            Step::Workers,
            Step::Batches,
        ] {
            loop {
                if stop.is_cancelled() {
                    return Ok(report);
                }
                let (got, next) = self.prune_batch(step, &cutoffs, batch, cursor).await?;
                cursor = next;
                report.batches += 1;
                report.removed.add(&got);
                if (count_of(step, &got) as usize) < batch {
                    break;
                }
                // Let other writers (claims, finishes) in between batches.
                tokio::task::yield_now().await;
            }
        }
        Ok(report)
    }

    /// One step's batch in its own write transaction; returns it and the runs cursor.
    async fn prune_batch(
        &self,
        step: Step,
        cutoffs: &PruneCutoffs,
        batch: usize,
        cursor: RunsCursor,
    ) -> Result<(Removed, RunsCursor)> {
        Ok(self
            .engine()
            .prune_batch(PruneBatch {
                step,
                cutoffs: cutoffs.clone(),
                batch,
                cursor,
            })
            .await?)
    }

    fn cutoffs(&self, older_than: Option<Duration>) -> Result<PruneCutoffs> {
        let r = &self.config().retention;
        let now = self.now();
        let before = |d: Duration, field: &str| -> Result<chrono::DateTime<chrono::Utc>> {
            chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_sub_signed(d))
                .ok_or_else(|| {
                    InputError::new(field, crate::clock::format_duration(d), "is too long").into()
                })
        };
        let pick = |configured: Duration| older_than.unwrap_or(configured);
        Ok(PruneCutoffs {
            runs_before: before(pick(r.finished_runs), "retention.finished_runs")?,
            failed_runs_before: before(pick(r.failed_runs), "retention.failed_runs")?,
            cancelled_runs_before: before(pick(r.cancelled_runs), "retention.cancelled_runs")?,
            unacked_runs_before: before(pick(r.unacked_runs), "retention.unacked_runs")?,
            acked_inbox_before: before(pick(r.acked_inbox), "retention.acked_inbox")?,
            occurrences_before: before(pick(r.occurrences), "retention.occurrences")?,
            workers_before: before(pick(r.finished_runs), "retention.finished_runs")?,
            batches_before: before(pick(r.finished_runs), "retention.finished_runs")?,
        })
    }
}

/// The rows of a step's own table in a batch's counts (a short batch means done).
fn count_of(step: Step, r: &Removed) -> u64 {
    match step {
        Step::Runs => r.runs,
        Step::AckedInbox => r.inbox,
        Step::Occurrences => r.occurrences,
        Step::Workers => r.workers,
        Step::Batches => r.batches,
    }
}
