//! Approve, deny and expire awaiting runs.

use crate::client::Client;
use crate::error::{Error, InputError, Result};
use crate::ids::RunId;
use crate::run::ending::WaitingEnd;
use crate::run::{Run, RunState};
use crate::store::RunApprove;

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
        let record = self.core().waiting_end(&run, end);
        let applied = self.core().record_ends(vec![record]).await?;
        let run = self.get(id).await?;
        if applied.first() != Some(&true) {
            return Err(not_awaiting(&run, "denied"));
        }
        Ok(run)
    }

    /// Cancels, as expired, every awaiting run whose approval deadline has passed (with its
    /// inbox message); returns how many. Workers do this every heartbeat interval.
    pub async fn expire_approvals(&self) -> Result<usize> {
        self.core().expire_approvals().await
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
