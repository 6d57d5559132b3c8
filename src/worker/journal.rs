//! An attempt's journal store: reads the run's steps and events through the engine, and sends
//! step records to the finisher, whose batch commits them (fenced by the lease) with other
//! attempts' ends in one transaction; the tool's next step waits for that commit.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};

use super::shared::{Job, Shared};
use crate::run::{Journal, Run, StepEntry, StepSave};
use crate::store::Settlement;
use crate::tool::durable::{Committed, Durable, JournalStore, SuspendSignal};

/// The journal store of one attempt.
struct AttemptJournal {
    sh: Arc<Shared>,
    run: Arc<Run>,
    /// Weak: a tool that keeps its context past its attempt must not keep the finisher alive.
    jobs: mpsc::WeakUnboundedSender<Job>,
}

#[async_trait]
impl JournalStore for AttemptJournal {
    async fn load(&self) -> Result<Journal, String> {
        self.sh
            .core
            .engine()
            .run_journal(self.run.id.clone())
            .await
            .map_err(|e| e.to_string())
    }

    fn submit(&self, entries: Vec<StepEntry>) -> Result<Committed, String> {
        let (tx, rx) = oneshot::channel();
        let Some(last) = entries.last().map(|e| e.seq) else {
            let _ = tx.send(true);
            return Ok(rx);
        };
        self.sh
            .step_acks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((self.run.id.clone(), last), tx);
        let save = StepSave {
            id: self.run.id.clone(),
            attempt: self.run.attempt,
            token: self.run.lease_token.clone().unwrap_or_default(),
            entries,
        };
        let sent = self
            .jobs
            .upgrade()
            .is_some_and(|jobs| jobs.send(Settlement::Step(Box::new(save))).is_ok());
        if !sent {
            return Err("the worker's finisher is gone".into());
        }
        Ok(rx)
    }
}

/// The journal of `run`'s attempt in this worker, and the signal its waits suspend through.
pub(super) fn journal_of(
    sh: &Arc<Shared>,
    run: &Arc<Run>,
    jobs: &mpsc::UnboundedSender<Job>,
) -> (Durable, SuspendSignal) {
    let suspend = SuspendSignal::default();
    let store = Arc::new(AttemptJournal {
        sh: sh.clone(),
        run: run.clone(),
        jobs: jobs.downgrade(),
    });
    let durable = Durable::new(
        store,
        suspend.clone(),
        sh.core.clock().clone(),
        run.attempt,
        sh.core.config().runs.max_step_bytes,
        // Steps are recorded only by a claimed attempt. A run claimed for the first time
        // has none; one that ran before is a later attempt (a retry, a rescue), or a resume
        // (a wait, a snooze, a hand-back after steps: `wait_kind` set).
        run.attempt <= 1 && !run.resumed,
    );
    (durable, suspend)
}
