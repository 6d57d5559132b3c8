//! The contract's plain parameter and result types (no engine type in any of them).

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

pub use crate::error::EngineError;
pub use crate::retention::Removed;
pub use crate::schedule::model::{ClaimReport, GateRun};

/// Identity of a worker process.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerRow {
    /// Worker id.
    pub id: String,
    /// Host name.
    pub host: String,
    /// Kernel boot id.
    pub boot_id: String,
    /// Pid namespace: pids are only comparable within one.
    pub pid_namespace: String,
    /// Process id.
    pub pid: i64,
    /// Process start time (from /proc), to tell a reused pid apart.
    pub process_start_time: String,
    /// When it started.
    pub started_at: String,
    /// Last heartbeat.
    pub heartbeat_at: String,
    /// Last claim poll.
    pub last_poll_at: Option<String>,
    /// Set on a clean exit, or when another worker found the process dead.
    pub stopped_at: Option<String>,
    /// Why it stopped: `exited` (clean exit) or `died` (found dead by another worker).
    pub stop_reason: Option<String>,
    /// Its concurrency limit.
    pub concurrency: i64,
    /// Its claim loop's poll interval, in milliseconds.
    pub poll_interval_ms: i64,
    /// Its heartbeat interval, in milliseconds.
    pub heartbeat_interval_ms: i64,
    /// Its lease length, in milliseconds.
    pub lease_ms: i64,
    /// SQLITE_BUSY retries it needed.
    pub busy_retries: i64,
    /// toolq version.
    pub version: String,
    /// The tools it has registered, sorted: it claims runs of these only (empty for a row
    /// written before schema version 5).
    pub tools: Vec<String>,
}

/// Parameters of `Engine::schedule_claim_due`.
#[derive(Debug, Clone, Copy)]
pub struct ClaimDue {
    /// The current time.
    pub now: DateTime<Utc>,
    /// At most this many schedules per call.
    pub limit: usize,
    /// A single tick fired within this much of its time is on time.
    pub late_after: Duration,
    /// Gap between two catch-up starts (spreads them; caps their rate).
    pub catchup_spacing: Duration,
}

/// The cutoffs of one prune. Everything strictly older than a cutoff may go.
#[derive(Debug, Clone)]
pub struct PruneCutoffs {
    /// Completed runs whose `finished_at` is before this go (with their blobs and inbox rows).
    pub runs_before: DateTime<Utc>,
    /// Failed runs whose `finished_at` is before this go (`retention.failed_runs`).
    pub failed_runs_before: DateTime<Utc>,
    /// Cancelled runs whose `finished_at` is before this go (`retention.cancelled_runs`).
    pub cancelled_runs_before: DateTime<Utc>,
    /// ... unless a message about them is still unacknowledged and they finished after this.
    pub unacked_runs_before: DateTime<Utc>,
    /// Acknowledged inbox messages whose `acked_at` is before this go.
    pub acked_inbox_before: DateTime<Utc>,
    /// Schedule occurrences recorded before this go (each schedule keeps its latest).
    pub occurrences_before: DateTime<Utc>,
    /// Cleanly stopped worker rows whose `stopped_at` is before this go.
    pub workers_before: DateTime<Utc>,
    /// Batches completed before this go, once none of their runs is left.
    pub batches_before: DateTime<Utc>,
}

impl PruneCutoffs {
    /// The cutoff of runs in the final state `state` (`completed`, `failed`, `cancelled`).
    pub fn runs_before_in(&self, state: &str) -> DateTime<Utc> {
        match state {
            "failed" => self.failed_runs_before,
            "cancelled" => self.cancelled_runs_before,
            _ => self.runs_before,
        }
    }
}

/// Where a prune of runs stands: the final state it walks (one at a time, so each batch is a
/// range of `runs_final_idx`) and the finish time it reached in that state. Start with
/// `RunsCursor::default()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunsCursor {
    pub(crate) state: usize,
    pub(crate) after: String,
}

impl RunsCursor {
    /// Moves past a page of `got` rows (of `want` asked for) whose last finish time is
    /// `last`: on within the state after a full page, else on to the next state.
    pub(crate) fn advance(&mut self, last: Option<&str>, got: usize, want: i64) {
        match last {
            Some(last) if got as i64 == want => last.clone_into(&mut self.after),
            _ => {
                self.state += 1;
                self.after.clear();
            }
        }
    }
}

/// Unfinished runs of one (session, tool).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueDepth {
    /// Session.
    pub session_id: String,
    /// Tool.
    pub tool: String,
    /// Runs waiting in the queue (due or not).
    pub queued: i64,
    /// Runs waiting for an operator.
    pub awaiting_approval: i64,
    /// Runs executing.
    pub running: i64,
}

/// Why a running run is taken back from its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RescueReason {
    /// The owner's process is gone (same host and boot; pid gone or reused).
    OwnerDied,
    /// The owner's row says it stopped, yet the run is still running.
    OwnerStopped,
    /// The owner has no row in `workers`.
    OwnerMissing,
    /// The lease ran out without a heartbeat (owner on another host, or hung).
    LeaseExpired,
}

