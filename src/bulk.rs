//! Bulk cancel and retry: [`Client::cancel_where`] and [`Client::retry_where`] act on every run
//! a [`RunFilter`] matches, in bounded batches: each batch is one read of the next runs by id
//! (a keyset walk, so each run is visited once even if it fails again meanwhile) and one
//! short write transaction, so a million-run retry never holds the writer for long.

use serde::Serialize;

use crate::client::Client;
use crate::error::{InputError, Result};
use crate::ids::RunId;
use crate::run::{Run, RunFilter, RunState};
use crate::store::{RunCancelMany, RunRetryMany, RunSelect};
use crate::worker::finish::{WaitingEnd, decide_waiting};

/// The default runs per batch (one write transaction each).
pub const DEFAULT_BATCH: usize = 500;

/// How a bulk operation runs.
#[derive(Debug, Clone)]
pub struct BulkOptions {
    /// Count what would be acted on and list the first ids; write nothing.
    pub dry_run: bool,
    /// Runs per batch, 1 to 10000 (default [`DEFAULT_BATCH`]).
    pub batch_size: usize,
    /// At most this many ids in the report.
    pub max_ids: usize,
}

impl Default for BulkOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            batch_size: DEFAULT_BATCH,
            max_ids: 100,
        }
    }
}

/// What a bulk cancel or retry did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct BulkReport {
    /// Nothing was written: `matched` and `ids` are what would be acted on.
    pub dry_run: bool,
    /// Runs the filter matched (in the states the operation acts on).
    pub matched: u64,
    /// Runs cancelled at once (cancel) or re-queued (retry).
    pub done: u64,
    /// Running runs asked to stop; each ends `cancelled` when its worker notices (cancel).
    pub cancel_requested: u64,
    /// Runs that changed state between the read and the write (finished, retried or
    /// cancelled by someone else meanwhile); left as they are.
    pub skipped: u64,
    /// Write transactions used.
    pub batches: u64,
    /// The first runs acted on (dry run: matched), at most `max_ids`.
    pub ids: Vec<RunId>,
    /// More runs were acted on than `ids` lists.
    pub ids_truncated: bool,
}

impl BulkReport {
    fn note_ids<'a>(&mut self, ids: impl IntoIterator<Item = &'a RunId>, max: usize) {
        for id in ids {
            if self.ids.len() < max {
                self.ids.push(id.clone());
            } else {
                self.ids_truncated = true;
            }
        }
    }
}

/// The states a cancel acts on.
const CANCELLABLE: [RunState; 3] = [
    RunState::Queued,
    RunState::AwaitingApproval,
    RunState::Running,
];
/// The states a retry acts on.
const RETRYABLE: [RunState; 2] = [RunState::Failed, RunState::Cancelled];

/// The filter with its states narrowed to `allowed` (all of them when none are given);
/// a state outside `allowed` is an input error.
fn narrowed(filter: &RunFilter, allowed: &[RunState], what: &str) -> Result<RunFilter> {
    let mut f = filter.clone();
    if f.states.is_empty() {
        f.states = allowed.to_vec();
    } else if let Some(bad) = f.states.iter().find(|s| !allowed.contains(s)) {
        let names: Vec<&str> = allowed.iter().map(|s| s.as_str()).collect();
        return Err(InputError::new(
            "--state",
            bad.as_str(),
            format!("{what} acts on {} runs only", names.join(", ")),
        )
        .into());
    }
    f.states.dedup();
    Ok(f)
}

fn check(opts: &BulkOptions) -> Result<()> {
    if !(1..=10_000).contains(&opts.batch_size) {
        return Err(InputError::new(
            "--batch-size",
            opts.batch_size.to_string(),
            "must be between 1 and 10000",
        )
        .into());
    }
    Ok(())
}

impl Client {
    /// Cancels every queued, awaiting or running run `filter` matches (its states narrow
    /// that): waiting runs end `cancelled` at once through the end-writer (with their inbox
    /// message), running runs are asked to stop. A state outside those three is an input
    /// error. Runs that changed state meanwhile are read again once (a run claimed meanwhile
    /// is asked to stop), then counted as skipped.
    pub async fn cancel_where(&self, filter: &RunFilter, opts: BulkOptions) -> Result<BulkReport> {
        check(&opts)?;
        let filter = narrowed(filter, &CANCELLABLE, "cancel")?;
        if opts.dry_run {
            return self.preview(filter, &opts).await;
        }
        let mut report = BulkReport::default();
        let mut after = String::new();
        loop {
            let page = self.page(&filter, &after, opts.batch_size).await?;
            let Some(last) = page.last() else { break };
            after = last.id.to_string();
            let full = page.len() == opts.batch_size;
            report.matched += page.len() as u64;
            let mut todo = page;
            // A second pass takes the runs whose fence failed, as they are now.
            for pass in 0..2 {
                let missed = self.cancel_batch(todo, &mut report, opts.max_ids).await?;
                if missed.is_empty() {
                    break;
                }
                if pass == 1 {
                    report.skipped += missed.len() as u64;
                    break;
                }
                let mut again = Vec::new();
                for id in missed {
                    match self.engine().run_get(id).await? {
                        Some(run) if CANCELLABLE.contains(&run.state) => again.push(run),
                        _ => report.skipped += 1,
                    }
                }
                todo = again;
            }
            if !full {
                break;
            }
            tokio::task::yield_now().await;
        }
        Ok(report)
    }

