//! Composition as data: batches ([`NewBatch`], [`Batch`]), dependencies between runs
//! ([`Dependency`]) and what a run reads of the runs it is linked to ([`LinkedResult`],
//! [`RunLinks`]). Pure types: the core validates, the store's end-writer keeps them in step
//! with each end, in the same transaction.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::InputError;
use crate::ids::{BatchId, RunId};

/// Most runs one batch may hold (`toolq enqueue --file F --batch`, [`crate::Client::create_batch`]).
pub const MAX_BATCH_RUNS: usize = 1_000_000;
/// Most parents one run may wait for.
pub const MAX_PARENTS: usize = 1_000;
/// Failed (or cancelled) runs a batch's summary names at most.
pub const FIRST_FAILURES: usize = 5;

/// How a dependent run treats one parent.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DepMode {
    /// `--after`: the parent must complete; if it fails or is cancelled, the dependent run is
    /// cancelled with an error naming it.
    #[default]
    All,
    /// `--after-any`: the parent must reach a final state, whichever.
    Any,
    /// A batch's callback run: its "parent" is the batch (`bt_…`), resolved when it completes.
    Batch,
}

impl DepMode {
    /// The mode as stored (`run_deps.mode`).
    pub fn as_str(self) -> &'static str {
        match self {
            DepMode::All => "all",
            DepMode::Any => "any",
            DepMode::Batch => "batch",
        }
    }

    /// The edge's kind as the `run_edges` view and `show` name it.
    pub fn edge_kind(self) -> &'static str {
        match self {
            DepMode::All => "after",
            DepMode::Any => "after_any",
            DepMode::Batch => "callback",
        }
    }
}

impl FromStr for DepMode {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [DepMode::All, DepMode::Any, DepMode::Batch]
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| InputError::new("dependency mode", s, "must be all, any or batch"))
    }
}