impl RescueReason {
    /// A short label (stored in the run's `errors` history).
    pub fn as_str(self) -> &'static str {
        match self {
            RescueReason::OwnerDied => "owner_died",
            RescueReason::OwnerStopped => "owner_stopped",
            RescueReason::OwnerMissing => "owner_missing",
            RescueReason::LeaseExpired => "lease_expired",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        [
            RescueReason::OwnerDied,
            RescueReason::OwnerStopped,
            RescueReason::OwnerMissing,
            RescueReason::LeaseExpired,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// Which checkpoint to run (`PRAGMA wal_checkpoint(MODE)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CheckpointMode {
    /// Copy what it can without waiting for anyone; never blocks readers or writers.
    Passive,
    /// Copy everything, then reset the `-wal` file to zero bytes; waits briefly for readers.
    Truncate,
}

/// What one checkpoint did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Checkpoint {
    /// SQLite could not finish (a reader or writer was in the way).
    pub busy: bool,
    /// Frames in the WAL.
    pub log_frames: i64,
    /// Frames copied into the database file (all of them: the WAL can be reused).
    pub checkpointed_frames: i64,
}

impl Checkpoint {
    /// A checkpoint that did not run to an answer (busy, or refused by the storage): frame
    /// counts unknown (-1 in the JSON of `stats` and `status`).
    pub fn not_done() -> Checkpoint {
        Checkpoint {
            busy: true,
            log_frames: -1,
            checkpointed_frames: -1,
        }
    }

    /// Frames still only in the WAL: a reader's snapshot needs them, or a writer was busy.
    pub fn backlog(&self) -> i64 {
        (self.log_frames - self.checkpointed_frames).max(0)
    }
}

/// The WAL as seen by one passive checkpoint, with a warning when it looks pinned.
#[derive(Debug, Clone, Serialize)]
pub struct WalHealth {
    /// Bytes of the `-wal` file after the checkpoint.
    pub wal_bytes: u64,
    /// What the checkpoint did.
    pub checkpoint: Checkpoint,
    /// Set when at least `warn_frames` frames could not be checkpointed.
    pub warning: Option<String>,
}

/// Durability settings reported by benchmarks and `stats`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DbInfo {
    /// `PRAGMA journal_mode`.
    pub journal_mode: String,
    /// `PRAGMA synchronous`, as a name.
    pub synchronous: String,
    /// SQLite library version (empty on Postgres, which reports `server_version`).
    pub sqlite_version: String,
    /// `sqlite` or `postgres`.
    pub engine: String,
    /// The server's version on Postgres; none for the embedded SQLite file.
    pub server_version: Option<String>,
}

/// Where the writer connection's time went, summed over this process's write transactions.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct WriteStats {
    /// Committed write transactions.
    pub transactions: u64,
    /// Seconds from `BEGIN IMMEDIATE` to the end of the statements (before the commit).
    pub statement_secs: f64,
    /// Seconds spent committing: writing WAL frames, and checkpoints that the commit ran.
    pub commit_secs: f64,
}

/// A live view of a running attempt: status, progress, tail and the log so far.
#[derive(Debug, Clone)]
pub struct ProgressWrite {
    /// Run id.
    pub id: String,
    /// Session (owner of the log blob).
    pub session_id: String,
    /// The attempt this write belongs to.
    pub attempt: i64,
    /// The attempt's lease token.
    pub token: String,
    /// Latest status line.
    pub status_text: Option<String>,
    /// Latest progress, JSON.
    pub progress: Option<String>,
    /// Log tail, escaped text.
    pub output_tail: Option<String>,
    /// The whole log so far, when it changed.
    pub log: Option<(Vec<u8>, bool)>,
}

/// Remembers recent checkpoints to tell a pinned WAL from a momentary busy one: warns once the
/// backlog stayed at or above `warn_frames` for `ticks` checkpoints in a row without shrinking.
#[derive(Debug, Clone)]
pub struct WalWatch {
    warn_frames: i64,
    ticks: u32,
    stalled: u32,
    last_backlog: i64,
}

impl WalWatch {
    /// A watch that warns after `ticks` stalled checkpoints with `warn_frames` or more pending.
    pub fn new(warn_frames: i64, ticks: u32) -> Self {
        Self {
            warn_frames,
            ticks: ticks.max(1),
            stalled: 0,
            last_backlog: 0,
        }
    }

    /// Feeds one checkpoint; returns the warning when the WAL looks pinned.
    pub fn observe(&mut self, cp: &Checkpoint, wal_bytes: u64) -> Option<String> {
        let backlog = cp.backlog();
        if backlog >= self.warn_frames && backlog >= self.last_backlog {
            self.stalled += 1;
        } else {
            self.stalled = 0;
        }
        self.last_backlog = backlog;
        (self.stalled >= self.ticks).then(|| pinned_warning(wal_bytes, backlog))
    }
}

/// The warning text for a WAL that cannot be checkpointed.
pub fn pinned_warning(wal_bytes: u64, backlog: i64) -> String {
    format!(
        "the WAL is {wal_bytes} bytes and {backlog} frames cannot be checkpointed: a long-lived \
         reader (an open sqlite3 shell, a long transaction) keeps it from being reset; close it"
    )
}

/// How a command may open the database file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Create the file if it is missing (`init`, `worker`, commands that add runs).
    Create,
    /// The file must exist and be writable (commands that change what is there).
    Existing,
    /// The file must exist; opened read-only when this process may not write it.
    Read,
}
