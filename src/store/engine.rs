//! The engine contract: every store operation the rest of the crate uses, each one
//! transaction (or one consistent read) that the engine owns. Callers hand over plain values
//! and get plain values back; no engine type crosses this boundary. docs/architecture.md lists
//! the invariant each operation guarantees, for the next engine to keep.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::run_params::*;
use super::types::*;
use super::upkeep::*;
use crate::error::StoreError;
use crate::ids::{BatchId, RunId};
use crate::inbox::{InboxFilter, InboxPage, Message};
use crate::run::{
    Batch, BatchFilter, Blob, EventSent, FinishRecord, Inserted, Journal, Linked, LinkedResult,
    ListFilter, NewBatch, NewEvent, NewRun, Run, RunFilter, RunLinks, StepSave,
};
use crate::schedule::model::{NewSchedule, Occurrence, Schedule};

/// Result of an engine operation.
pub type EngineResult<T> = Result<T, StoreError>;

/// Decides how a rescued run's attempt ends (pure; called inside the rescue transaction).
pub type DecideRescue = Arc<dyn Fn(&Run, RescueReason) -> FinishRecord + Send + Sync>;

/// Called by a change feed when another connection or process may have committed.
pub type OnChange = Arc<dyn Fn() + Send + Sync>;

/// The operations of a toolq store. One implementation per engine (SQLite today).
#[async_trait]
pub trait Engine: Send + Sync + std::fmt::Debug + 'static {
    // ---- runs -------------------------------------------------------------------------
    /// Inserts runs in one transaction, all or none; a known idempotency key returns the
    /// run that holds it. A new run with `approval` is stored `awaiting_approval` (approval
    /// `pending`, its deadline) with its `approval_request` message, in the same transaction;
    /// an existing one returned instead writes nothing.
    ///
    /// Composition, in the same transaction: a run with `batch_id` joins that batch (its
    /// counters), [`StoreError::Rejected`] when the batch is unknown or has completed. A run
    /// with `after` gets one `run_deps` row per parent (a run stored before, or inserted
    /// earlier in this call; [`StoreError::Rejected`] naming an unknown one). A parent
    /// already final resolves its edge at once; while any edge is unresolved the run is
    /// blocked (queued, `wait_kind` parents, `run_at` far in the future, `deps_pending` the
    /// count). A parent that already failed or was cancelled (mode all) cancels the run at
    /// once, through the end-writer, with its one final message.
    async fn run_insert(&self, runs: Vec<NewRun>) -> EngineResult<Vec<Inserted>>;
    /// Inserts one background run (`runs.background` = 1: spawn_background, a Background-mode
    /// tool through the executor) unless the run's session already has `limit` active
    /// background runs (not counting `except`): queued or awaiting approval and due at `now`,
    /// or running. Delayed runs and runs not started in the background never count. With
    /// `approval`, the run is recorded as approved before it is queued. Count and insert are
    /// one transaction, so two calls cannot both take the last slot.
    async fn run_insert_within_limit(&self, p: RunInsertLimited) -> EngineResult<LimitedInsert>;
    /// Inserts one run and, with `approval`, records it as approved before it is queued (a
    /// host approved the call), in one transaction.
    async fn run_insert_preapproved(
        &self,
        run: NewRun,
        approval: Option<RunApprove>,
    ) -> EngineResult<()>;
    /// Reads one run.
    async fn run_get(&self, id: RunId) -> EngineResult<Option<Run>>;
    /// Lists runs, newest first.
    async fn run_list(&self, filter: ListFilter) -> EngineResult<Vec<Run>>;
    /// Asks a running run to stop (its worker sees it at its next heartbeat).
    async fn run_cancel_request(&self, id: RunId, now: DateTime<Utc>) -> EngineResult<bool>;
    /// Puts a failed or cancelled run (still in `expected`) back in the queue; its next
    /// claim starts a new attempt.
    async fn run_retry(&self, p: RunRetry) -> EngineResult<bool>;
    /// One keyset page of a bulk operation: at most `limit` runs matching the filter whose
    /// id sorts after `after`, in id order (one consistent read; it never holds the writer).
    async fn run_select(&self, p: RunSelect) -> EngineResult<Vec<Run>>;
    /// How many runs match the filter (a bulk `--dry-run`).
    async fn run_count_where(&self, filter: RunFilter) -> EngineResult<i64>;
    /// One page of the dashboard's run list: at most `limit` runs matching the filter whose
    /// id sorts before `before` (from the newest when `None`), newest first (keyset; one
    /// consistent read).
    async fn run_page(&self, p: RunPage) -> EngineResult<Vec<Run>>;
    /// Runs that reached a final state at or after `since`, counted per final state and
    /// bucket of `bucket_secs` seconds (bucket 0 starts at `since`): the dashboard's
    /// throughput and failure chart.
    async fn run_finished_buckets(
        &self,
        since: DateTime<Utc>,
        bucket_secs: i64,
    ) -> EngineResult<Vec<FinishedBucket>>;
    /// One batch of a bulk cancel in one transaction: every end through the end-writer
    /// (fenced as `run_end`), then a cancel request on every running run given.
    async fn run_cancel_many(&self, p: RunCancelMany) -> EngineResult<CancelledMany>;
    /// One batch of a bulk retry in one transaction: each run re-queued as `run_retry`
    /// does, only while still in the state it was read in; per run, whether it applied.
    async fn run_retry_many(&self, p: RunRetryMany) -> EngineResult<Vec<bool>>;
    /// Queues an awaiting run to execute as approved.
    async fn run_approve(&self, p: RunApprove) -> EngineResult<bool>;
    /// Awaiting runs whose approval deadline passed, oldest deadline first.
    async fn run_list_overdue_approvals(
        &self,
        now: DateTime<Utc>,
        limit: i64,
    ) -> EngineResult<Vec<Run>>;
    /// The one end-writer: records ends in one transaction (each engine's
    /// `finish::record_ends`; what an end writes is planned once in `store::end_plan`); per
    /// record, whether its fence held.
    async fn run_end(&self, ends: Vec<FinishRecord>, now: DateTime<Utc>)
    -> EngineResult<Vec<bool>>;
    /// Whether a draining worker with `tools` must keep going: a due queued run of its
    /// tools, or a queued retry of its tools (due or not). Runs running elsewhere, and runs
    /// of other tools, do not count.
    async fn run_pending(&self, now: DateTime<Utc>, tools: Arc<[String]>) -> EngineResult<bool>;
    /// The earliest `run_at` after `now` of a queued run of one of `tools`.
    async fn run_next_due(
        &self,
        now: DateTime<Utc>,
        tools: Arc<[String]>,
    ) -> EngineResult<Option<DateTime<Utc>>>;
    /// Runs not finished (queued, awaiting approval or running): the drain progress bar.
    async fn run_count_unfinished(&self) -> EngineResult<i64>;

    // ---- durable runs -------------------------------------------------------------------
    /// A run's recorded steps (by `seq`) and the events sent to it (oldest first), in one
    /// consistent read; empty for an unknown run.
    async fn run_journal(&self, id: RunId) -> EngineResult<Journal>;
    /// Delivers an event to a run, in one transaction: stored unless the run is unknown or
    /// final, or an event of that name was delivered before (the first one wins and is
    /// returned). A queued run that waits for this event (`wait_kind` event, `wait_event` the
    /// name) is due at once (`run_at` = now), so no wake-up is lost: a run that suspends
    /// after the event was stored finds it in its own suspend transaction.
    async fn event_send(&self, e: NewEvent) -> EngineResult<EventSent>;

    // ---- composition ----------------------------------------------------------------------
    /// Creates a batch with its runs in one transaction, all or none (inserted as
    /// [`Engine::run_insert`] inserts, each with `batch_id` set to the batch). Its counters count
    /// the runs inserted (a known idempotency key's run is not added).
    async fn batch_insert(&self, batch: NewBatch, runs: Vec<NewRun>)
    -> EngineResult<Vec<Inserted>>;
    /// Reads one batch, with its runs counted by state and its first failures.
    async fn batch_get(&self, id: BatchId) -> EngineResult<Option<Batch>>;
    /// Lists batches, newest first (counters only).
    async fn batch_list(&self, filter: BatchFilter) -> EngineResult<Vec<Batch>>;
    /// A run's links: its batch, its parents and dependents (`run_deps`), the run that
    /// spawned it and the runs it spawned. Empty for an unknown run.
    async fn run_links(&self, id: RunId) -> EngineResult<RunLinks>;
    /// The outcomes of a run's parents (a batch parent: its summary) or of its children, in
    /// id order.
    async fn run_linked_results(&self, id: RunId, which: Linked)
    -> EngineResult<Vec<LinkedResult>>;

    // ---- attempts (a worker's leases) -------------------------------------------------
    /// Claims runnable runs under a fresh lease each (attempt + 1).
    async fn attempt_claim(&self, p: Claim) -> EngineResult<Vec<Run>>;
    /// The finisher's cycle in one transaction: records ends, hands back released
    /// attempts, then claims replacements.
    async fn attempt_settle(&self, p: Settle) -> EngineResult<Settled>;
    /// Heartbeats the worker row and extends the held leases; returns, per held run still
    /// leased to this worker, whether its cancellation was requested.
    async fn attempt_heartbeat(&self, p: Heartbeat) -> EngineResult<Vec<(String, bool)>>;
    /// Writes live views and operation stages of running attempts, each fenced by its
    /// lease; returns which applied.
    async fn attempt_flush(&self, p: Flush) -> EngineResult<Flushed>;
    /// Marks dead workers stopped and takes back the runs of dead owners and expired
    /// leases, each written through the end-writer (or re-queued) in one transaction.
    async fn attempt_rescue(&self, p: Rescue, decide: DecideRescue) -> EngineResult<Rescued>;

    // ---- flow control -------------------------------------------------------------------
    /// Records a pause (claims skip what it covers from the next claim on, on every worker);
    /// an existing pause of the same scope is kept as it was. Whether it is new.
    async fn pause_set(&self, pause: crate::flow::Pause) -> EngineResult<bool>;
    /// Lifts a pause; returns it if it existed.
    async fn pause_clear(
        &self,
        scope: crate::flow::PauseScope,
    ) -> EngineResult<Option<crate::flow::Pause>>;
    /// The pauses in force, oldest first.
    async fn pause_list(&self) -> EngineResult<Vec<crate::flow::Pause>>;
    /// For each of `rates` (tool, rate) whose window is full at `now`, when it lets a start
    /// again; the earliest of those (the claim loop sleeps at most until then).
    async fn limit_next_open(
        &self,
        now: DateTime<Utc>,
        rates: Vec<(String, crate::flow::Rate)>,
    ) -> EngineResult<Option<DateTime<Utc>>>;
    /// What `rate` allows `tool` at `now`: the starts left in the window, or when it opens.
    async fn limit_room(
        &self,
        tool: String,
        rate: crate::flow::Rate,
        now: DateTime<Utc>,
    ) -> EngineResult<crate::flow::Room>;
    /// Running runs of `tool` over all workers.
    async fn limit_running(&self, tool: String) -> EngineResult<i64>;

    // ---- workers ----------------------------------------------------------------------
    /// Registers a worker process.
    async fn worker_register(&self, row: WorkerRow) -> EngineResult<()>;
    /// Marks a worker cleanly stopped.
    async fn worker_deregister(
        &self,
        id: String,
        now: DateTime<Utc>,
        busy_retries: u64,
    ) -> EngineResult<()>;
    /// Worker rows (with `include_stopped`, also stopped ones).
    async fn worker_list(&self, include_stopped: bool) -> EngineResult<Vec<WorkerRow>>;
    /// What `status` judges, read together: worker rows, queued runs by tool, and the
    /// enabled schedules that will fire again.
    async fn worker_overview(&self, include_stopped: bool) -> EngineResult<WorkerOverview>;

    // ---- inbox and blobs --------------------------------------------------------------
    /// A session's messages.
    async fn inbox_list(&self, session: String, filter: InboxFilter) -> EngineResult<Vec<Message>>;
    /// A page of a session's messages, newest first (before or after an id).
    async fn inbox_page(&self, session: String, page: InboxPage) -> EngineResult<Vec<Message>>;
    /// The messages to deliver to a session now: its unacknowledged ones of the `modes`
    /// deliveries, oldest first, at most `limit`. Only reads: the host acknowledges what it
    /// delivered (silent messages too) with `inbox_mark`.
    async fn inbox_deliverable(
        &self,
        session: String,
        modes: &'static [&'static str],
        limit: i64,
    ) -> EngineResult<Vec<Message>>;
    /// Marks messages read (and, with `ack`, acknowledged); returns how many changed.
    async fn inbox_mark(&self, p: InboxMark) -> EngineResult<usize>;
    /// The newest message id of any session (0 when there is none): the HTTP API's streams
    /// read their session's messages only when it grows (where
    /// [`Engine::inbox_ids_in_commit_order`]).
    async fn inbox_newest_id(&self) -> EngineResult<i64>;
    /// Whether message ids become visible in increasing order across all sessions (SQLite:
    /// one writer), not only within each session (Postgres: each session's inbox has a lock
    /// of its own, so a message of one session may commit after a newer id of another).
    fn inbox_ids_in_commit_order(&self) -> bool {
        true
    }
    /// The inbox messages about one run, oldest first, at most `limit`.
    async fn inbox_of_run(&self, run: RunId, limit: i64) -> EngineResult<Vec<Message>>;
    /// A blob by session and path.
    async fn blob_get(&self, session: String, path: String) -> EngineResult<Option<Blob>>;

    // ---- schedules --------------------------------------------------------------------
    /// Inserts a schedule unless its session has `max_active` enabled ones (atomic).
    async fn schedule_insert_within_limit(
        &self,
        new: NewSchedule,
        max_active: i64,
    ) -> EngineResult<bool>;
    /// Reads a schedule.
    async fn schedule_get(&self, id: String) -> EngineResult<Option<Schedule>>;
    /// Lists schedules of a session (or all), newest first.
    async fn schedule_list(
        &self,
        session: Option<String>,
        limit: i64,
    ) -> EngineResult<Vec<Schedule>>;
    /// A schedule's most recent ledger rows.
    async fn schedule_occurrences(&self, id: String, limit: i64) -> EngineResult<Vec<Occurrence>>;
    /// Cancels an enabled schedule.
    async fn schedule_cancel(&self, id: String, now: DateTime<Utc>) -> EngineResult<bool>;
    /// Disables an enabled schedule without marking it cancelled (false if it was not enabled).
    async fn schedule_disable(&self, id: String, now: DateTime<Utc>) -> EngineResult<bool>;
    /// Enables a schedule from `next` on unless its session is at its limit (`None`);
    /// `Some(false)` when it changed meanwhile.
    async fn schedule_enable_within_limit(&self, p: ScheduleEnable) -> EngineResult<Option<bool>>;
    /// The earliest next tick of an enabled schedule.
    async fn schedule_next_due(&self) -> EngineResult<Option<DateTime<Utc>>>;
    /// Fires due schedules: runs, ledger rows and the advance of each, in one transaction;
    /// a tick fires once however many workers poll. `gate` says which of the runs made wait
    /// for approval (inserted as [`Engine::run_insert`] does with `NewRun::approval`).
    async fn schedule_claim_due(&self, p: ClaimDue, gate: GateRun) -> EngineResult<ClaimReport>;

    // ---- retention --------------------------------------------------------------------
    /// What a prune with these cutoffs would remove.
    async fn prune_count(&self, cutoffs: PruneCutoffs) -> EngineResult<Removed>;
    /// One bounded prune batch of one step, in its own transaction.
    async fn prune_batch(&self, p: PruneBatch) -> EngineResult<(Removed, RunsCursor)>;

    // ---- observation ------------------------------------------------------------------
    /// Figures for `toolq stats`.
    async fn stats_read(&self, now: DateTime<Utc>) -> EngineResult<StoreStats>;
    /// Gauges for metrics.
    async fn gauges_read(&self, now: DateTime<Utc>) -> EngineResult<Gauges>;
    /// Every problem an integrity check finds (`quick`: the faster, shallower one), one
    /// line each; empty for healthy data.
    async fn check(&self, quick: bool) -> EngineResult<Vec<String>>;
    /// Durability settings and engine version.
    async fn info(&self) -> EngineResult<DbInfo>;
    /// Where the data lives, for messages and `stats` (a file path for SQLite).
    fn location(&self) -> String;
    /// Size of the data in bytes, if the engine knows it cheaply.
    fn size_bytes(&self) -> Option<u64>;
    /// Writes this process retried because the store was busy.
    fn busy_retries(&self) -> u64;
    /// Time the writer spent in statements and commits in this process.
    fn write_stats(&self) -> WriteStats;

    // ---- engine upkeep and change feed ------------------------------------------------
    /// Log health (SQLite: WAL size and checkpoint backlog; engines without one report
    /// zeros and no warning).
    async fn wal_health(&self, warn_frames: i64) -> EngineResult<WalHealth>;
    /// Bytes of the engine's write-ahead log now (0 without one).
    fn wal_bytes(&self) -> u64;
    /// One upkeep tick of a worker: SQLite checkpoints the WAL (truncating when `idle`).
    async fn checkpoint(&self, idle: bool) -> EngineResult<CheckpointTick>;
    /// The change feed: runs until `stop`, calling `on_change` soon after any connection or
    /// process commits (SQLite: WAL watch and -shm probe; Postgres: LISTEN/NOTIFY). It only
    /// reads. A worker awaits it as one of its background tasks.
    async fn change_feed(&self, on_change: OnChange, stop: CancellationToken);
    /// The change feed for readers of messages (the HTTP API's inbox streams and waits): as
    /// [`Engine::change_feed`], and also soon after any inbox message commits, even one whose
    /// write wakes no worker (Postgres: a run's end whose slot the same transaction refilled
    /// notifies no worker). SQLite's feed already sees every commit.
    async fn message_feed(&self, on_change: OnChange, stop: CancellationToken) {
        self.change_feed(on_change, stop).await;
    }
}