impl fmt::Display for DepMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One dependency edge as stored (`run_deps`): `child` waits for `parent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Dependency {
    /// The run (or, mode `batch`, the batch) waited for.
    pub parent: String,
    /// The dependent run.
    pub child: String,
    /// How the child treats the parent.
    pub mode: DepMode,
    /// The parent's final state, once it reached one (`None` while the child waits for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
}

/// The run a batch enqueues when it completes (`--on-complete TOOL --args JSON`), validated
/// when the batch is created. It reads the batch's summary as its one parent result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Callback {
    /// The tool.
    pub tool: String,
    /// Its args (validated against the tool's schema when the batch was created).
    pub args: Value,
    /// Its title.
    pub title: String,
    /// Its attempts.
    pub max_attempts: i64,
    /// Its priority.
    pub priority: i64,
}

/// A batch to create, with its runs, in one transaction.
#[derive(Debug, Clone)]
pub struct NewBatch {
    /// Fresh id.
    pub id: BatchId,
    /// The session that gets its completion message.
    pub session_id: String,
    /// Title.
    pub title: String,
    /// The callback run, if any.
    pub on_complete: Option<Callback>,
    /// Now.
    pub created_at: DateTime<Utc>,
}

/// A run of a batch that did not complete, as a batch's summary names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FailedRun {
    /// Run id.
    pub id: String,
    /// Its tool.
    pub tool: String,
    /// failed or cancelled.
    pub state: String,
    /// The error its session saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A batch as stored (`batches`; the ops view `batch_progress`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Batch {
    /// Its id.
    pub id: BatchId,
    /// The session that gets its completion message.
    pub session_id: String,
    /// Title.
    pub title: String,
    /// `running` while a run of it is unfinished, else `completed`.
    pub state: &'static str,
    /// Runs added.
    pub total: i64,
    /// Runs not yet final.
    pub pending: i64,
    /// Runs that completed.
    pub completed: i64,
    /// Runs that failed.
    pub failed: i64,
    /// Runs that were cancelled.
    pub cancelled: i64,
    /// The callback run it enqueues when it completes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_complete: Option<Callback>,
    /// The callback run of its latest completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_run_id: Option<String>,
    /// Times it completed (a retry of its runs reopens it; each completion sends a message).
    pub completions: i64,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// When its last run became final (`None` while one is unfinished).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    /// Its runs by current state (read by [`crate::store::Engine::batch_get`] only; empty in
    /// a list).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub states: BTreeMap<String, i64>,
    /// Its first runs that failed or were cancelled, oldest first, at most
    /// [`FIRST_FAILURES`] (read by `batch_get` only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub first_failures: Vec<FailedRun>,
}

impl Batch {
    /// Whether every run of it is final.
    pub fn is_complete(&self) -> bool {
        self.completed_at.is_some()
    }

    /// The batch as `toolq batch wait --json` prints it and `GET /batches/{id}/wait` answers.
    pub fn waited(&self) -> BatchWaited {
        BatchWaited {
            id: self.id.clone(),
            state: self.state,
            ended: self.is_complete(),
            total: self.total,
            pending: self.pending,
            completed: self.completed,
            failed: self.failed,
            cancelled: self.cancelled,
            first_failures: self.first_failures.clone(),
            callback_run_id: self.callback_run_id.clone(),
        }
    }

    /// The batch as its callback reads it (`ctx.parent_results()`): its one parent, with the
    /// summary of its latest completion; `None` read as a batch pruned since.
    pub fn as_parent(id: &str, b: Option<&Batch>) -> LinkedResult {
        let result = b
            .map(|b| BatchSummary {
                batch_id: b.id.to_string(),
                title: b.title.clone(),
                total: b.total,
                completed: b.completed,
                failed: b.failed,
                cancelled: b.cancelled,
                first_failed: b.first_failures.clone(),
                completion: b.completions,
                callback_run_id: b.callback_run_id.clone(),
            })
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or(Value::Null);
        LinkedResult {
            id: id.to_string(),
            tool: None,
            state: b.map_or("pruned", |b| b.state).to_string(),
            result,
            error: None,
        }
    }
}

/// A batch after a wait ([`Batch::waited`]): whether it ended, and its counts.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct BatchWaited {
    /// Its id.
    pub id: BatchId,
    /// `running` or `completed`.
    pub state: &'static str,
    /// Whether every run of it is final (false when the wait timed out first).
    pub ended: bool,
    /// Runs added.
    pub total: i64,
    /// Runs not yet final.
    pub pending: i64,
    /// Runs that completed.
    pub completed: i64,
    /// Runs that failed.
    pub failed: i64,
    /// Runs that were cancelled.
    pub cancelled: i64,
    /// Its first runs that failed or were cancelled.
    pub first_failures: Vec<FailedRun>,
    /// The callback run of its latest completion.
    pub callback_run_id: Option<String>,
}

/// Which batches a list shows, newest first.
#[derive(Debug, Clone, Default)]
pub struct BatchFilter {
    /// Only this session's.
    pub session: Option<String>,
    /// Only `running` or only `completed` ones.
    pub state: Option<String>,
    /// Only ids that sort before this one (the next page).
    pub before: Option<BatchId>,
    /// At most this many.
    pub limit: i64,
}

/// A batch's completion as its message and its callback read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchSummary {
    /// The batch.
    pub batch_id: String,
    /// Its title.
    pub title: String,
    /// Runs in it.
    pub total: i64,
    /// How many completed.
    pub completed: i64,
    /// How many failed.
    pub failed: i64,
    /// How many were cancelled.
    pub cancelled: i64,
    /// The first that failed or were cancelled.
    pub first_failed: Vec<FailedRun>,
    /// Which completion this is (1 unless a retry reopened the batch).
    pub completion: i64,
    /// The callback run enqueued with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_run_id: Option<String>,
}

impl BatchSummary {
    /// The message text: `Batch "t" (bt_…) finished: 98 completed, 2 failed (bg_…, bg_…), 0 cancelled.`
    pub fn body(&self) -> String {
        let mut s = format!(
            "Batch {:?} ({}) finished: {} completed, {} failed, {} cancelled",
            self.title, self.batch_id, self.completed, self.failed, self.cancelled
        );
        if !self.first_failed.is_empty() {
            let ids: Vec<&str> = self.first_failed.iter().map(|f| f.id.as_str()).collect();
            s.push_str(&format!("; first not completed: {}", ids.join(", ")));
        }
        s.push('.');
        s
    }
}

/// What a run reads of a linked run: a parent's (`ctx.parent_results()`) or a child's
/// (`ctx.wait_children()`) outcome. A batch callback's one parent is the batch: its `result`
/// is the [`BatchSummary`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkedResult {
    /// The run's (or batch's) id.
    pub id: String,
    /// Its tool (`None` for a batch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Its state.
    pub state: String,
    /// Its result.json (a run that is not final yet: `null`).
    pub result: Value,
    /// The error its session saw, if it did not complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A linked run as `show` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct LinkedRun {
    /// Run id.
    pub id: String,
    /// Its tool.
    pub tool: String,
    /// Its state.
    pub state: String,
}

/// How a run is linked to others: its batch, the runs it waits for and that wait for it,
/// the run that spawned it and the runs it spawned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RunLinks {
    /// Its batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// The runs (or batch) it waits for, with how and whether each resolved.
    pub parents: Vec<Dependency>,
    /// The runs that wait for it.
    pub dependents: Vec<Dependency>,
    /// The run that spawned it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// The runs it spawned, oldest first.
    pub children: Vec<LinkedRun>,
}

/// Which linked runs' results to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linked {
    /// The runs (or batch) it depends on.
    Parents,
    /// The runs it spawned.
    Children,
}

/// Why a dependent run was cancelled when its parent ended unsuccessfully.
pub fn parent_failed_error(parent: &str, state: &str) -> String {
    format!("cancelled: its parent {parent} {state}, and it ran only after its parents completed")
}

/// A run id or the id of a run to be inserted in the same call, as `--after` names it.
pub fn check_parents(child: &RunId, parents: &[RunId]) -> Result<(), InputError> {
    if parents.len() > MAX_PARENTS {
        return Err(InputError::new(
            "after",
            format!("{} runs", parents.len()),
            format!("a run may wait for at most {MAX_PARENTS} parents"),
        ));
    }
    if parents.contains(child) {
        return Err(InputError::new(
            "after",
            child.as_str(),
            "a run cannot be its own parent",
        ));
    }
    Ok(())
}

/// Checks the links between the requests of one call (`links[i]`: the requests that request
/// `i` waits for, 0-based): every index names a request of the call, none names itself, and
/// there is no cycle. Errors count requests from 1, as enqueue errors do.
pub fn check_request_links(links: &[Vec<usize>]) -> Result<(), InputError> {
    for (i, parents) in links.iter().enumerate() {
        for &j in parents {
            if j >= links.len() {
                return Err(InputError::new(
                    format!("request {}: after", i + 1),
                    format!("request {}", j + 1),
                    format!("there are only {} requests", links.len()),
                ));
            }
            if j == i {
                return Err(InputError::new(
                    format!("request {}: after", i + 1),
                    format!("request {}", j + 1),
                    "a run cannot be its own parent",
                ));
            }
        }
    }
    // Depth-first, iteratively (a chain of 100,000 requests must not overflow the stack):
    // 0 unvisited, 1 on the current path, 2 done.
    let mut mark = vec![0u8; links.len()];
    for start in 0..links.len() {
        if mark[start] != 0 {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = 1;
        while let Some((node, next)) = path.last().copied() {
            match links[node].get(next) {
                Some(&p) => {
                    if let Some(top) = path.last_mut() {
                        top.1 += 1;
                    }
                    match mark[p] {
                        0 => {
                            mark[p] = 1;
                            path.push((p, 0));
                        }
                        1 => {
                            let from = path.iter().position(|(n, _)| *n == p).unwrap_or(0);
                            let mut cycle: Vec<String> = path[from..]
                                .iter()
                                .map(|(n, _)| format!("{}", n + 1))
                                .collect();
                            cycle.push(format!("{}", p + 1));
                            return Err(InputError::new(
                                "after",
                                format!("requests {}", cycle.join(" -> ")),
                                "the runs wait for each other in a cycle, so none could start",
                            ));
                        }
                        _ => {}
                    }
                }
                None => {
                    mark[node] = 2;
                    path.pop();
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_links_refuse_cycles_and_bad_indexes() {
        assert!(check_request_links(&[vec![], vec![0], vec![0, 1]]).is_ok());
        let e = check_request_links(&[vec![2], vec![0], vec![1]]).unwrap_err();
        assert!(e.to_string().contains("cycle"), "{e}");
        assert!(e.to_string().contains("1 -> 3 -> 2 -> 1"), "{e}");
        let e = check_request_links(&[vec![0]]).unwrap_err();
        assert!(e.to_string().contains("own parent"), "{e}");
        let e = check_request_links(&[vec![5]]).unwrap_err();
        assert!(e.to_string().contains("only 1 requests"), "{e}");
        let chain: Vec<Vec<usize>> = (0..100_000)
            .map(|i| if i == 0 { vec![] } else { vec![i - 1] })
            .collect();
        assert!(check_request_links(&chain).is_ok());
    }
}
