//! The typed sections of a [`Config`](super::Config), each with its built-in default (the
//! values the shipped `config.toml` lists; a test checks the two agree).

use std::time::Duration;

use serde::Deserialize;

const DAY: u64 = 86_400;

/// The `[web]` section: how the dashboard listens and who may use it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// `HOST:PORT` of `toolq web` (default 127.0.0.1:8080).
    #[serde(default = "default_web_listen")]
    pub listen: String,
    /// The token every request must carry (required to listen off loopback).
    #[serde(default)]
    pub token: Option<String>,
    /// A second token that may read everything (dashboard and API) but take no action.
    #[serde(default)]
    pub read_token: Option<String>,
    /// Show everything, allow no action.
    #[serde(default)]
    pub read_only: bool,
}

fn default_web_listen() -> String {
    "127.0.0.1:8080".into()
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            listen: default_web_listen(),
            token: None,
            read_token: None,
            read_only: false,
        }
    }
}

/// The `[traces]` section: OpenTelemetry traces over OTLP/HTTP (off by default). Unset keys
/// fall back on the standard `OTEL_*` variables when the exporter starts (see `crate::trace`).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracesConfig {
    /// Export spans (also on with `OTEL_TRACES_EXPORTER=otlp`; `OTEL_SDK_DISABLED=true` wins).
    #[serde(default)]
    pub enabled: bool,
    /// The OTLP/HTTP traces URL (None: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`, else `http://localhost:4318/v1/traces`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `service.name` of the spans (None: `OTEL_SERVICE_NAME`, else `toolq`).
    #[serde(default)]
    pub service_name: Option<String>,
}

/// Retention: how long finished work is kept before the worker's retention tick deletes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionConfig {
    /// Whether workers prune automatically.
    pub enabled: bool,
    /// Finished runs (with their logs, results and messages) are kept this long; completed
    /// runs always, failed and cancelled ones unless their own keys say otherwise.
    pub finished_runs: Duration,
    /// Failed runs are kept this long (default: `finished_runs`).
    pub failed_runs: Duration,
    /// Cancelled runs are kept this long (default: `finished_runs`).
    pub cancelled_runs: Duration,
    /// Finished runs whose message is still unacknowledged are kept this long.
    pub unacked_runs: Duration,
    /// Acknowledged inbox messages are kept this long after the acknowledgement.
    pub acked_inbox: Duration,
    /// Schedule occurrences are kept this long after their tick.
    pub occurrences: Duration,
    /// Rows deleted per write transaction.
    pub batch_size: usize,
    /// How often the retention tick runs.
    pub interval: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            finished_runs: Duration::from_secs(7 * DAY),
            failed_runs: Duration::from_secs(7 * DAY),
            cancelled_runs: Duration::from_secs(7 * DAY),
            unacked_runs: Duration::from_secs(30 * DAY),
            acked_inbox: Duration::from_secs(7 * DAY),
            occurrences: Duration::from_secs(30 * DAY),
            batch_size: 500,
            interval: Duration::from_secs(600),
        }
    }
}

/// WAL checkpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct WalConfig {
    /// How often a worker checkpoints (passive when busy, truncating when idle).
    pub checkpoint_interval: Duration,
    /// Warn when this many WAL frames cannot be checkpointed for several ticks in a row.
    pub warn_frames: i64,
}

impl Default for WalConfig {
    fn default() -> Self {
        Self {
            checkpoint_interval: Duration::from_secs(30),
            warn_frames: 10_000,
        }
    }
}

/// The `[shell]` section: whether the built-ins that run any command are registered.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellConfig {
    /// Registers `shell` and `detached_command` (default false: whoever can enqueue could
    /// otherwise run any command).
    #[serde(default)]
    pub enabled: bool,
    /// Programs (`argv[0]`, as written) they may run; empty means any.
    #[serde(default)]
    pub allowed_programs: Vec<String>,
    /// Where `detached_command` keeps operation state (default: `<database>.operations`).
    #[serde(default)]
    pub state_dir: Option<String>,
}

