//! What composition writes, the same on every engine: how a dependent run is cancelled when
//! a parent ends unsuccessfully, how a new dependent starts (blocked, due, or cancelled at
//! once), and what a batch's completion writes (its message and its callback run). Each
//! engine's `compose.rs` reads the facts and binds these to its own statements, in the
//! transaction of the end (or insert) that caused them.

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::ids::RunId;
use crate::inbox::FinalKind;
use crate::run::composition::parent_failed_error;
use crate::run::ending::{blank, end_unsuccessfully};
use crate::run::{
    BatchSummary, Callback, DepMode, FailedRun, Fence, FinishRecord, NewRun, Run, RunState,
};

/// The `run_at` of a blocked run: the claim never reaches it (the same instant a wait
/// without timeout uses).
pub(crate) fn blocked_until() -> DateTime<Utc> {
    crate::run::steps::far_future()
}

/// A final state as stored text, or `None` for a state that is not final.
pub(crate) fn final_state(state: &str) -> Option<&'static str> {
    match state {
        "completed" => Some("completed"),
        "failed" => Some("failed"),
        "cancelled" => Some("cancelled"),
        _ => None,
    }
}

/// How a new (or retried) dependent run starts, from its edges' parents' states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DepStart {
    /// Every parent resolved as it needs: the run is due as inserted.
    Ready,
    /// This many parents are not final yet: blocked.
    Blocked(i64),
    /// A parent (mode all) failed or was cancelled: the run is cancelled at once.
    Cancel {
        /// The parent.
        parent: String,
        /// Its final state.
        state: String,
    },
}

/// [`DepStart`] from each edge's mode and its parent's current state (`None`: unknown to
/// the caller, which refuses it before).
pub(crate) fn dep_start<'a>(
    edges: impl IntoIterator<Item = (DepMode, &'a str, &'a str)>,
) -> DepStart {
    let mut pending = 0;
    for (mode, parent, state) in edges {
        match (mode, final_state(state)) {
            (_, None) => pending += 1,
            (DepMode::All, Some(s)) if s != "completed" => {
                return DepStart::Cancel {
                    parent: parent.to_string(),
                    state: s.to_string(),
                };
            }
            _ => {}
        }
    }
    if pending == 0 {
        DepStart::Ready
    } else {
        DepStart::Blocked(pending)
    }
}

/// What a parent's end does to one dependent (its edge's mode, the parent's final state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DepEffect {
    /// One parent fewer to wait for.
    Release,
    /// The dependent is cancelled.
    Cancel,
}

/// [`DepEffect`] of a parent ending in `state` on an edge of `mode`.
pub(crate) fn dep_effect(mode: DepMode, state: &str) -> DepEffect {
    if mode == DepMode::All && state != "completed" {
        DepEffect::Cancel
    } else {
        DepEffect::Release
    }
}

/// The end of a dependent run cancelled because `parent` ended `state`: fenced by its
/// current state and attempt as any end of a run that is not running, with its one final
/// message (the default text: the tool's formatter is not at hand inside a transaction).
pub(crate) fn dependent_cancel(child: &Run, parent: &str, state: &str) -> FinishRecord {
    let error = parent_failed_error(parent, state);
    let mut rec = end_unsuccessfully(
        blank(child, Fence::Waiting(child.state)),
        child,
        FinalKind::Cancelled,
        &error,
        child.attempt + 1,
    );
    rec.internal_error = Some(format!("dependency: parent {parent} ended {state}"));
    rec.encode_message();
    rec
}

/// A batch's counters as the completing transaction read them.
#[derive(Debug, Clone)]
pub(crate) struct BatchRow {
    /// Id.
    pub id: String,
    /// Its session.
    pub session_id: String,
    /// Title.
    pub title: String,
    /// Runs in it.
    pub total: i64,
    /// Completed runs.
    pub completed: i64,
    /// Failed runs.
    pub failed: i64,
    /// Cancelled runs.
    pub cancelled: i64,
    /// The callback, as stored JSON.
    pub on_complete: Option<String>,
    /// Completions before this one.
    pub completions: i64,
}

/// What a batch's completion writes: the summary (its message data), the message text, and
/// the callback run (with its edge to the batch, resolved `completed`).
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    /// The summary.
    pub summary: BatchSummary,
    /// Its JSON text (the message's data).
    pub data: String,
    /// The message text.
    pub body: String,
    /// The callback run to insert, if the batch has one.
    pub callback: Option<NewRun>,
}