/// Parameters of a claim.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The claiming worker (becomes the lease owner).
    pub worker: String,
    /// Now.
    pub now: DateTime<Utc>,
    /// The lease expiry to set.
    pub lease_until: DateTime<Utc>,
    /// At most this many runs (0 claims nothing).
    pub max: usize,
    /// At most this many running runs per session, over all workers.
    pub per_session: i64,
    /// Visit sessions after this one first (round-robin).
    pub after_session: Option<String>,
    /// Claim runs of these tools only (the worker's registered tools, sorted).
    pub tools: Arc<[String]>,
    /// Per-tool limits (`max_running`, `rate`), counted over all workers.
    pub limits: Arc<crate::flow::ToolLimits>,
    /// At most this many background runs (`runs.background`) among the claimed ones: what
    /// the worker's per-worker limit leaves (`sessions.max_active_runs_per_worker` less the
    /// background runs it runs). `None`: no limit (the claim cannot reach it).
    pub background_room: Option<usize>,
}

/// An attempt handed back to the queue uncounted (clean shutdown), fenced by its lease.
#[derive(Debug, Clone)]
pub struct Release {
    /// Run id.
    pub id: RunId,
    /// Its attempt.
    pub attempt: i64,
    /// Its lease token.
    pub token: String,
}

/// How one attempt leaves its worker: an end to record, or a hand-back.
#[derive(Debug, Clone)]
pub enum Settlement {
    /// Record this end (through the end-writer).
    End(Box<FinishRecord>),
    /// Give the run back to the queue uncounted.
    Release(Release),
    /// Record steps of a running attempt (fenced by its lease); the attempt goes on.
    Step(Box<StepSave>),
}

