//! The library's front door: a [`Client`] opens the database with a tool registry and offers
//! enqueue, inspection, cancellation, retry and inbox calls. Workers are built from it. Every
//! `impl Client` lives here and in `client/`: approvals, schedules, retention, WAL health,
//! `spawn_background`, inbox pages and waiting.

mod approvals;
mod bulk;
mod dashboard;
mod deliver;
mod detail;
mod inbox_page;
mod pause;
mod retention;
mod schedules;
mod spawn;
mod wait;
mod wal;

pub use deliver::SessionActivity;
pub use detail::{RunDetail, TimeoutSource};
pub use wait::WaitOutcome;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::clock::{SharedClock, SystemClock};
use crate::config::Config;
use crate::core::Core;
pub use crate::core::{EnqueueRequest, Enqueued};
use crate::error::{Error, InputError, Result};
use crate::ids::{RunId, validate_session};
use crate::inbox::{InboxFilter, Message};
use crate::run::ending::WaitingEnd;
use crate::run::{ListFilter, NewRun, Run, RunState};
use crate::store::sqlite::Store;
use crate::store::{Engine, InboxMark, OpenMode, RunRetry};
use crate::tool::Registry;

/// A handle to a toolq database with its tools. Cheap to clone.
///
/// ```
/// # async fn demo() -> toolq::Result<()> {
/// # let dir = tempfile::tempdir().expect("temp dir");
/// use toolq::{Client, Config, EnqueueRequest, Registry, RunState};
///
/// let config = Config {
///     db_path: dir.path().join("toolq.db").display().to_string(),
///     ..Config::default()
/// };
/// let client = Client::open(config, Registry::builtins())?;
/// let enqueued = client
///     .enqueue(EnqueueRequest::new("add", serde_json::json!({"a": 1, "b": 2})).session("demo"))
///     .await?;
/// let run = client.get(&enqueued.run_id).await?;
/// assert_eq!(run.state, RunState::Queued);
/// // Bad arguments are refused before anything is written.
/// let e = client
///     .enqueue(EnqueueRequest::new("add", serde_json::json!({"a": 1})))
///     .await
///     .unwrap_err();
/// assert_eq!(e.exit_code(), 2);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().expect("runtime").block_on(demo()).expect("demo");
/// ```
#[derive(Clone)]
pub struct Client {
    core: Core,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("engine", &self.core.engine())
            .finish()
    }
}

impl Client {
    /// Opens the database the config names (`database.url` when set, else the file
    /// `database.path`) with the real clock.
    pub fn open(config: Config, registry: Registry) -> Result<Client> {
        Self::open_with_clock(config, registry, Arc::new(SystemClock))
    }

    /// Opens with an injected clock (tests use [`crate::ManualClock`]).
    pub fn open_with_clock(
        config: Config,
        registry: Registry,
        clock: SharedClock,
    ) -> Result<Client> {
        Self::open_as(config, registry, clock, OpenMode::Create)
    }

    /// Opens as `mode` allows (see [`Store::open_with`]): the CLI's read commands neither
    /// create a missing file nor need to write one. The engine follows the location: a
    /// `postgres://` URL (`database.url`) opens Postgres ([`crate::store::postgres::PgStore`]), a path
    /// the SQLite file.
    pub fn open_as(
        config: Config,
        registry: Registry,
        clock: SharedClock,
        mode: OpenMode,
    ) -> Result<Client> {
        Ok(Client {
            core: Core::open(config, registry, clock, mode)?,
        })
    }