/// The completion of `b` at `now`, whose first failures are `first_failed`.
pub(crate) fn completion(
    b: &BatchRow,
    first_failed: Vec<FailedRun>,
    now: DateTime<Utc>,
) -> Completion {
    let callback = b
        .on_complete
        .as_deref()
        .and_then(|text| serde_json::from_str::<Callback>(text).ok())
        .map(|c| callback_run(b, &c, now));
    let summary = BatchSummary {
        batch_id: b.id.clone(),
        title: b.title.clone(),
        total: b.total,
        completed: b.completed,
        failed: b.failed,
        cancelled: b.cancelled,
        first_failed,
        completion: b.completions + 1,
        callback_run_id: callback.as_ref().map(|r| r.id.to_string()),
    };
    let data = json!({
        "status": "batch_completed",
        "batch_id": summary.batch_id,
        "title": summary.title,
        "total": summary.total,
        "completed": summary.completed,
        "failed": summary.failed,
        "cancelled": summary.cancelled,
        "first_failed": summary.first_failed,
        "completion": summary.completion,
        "callback_run_id": summary.callback_run_id,
    })
    .to_string();
    Completion {
        body: summary.body(),
        summary,
        data,
        callback,
    }
}

/// The callback run of a batch's completion: in the batch's session, due at once, with one
/// dependency (mode `batch`) on the batch, already resolved.
fn callback_run(b: &BatchRow, c: &Callback, now: DateTime<Utc>) -> NewRun {
    NewRun {
        id: RunId::generate(),
        session_id: b.session_id.clone(),
        tool: c.tool.clone(),
        args: c.args.to_string(),
        title: c.title.clone(),
        priority: c.priority,
        max_attempts: c.max_attempts,
        run_at: now,
        created_at: now,
        idempotency_key: None,
        timeout_ms: None,
        signal_on_completion: true,
        delivery: crate::run::Delivery::WhenIdle,
        schedule_id: None,
        fire_at: None,
        ticks: 1,
        unique: None,
        approval: None,
        batch_id: None,
        parent_run_id: None,
        after: Vec::new(),
        after_mode: DepMode::Batch,
        // A callback does not inherit the batch's runs' tags (there is no one set to take).
        tags: crate::run::Tags::new(),
        traceparent: None,
    }
}

/// The counter column a final state adds to.
pub(crate) fn counter_of(state: RunState) -> Option<&'static str> {
    match state {
        RunState::Completed => Some("completed"),
        RunState::Failed => Some("failed"),
        RunState::Cancelled => Some("cancelled"),
        _ => None,
    }
}

/// Per batch, the final ends counted in one transaction: (completed, failed, cancelled).
pub(crate) fn count_by_batch<'a>(
    ends: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<(&'a str, [i64; 3])> {
    let mut out: Vec<(&str, [i64; 3])> = Vec::new();
    for (batch, state) in ends {
        let slot = match state {
            "completed" => 0,
            "failed" => 1,
            "cancelled" => 2,
            _ => continue,
        };
        match out.iter_mut().find(|(b, _)| *b == batch) {
            Some((_, c)) => c[slot] += 1,
            None => {
                let mut c = [0; 3];
                c[slot] = 1;
                out.push((batch, c));
            }
        }
    }
    // A fixed order: two transactions that count in the same batches lock them alike.
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependent_starts_by_its_parents_states() {
        use DepMode::*;
        assert_eq!(dep_start([(All, "a", "completed")]), DepStart::Ready);
        assert_eq!(
            dep_start([(All, "a", "running"), (Any, "b", "queued")]),
            DepStart::Blocked(2)
        );
        assert_eq!(dep_start([(Any, "a", "failed")]), DepStart::Ready);
        assert_eq!(
            dep_start([(All, "a", "queued"), (All, "b", "cancelled")]),
            DepStart::Cancel {
                parent: "b".into(),
                state: "cancelled".into()
            }
        );
        assert_eq!(dep_effect(All, "failed"), DepEffect::Cancel);
        assert_eq!(dep_effect(Any, "failed"), DepEffect::Release);
        assert_eq!(dep_effect(All, "completed"), DepEffect::Release);
    }

    #[test]
    fn ends_are_counted_per_batch_in_id_order() {
        let c = count_by_batch([
            ("bt_b", "completed"),
            ("bt_a", "failed"),
            ("bt_b", "cancelled"),
            ("bt_b", "completed"),
        ]);
        assert_eq!(c, vec![("bt_a", [0, 1, 0]), ("bt_b", [2, 0, 1])]);
    }
}