impl Settlement {
    /// The run's id.
    pub fn id(&self) -> &RunId {
        match self {
            Settlement::End(r) => &r.id,
            Settlement::Release(r) => &r.id,
            Settlement::Step(s) => &s.id,
        }
    }
}

/// Parameters of [`Engine::attempt_settle`]. Shared, so a retried settle does not copy
/// the logs it carries.
#[derive(Debug, Clone)]
pub struct Settle {
    /// What ends, in order.
    pub batch: Arc<Vec<Settlement>>,
    /// Replacements to claim afterwards (`max` 0: none).
    pub claim: Claim,
}

impl Settle {
    /// The ends among the settlements, in order (the hand-backs left out): one end-writer
    /// records them all.
    pub fn ends(&self) -> Vec<&FinishRecord> {
        self.batch
            .iter()
            .filter_map(|s| match s {
                Settlement::End(r) => Some(&**r),
                Settlement::Release(_) | Settlement::Step(_) => None,
            })
            .collect()
    }
}

/// What [`Engine::attempt_settle`] did.
#[derive(Debug, Clone, Default)]
pub struct Settled {
    /// Per settlement, in order, whether it applied (its lease still held).
    pub applied: Vec<bool>,
    /// The runs claimed.
    pub claimed: Vec<Run>,
}

