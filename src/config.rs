//! Configuration: layers (built-in defaults, one config file, `TOOLQ_SECTION__KEY`
//! environment variables, flags; see [`layers`]) merged by figment into the file's shape
//! (every key optional, unknown keys rejected), then validated into a typed [`Config`].

pub mod explain;
pub mod layers;
mod report;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::error::ConfigError;
use crate::tool::command::{CommandToolConfig, FileCommandTool};
pub use layers::{ConfigFile, FileChoice, Layers, Origin, Override};
pub(crate) use report::suggest;

/// Validated configuration with typed values.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Database file (SQLite).
    pub db_path: String,
    /// A Postgres URL (`postgres://user@host/db`): when set, the Postgres engine is used
    /// instead of the file (`database.url`, or `--db`/`TOOLQ_DB` given a URL).
    pub db_url: Option<String>,
    /// Worker loop settings.
    pub worker: WorkerConfig,
    /// Defaults for runs.
    pub runs: RunDefaults,
    /// Per-session limits.
    pub sessions: SessionLimits,
    /// Schedule firing.
    pub schedules: SchedulesConfig,
    /// Command tools defined by the operator, by name.
    pub tools: BTreeMap<String, CommandToolConfig>,
    /// The `shell` and `detached_command` built-ins (off unless enabled).
    pub shell: ShellConfig,
    /// Approval requirements beyond each tool's own policy.
    pub approvals: ApprovalConfig,
    /// What the automatic retention tick (and `toolq prune`) keeps.
    pub retention: RetentionConfig,
    /// WAL checkpoints.
    pub wal: WalConfig,
    /// Per-tool limits: `[limits.NAME]` merged with `[tools.NAME] max_running`. Each worker
    /// enforces its own, counting every worker's runs in the database.
    pub limits: crate::flow::ToolLimits,
    /// The dashboard (`toolq web`, `toolq worker --web`).
    pub web: WebConfig,
}

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
            read_only: false,
        }
    }
}

/// Retention: how long finished work is kept before the worker's retention tick deletes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionConfig {
    /// Whether workers prune automatically.
    pub enabled: bool,
    /// Finished runs (with their logs, results and messages) are kept this long.
    pub finished_runs: Duration,
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