/// The `[approvals]` section.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ApprovalConfig {
    /// Tools whose runs wait for approval whatever their own policy says.
    pub require: Vec<String>,
    /// An approval not given within this long expires the run (none by default).
    pub deadline: Option<Duration>,
}

/// Worker loop settings.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// Running runs per worker process.
    pub concurrency: usize,
    /// Running runs per session, over all workers.
    pub per_session: i64,
    /// How often to look for work when nothing woke the worker.
    pub poll_interval: Duration,
    /// How long a claim holds a run without a heartbeat.
    pub lease: Duration,
    /// How often leases are extended (and cancel requests noticed).
    pub heartbeat_interval: Duration,
    /// Shortest gap between live progress/log writes of one run.
    pub flush_interval: Duration,
    /// On shutdown, how long in-flight runs may take before they are handed back.
    pub shutdown_grace: Duration,
    /// After a cancel or timeout signal, how long a tool may take before it is aborted.
    pub cancel_grace: Duration,
    /// How long writes may fail with a storage error (disk full, I/O error) without progress
    /// before a draining worker gives up and exits 1.
    pub stall_timeout: Duration,
    /// The host name a worker records and compares to rescue runs of dead processes at once
    /// (None: the machine's). For tests and containers that share a machine but must act as
    /// separate hosts; see config.toml.
    pub host_id: Option<String>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 64,
            per_session: 5,
            poll_interval: Duration::from_millis(500),
            lease: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(2),
            flush_interval: Duration::from_millis(500),
            shutdown_grace: Duration::from_secs(30),
            cancel_grace: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(300),
            host_id: None,
        }
    }
}

/// Defaults applied to runs that do not set their own.
#[derive(Debug, Clone, PartialEq)]
pub struct RunDefaults {
    /// Attempts in all.
    pub max_attempts: i64,
    /// Timeout when neither the run nor its tool sets one.
    pub timeout: Duration,
    /// First retry delay.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Log cap in bytes.
    pub log_cap_bytes: usize,
    /// Characters kept in output_tail.
    pub tail_chars: usize,
    /// Snoozes a run may take (`ToolOutcome::Snooze`) before it fails, naming this limit.
    pub max_snoozes: i64,
    /// Largest JSON result of one recorded step (`ctx.step`), in bytes.
    pub max_step_bytes: usize,
    /// Most runs one batch may hold (`enqueue --batch`, `Client::create_batch`).
    pub max_batch_runs: usize,
}

impl Default for RunDefaults {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            timeout: Duration::from_secs(3600),
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(600),
            log_cap_bytes: 256 * 1024,
            tail_chars: 2048,
            max_snoozes: 1000,
            max_step_bytes: 1024 * 1024,
            max_batch_runs: 100_000,
        }
    }
}

/// Per-session limits.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionLimits {
    /// Active background runs (queued or awaiting approval and due, or running) a session may
    /// have when it calls spawn_background or a Background-mode tool (the seed's 5). Runs not
    /// started in the background and delayed runs do not count.
    pub max_active_runs: i64,
    /// Background runs one worker process runs at once (the seed's per-worker 64): its claim
    /// takes no more; its other slots take other runs. Not a count of the queue.
    pub max_active_runs_per_worker: i64,
    /// Batch use: spawn_background queues beyond the per-session limit instead of rejecting.
    pub queue_beyond_limit: bool,
    /// Enabled schedules per session.
    pub max_active_schedules: i64,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_active_runs: 5,
            max_active_runs_per_worker: 64,
            queue_beyond_limit: false,
            max_active_schedules: 20,
        }
    }
}

/// Schedule firing settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulesConfig {
    /// Catch-up runs (after downtime) start at most this many per second, over all schedules.
    pub catchup_starts_per_second: i64,
    /// A tick fired more than this after its time counts as missed and follows the
    /// schedule's missed-ticks policy.
    pub late_after: Duration,
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        Self {
            catchup_starts_per_second: 2,
            late_after: Duration::from_secs(60),
        }
    }
}
