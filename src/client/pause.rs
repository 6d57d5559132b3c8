//! Pause and resume, and why a queued run waits: the client's side of flow control (the
//! types and the window arithmetic are in [`crate::flow`]).
//!
//! A pause is a row in the database, so every worker's next claim and every restart honour
//! it. Paused work stays queued; running runs finish. Resuming commits, and the commit wakes
//! every worker (the change feed; this process's workers directly).

use chrono::SubsecRound;

use crate::client::Client;
use crate::error::{InputError, Result};
use crate::flow::{Pause, PauseOutcome, PauseScope};
use crate::run::{Run, RunState};

fn check_scope(scope: &PauseScope) -> Result<(), InputError> {
    match scope {
        PauseScope::Tool(v) if v.trim().is_empty() => {
            Err(InputError::new("--tool", v, "must name a tool"))
        }
        PauseScope::Session(v) if v.trim().is_empty() => {
            Err(InputError::new("--session", v, "must name a session"))
        }
        _ => Ok(()),
    }
}

impl Client {
    /// Pauses a tool, a session or everything: claims (on every worker) leave what it covers
    /// queued, and schedule ticks it covers are recorded as `paused`. Pausing what is already
    /// paused keeps the first pause (its time and author).
    pub async fn pause(
        &self,
        scope: PauseScope,
        by: Option<String>,
        reason: Option<String>,
    ) -> Result<PauseOutcome> {
        check_scope(&scope)?;
        let pause = Pause {
            scope: scope.clone(),
            // Milliseconds, as stored and as every other time in the JSON (`pause --json`
            // printed nanoseconds for a new pause).
            since: self.now().trunc_subsecs(3),
            by: by.filter(|b| !b.trim().is_empty()),
            reason: reason.filter(|r| !r.trim().is_empty()),
        };
        let new = self.engine().pause_set(pause.clone()).await?;
        if new {
            return Ok(PauseOutcome { pause, new });
        }
        let pauses = self.engine().pause_list().await?;
        let pause = pauses
            .into_iter()
            .find(|p| p.scope == scope)
            .unwrap_or(pause);
        Ok(PauseOutcome { pause, new })
    }

    /// Lifts a pause and wakes the workers; the pause that was lifted, or None if that scope
    /// was not paused.
    pub async fn resume(&self, scope: PauseScope) -> Result<Option<Pause>> {
        check_scope(&scope)?;
        let lifted = self.engine().pause_clear(scope).await?;
        if lifted.is_some() {
            self.wake_workers();
        }
        Ok(lifted)
    }

    /// The pauses in force, oldest first.
    pub async fn pauses(&self) -> Result<Vec<Pause>> {
        Ok(self.engine().pause_list().await?)
    }

    /// Why a queued run that is due is not starting, as far as this process can tell: a pause
    /// that covers it, its tool's `max_running` reached, or its tool's `rate` window full
    /// (with when it opens). Limits are this process's config (each worker enforces its own).
    /// None for a run that is not queued or not held.
    pub async fn hold_reason(&self, run: &Run) -> Result<Option<String>> {
        if run.state != RunState::Queued {
            return Ok(None);
        }
        for p in self.pauses().await? {
            let covers = match &p.scope {
                PauseScope::All => true,
                PauseScope::Tool(t) => *t == run.tool,
                PauseScope::Session(s) => *s == run.session_id,
            };
            if covers {
                return Ok(Some(format!(
                    "paused ({}) since {}{}",
                    p.scope,
                    crate::clock::ts(p.since),
                    p.by_and_reason()
                )));
            }
        }
        let Some(limit) = self.config().limits.get(&run.tool).copied() else {
            return Ok(None);
        };
        if let Some(max) = limit.max_running {
            let n = self.engine().limit_running(run.tool.clone()).await?;
            if n >= max {
                return Ok(Some(format!(
                    "max_running: {n} of {max} runs of {} are running",
                    run.tool
                )));
            }
        }
        if let Some(rate) = limit.rate {
            let room = self
                .engine()
                .limit_room(run.tool.clone(), rate, self.now())
                .await?;
            if let Some(at) = room.opens_at {
                return Ok(Some(format!(
                    "rate {rate} of {} reached; the window opens at {}",
                    run.tool,
                    crate::clock::ts(at)
                )));
            }
        }
        Ok(None)
    }
}
