//! A prune's bookkeeping, once for both engines: the walk of one runs batch over the final
//! states from a [`RunsCursor`], what each step's batch removed, and which tables a dry run
//! counts. An engine's retention code only runs the queries each of these names.

use chrono::{DateTime, Utc};

use super::types::{PruneCutoffs, RunsCursor};
use super::upkeep::PruneStep;
use crate::retention::Removed;

/// The final states, in the order a prune walks them. A batch's query names its state as a
/// literal (not a parameter), so the planner can prove the partial index `runs_final_idx`
/// applies.
const FINAL_STATES: [&str; 3] = ["completed", "failed", "cancelled"];

/// A run a batch found prunable.
pub(crate) struct PrunableRun {
    /// Its id.
    pub(crate) id: String,
    /// Its `finished_at` text (the cursor's position).
    pub(crate) finished_at: String,
    /// Its session (owner of its blobs).
    pub(crate) session_id: String,
}

/// One page a runs batch asks for: at most `want` prunable runs in final state `state` that
/// finished at or after `after`, oldest first.
pub(crate) struct Page<'c> {
    /// The final state, as a literal for the query text.
    pub(crate) state: &'static str,
    /// The finish time the walk reached in that state ("" from its start).
    pub(crate) after: &'c str,
    /// How many runs are still wanted.
    pub(crate) want: i64,
}

/// One runs batch's walk: pages of prunable runs, state after state, from where the previous
/// batch stopped, until `batch` runs are found or every final state is done. Kept runs are
/// not scanned again batch after batch.
pub(crate) struct RunsWalk<'c> {
    cursor: &'c mut RunsCursor,
    batch: usize,
    found: Vec<PrunableRun>,
}

impl<'c> RunsWalk<'c> {
    /// A walk of at most `batch` runs from `cursor` (which it moves on).
    pub(crate) fn new(cursor: &'c mut RunsCursor, batch: usize) -> Self {
        Self {
            cursor,
            batch,
            found: Vec::new(),
        }
    }

    /// The next page to read, or `None` when the batch is full or every state is done.
    pub(crate) fn next_page(&self) -> Option<Page<'_>> {
        let state = *FINAL_STATES.get(self.cursor.state)?;
        (self.found.len() < self.batch).then(|| Page {
            state,
            after: &self.cursor.after,
            want: (self.batch - self.found.len()) as i64,
        })
    }

    /// Takes the rows a page returned (`want` as the page asked): the cursor moves on within
    /// the state after a full page, else on to the next state.
    pub(crate) fn took(&mut self, rows: Vec<PrunableRun>, want: i64) {
        let last = rows.last().map(|r| r.finished_at.as_str());
        self.cursor.advance(last, rows.len(), want);
        self.found.extend(rows);
    }

    /// The runs found, oldest first within each state.
    pub(crate) fn found(self) -> Vec<PrunableRun> {
        self.found
    }
}

/// A prune step that deletes from one table by one cutoff (every step but the runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TableStep {
    /// Old acknowledged messages (`acked_at` before the cutoff).
    AckedInbox,
    /// Old occurrences (`recorded_at` before the cutoff), never a schedule's latest.
    Occurrences,
    /// Worker rows stopped before the cutoff that no running run names.
    Workers,
    /// Batches completed before the cutoff with no run left.
    Batches,
}

impl TableStep {
    /// The table step `step` is, or `None` for [`PruneStep::Runs`] (a [`RunsWalk`]).
    pub(crate) fn of(step: PruneStep) -> Option<Self> {
        match step {
            PruneStep::Runs => None,
            PruneStep::AckedInbox => Some(Self::AckedInbox),
            PruneStep::Occurrences => Some(Self::Occurrences),
            PruneStep::Workers => Some(Self::Workers),
            PruneStep::Batches => Some(Self::Batches),
        }
    }

    /// The cutoff this step deletes before.
    pub(crate) fn cutoff(self, c: &PruneCutoffs) -> DateTime<Utc> {
        match self {
            Self::AckedInbox => c.acked_inbox_before,
            Self::Occurrences => c.occurrences_before,
            Self::Workers => c.workers_before,
            Self::Batches => c.batches_before,
        }
    }

    /// What a batch that deleted `n` rows of this step's table removed.
    pub(crate) fn removed(self, n: u64) -> Removed {
        let mut r = Removed::default();
        match self {
            Self::AckedInbox => r.inbox = n,
            Self::Occurrences => r.occurrences = n,
            Self::Workers => r.workers = n,
            Self::Batches => r.batches = n,
        }
        r
    }
}

