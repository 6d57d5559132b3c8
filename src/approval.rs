//! Approvals: a run of a tool that requires approval waits in `awaiting_approval` with an
//! `approval_request` inbox message; an operator approves it (queued again, then executed),
//! denies it (cancelled with a message), or its deadline passes (cancelled as expired).
//! Decision, actor, time and note stay on the run. Everything is in the database, so it
//! survives restarts.

use chrono::{DateTime, Utc};

use crate::client::{Client, about_of};
use crate::clock::ts;
use crate::error::{Error, InputError, Result};
use crate::ids::RunId;
use crate::inbox::approval_message;
use crate::run::{Fence, FinishRecord, Outcome};
use crate::run::{Run, RunState};
use crate::store::RunApprove;
use crate::tool::ToolPolicy;
use crate::worker::finish::{WaitingEnd, blank, decide_waiting};

/// Whether a claimed run must first wait for approval, and until when. `None`: run it.
/// A run approved once is not asked again (e.g. on retry); a denied one that is retried is.
pub fn gate_of(client: &Client, run: &Run, now: DateTime<Utc>) -> Option<Option<DateTime<Utc>>> {
    if run.approval_state.as_deref() == Some("approved") {
        return None;
    }
    let entry = client.registry().get(&run.tool)?;
    let cfg = &client.config().approvals;
    let required =
        entry.def.policy == ToolPolicy::RequiresApproval || cfg.require.contains(&run.tool);
    if !required {
        return None;
    }
    let after = entry.def.approval_deadline.or(cfg.deadline);
    Some(after.and_then(|d| chrono::Duration::from_std(d).ok().map(|d| now + d)))
}

/// The records that move a claimed run to `awaiting_approval` (fenced by its lease) and post
/// its approval request. Pure.
pub fn await_approval(run: &Run, deadline: Option<DateTime<Utc>>) -> FinishRecord {
    let about = about_of(run);
    let mut rec = blank(
        run,
        Fence::Lease(run.lease_token.clone().unwrap_or_default()),
    );
    rec.outcome = Outcome::AwaitApproval { deadline };
    rec.status_text = Some("awaiting approval".into());
    rec.message = Some(approval_message(
        &about,
        &run.args,
        deadline.map(ts).as_deref(),
    ));
    rec
}

fn check_actor(by: &str) -> Result<(), InputError> {
    if by.trim().is_empty() {
        return Err(InputError::new("by", by, "must name who decides"));
    }
    Ok(())
}

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

fn not_awaiting(run: &Run, what: &str) -> Error {
    Error::Conflict(format!(
        "run {} is {}; only awaiting_approval runs can be {what}",
        run.id, run.state
    ))
}
