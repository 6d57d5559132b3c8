//! From the file's shape to the typed sections, one function per section. Errors name the
//! key, the value and where the key was set (file and line, variable or flag).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use super::command_tools::CommandToolConfig;
use super::file::{
    FileApprovals, FileDatabase, FileLimit, FileRetention, FileRuns, FileSchedules, FileSessions,
    FileWal, FileWorker,
};
use super::layers::Layers;
use super::sections::{
    ApprovalConfig, RetentionConfig, RunDefaults, SchedulesConfig, SessionLimits, TracesConfig,
    WalConfig, WebConfig, WorkerConfig,
};
use crate::clock::{format_duration, parse_duration};
use crate::error::ConfigError;
use crate::flow::{Rate, ToolLimit, ToolLimits};

/// Validates values; errors name where the key was set (file and line, variable or flag).
pub(super) struct Checker<'a> {
    pub layers: &'a Layers,
}

impl Checker<'_> {
    /// Where the value at the dotted `key` came from, as errors say it.
    pub fn origin(&self, key: &str) -> String {
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

    /// A duration greater than zero, or `default` when not set.
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

    /// An integer within `range`, or `default` when not set.
    fn int(
        &self,
        key: &str,
        v: Option<i64>,
        default: i64,
        range: RangeInclusive<i64>,
    ) -> Result<i64, ConfigError> {
        match v {
            None => Ok(default),
            Some(n) if !range.contains(&n) => Err(self.bad(
                key,
                n,
                format!("must be between {} and {}", range.start(), range.end()),
            )),
            Some(n) => Ok(n),
        }
    }
}

/// `[database]`: the file path and the Postgres URL (an empty URL means none).
pub(super) fn database(
    c: &Checker<'_>,
    f: FileDatabase,
    default_path: &str,
) -> Result<(String, Option<String>), ConfigError> {
    let db_path = f.path.unwrap_or_else(|| default_path.into());
    if db_path.trim().is_empty() {
        return Err(c.bad("database.path", "\"\"", "must not be empty"));
    }
    // An empty url means none: `--db PATH` sets it so, to win over a url in the file.
    let db_url = f.url.filter(|u| !u.trim().is_empty());
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
    Ok((db_path, db_url))
}

/// `[worker]`; the heartbeat must fit twice in the lease.
pub(super) fn worker(c: &Checker<'_>, w: FileWorker) -> Result<WorkerConfig, ConfigError> {
    let d = WorkerConfig::default();
    let worker = WorkerConfig {
        concurrency: c.int(
            "worker.concurrency",
            w.concurrency,
            d.concurrency as i64,
            1..=10_000,
        )? as usize,
        per_session: c.int(
            "worker.per_session",
            w.per_session,
            d.per_session,
            1..=10_000,
        )?,
        poll_interval: c.duration("worker.poll_interval", w.poll_interval, d.poll_interval)?,
        lease: c.duration("worker.lease", w.lease, d.lease)?,
        heartbeat_interval: c.duration(
            "worker.heartbeat_interval",
            w.heartbeat_interval,
            d.heartbeat_interval,
        )?,
        flush_interval: c.duration("worker.flush_interval", w.flush_interval, d.flush_interval)?,
        shutdown_grace: c.duration("worker.shutdown_grace", w.shutdown_grace, d.shutdown_grace)?,
        cancel_grace: c.duration("worker.cancel_grace", w.cancel_grace, d.cancel_grace)?,
        stall_timeout: c.duration("worker.stall_timeout", w.stall_timeout, d.stall_timeout)?,
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
            format_duration(worker.heartbeat_interval),
            format!(
                "must be at most half of worker.lease ({})",
                format_duration(worker.lease)
            ),
        ));
    }
    Ok(worker)
}

