//! The library's front door: a [`Client`] opens the database with a tool registry and offers
//! enqueue, inspection, cancellation, retry and inbox calls. Workers are built from it. Every
//! `impl Client` lives here and in `client/`: approvals, schedules, retention, WAL health,
//! `spawn_background`, inbox pages and waiting.

mod approvals;
mod bulk;
mod dashboard;
mod deliver;
mod inbox_page;
mod pause;
mod retention;
mod schedules;
mod spawn;
mod wait;
mod wal;

pub use deliver::SessionActivity;
pub use wait::WaitOutcome;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::Notify;

use crate::clock::{SharedClock, SystemClock};
use crate::config::Config;
use crate::error::StoreError;
use crate::error::{Error, InputError, Result};
use crate::ids::{RunId, validate_session};
use crate::inbox::About;
use crate::inbox::{InboxFilter, Message};
use crate::run::FinishRecord;
use crate::run::{Delivery, NewRun, Run, RunState, Unique, UniqueCheck, unique_key};
use crate::run::{Inserted, ListFilter};
use crate::store::postgres::PgStore;
use crate::store::sqlite::Store;
use crate::store::{Engine, InboxMark, OpenMode, RunRetry};
use crate::tool::Registry;
use crate::worker::finish::{WaitingEnd, decide_waiting};

/// A request to run a tool once.
#[derive(Debug, Clone)]
pub struct EnqueueRequest {
    /// Tool name.
    pub tool: String,
    /// Arguments (must match the tool's schema).
    pub args: Value,
    /// Owning session (default "default").
    pub session: String,
    /// Title (default: the tool's display name).
    pub title: Option<String>,
    /// Higher runs first (default 0).
    pub priority: i64,
    /// Not before this instant (default: now).
    pub run_at: Option<DateTime<Utc>>,
    /// Attempts in all (default from config).
    pub max_attempts: Option<i64>,
    /// Timeout (default: the tool's, else config).
    pub timeout: Option<Duration>,
    /// Same key, same run: a second enqueue returns the first run.
    pub idempotency_key: Option<String>,
    /// Post an inbox message when it ends (default true).
    pub signal_on_completion: bool,
    /// Delivery mode of that message.
    pub delivery: Delivery,
    /// Return a run of the same tool and args (in the given states and period) instead of
    /// inserting another; see [`Unique`].
    pub unique: Option<Unique>,
}

impl EnqueueRequest {
    /// A request with defaults for everything but tool and args.
    pub fn new(tool: impl Into<String>, args: Value) -> Self {
        Self {
            tool: tool.into(),
            args,
            session: "default".into(),
            title: None,
            priority: 0,
            run_at: None,
            max_attempts: None,
            timeout: None,
            idempotency_key: None,
            signal_on_completion: true,
            delivery: Delivery::WhenIdle,
            unique: None,
        }
    }

    /// Sets the session.
    pub fn session(mut self, s: impl Into<String>) -> Self {
        self.session = s.into();
        self
    }

    /// Sets the title.
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.title = Some(t.into());
        self
    }

    /// Makes the run unique (see [`Unique`]).
    pub fn unique(mut self, u: Unique) -> Self {
        self.unique = Some(u);
        self
    }
}

/// The answer to an enqueue. As JSON: `{"id", "run_id", "created"}` (`id` like every other
/// run in toolq's JSON; `run_id` kept for scripts written against the first release).
#[derive(Debug, Clone)]
pub struct Enqueued {
    /// The run id.
    pub run_id: RunId,
    /// False when the idempotency key returned an existing run.
    pub created: bool,
}

impl Serialize for Enqueued {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Enqueued", 3)?;
        st.serialize_field("id", &self.run_id)?;
        st.serialize_field("run_id", &self.run_id)?;
        st.serialize_field("created", &self.created)?;
        st.end()
    }
}

