//! An attempt's journal store: reads the run's steps and events through the engine, and sends
//! step records to the finisher, whose batch commits them (fenced by the lease) with other
//! attempts' ends in one transaction; the tool waits for that commit.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};

use super::shared::{Job, Shared};
use crate::run::{Journal, Run, StepEntry, StepSave};
use crate::store::Settlement;
use crate::tool::durable::{Durable, JournalStore, SuspendSignal};

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

    async fn save(&self, entries: Vec<StepEntry>) -> Result<bool, String> {
        let Some(last) = entries.last().map(|e| e.seq) else {
            return Ok(true);
        };
        let (tx, rx) = oneshot::channel();
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
        rx.await
            .map_err(|_| "the worker stopped before the step was recorded".to_string())
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
    );
    (durable, suspend)
}