/// `[runs]`; the first retry delay may not exceed the longest.
pub(super) fn runs(c: &Checker<'_>, r: FileRuns) -> Result<RunDefaults, ConfigError> {
    let d = RunDefaults::default();
    let runs = RunDefaults {
        max_attempts: c.int(
            "runs.max_attempts",
            r.max_attempts,
            d.max_attempts,
            1..=1000,
        )?,
        timeout: c.duration("runs.timeout", r.timeout, d.timeout)?,
        backoff_base: c.duration("runs.backoff_base", r.backoff_base, d.backoff_base)?,
        backoff_max: c.duration("runs.backoff_max", r.backoff_max, d.backoff_max)?,
        log_cap_bytes: c.int(
            "runs.log_cap_bytes",
            r.log_cap_bytes,
            d.log_cap_bytes as i64,
            1024..=1 << 30,
        )? as usize,
        tail_chars: c.int(
            "runs.tail_chars",
            r.tail_chars,
            d.tail_chars as i64,
            0..=1 << 20,
        )? as usize,
        max_snoozes: c.int(
            "runs.max_snoozes",
            r.max_snoozes,
            d.max_snoozes,
            0..=1_000_000_000,
        )?,
        max_step_bytes: c.int(
            "runs.max_step_bytes",
            r.max_step_bytes,
            d.max_step_bytes as i64,
            16..=64 << 20,
        )? as usize,
        max_batch_runs: c.int(
            "runs.max_batch_runs",
            r.max_batch_runs,
            d.max_batch_runs as i64,
            1..=crate::run::composition::MAX_BATCH_RUNS as i64,
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
    Ok(runs)
}

/// `[sessions]`.
pub(super) fn sessions(c: &Checker<'_>, s: FileSessions) -> Result<SessionLimits, ConfigError> {
    let d = SessionLimits::default();
    let count = |key: &str, v: Option<i64>, d: i64| c.int(key, v, d, 1..=1_000_000);
    Ok(SessionLimits {
        max_active_runs: count(
            "sessions.max_active_runs",
            s.max_active_runs,
            d.max_active_runs,
        )?,
        max_active_runs_per_worker: count(
            "sessions.max_active_runs_per_worker",
            s.max_active_runs_per_worker,
            d.max_active_runs_per_worker,
        )?,
        queue_beyond_limit: s.queue_beyond_limit.unwrap_or(d.queue_beyond_limit),
        max_active_schedules: count(
            "sessions.max_active_schedules",
            s.max_active_schedules,
            d.max_active_schedules,
        )?,
    })
}

/// `[schedules]`; a tick must not count as late before the worker could have looked twice.
pub(super) fn schedules(
    c: &Checker<'_>,
    s: FileSchedules,
    worker: &WorkerConfig,
) -> Result<SchedulesConfig, ConfigError> {
    let d = SchedulesConfig::default();
    let schedules = SchedulesConfig {
        catchup_starts_per_second: c.int(
            "schedules.catchup_starts_per_second",
            s.catchup_starts_per_second,
            d.catchup_starts_per_second,
            1..=10_000,
        )?,
        late_after: c.duration("schedules.late_after", s.late_after, d.late_after)?,
    };
    if schedules.late_after < worker.poll_interval * 2 {
        return Err(c.bad(
            "schedules.late_after",
            format_duration(schedules.late_after),
            format!(
                "must be at least twice worker.poll_interval ({}), or every tick would count as missed",
                format_duration(worker.poll_interval)
            ),
        ));
    }
    Ok(schedules)
}

/// `[retention]` and `[wal]`: what the worker's maintenance ticks keep and how often.
pub(super) fn maintenance(
    c: &Checker<'_>,
    r: Option<FileRetention>,
    w: Option<FileWal>,
) -> Result<(RetentionConfig, WalConfig), ConfigError> {
    let (r, w) = (r.unwrap_or_default(), w.unwrap_or_default());
    let (dr, dw) = (RetentionConfig::default(), WalConfig::default());
    let finished_runs = c.duration("retention.finished_runs", r.finished_runs, dr.finished_runs)?;
    let retention = RetentionConfig {
        enabled: r.enabled.unwrap_or(dr.enabled),
        finished_runs,
        // Unset, an outcome is kept as long as finished runs are (the one age before these).
        failed_runs: c.duration("retention.failed_runs", r.failed_runs, finished_runs)?,
        cancelled_runs: c.duration("retention.cancelled_runs", r.cancelled_runs, finished_runs)?,
        unacked_runs: c.duration("retention.unacked_runs", r.unacked_runs, dr.unacked_runs)?,
        acked_inbox: c.duration("retention.acked_inbox", r.acked_inbox, dr.acked_inbox)?,
        occurrences: c.duration("retention.occurrences", r.occurrences, dr.occurrences)?,
        batch_size: c.int(
            "retention.batch_size",
            r.batch_size,
            dr.batch_size as i64,
            1..=100_000,
        )? as usize,
        interval: c.duration("retention.interval", r.interval, dr.interval)?,
    };
    let wal = WalConfig {
        checkpoint_interval: c.duration(
            "wal.checkpoint_interval",
            w.checkpoint_interval,
            dw.checkpoint_interval,
        )?,
        warn_frames: c.int(
            "wal.warn_frames",
            w.warn_frames,
            dw.warn_frames,
            1..=1 << 40,
        )?,
    };
    Ok((retention, wal))
}

/// `[limits.NAME]` and `[tools.NAME] max_running`, one entry per limited tool. A tool's
/// `max_running` may be given in one of the two places, not both.
pub(super) fn limits(
    c: &Checker<'_>,
    raw: BTreeMap<String, FileLimit>,
    tools: &BTreeMap<String, CommandToolConfig>,
) -> Result<ToolLimits, ConfigError> {
    let mut out = ToolLimits::new();
    for (name, l) in raw {
        let key = |k: &str| format!("limits.{name}.{k}");
        let max_running = match l.max_running {
            None => None,
            Some(n) => Some(c.int(&key("max_running"), Some(n), 0, 1..=1_000_000)?),
        };
        let rate = match l.rate {
            None => None,
            Some(s) => Some(Rate::parse(&s).map_err(|r| c.bad(&key("rate"), format!("{s:?}"), r))?),
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
        // A table with retry keys only limits nothing: no entry, so claims see no limit.
        if max_running.is_none() && rate.is_none() {
            continue;
        }
        out.insert(name, ToolLimit { max_running, rate });
    }
    for (name, t) in tools {
        if let Some(n) = t.max_running {
            out.entry(name.clone()).or_default().max_running = Some(n);
        }
    }
    Ok(out)
}

/// The retry keys of `[limits.NAME]` and `[tools.NAME]`, taken out of both tables and
/// merged per tool (`retry::merge`); a key given in both places is an error naming both.
pub(super) fn retries(
    c: &Checker<'_>,
    limits: &mut BTreeMap<String, FileLimit>,
    tools: &mut BTreeMap<String, super::command_tools::FileCommandTool>,
    runs: &RunDefaults,
) -> Result<BTreeMap<String, super::retry::ToolRetry>, ConfigError> {
    let from_limits = limits
        .iter_mut()
        .map(|(n, l)| (n.clone(), l.take_retry()))
        .collect();
    let from_tools = tools
        .iter_mut()
        .map(|(n, t)| (n.clone(), t.take_retry()))
        .collect();
    let bad = |key: &str, value: String, reason: String| c.bad(key, value, reason);
    let origin = |key: &str| c.origin(key);
    super::retry::merge(from_limits, from_tools, runs, &bad, &origin)
}

/// `[web]`: a token that is not blank, an address that parses.
/// `[traces]`: the endpoint must be an http(s) URL and the service name not blank.
pub(super) fn traces(c: &Checker<'_>, t: &TracesConfig) -> Result<(), ConfigError> {
    if let Some(e) = &t.endpoint
        && let Some(reason) = refuse_endpoint(e)
    {
        return Err(c.bad("traces.endpoint", format!("{e:?}"), reason));
    }
    if let Some(n) = &t.service_name
        && n.trim().is_empty()
    {
        return Err(c.bad("traces.service_name", format!("{n:?}"), "must not be blank"));
    }
    Ok(())
}

/// Why `url` cannot be an OTLP/HTTP endpoint, or None when it can: an `http://` or
/// `https://` URL with a host. Also checks the `OTEL_*` variables' endpoints (`crate::trace`).
pub(crate) fn refuse_endpoint(url: &str) -> Option<&'static str> {
    const NEED: &str = "must be an http:// or https:// URL with a host, like \
                        http://localhost:4318/v1/traces";
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let Some(rest) = rest else {
        return Some(NEED);
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') || url.chars().any(char::is_whitespace) {
        return Some(NEED);
    }
    if url.parse::<ureq::http::Uri>().is_err() {
        return Some(NEED);
    }
    None
}

pub(super) fn web(c: &Checker<'_>, web: &WebConfig) -> Result<(), ConfigError> {
    for (key, token) in [
        ("web.token", &web.token),
        ("web.read_token", &web.read_token),
    ] {
        if let Some(t) = token
            && t.trim().is_empty()
        {
            // A blank token would read as set here and be refused by `web` (or accepted as
            // one space): refuse it where it is given.
            return Err(c.bad(key, format!("{t:?}"), "must not be empty or blank"));
        }
    }
    if web.read_token.is_some() && web.read_token == web.token {
        return Err(c.bad(
            "web.read_token",
            "(hidden)",
            "must differ from web.token: a read token that equals the acting token could act",
        ));
    }
    if web.listen.parse::<std::net::SocketAddr>().is_err() {
        return Err(c.bad(
            "web.listen",
            format!("{:?}", web.listen),
            "must be an address like 127.0.0.1:8080",
        ));
    }
    Ok(())
}

/// `[approvals]`: the tools that always wait, and the deadline (none unless set).
pub(super) fn approvals(c: &Checker<'_>, a: FileApprovals) -> Result<ApprovalConfig, ConfigError> {
    let deadline = match a.deadline {
        None => None,
        Some(s) => Some(c.duration("approvals.deadline", Some(s), Duration::ZERO)?),
    };
    Ok(ApprovalConfig {
        require: a.require,
        deadline,
    })
}