pub(crate) struct Inner {
    /// The engine every operation goes through.
    pub engine: Arc<dyn Engine>,
    /// The same engine as SQLite (None on Postgres), for test support.
    pub store: Option<Store>,
    pub registry: Arc<Registry>,
    pub config: Config,
    pub clock: SharedClock,
    /// Wakes this process's workers when work is enqueued here.
    pub wake: Notify,
}

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
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("engine", &self.inner.engine)
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
    /// `postgres://` URL (`database.url`) opens Postgres ([`crate::store::PgStore`]), a path
    /// the SQLite file.
    pub fn open_as(
        config: Config,
        registry: Registry,
        clock: SharedClock,
        mode: OpenMode,
    ) -> Result<Client> {
        // A URL in `database.url`, or in place of the path (a library caller's `db_path`).
        let url = config.db_url.clone().or_else(|| {
            crate::db_url::is_postgres(&config.db_path).then(|| config.db_path.clone())
        });
        let (engine, store): (Arc<dyn Engine>, Option<Store>) = match &url {
            Some(url) => (Arc::new(PgStore::open(url, mode)?), None),
            None => {
                // Config::from_layers refuses these too; a library caller's Config is not
                // validated there.
                if let Some(reason) = crate::db_url::refuse_path(&config.db_path) {
                    let shown = format!("{:?}", crate::db_url::redact(&config.db_path));
                    return Err(crate::error::InputError::new("db_path", shown, reason).into());
                }
                let store = Store::open_with(&config.db_path, mode)?;
                (Arc::new(store.clone()), Some(store))
            }
        };
        Ok(Client {
            inner: Arc::new(Inner {
                engine,
                store,
                registry: Arc::new(registry),
                config,
                clock,
                wake: Notify::new(),
            }),
        })
    }

    /// The SQLite store under this client (test support: tests reach below the engine
    /// contract to stage races; the crate itself goes through [`Client::engine`]).
    ///
    /// # Panics
    /// On a client of the Postgres engine: a test that stages a race below the contract is
    /// a SQLite test, and says so in its name.
    #[doc(hidden)]
    pub fn store(&self) -> &Store {
        self.inner
            .store
            .as_ref()
            .expect("Client::store is the SQLite store; this client uses Postgres")
    }

    /// Whether this client's engine is Postgres.
    pub fn is_postgres(&self) -> bool {
        self.inner.store.is_none()
    }

    /// The engine: every store operation ([`Engine`]). Public for tests, which stage races
    /// through the engine contract on either engine; not a stable API.
    #[doc(hidden)]
    pub fn engine(&self) -> &dyn Engine {
        &*self.inner.engine
    }

    /// The tools.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The clock.
    pub fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    /// Now, from the clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.inner.clock.now()
    }

    /// Validates a request into a row to insert; writes nothing.
    pub fn prepare(&self, req: &EnqueueRequest) -> Result<NewRun, InputError> {
        self.prepare_owned(req.clone(), self.now())
    }

    /// [`Client::prepare`] taking the request: its args and strings move into the row instead
    /// of being copied (the copies were 6 % of a batch enqueue's instructions). `now` is the
    /// creation time (and the due time unless the request names one).
    fn prepare_owned(&self, req: EnqueueRequest, now: DateTime<Utc>) -> Result<NewRun, InputError> {
        validate_session(&req.session)?;
        let entry = self.inner.registry.validate(&req.tool, &req.args)?;
        if !(-1_000_000..=1_000_000).contains(&req.priority) {
            return Err(InputError::new(
                "priority",
                req.priority.to_string(),
                "must be between -1000000 and 1000000",
            ));
        }
        if let Some(at) = req.run_at
            && !(crate::clock::earliest()..=crate::clock::latest()).contains(&at)
        {
            return Err(InputError::new(
                "run_at",
                at.to_rfc3339(),
                "must be between the years 1 and 9999",
            ));
        }
        let max_attempts = req
            .max_attempts
            .unwrap_or(self.inner.config.runs.max_attempts);
        if !(1..=1000).contains(&max_attempts) {
            return Err(InputError::new(
                "max_attempts",
                max_attempts.to_string(),
                "must be between 1 and 1000",
            ));
        }
        let timeout_ms = match req.timeout {
            Some(t) if t.is_zero() => {
                return Err(InputError::new(
                    "timeout",
                    "0s",
                    "must be greater than zero",
                ));
            }
            // Stored in whole milliseconds: less would be stored as no time at all.
            Some(t) if t < Duration::from_millis(1) => {
                return Err(InputError::new(
                    "timeout",
                    crate::clock::format_duration(t),
                    "must be at least 1ms",
                ));
            }
            Some(t) if t > Duration::from_secs(7 * 86_400) => {
                return Err(InputError::new(
                    "timeout",
                    crate::clock::format_duration(t),
                    "must be at most 7 days",
                ));
            }
            Some(t) => Some(t.as_millis() as i64),
            None => None,
        };
        if let Some(key) = &req.idempotency_key
            && (key.is_empty() || key.chars().count() > 200)
        {
            return Err(InputError::new(
                "idempotency_key",
                key,
                "must be 1 to 200 characters",
            ));
        }
        let title = match req.title {
            Some(t) if t.trim().is_empty() => {
                return Err(InputError::new("title", t, "must not be blank"));
            }
            Some(t) if t.chars().count() > 500 => {
                return Err(InputError::new("title", t, "is longer than 500 characters"));
            }
            Some(t) => t,
            None => entry.def.display_name.clone(),
        };
        let unique = req
            .unique
            .as_ref()
            .map(|u| unique_check(u, &req.tool, &req.args, now))
            .transpose()?;
        // Encoded here rather than in the store, so the write transaction only binds text
        // (a batch's encoding was ~5 % of its instructions inside the transaction).
        let args = crate::run::encode_args(&req.args)?;
        let mut row = NewRun {
            id: RunId::generate(),
            session_id: req.session,
            tool: req.tool,
            args,
            title,
            priority: req.priority,
            max_attempts,
            run_at: req.run_at.unwrap_or(now),
            created_at: now,
            idempotency_key: req.idempotency_key,
            timeout_ms,
            signal_on_completion: req.signal_on_completion,
            delivery: req.delivery,
            schedule_id: None,
            fire_at: None,
            ticks: 1,
            unique,
            approval: None,
        };
        // This process's rules decide whether the run waits for approval from its creation.
        row.approval = crate::approval::pending_for(self, &row, &req.args);
        drop(req.args);
        Ok(row)
    }

    /// Validates and inserts one run. Bad input writes nothing; a known idempotency key
    /// returns the existing run.
    pub async fn enqueue(&self, req: EnqueueRequest) -> Result<Enqueued> {
        let row = self.prepare_owned(req, self.now())?;
        let inserted = self
            .engine()
            .run_insert(vec![row])
            .await
            .map_err(|e| key_conflict(e, ""))?;
        self.inner.wake.notify_one();
        inserted.into_iter().map(to_enqueued).next().ok_or_else(|| {
            Error::Store(StoreError::Invalid(
                "an insert of one run returned none".into(),
            ))
        })
    }

    /// Validates every request first, then inserts all of them in one transaction, or none.
    /// An error names the request's index (`request 3: ...`). The runs of a batch share one
    /// creation time, the instant of the call, as they share its transaction; their ids keep
    /// the order of `reqs`.
    pub async fn enqueue_batch(&self, reqs: Vec<EnqueueRequest>) -> Result<Vec<Enqueued>> {
        // One instant also lets the insert bind it once for many rows (`runs::Shared`).
        let now = self.now();
        let rows = reqs
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                self.prepare_owned(r, now)
                    .map_err(|e| e.within(&format!("request {}: ", i + 1)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let inserted = self
            .engine()
            .run_insert(rows)
            .await
            .map_err(|e| key_conflict(e, "batch"))?;
        self.inner.wake.notify_one();
        Ok(inserted.into_iter().map(to_enqueued).collect())
    }

    /// Reads a run.
    pub async fn get(&self, id: &RunId) -> Result<Run> {
        self.engine()
            .run_get(id.clone())
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "run",
                id: id.to_string(),
            })
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
                let record = decide_waiting(&run, WaitingEnd::Cancelled);
                let applied = self.record_ends(vec![(run.tool.clone(), record)]).await?;
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
        let approval = crate::approval::pending_for_retry(self, &run, now);
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
        self.inner.wake.notify_one();
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

    /// A run's log blob (bytes, truncated flag), if written yet.
    pub async fn log(&self, run: &Run) -> Result<Option<crate::run::Blob>> {
        Ok(self
            .engine()
            .blob_get(run.session_id.clone(), run.log_path())
            .await?)
    }

    /// A run's result blob, if written.
    pub async fn result(&self, run: &Run) -> Result<Option<crate::run::Blob>> {
        Ok(self
            .engine()
            .blob_get(run.session_id.clone(), run.result_path())
            .await?)
    }

    /// Makes an end's message final: the tool's formatter (if the tool is known here), then
    /// its data encoded off the writer.
    pub(crate) fn format_end(&self, tool: &str, record: &mut FinishRecord) {
        if let (Some(m), Some(e)) = (record.message.as_mut(), self.registry().get(tool)) {
            e.format_message(m);
        }
        record.encode_message();
    }

    /// Records ends of runs, each given with its tool's name, through the one end-writer
    /// ([`Engine::run_end`]) in one transaction. Returns, per record, whether it
    /// applied (its fence still held).
    pub(crate) async fn record_ends(&self, ends: Vec<(String, FinishRecord)>) -> Result<Vec<bool>> {
        let records: Vec<FinishRecord> = ends
            .into_iter()
            .map(|(tool, mut r)| {
                self.format_end(&tool, &mut r);
                r
            })
            .collect();
        Ok(self.engine().run_end(records, self.now()).await?)
    }

    /// A worker over this client's database and tools.
    pub fn worker(&self, opts: crate::worker::WorkerOptions) -> crate::worker::Worker {
        crate::worker::Worker::new(self, opts)
    }

    /// Wakes this process's workers (used after an enqueue made elsewhere in the process).
    pub fn wake_workers(&self) {
        self.inner.wake.notify_one();
    }
}