    /// The core under this client: what the worker, the scheduler and tools share.
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The SQLite store under this client (test support: tests reach below the engine
    /// contract to stage races; the crate itself goes through [`Client::engine`]).
    ///
    /// # Panics
    /// On a client of the Postgres engine: a test that stages a race below the contract is
    /// a SQLite test, and says so in its name.
    #[doc(hidden)]
    pub fn store(&self) -> &Store {
        self.core
            .sqlite_store()
            .expect("Client::store is the SQLite store; this client uses Postgres")
    }

    /// Whether this client's engine is Postgres.
    pub fn is_postgres(&self) -> bool {
        self.core.is_postgres()
    }

    /// The engine: every store operation ([`Engine`]). Public for tests, which stage races
    /// through the engine contract on either engine; not a stable API.
    #[doc(hidden)]
    pub fn engine(&self) -> &dyn Engine {
        self.core.engine()
    }

    /// The tools.
    pub fn registry(&self) -> &Registry {
        self.core.registry()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        self.core.config()
    }

    /// The clock.
    pub fn clock(&self) -> &SharedClock {
        self.core.clock()
    }

    /// Now, from the clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.core.now()
    }

    /// Validates a request into a row to insert; writes nothing.
    pub fn prepare(&self, req: &EnqueueRequest) -> Result<NewRun, InputError> {
        self.core.prepare(req)
    }

    /// Validates and inserts one run. Bad input writes nothing; a known idempotency key
    /// returns the existing run.
    pub async fn enqueue(&self, req: EnqueueRequest) -> Result<Enqueued> {
        self.core.enqueue(req).await
    }

    /// Validates every request first, then inserts all of them in one transaction, or none.
    /// An error names the request's index (`request 3: ...`). The runs of a batch share one
    /// creation time, the instant of the call, as they share its transaction; their ids keep
    /// the order of `reqs`.
    pub async fn enqueue_batch(&self, reqs: Vec<EnqueueRequest>) -> Result<Vec<Enqueued>> {
        self.core.enqueue_batch(reqs).await
    }

    /// Creates a batch of runs in one transaction, or nothing (see
    /// [`crate::core::Core::create_batch`]): its id and its runs. When every run of it is
    /// final, its session gets exactly one `batch_completed` message, and its callback run
    /// (if any) is enqueued. ([`Client::enqueue_batch`] inserts many runs in one transaction
    /// without making a batch of them.)
    pub async fn create_batch(
        &self,
        batch: crate::core::BatchRequest,
        reqs: Vec<EnqueueRequest>,
    ) -> Result<crate::core::BatchCreated> {
        self.core.create_batch(batch, reqs).await
    }

    /// Reads a batch with its runs counted by state and its first failures.
    pub async fn batch(&self, id: &crate::ids::BatchId) -> Result<crate::run::Batch> {
        self.core.batch(id).await
    }

    /// Lists batches, newest first.
    pub async fn batches(&self, filter: crate::run::BatchFilter) -> Result<Vec<crate::run::Batch>> {
        self.core.batches(filter).await
    }

    /// A run's links: its batch, the runs it waits for and that wait for it, the run that
    /// spawned it and the runs it spawned.
    pub async fn links(&self, id: &RunId) -> Result<crate::run::RunLinks> {
        self.core.links(id).await
    }

    /// Reads a run.
    pub async fn get(&self, id: &RunId) -> Result<Run> {
        self.core.get_run(id).await
    }

    /// Delivers the event `name` (with `payload`) to run `id` (see [`crate::core::Core::signal`]):
    /// stored, the first delivery of a name wins, a run waiting for it resumes, one sent
    /// before the run waits is kept for its wait; a run that has ended is an error naming its
    /// state.
    pub async fn signal(
        &self,
        id: &RunId,
        name: &str,
        payload: serde_json::Value,
        by: Option<String>,
    ) -> Result<crate::core::events::Signalled> {
        self.core.signal(id, name, payload, by).await
    }

    /// A run's recorded steps and the events sent to it.
    pub async fn journal(&self, id: &RunId) -> Result<crate::run::Journal> {
        Ok(self.engine().run_journal(id.clone()).await?)
    }

    /// Lists runs, newest first.
    pub async fn list(&self, filter: ListFilter) -> Result<Vec<Run>> {
        Ok(self.engine().run_list(filter).await?)
    }

