//! [`Client::wait`]: block until a run reaches a final state.
//!
//! Waiting polls the run's row (one indexed read) with a backoff from 50 ms to 500 ms: a
//! waiter costs next to nothing, sees a short run end quickly, and needs nothing from the
//! worker, which may live in another process or on no machine yet.

use std::time::Duration;

use crate::error::Result;
use crate::ids::RunId;
use crate::run::Run;

use super::Client;

/// The first pause between two looks at the run.
const FIRST_POLL: Duration = Duration::from_millis(50);
/// The longest pause between two looks.
const MAX_POLL: Duration = Duration::from_millis(500);

/// How a [`Client::wait_timeout`] ended.
#[derive(Debug, Clone)]
pub enum WaitOutcome {
    /// The run reached a final state (completed, failed or cancelled); here it is.
    Ended(Box<Run>),
    /// The time ran out first; here is the run as last seen.
    TimedOut(Box<Run>),
}

impl Client {
    /// Waits until the run ends (completed, failed or cancelled) and returns it. A run that
    /// has already ended returns at once; an unknown id is [`crate::Error::NotFound`].
    /// A run awaiting approval is not ended: this waits for the decision too.
    ///
    /// ```
    /// # async fn demo() -> toolq::Result<()> {
    /// # let dir = tempfile::tempdir().expect("temp dir");
    /// use toolq::{Client, Config, EnqueueRequest, Registry, RunState, WorkerOptions};
    /// let config = Config { db_path: dir.path().join("q.db").display().to_string(), ..Config::default() };
    /// let client = Client::open(config, Registry::builtins())?;
    /// let id = client
    ///     .enqueue(EnqueueRequest::new("echo", serde_json::json!({"message": "hi"})))
    ///     .await?
    ///     .run_id;
    /// let worker = client.worker(WorkerOptions { drain: true });
    /// tokio::spawn(async move { worker.run(Default::default()).await });
    /// let run = client.wait(&id).await?;
    /// assert_eq!(run.state, RunState::Completed);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().expect("runtime").block_on(demo()).expect("demo");
    /// ```
    pub async fn wait(&self, id: &RunId) -> Result<Run> {
        let mut pause = FIRST_POLL;
        loop {
            let run = self.get(id).await?;
            if run.state.is_final() {
                return Ok(run);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_POLL);
        }
    }

    /// Like [`Client::wait`], but gives up after `timeout` and returns the run as last seen.
    pub async fn wait_timeout(&self, id: &RunId, timeout: Duration) -> Result<WaitOutcome> {
        match tokio::time::timeout(timeout, self.wait(id)).await {
            Ok(run) => Ok(WaitOutcome::Ended(Box::new(run?))),
            Err(_) => Ok(WaitOutcome::TimedOut(Box::new(self.get(id).await?))),
        }
    }
}