/// The store's check for a unique enqueue; the states must be given and the period positive.
fn unique_check(
    u: &Unique,
    tool: &str,
    args: &Value,
    now: DateTime<Utc>,
) -> Result<UniqueCheck, InputError> {
    if u.states.is_empty() {
        return Err(InputError::about(
            "unique_states",
            "must name at least one state",
        ));
    }
    let since = match u.within {
        None => None,
        Some(d) if d.is_zero() => {
            return Err(InputError::new(
                "unique_for",
                "0s",
                "must be greater than zero",
            ));
        }
        Some(d) => Some(
            chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_sub_signed(d))
                .ok_or_else(|| {
                    InputError::new(
                        "unique_for",
                        crate::clock::format_duration(d),
                        "is too long",
                    )
                })?,
        ),
    };
    let mut states = u.states.clone();
    states.sort_by_key(|s| s.as_str());
    states.dedup();
    Ok(UniqueCheck {
        key: match u.by {
            crate::run::UniqueBy::Args => unique_key(tool, args),
        },
        states,
        since,
    })
}

/// An idempotency key naming a run with other args is the caller's input error; in a batch
/// it names the request (`request 3: `), like the other input errors of a batch.
fn key_conflict(e: StoreError, batch: &str) -> Error {
    match e {
        StoreError::KeyConflict {
            index,
            key,
            run,
            what,
        } => {
            let field = if batch.is_empty() {
                "idempotency key".to_string()
            } else {
                format!("request {}: idempotency key", index + 1)
            };
            Error::Input(InputError::new(
                field,
                key,
                format!("already names run {run} with {what}"),
            ))
        }
        e => Error::Store(e),
    }
}

fn to_enqueued(i: Inserted) -> Enqueued {
    match i {
        Inserted::New(run_id) => Enqueued {
            run_id,
            created: true,
        },
        Inserted::Existing(run_id) => Enqueued {
            run_id,
            created: false,
        },
    }
}

/// What a final message says about a run.
pub(crate) fn about_of(run: &Run) -> About<'_> {
    About {
        run_id: &run.id,
        session_id: &run.session_id,
        title: &run.title,
        tool: &run.tool,
        attempt: run.attempt,
        delivery: run.delivery,
    }
}
