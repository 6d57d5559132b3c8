//! [`Client::cancel_where`] and [`Client::retry_where`]: every run a filter matches, in
//! keyset batches, each its own write transaction (see [`crate::bulk`]).

use crate::bulk::{BulkOptions, BulkReport, CANCELLABLE, RETRYABLE, check, narrowed};
use crate::client::Client;
use crate::error::Result;
use crate::ids::RunId;
use crate::run::ending::WaitingEnd;
use crate::run::{Run, RunFilter, RunState};
use crate::store::{RunCancelMany, RunRetryMany, RunSelect};

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
        let mut pages = Pages::new(filter, opts.batch_size);
        while let Some(page) = self.next_page(&mut pages).await? {
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
        let mut pages = Pages::new(filter, opts.batch_size);
        while let Some(page) = self.next_page(&mut pages).await? {
            report.matched += page.len() as u64;
            let now = self.now();
            let approvals = page
                .iter()
                .map(|r| crate::approval::pending_for_retry(self.core().approval_rules(), r, now))
                .collect();
            let runs: Vec<(RunId, RunState)> = page.into_iter().map(|r| (r.id, r.state)).collect();
            let applied = self
                .engine()
                .run_retry_many(RunRetryMany {
                    runs: runs.clone(),
                    now,
                    approvals,
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
        }
        Ok(report)
    }

    /// The next page of `pages`, or None once the filter's runs are walked. Yields to the
    /// runtime between pages, so a million-run call does not hold a worker thread.
    async fn next_page(&self, pages: &mut Pages) -> Result<Option<Vec<Run>>> {
        if pages.done {
            return Ok(None);
        }
        if !pages.after.is_empty() {
            tokio::task::yield_now().await;
        }
        let page = self.page(&pages.filter, &pages.after, pages.batch).await?;
        let Some(last) = page.last() else {
            return Ok(None);
        };
        pages.after = last.id.to_string();
        pages.done = page.len() < pages.batch;
        Ok(Some(page))
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
            .map(|r| self.core().waiting_end(r, WaitingEnd::Cancelled))
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

/// A walk over the runs a filter matches, in keyset pages of `batch` by run id.
struct Pages {
    filter: RunFilter,
    /// The last id of the previous page ("" before the first).
    after: String,
    batch: usize,
    /// The previous page was short: nothing is left.
    done: bool,
}

impl Pages {
    fn new(filter: RunFilter, batch: usize) -> Pages {
        Pages {
            filter,
            after: String::new(),
            batch,
            done: false,
        }
    }
}