    /// Cancels a run: a queued or awaiting run ends `cancelled` at once (with its inbox message);
    /// a running run is asked to stop and ends `cancelled` when its worker notices.
    /// Cancelling a finished run is an error.
    pub async fn cancel(&self, id: &RunId) -> Result<RunState> {
        let run = self.get(id).await?;
        let now = self.now();
        match run.state {
            RunState::Queued | RunState::AwaitingApproval => {
                let record = self.core.waiting_end(&run, WaitingEnd::Cancelled);
                let applied = self.core.record_ends(vec![record]).await?;
                if applied.first() == Some(&true) {
                    Ok(RunState::Cancelled)
                } else {
                    Box::pin(self.cancel(id)).await
                }
            }
            RunState::Running => {
                self.engine()
                    .run_cancel_request(run.id.clone(), now)
                    .await?;
                Ok(RunState::Running)
            }
            s => Err(Error::Conflict(format!(
                "run {id} is already {s}; only queued, awaiting_approval or running runs can be cancelled"
            ))),
        }
    }

    /// Re-queues a failed or cancelled run as a new attempt. A run of a tool that requires
    /// approval, and that was not approved before, waits for approval again
    /// (`awaiting_approval`, with a new request message) instead. Returns the state it moved
    /// to: `queued` or `awaiting_approval`.
    pub async fn retry(&self, id: &RunId) -> Result<RunState> {
        let run = self.get(id).await?;
        if !matches!(run.state, RunState::Failed | RunState::Cancelled) {
            return Err(Error::Conflict(format!(
                "run {id} is {}; only failed or cancelled runs can be retried",
                run.state
            )));
        }
        let now = self.now();
        let approval = crate::approval::pending_for_retry(self.core.approval_rules(), &run, now);
        let state = match approval {
            Some(_) => RunState::AwaitingApproval,
            None => RunState::Queued,
        };
        let ok = self
            .engine()
            .run_retry(RunRetry {
                id: run.id.clone(),
                expected: run.state,
                now,
                approval,
            })
            .await?;
        if !ok {
            return Err(Error::Conflict(format!(
                "run {id} changed state meanwhile; try again"
            )));
        }
        self.core.wake_workers();
        Ok(state)
    }

    /// A session's inbox messages.
    pub async fn inbox(&self, session: &str, filter: InboxFilter) -> Result<Vec<Message>> {
        validate_session(session)?;
        Ok(self
            .engine()
            .inbox_list(session.to_string(), filter)
            .await?)
    }

    /// The newest inbox message id of any session (0 when there is none). Ids are assigned
    /// in commit order, so a reader that saw every message up to this id has missed none.
    pub async fn inbox_newest_id(&self) -> Result<i64> {
        Ok(self.engine().inbox_newest_id().await?)
    }

    /// Marks messages read; with `ack`, also acknowledges them.
    pub async fn mark_inbox(&self, session: &str, ids: Vec<i64>, ack: bool) -> Result<usize> {
        let mark = InboxMark {
            session: session.to_string(),
            ids,
            ack,
            now: self.now(),
        };
        Ok(self.engine().inbox_mark(mark).await?)
    }

    /// A run's log blob (bytes, truncated flag), if written yet. A finished run always has
    /// one: an empty log is stored as no row (it costs a finish no write), and is given here
    /// as an empty blob dated `finished_at`.
    pub async fn log(&self, run: &Run) -> Result<Option<crate::run::Blob>> {
        let blob = self
            .engine()
            .blob_get(run.session_id.clone(), run.log_path())
            .await?;
        Ok(blob.or_else(|| run.empty_log()))
    }

    /// A run's result blob, if written.
    pub async fn result(&self, run: &Run) -> Result<Option<crate::run::Blob>> {
        Ok(self
            .engine()
            .blob_get(run.session_id.clone(), run.result_path())
            .await?)
    }

    /// A worker over this client's database and tools.
    pub fn worker(&self, opts: crate::worker::WorkerOptions) -> crate::worker::Worker {
        crate::worker::Worker::new(&self.core, opts)
    }

    /// Wakes this process's workers (used after an enqueue made elsewhere in the process).
    pub fn wake_workers(&self) {
        self.core.wake_workers();
    }
}