/// WAL checkpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct WalConfig {
    /// How often a worker checkpoints (passive when busy, truncating when idle).
    pub checkpoint_interval: Duration,
    /// Warn when this many WAL frames cannot be checkpointed for several ticks in a row.
    pub warn_frames: i64,
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileApprovals {
    #[serde(default)]
    require: Vec<String>,
    deadline: Option<String>,
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

/// Schedule firing settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulesConfig {
    /// Catch-up runs (after downtime) start at most this many per second, over all schedules.
    pub catchup_starts_per_second: i64,
    /// A tick fired more than this after its time counts as missed and follows the
    /// schedule's missed-ticks policy.
    pub late_after: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            db_path: "./toolq.db".into(),
            db_url: None,
            worker: WorkerConfig {
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
            },
            runs: RunDefaults {
                max_attempts: 3,
                timeout: Duration::from_secs(3600),
                backoff_base: Duration::from_secs(1),
                backoff_max: Duration::from_secs(600),
                log_cap_bytes: 256 * 1024,
                tail_chars: 2048,
            },
            sessions: SessionLimits {
                max_active_runs: 5,
                max_active_runs_per_worker: 64,
                queue_beyond_limit: false,
                max_active_schedules: 20,
            },
            schedules: SchedulesConfig {
                catchup_starts_per_second: 2,
                late_after: Duration::from_secs(60),
            },
            tools: BTreeMap::new(),
            shell: ShellConfig::default(),
            approvals: ApprovalConfig::default(),
            retention: RetentionConfig {
                enabled: true,
                finished_runs: Duration::from_secs(7 * DAY),
                unacked_runs: Duration::from_secs(30 * DAY),
                acked_inbox: Duration::from_secs(7 * DAY),
                occurrences: Duration::from_secs(30 * DAY),
                batch_size: 500,
                interval: Duration::from_secs(600),
            },
            wal: WalConfig {
                checkpoint_interval: Duration::from_secs(30),
                warn_frames: 10_000,
            },
            limits: crate::flow::ToolLimits::new(),
            web: WebConfig::default(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    database: Option<FileDatabase>,
    worker: Option<FileWorker>,
    runs: Option<FileRuns>,
    sessions: Option<FileSessions>,
    schedules: Option<FileSchedules>,
    #[serde(default)]
    tools: BTreeMap<String, FileCommandTool>,
    #[serde(default)]
    shell: ShellConfig,
    #[serde(default)]
    approvals: FileApprovals,
    retention: Option<FileRetention>,
    wal: Option<FileWal>,
    #[serde(default)]
    limits: BTreeMap<String, FileLimit>,
    #[serde(default)]
    web: WebConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimit {
    max_running: Option<i64>,
    rate: Option<String>,
}

const DAY: u64 = 86_400;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRetention {
    enabled: Option<bool>,
    finished_runs: Option<String>,
    unacked_runs: Option<String>,
    acked_inbox: Option<String>,
    occurrences: Option<String>,
    batch_size: Option<i64>,
    interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWal {
    checkpoint_interval: Option<String>,
    warn_frames: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDatabase {
    path: Option<String>,
    url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWorker {
    concurrency: Option<i64>,
    per_session: Option<i64>,
    poll_interval: Option<String>,
    lease: Option<String>,
    heartbeat_interval: Option<String>,
    flush_interval: Option<String>,
    shutdown_grace: Option<String>,
    cancel_grace: Option<String>,
    stall_timeout: Option<String>,
    host_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRuns {
    max_attempts: Option<i64>,
    timeout: Option<String>,
    backoff_base: Option<String>,
    backoff_max: Option<String>,
    log_cap_bytes: Option<i64>,
    tail_chars: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSessions {
    max_active_runs: Option<i64>,
    max_active_runs_per_worker: Option<i64>,
    queue_beyond_limit: Option<bool>,
    max_active_schedules: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSchedules {
    catchup_starts_per_second: Option<i64>,
    late_after: Option<String>,
}

pub use crate::clock::parse_duration;

/// Validates values; errors name where the key was set (file and line, variable or flag).
struct Checker<'a> {
    layers: &'a Layers,
}

impl Checker<'_> {
    fn origin(&self, key: &str) -> String {
        let path: Vec<String> = key.split('.').map(String::from).collect();
        self.layers.origin_of(&path).to_string()
    }

    fn bad(&self, key: &str, value: impl ToString, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.origin(key),
            key: key.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    fn duration(
        &self,
        key: &str,
        v: Option<String>,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        match v {
            None => Ok(default),
            Some(s) => {
                let d = parse_duration(&s).map_err(|r| self.bad(key, format!("{s:?}"), r))?;
                if d.is_zero() {
                    return Err(self.bad(key, format!("{s:?}"), "must be greater than zero"));
                }
                Ok(d)
            }
        }
    }

    fn int(
        &self,
        key: &str,
        v: Option<i64>,
        default: i64,
        min: i64,
        max: i64,
    ) -> Result<i64, ConfigError> {
        match v {
            None => Ok(default),
            Some(n) if n < min || n > max => {
                Err(self.bad(key, n, format!("must be between {min} and {max}")))
            }
            Some(n) => Ok(n),
        }
    }
}

/// The configuration the CLI uses, and the layers it came from: the config file by the
/// lookup order (`--config`, `TOOLQ_CONFIG`, `./toolq.toml`, none), then `TOOLQ_*__*`
/// environment variables, then `overrides` (flags).
pub fn resolve(
    config_flag: Option<&Path>,
    overrides: &[Override],
) -> Result<(Config, Layers), ConfigError> {
    let layers = Layers::new(ConfigFile::lookup(config_flag)?, true, overrides)?;
    let config = Config::from_layers(&layers)?;
    Ok((config, layers))
}

impl Config {
    /// Reads and validates a config file (the file alone: no environment, no flags).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = ConfigFile::read(path, FileChoice::Given)?;
        Config::from_layers(&Layers::new(Some(file), false, &[])?)
    }

    /// Parses and validates config text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let file = ConfigFile {
            name: origin.into(),
            text: text.into(),
            choice: FileChoice::Given,
        };
        Config::from_layers(&Layers::new(Some(file), false, &[])?)
    }

    /// Validates the merged layers into a typed configuration.
    pub fn from_layers(layers: &Layers) -> Result<Config, ConfigError> {
        let file: FileConfig = layers
            .figment
            .extract()
            .map_err(|e| report::from_figment(e, layers))?;
        let c = Checker { layers };
        let d = Config::default();
        let w = file.worker.unwrap_or_default();
        let r = file.runs.unwrap_or_default();
        let s = file.sessions.unwrap_or_default();
        let (retention, wal) = parse_maintenance(&c, &d, file.retention, file.wal)?;
        let sc = file.schedules.unwrap_or_default();
        let database = file.database.unwrap_or_default();
        let db_path = database.path.unwrap_or(d.db_path);
        if db_path.trim().is_empty() {
            return Err(c.bad("database.path", "\"\"", "must not be empty"));
        }
        // An empty url means none: `--db PATH` sets it so, to win over a url in the file.
        let db_url = database.url.filter(|u| !u.trim().is_empty());
        if let Some(u) = &db_url
            && let Some(reason) = crate::db_url::refuse_url(u)
        {
            let shown = format!("{:?}", crate::db_url::redact(u));
            return Err(c.bad("database.url", shown, reason));
        }
        // A URL of another scheme or a keyword string would otherwise become a SQLite file
        // named after it, password and all.
        if db_url.is_none()
            && let Some(reason) = crate::db_url::refuse_path(&db_path)
        {
            let shown = format!("{:?}", crate::db_url::redact(&db_path));
            return Err(c.bad("database.path", shown, reason));
        }
        let worker = WorkerConfig {
            concurrency: c.int(
                "worker.concurrency",
                w.concurrency,
                d.worker.concurrency as i64,
                1,
                10_000,
            )? as usize,
            per_session: c.int(
                "worker.per_session",
                w.per_session,
                d.worker.per_session,
                1,
                10_000,
            )?,
            poll_interval: c.duration(
                "worker.poll_interval",
                w.poll_interval,
                d.worker.poll_interval,
            )?,
            lease: c.duration("worker.lease", w.lease, d.worker.lease)?,
            heartbeat_interval: c.duration(
                "worker.heartbeat_interval",
                w.heartbeat_interval,
                d.worker.heartbeat_interval,
            )?,
            flush_interval: c.duration(
                "worker.flush_interval",
                w.flush_interval,
                d.worker.flush_interval,
            )?,
            shutdown_grace: c.duration(
                "worker.shutdown_grace",
                w.shutdown_grace,
                d.worker.shutdown_grace,
            )?,
            cancel_grace: c.duration(
                "worker.cancel_grace",
                w.cancel_grace,
                d.worker.cancel_grace,
            )?,
            stall_timeout: c.duration(
                "worker.stall_timeout",
                w.stall_timeout,
                d.worker.stall_timeout,
            )?,
            host_id: match w.host_id {
                Some(h) if h.trim().is_empty() => {
                    return Err(c.bad("worker.host_id", "\"\"", "must not be empty"));
                }
                h => h,
            },
        };
        if worker.heartbeat_interval * 2 > worker.lease {
            return Err(c.bad(
                "worker.heartbeat_interval",
                crate::clock::format_duration(worker.heartbeat_interval),
                format!(
                    "must be at most half of worker.lease ({})",
                    crate::clock::format_duration(worker.lease)
                ),
            ));
        }
        let runs = RunDefaults {
            max_attempts: c.int(
                "runs.max_attempts",
                r.max_attempts,
                d.runs.max_attempts,
                1,
                1000,
            )?,
            timeout: c.duration("runs.timeout", r.timeout, d.runs.timeout)?,
            backoff_base: c.duration("runs.backoff_base", r.backoff_base, d.runs.backoff_base)?,
            backoff_max: c.duration("runs.backoff_max", r.backoff_max, d.runs.backoff_max)?,
            log_cap_bytes: c.int(
                "runs.log_cap_bytes",
                r.log_cap_bytes,
                d.runs.log_cap_bytes as i64,
                1024,
                1 << 30,
            )? as usize,
            tail_chars: c.int(
                "runs.tail_chars",
                r.tail_chars,
                d.runs.tail_chars as i64,
                0,
                1 << 20,
            )? as usize,
        };
        if runs.backoff_base > runs.backoff_max {
            return Err(c.bad(
                "runs.backoff_base",
                format!("{:?}", runs.backoff_base),
                format!(
                    "must be at most runs.backoff_max ({:?}): every retry would wait backoff_max",
                    runs.backoff_max
                ),
            ));
        }
        let sessions = SessionLimits {
            max_active_runs: c.int(
                "sessions.max_active_runs",
                s.max_active_runs,
                d.sessions.max_active_runs,
                1,
                1_000_000,
            )?,
            max_active_runs_per_worker: c.int(
                "sessions.max_active_runs_per_worker",
                s.max_active_runs_per_worker,
                d.sessions.max_active_runs_per_worker,
                1,
                1_000_000,
            )?,
            queue_beyond_limit: s
                .queue_beyond_limit
                .unwrap_or(d.sessions.queue_beyond_limit),
            max_active_schedules: c.int(
                "sessions.max_active_schedules",
                s.max_active_schedules,
                d.sessions.max_active_schedules,
                1,
                1_000_000,
            )?,
        };
        let schedules = SchedulesConfig {
            catchup_starts_per_second: c.int(
                "schedules.catchup_starts_per_second",
                sc.catchup_starts_per_second,
                d.schedules.catchup_starts_per_second,
                1,
                10_000,
            )?,
            late_after: c.duration(
                "schedules.late_after",
                sc.late_after,
                d.schedules.late_after,
            )?,
        };
        if schedules.late_after < worker.poll_interval * 2 {
            return Err(c.bad(
                "schedules.late_after",
                crate::clock::format_duration(schedules.late_after),
                format!(
                    "must be at least twice worker.poll_interval ({}), or every tick would count as missed",
                    crate::clock::format_duration(worker.poll_interval)
                ),
            ));
        }
        let tools = crate::tool::command::parse_tools(file.tools, &|key: &str| c.origin(key))?;
        refuse_builtin_names(&c, &tools, file.shell.enabled)?;
        let limits = parse_limits(&c, file.limits, &tools)?;
        if let Some(t) = &file.web.token
            && t.trim().is_empty()
        {
            // A blank token would read as set here and be refused by `web` (or accepted as
            // one space): refuse it where it is given.
            return Err(c.bad("web.token", format!("{t:?}"), "must not be empty or blank"));
        }
        if file.web.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(c.bad(
                "web.listen",
                format!("{:?}", file.web.listen),
                "must be an address like 127.0.0.1:8080",
            ));
        }
        Ok(Config {
            web: file.web,
            limits,
            db_path,
            db_url,
            worker,
            runs,
            sessions,
            schedules,
            tools,
            shell: file.shell,
            retention,
            wal,
            approvals: ApprovalConfig {
                require: file.approvals.require,
                deadline: match file.approvals.deadline {
                    None => None,
                    Some(s) => Some(c.duration("approvals.deadline", Some(s), Duration::ZERO)?),
                },
            },
        })
    }
}

/// Refuses a `[tools.NAME]` whose name a built-in tool has (`shell` and `detached_command`
/// only while `[shell] enabled`): the registry would refuse the pair without saying where.
fn refuse_builtin_names(
    c: &Checker<'_>,
    tools: &BTreeMap<String, CommandToolConfig>,
    shell: bool,
) -> Result<(), ConfigError> {
    let mut builtins: Vec<String> = crate::tool::builtin::all()
        .iter()
        .map(|t| t.definition().name)
        .collect();
    if shell {
        builtins.extend(["shell".to_string(), "detached_command".to_string()]);
    }
    match tools.keys().find(|name| builtins.contains(name)) {
        None => Ok(()),
        Some(name) => Err(ConfigError::Key {
            origin: c.origin(&format!("tools.{name}")),
            message: format!(
                "[tools.{name}]: {name} is built in, so a command tool cannot have that name\n  \
                 give it another name (built-in tools: {})",
                builtins.join(", ")
            ),
        }),
    }
}

/// `[limits.NAME]` and `[tools.NAME] max_running`, one entry per limited tool. A tool's
/// `max_running` may be given in one of the two places, not both.
fn parse_limits(
    c: &Checker<'_>,
    raw: BTreeMap<String, FileLimit>,
    tools: &BTreeMap<String, CommandToolConfig>,
) -> Result<crate::flow::ToolLimits, ConfigError> {
    let mut out = crate::flow::ToolLimits::new();
    for (name, l) in raw {
        let key = |k: &str| format!("limits.{name}.{k}");
        let max_running = match l.max_running {
            None => None,
            Some(n) => Some(c.int(&key("max_running"), Some(n), 0, 1, 1_000_000)?),
        };
        let rate = match l.rate {
            None => None,
            Some(s) => Some(
                crate::flow::Rate::parse(&s)
                    .map_err(|r| c.bad(&key("rate"), format!("{s:?}"), r))?,
            ),
        };
        if let Some(limit) = max_running
            && let Some(n) = tools.get(&name).and_then(|t| t.max_running)
        {
            // The error is at the [limits] key, with its own value; the other one is named
            // with its own place.
            let other = format!("tools.{name}.max_running");
            return Err(c.bad(
                &key("max_running"),
                limit,
                format!(
                    "{other} = {n} is set too ({}); give it in one place",
                    c.origin(&other)
                ),
            ));
        }
        out.insert(name, crate::flow::ToolLimit { max_running, rate });
    }
    for (name, t) in tools {
        if let Some(n) = t.max_running {
            out.entry(name.clone()).or_default().max_running = Some(n);
        }
    }
    Ok(out)
}

fn parse_maintenance(
    c: &Checker<'_>,
    d: &Config,
    r: Option<FileRetention>,
    w: Option<FileWal>,
) -> Result<(RetentionConfig, WalConfig), ConfigError> {
    let (r, w, dr, dw) = (
        r.unwrap_or_default(),
        w.unwrap_or_default(),
        &d.retention,
        &d.wal,
    );
    let retention = RetentionConfig {
        enabled: r.enabled.unwrap_or(dr.enabled),
        finished_runs: c.duration("retention.finished_runs", r.finished_runs, dr.finished_runs)?,
        unacked_runs: c.duration("retention.unacked_runs", r.unacked_runs, dr.unacked_runs)?,
        acked_inbox: c.duration("retention.acked_inbox", r.acked_inbox, dr.acked_inbox)?,
        occurrences: c.duration("retention.occurrences", r.occurrences, dr.occurrences)?,
        batch_size: c.int(
            "retention.batch_size",
            r.batch_size,
            dr.batch_size as i64,
            1,
            100_000,
        )? as usize,
        interval: c.duration("retention.interval", r.interval, dr.interval)?,
    };
    let wal = WalConfig {
        checkpoint_interval: c.duration(
            "wal.checkpoint_interval",
            w.checkpoint_interval,
            dw.checkpoint_interval,
        )?,
        warn_frames: c.int("wal.warn_frames", w.warn_frames, dw.warn_frames, 1, 1 << 40)?,
    };
    Ok((retention, wal))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_config_file_is_the_defaults() {
        let text = include_str!("../config.toml");
        assert_eq!(
            Config::parse(text, "config.toml").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(Config::parse("", "x").unwrap(), Config::default());
    }

    #[test]
    fn limits_merge_tools_max_running_and_reject_bad_values() {
        let c = Config::parse(
            "[tools.fetch]\ncommand = [\"true\"]\nmax_running = 2\n\
             [limits.fetch]\nrate = \"10/1m\"\n[limits.http]\nmax_running = 3\n",
            "c.toml",
        )
        .unwrap();
        let fetch = c.limits["fetch"];
        assert_eq!(fetch.max_running, Some(2));
        assert_eq!(fetch.rate.map(|r| r.count), Some(10));
        assert_eq!(c.limits["http"].max_running, Some(3));
        assert_eq!(c.limits["http"].rate, None);
        for (text, key) in [
            ("[limits.http]\nrate = \"fast\"\n", "limits.http.rate"),
            (
                "[limits.http]\nmax_running = 0\n",
                "limits.http.max_running",
            ),
            ("[limits.http]\nburst = 3\n", "burst"),
            (
                "[tools.t]\ncommand = [\"x\"]\nmax_running = 0\n",
                "tools.t.max_running",
            ),
            (
                "[tools.t]\ncommand = [\"x\"]\nmax_running = 1\n[limits.t]\nmax_running = 2\n",
                "limits.t.max_running",
            ),
        ] {
            let e = Config::parse(text, "c.toml").unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn bad_values_name_key_and_value() {
        let e = Config::parse("[worker]\nconcurrency = 0\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("worker.concurrency") && e.contains('0') && e.contains("c.toml"),
            "{e}"
        );
        let e = Config::parse("[worker]\nlease = \"soon\"\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("worker.lease") && e.contains("soon"), "{e}");
        let e = Config::parse("[worker]\nconcurency = 3\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("concurency"), "{e}");
        let e = Config::parse("[retention]\nfinished_runs = \"forever\"\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("retention.finished_runs") && e.contains("forever"),
            "{e}"
        );
        let e = Config::parse("[schedules]\nlate_after = \"100ms\"\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("schedules.late_after") && e.contains("poll_interval"),
            "{e}"
        );
        let e = Config::parse("[schedules]\ncatchup_starts_per_second = 0\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("schedules.catchup_starts_per_second"), "{e}");
        let e = Config::parse("[worker\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.toml"), "{e}");
    }
}