/// Parameters of [`Engine::attempt_heartbeat`].
#[derive(Debug, Clone)]
pub struct Heartbeat {
    /// The worker.
    pub worker: String,
    /// Held (run id, lease token) pairs.
    pub held: Vec<(String, String)>,
    /// Now.
    pub now: DateTime<Utc>,
    /// The new lease expiry.
    pub until: DateTime<Utc>,
    /// The claim loop's last poll.
    pub last_poll: Option<DateTime<Utc>>,
    /// This process's busy retries so far.
    pub busy_retries: u64,
}

/// An async tool's operation id and its new stages, for a running attempt.
#[derive(Debug, Clone)]
pub struct OperationWrite {
    /// Run id.
    pub id: String,
    /// Its attempt.
    pub attempt: i64,
    /// Its lease token.
    pub token: String,
    /// The operation id.
    pub operation_id: String,
    /// New stages, in order.
    pub stages: Vec<serde_json::Value>,
}

/// Parameters of [`Engine::attempt_flush`].
#[derive(Debug, Clone)]
pub struct Flush {
    /// Operation ids and stages.
    pub operations: Vec<OperationWrite>,
    /// Live views.
    pub progress: Vec<ProgressWrite>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// What [`Engine::attempt_flush`] applied.
#[derive(Debug, Clone, Default)]
pub struct Flushed {
    /// Per operation write.
    pub operations: Vec<bool>,
    /// Per progress write.
    pub progress: Vec<bool>,
}

/// Parameters of [`Engine::attempt_rescue`].
#[derive(Debug, Clone)]
pub struct Rescue {
    /// This host.
    pub host: String,
    /// This boot.
    pub boot_id: String,
    /// This pid namespace.
    pub pid_namespace: String,
    /// Now.
    pub now: DateTime<Utc>,
    /// Whether a worker process (pid, start time) on this host is gone.
    pub is_dead: fn(i64, &str) -> bool,
    /// The runs that the rescuing worker itself is running or recording: never taken back,
    /// whatever their lease says (after an outage it extends or records them itself).
    pub spare: Vec<String>,
    /// Whether a run may be taken back because its lease expired. A worker that was itself
    /// cut off from the database lately passes `false`: the other hosts' leases ran out
    /// during the same outage, and they get a lease's time to extend them.
    pub lease_expiry: bool,
}

impl Rescue {
    /// Whether this rescue takes `run` back for `reason` (the owner's death always counts).
    pub fn takes(&self, run: &Run, reason: RescueReason) -> bool {
        (self.lease_expiry || reason != RescueReason::LeaseExpired)
            && !self.spare.iter().any(|id| run.id.as_str() == id)
    }
}

/// One run taken back by a rescue.
#[derive(Debug, Clone)]
pub struct RescuedRun {
    /// The run as it was read.
    pub run: Run,
    /// Why.
    pub reason: RescueReason,
    /// How its attempt ended.
    pub outcome: crate::run::Outcome,
}

/// What [`Engine::attempt_rescue`] did (committed).
#[derive(Debug, Clone, Default)]
pub struct Rescued {
    /// Worker rows marked stopped because their process is gone.
    pub workers_died: usize,
    /// The runs taken back.
    pub runs: Vec<RescuedRun>,
}