    /// Re-queues every failed or cancelled run `filter` matches (its states narrow that) as
    /// a new attempt, as [`Client::retry`] does for one. A state outside those two is an
    /// input error. Runs that changed state meanwhile are skipped.
    pub async fn retry_where(&self, filter: &RunFilter, opts: BulkOptions) -> Result<BulkReport> {
        check(&opts)?;
        let filter = narrowed(filter, &RETRYABLE, "retry")?;
        if opts.dry_run {
            return self.preview(filter, &opts).await;
        }
        let mut report = BulkReport::default();
        let mut after = String::new();
        loop {
            let page = self.page(&filter, &after, opts.batch_size).await?;
            let Some(last) = page.last() else { break };
            after = last.id.to_string();
            let full = page.len() == opts.batch_size;
            report.matched += page.len() as u64;
            let runs: Vec<(RunId, RunState)> = page.into_iter().map(|r| (r.id, r.state)).collect();
            let applied = self
                .engine()
                .run_retry_many(RunRetryMany {
                    runs: runs.clone(),
                    now: self.now(),
                })
                .await?;
            report.batches += 1;
            let done: Vec<&RunId> = runs
                .iter()
                .zip(&applied)
                .filter(|(_, ok)| **ok)
                .map(|((id, _), _)| id)
                .collect();
            report.done += done.len() as u64;
            report.skipped += (runs.len() - done.len()) as u64;
            report.note_ids(done, opts.max_ids);
            self.wake_workers();
            if !full {
                break;
            }
            tokio::task::yield_now().await;
        }
        Ok(report)
    }

    /// The next keyset page.
    async fn page(&self, filter: &RunFilter, after: &str, batch: usize) -> Result<Vec<Run>> {
        Ok(self
            .engine()
            .run_select(RunSelect {
                filter: filter.clone(),
                after: after.to_string(),
                limit: batch as i64,
            })
            .await?)
    }

    /// A dry run: the count and the first ids.
    async fn preview(&self, filter: RunFilter, opts: &BulkOptions) -> Result<BulkReport> {
        let matched = self.engine().run_count_where(filter.clone()).await?.max(0) as u64;
        let first = self.page(&filter, "", opts.max_ids.max(1)).await?;
        let mut report = BulkReport {
            dry_run: true,
            matched,
            ..BulkReport::default()
        };
        report.note_ids(first.iter().map(|r| &r.id).take(opts.max_ids), opts.max_ids);
        report.ids_truncated = matched > report.ids.len() as u64;
        Ok(report)
    }

    /// One cancel batch in one transaction; returns the runs whose fence failed.
    async fn cancel_batch(
        &self,
        runs: Vec<Run>,
        report: &mut BulkReport,
        max_ids: usize,
    ) -> Result<Vec<RunId>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let (running, waiting): (Vec<Run>, Vec<Run>) =
            runs.into_iter().partition(|r| r.state == RunState::Running);
        let ends = waiting
            .iter()
            .map(|r| {
                let mut rec = decide_waiting(r, WaitingEnd::Cancelled);
                self.format_end(&r.tool, &mut rec);
                rec
            })
            .collect();
        let requests: Vec<RunId> = running.iter().map(|r| r.id.clone()).collect();
        let out = self
            .engine()
            .run_cancel_many(RunCancelMany {
                ends,
                requests: requests.clone(),
                now: self.now(),
            })
            .await?;
        report.batches += 1;
        let mut missed = Vec::new();
        let mut acted = Vec::new();
        for (run, ok) in waiting.iter().zip(&out.ended) {
            if *ok {
                report.done += 1;
                acted.push(&run.id);
            } else {
                missed.push(run.id.clone());
            }
        }
        for (id, ok) in requests.iter().zip(&out.requested) {
            if *ok {
                report.cancel_requested += 1;
                acted.push(id);
            } else {
                missed.push(id.clone());
            }
        }
        report.note_ids(acted, max_ids);
        Ok(missed)
    }
}