/// What a dry run counts, one query each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// Prunable completed runs (by `retention.finished_runs`).
    RunsCompleted,
    /// Prunable failed runs (by `retention.failed_runs`).
    RunsFailed,
    /// Prunable cancelled runs (by `retention.cancelled_runs`).
    RunsCancelled,
    /// The blobs (logs, results) of prunable runs.
    Blobs,
    /// Messages about prunable runs, and old acknowledged ones (each counted once).
    Inbox,
    /// Old occurrences (never a schedule's latest).
    Occurrences,
    /// Stopped worker rows no running run names.
    Workers,
    /// Prunable batches.
    Batches,
}

impl Counted {
    /// Every count, in the order a dry run makes them.
    pub(crate) const ALL: [Counted; 8] = [
        Counted::RunsCompleted,
        Counted::RunsFailed,
        Counted::RunsCancelled,
        Counted::Blobs,
        Counted::Inbox,
        Counted::Occurrences,
        Counted::Workers,
        Counted::Batches,
    ];

    /// Adds this count's `n` rows to `r`.
    pub(crate) fn add_to(self, r: &mut Removed, n: u64) {
        match self {
            Counted::RunsCompleted | Counted::RunsFailed | Counted::RunsCancelled => {
                r.add_runs(self.state().unwrap_or_default(), n)
            }
            Counted::Blobs => r.blobs += n,
            Counted::Inbox => r.inbox += n,
            Counted::Occurrences => r.occurrences += n,
            Counted::Workers => r.workers += n,
            Counted::Batches => r.batches += n,
        }
    }

    /// The final state a runs count counts (a literal for its query: `runs_final_idx`
    /// serves it), or `None` for the other counts.
    pub(crate) fn state(self) -> Option<&'static str> {
        match self {
            Counted::RunsCompleted => Some(FINAL_STATES[0]),
            Counted::RunsFailed => Some(FINAL_STATES[1]),
            Counted::RunsCancelled => Some(FINAL_STATES[2]),
            _ => None,
        }
    }

    /// What the count's query does, for its error.
    pub(crate) fn action(self) -> &'static str {
        match self {
            Counted::RunsCompleted => "count prunable completed runs",
            Counted::RunsFailed => "count prunable failed runs",
            Counted::RunsCancelled => "count prunable cancelled runs",
            Counted::Blobs => "count prunable blobs",
            Counted::Inbox => "count prunable inbox rows",
            Counted::Occurrences => "count prunable occurrences",
            Counted::Workers => "count prunable workers",
            Counted::Batches => "count prunable batches",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(finished_at: &str) -> PrunableRun {
        PrunableRun {
            id: format!("run_{finished_at}"),
            finished_at: finished_at.to_string(),
            session_id: "default".into(),
        }
    }

    fn page(walk: &RunsWalk<'_>) -> Option<(&'static str, String, i64)> {
        walk.next_page()
            .map(|p| (p.state, p.after.to_string(), p.want))
    }

    #[test]
    fn a_walk_stays_in_a_state_after_a_full_page_and_moves_on_after_a_short_one() {
        let mut cursor = RunsCursor::default();
        let mut walk = RunsWalk::new(&mut cursor, 3);
        assert_eq!(page(&walk), Some(("completed", String::new(), 3)));
        walk.took(vec![run("t1"), run("t2")], 3);
        assert_eq!(page(&walk), Some(("failed", String::new(), 1)));
        walk.took(vec![run("t3")], 1);
        assert_eq!(page(&walk), None, "the batch is full");
        assert_eq!(walk.found().len(), 3);
        assert_eq!(
            cursor,
            RunsCursor {
                state: 1,
                after: "t3".into()
            }
        );
    }

    #[test]
    fn a_walk_ends_when_every_final_state_is_done() {
        let mut cursor = RunsCursor::default();
        let mut walk = RunsWalk::new(&mut cursor, 10);
        for state in ["completed", "failed", "cancelled"] {
            let (s, _, want) = page(&walk).expect("a page");
            assert_eq!(s, state);
            walk.took(Vec::new(), want);
        }
        assert_eq!(page(&walk), None);
        assert!(walk.found().is_empty());
        assert_eq!(cursor.state, FINAL_STATES.len());
    }

    #[test]
    fn a_table_step_counts_its_own_table() {
        assert_eq!(TableStep::of(PruneStep::Runs), None);
        let step = TableStep::of(PruneStep::Occurrences).expect("a table step");
        assert_eq!(step.removed(4).occurrences, 4);
        assert_eq!(step.removed(4).total(), 4);
    }
}
