//! Bulk cancel and retry, their options, report and the states each acts on:
//! [`crate::Client::cancel_where`] and [`crate::Client::retry_where`] (in `client/bulk.rs`)
//! act on every run a [`RunFilter`] matches, in bounded batches: each batch is one read of the
//! next runs by id (a keyset walk, so each run is visited once even if it fails again
//! meanwhile) and one short write transaction, so a million-run retry never holds the writer
//! for long.

use serde::Serialize;

use crate::error::{InputError, Result};
use crate::ids::RunId;
use crate::run::{RunFilter, RunState};

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
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
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
    pub(crate) fn note_ids<'a>(&mut self, ids: impl IntoIterator<Item = &'a RunId>, max: usize) {
        for id in ids {
            if self.ids.len() < max {
                self.ids.push(id.clone());
            } else {
                self.ids_truncated = true;
            }
        }
    }
}

/// Which bulk operation a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BulkAction {
    /// [`crate::Client::cancel_where`].
    Cancel,
    /// [`crate::Client::retry_where`].
    Retry,
}

/// A bulk report as `toolq cancel|retry FILTERS --json` prints it and `POST /runs/bulk`
/// answers it (`Accept: application/json`): one shape in both places. Every field of
/// [`BulkReport`], the `action`, and `done` once more under the name the CLI used before
/// (`cancelled` for a cancel, `retried` for a retry), which scripts may keep reading.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct BulkAnswer {
    /// `cancel` or `retry`.
    pub action: BulkAction,
    /// What was done.
    #[serde(flatten)]
    pub report: BulkReport,
    /// Cancel: `done` again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<u64>,
    /// Retry: `done` again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retried: Option<u64>,
}

impl BulkAnswer {
    /// The answer for `report` of `action`.
    pub fn new(action: BulkAction, report: BulkReport) -> Self {
        let done = Some(report.done);
        Self {
            action,
            cancelled: done.filter(|_| action == BulkAction::Cancel),
            retried: done.filter(|_| action == BulkAction::Retry),
            report,
        }
    }
}

/// The states a cancel acts on.
pub(crate) const CANCELLABLE: [RunState; 3] = [
    RunState::Queued,
    RunState::AwaitingApproval,
    RunState::Running,
];
/// The states a retry acts on.
pub(crate) const RETRYABLE: [RunState; 2] = [RunState::Failed, RunState::Cancelled];

/// The filter with its states narrowed to `allowed` (all of them when none are given);
/// a state outside `allowed` is an input error.
pub(crate) fn narrowed(filter: &RunFilter, allowed: &[RunState], what: &str) -> Result<RunFilter> {
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

pub(crate) fn check(opts: &BulkOptions) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bulk_answer_names_done_also_as_the_cli_did() {
        let report = BulkReport {
            matched: 3,
            done: 2,
            skipped: 1,
            batches: 1,
            ..BulkReport::default()
        };
        let v = serde_json::to_value(BulkAnswer::new(BulkAction::Cancel, report.clone())).unwrap();
        assert_eq!(v["action"], "cancel");
        assert_eq!(v["done"], 2);
        assert_eq!(v["cancelled"], 2);
        assert!(v.get("retried").is_none());
        assert_eq!(v["cancel_requested"], 0);
        let v = serde_json::to_value(BulkAnswer::new(BulkAction::Retry, report)).unwrap();
        assert_eq!(
            (v["done"].clone(), v["retried"].clone()),
            (2.into(), 2.into())
        );
        assert!(v.get("cancelled").is_none());
    }
}
