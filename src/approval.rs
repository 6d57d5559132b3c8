//! Approvals: a run of a tool that requires approval waits in `awaiting_approval` with an
//! `approval_request` inbox message; an operator approves it (queued again, then executed),
//! denies it (cancelled with a message), or its deadline passes (cancelled as expired).
//! Decision, actor, time and note stay on the run. Everything is in the database, so it
//! survives restarts.

use chrono::{DateTime, Utc};

use crate::client::{Client, about_of};
use crate::error::{Error, InputError, Result};
use crate::ids::RunId;
use crate::inbox::{FinalKind, approval_message, final_message};
use crate::run::{Run, RunState};
use crate::store::approvals::{self, Decision};
use crate::store::codec::ts;
use crate::store::finish::{FinishRecord, Outcome};
use crate::store::inbox::NewMessage;
use crate::tool::ToolPolicy;

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
    let message = approval_message(&about, &run.args, deadline.map(ts).as_deref());
    FinishRecord {
        id: run.id.to_string(),
        session_id: run.session_id.clone(),
        attempt: run.attempt,
        token: run.lease_token.clone().unwrap_or_default(),
        outcome: Outcome::AwaitApproval { deadline },
        error: None,
        internal_error: None,
        error_entry: None,
        status_text: Some("awaiting approval".into()),
        progress: None,
        output_tail: None,
        log: None,
        result: None,
        extra_blobs: Vec::new(),
        message: Some(message),
        message_data: None,
    }
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
        let (rid, by_s, note_s) = (id.to_string(), by.to_string(), note.map(str::to_string));
        let ok = self
            .store()
            .write_async(move |tx| {
                approvals::approve(
                    tx,
                    &Decision {
                        id: &rid,
                        by: &by_s,
                        note: note_s.as_deref(),
                        now,
                    },
                )
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
        let error = match reason {
            Some(r) => format!("approval denied by {by}: {r}"),
            None => format!("approval denied by {by}"),
        };
        let now = self.now();
        let ok = self
            .reject(
                vec![(run, by.to_string(), reason.map(str::to_string), error)],
                "denied",
                now,
            )
            .await?;
        let run = self.get(id).await?;
        if ok == 0 {
            return Err(not_awaiting(&run, "denied"));
        }
        Ok(run)
    }

    /// Cancels, as expired, every awaiting run whose approval deadline has passed; returns
    /// how many. The worker calls this on every heartbeat.
    pub async fn expire_approvals(&self) -> Result<usize> {
        let now = self.now();
        let runs = self
            .store()
            .read_async(move |c| approvals::overdue(c, now, 500))
            .await?;
        if runs.is_empty() {
            return Ok(0);
        }
        let batch = runs
            .into_iter()
            .map(|r| {
                let at = r.approval_deadline.map(ts).unwrap_or_default();
                let error = format!("approval not given before its deadline {at}; expired");
                (r, "toolq".to_string(), None, error)
            })
            .collect();
        self.reject(batch, "expired", now).await
    }

    async fn reject(
        &self,
        batch: Vec<(Run, String, Option<String>, String)>,
        state: &'static str,
        now: DateTime<Utc>,
    ) -> Result<usize> {
        let messages: Vec<Option<NewMessage>> = batch
            .iter()
            .map(|(run, _, _, error)| {
                run.signal_on_completion.then(|| {
                    let mut m = final_message(FinalKind::Cancelled, &about_of(run), error);
                    if let Some(e) = self.registry().get(&run.tool) {
                        e.format_message(&mut m);
                    }
                    m
                })
            })
            .collect();
        Ok(self
            .store()
            .write_async(move |tx| {
                let mut done = 0;
                for ((run, by, note, error), msg) in batch.iter().zip(&messages) {
                    let d = Decision {
                        id: run.id.as_str(),
                        by,
                        note: note.as_deref(),
                        now,
                    };
                    if approvals::reject(tx, &d, state, error)? {
                        done += 1;
                        if let Some(m) = msg {
                            crate::store::inbox::insert(tx, m, now)?;
                        }
                    }
                }
                Ok(done)
            })
            .await?)
    }
}

fn not_awaiting(run: &Run, what: &str) -> Error {
    Error::Conflict(format!(
        "run {} is {}; only awaiting_approval runs can be {what}",
        run.id, run.state
    ))
}
