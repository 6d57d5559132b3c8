//! Approve, deny and expire awaiting runs.

use crate::client::Client;
use crate::error::{Error, InputError, Result};
use crate::ids::RunId;
use crate::run::{Run, RunState};
use crate::store::RunApprove;
use crate::worker::finish::{WaitingEnd, decide_waiting};

impl Client {
    /// Approves an awaiting run: it is queued again and executes as approved.
    pub async fn approve(&self, id: &RunId, by: &str, note: Option<&str>) -> Result<Run> {
        check_actor(by)?;
        let now = self.now();
        let ok = self
            .engine()
            .run_approve(RunApprove {
                id: id.clone(),
                by: by.to_string(),
                note: note.map(str::to_string),
                now,
            })
            .await?;
        let run = self.get(id).await?;
        if !ok {
            return Err(not_awaiting(&run, "approved"));
        }
        self.wake_workers();
        Ok(run)
    }

    /// Denies an awaiting run: it ends `cancelled` with a message naming who denied it and why.
    pub async fn deny(&self, id: &RunId, by: &str, reason: Option<&str>) -> Result<Run> {
        check_actor(by)?;
        let run = self.get(id).await?;
        if run.state != RunState::AwaitingApproval {
            return Err(not_awaiting(&run, "denied"));
        }
        let end = WaitingEnd::Denied {
            by: by.to_string(),
            reason: reason.map(str::to_string),
        };
        let record = decide_waiting(&run, end);
        let applied = self.record_ends(vec![(run.tool.clone(), record)]).await?;
        let run = self.get(id).await?;
        if applied.first() != Some(&true) {
            return Err(not_awaiting(&run, "denied"));
        }
        Ok(run)
    }

    /// Cancels, as expired, every awaiting run whose approval deadline has passed; returns
    /// how many. The worker calls this on every heartbeat.
    pub async fn expire_approvals(&self) -> Result<usize> {
        let now = self.now();
        let runs = self.engine().run_list_overdue_approvals(now, 500).await?;
        if runs.is_empty() {
            return Ok(0);
        }
        let records = runs
            .into_iter()
            .map(|r| (r.tool.clone(), decide_waiting(&r, WaitingEnd::Expired)))
            .collect();
        let applied = self.record_ends(records).await?;
        Ok(applied.into_iter().filter(|&ok| ok).count())
    }
}

fn check_actor(by: &str) -> Result<(), InputError> {
    if by.trim().is_empty() {
        return Err(InputError::new("by", by, "must name who decides"));
    }
    Ok(())
}

fn not_awaiting(run: &Run, what: &str) -> Error {
    Error::Conflict(format!(
        "run {} is {}; only awaiting_approval runs can be {what}",
        run.id, run.state
    ))
}
