//! Retention: [`Client::prune`] deletes old finished work in bounded batches, each its own
//! short write transaction, and reports what it removed per table.

use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::clock::ts;
use crate::error::{InputError, Result};
use crate::store::{PruneBatch, PruneCutoffs, PruneStep, Removed, RunsCursor};

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

impl Client {
    /// Deletes finished runs (with their blobs and inbox rows), acknowledged messages, schedule
    /// occurrences and stopped worker rows older than the retention ages, in batches of
    /// `[retention] batch_size` rows, each its own transaction. Never touches unfinished runs,
    /// the latest finished run of an enabled schedule, or runs a kept occurrence points at.
    pub async fn prune(&self, opts: PruneOptions) -> Result<PruneReport> {
        self.prune_until(opts, &CancellationToken::new()).await
    }

    /// [`Client::prune`] that stops between batches once `stop` fires.
    pub(crate) async fn prune_until(
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
                    InputError::new(
                        field,
                        humantime::format_duration(d).to_string(),
                        "is too long",
                    )
                    .into()
                })
        };
        let pick = |configured: Duration| older_than.unwrap_or(configured);
        Ok(PruneCutoffs {
            runs_before: before(pick(r.finished_runs), "retention.finished_runs")?,
            unacked_runs_before: before(pick(r.unacked_runs), "retention.unacked_runs")?,
            acked_inbox_before: before(pick(r.acked_inbox), "retention.acked_inbox")?,
            occurrences_before: before(pick(r.occurrences), "retention.occurrences")?,
            workers_before: before(pick(r.finished_runs), "retention.finished_runs")?,
        })
    }
}

/// A prune's step, as the engine names it.
type Step = PruneStep;

/// The rows of a step's own table in a batch's counts (a short batch means done).
fn count_of(step: Step, r: &Removed) -> u64 {
    match step {
        Step::Runs => r.runs,
        Step::AckedInbox => r.inbox,
        Step::Occurrences => r.occurrences,
        Step::Workers => r.workers,
    }
}
