//! Worker health for `toolq status`: every worker process with its liveness, and whether a
//! live worker's claim loop is stale (no poll for 3 poll intervals).
//!
//! A worker records the time of its latest loop iteration in memory and writes it to its
//! `workers` row with each heartbeat, so a row's `last_poll_at` can lag by one heartbeat
//! interval: a loop is stale when `last_poll_at` is older than 3 poll intervals plus one
//! heartbeat interval (each worker's own intervals, as stored in its row).
//!
//! The health check also fails when work waits (queued runs, or enabled schedules) and no
//! worker is alive to do it, and it names queued runs of tools no live worker has.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::client::Client;
use crate::clock::parse_ts;
use crate::error::Result;
use crate::store::WorkerRow;
use crate::worker::identity;

/// How a worker process looks from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Heartbeating and polling.
    Alive,
    /// Its process lives (or it still heartbeats) but its claim loop has not polled for
    /// 3 poll intervals: something is wrong with it.
    Stale,
    /// Its process is gone (same host and boot), or it has not heartbeated for a whole lease
    /// (another host), and it has not been marked stopped yet.
    Dead,
    /// It exited cleanly, or a rescue found it dead and marked it stopped.
    Stopped,
}

impl Liveness {
    /// The name shown by `toolq status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Alive => "alive",
            Liveness::Stale => "stale",
            Liveness::Dead => "dead",
            Liveness::Stopped => "stopped",
        }
    }
}

/// One worker process and its liveness.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerStatus {
    /// The stored row.
    #[serde(flatten)]
    pub row: WorkerRow,
    /// Its liveness, judged now.
    pub liveness: Liveness,
}

/// The answer of [`status`].
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// When it was judged.
    pub now: String,
    /// Worker processes, live ones first, newest first.
    pub workers: Vec<WorkerStatus>,
    /// Number of workers whose loop is stale; `toolq status` exits non-zero when above 0.
    pub stale: usize,
    /// SQLITE_BUSY retries summed over the listed workers.
    pub busy_retries: i64,
    /// Live workers (alive or stale).
    pub live_workers: usize,
    /// Queued runs, due or not.
    pub queued_runs: i64,
    /// Enabled schedules that will fire again.
    pub enabled_schedules: i64,
    /// Queued runs of tools no live worker has, by tool: they wait for a worker with the tool.
    pub unserved_tools: Vec<UnservedTool>,
    /// What is paused (`toolq pause`), since when and by whom; oldest first.
    pub paused: Vec<crate::flow::Pause>,
}

impl StatusReport {
    /// True when no live worker's loop is stale, and work that waits (queued runs, enabled
    /// schedules) has a live worker.
    pub fn healthy(&self) -> bool {
        self.stale == 0 && !self.unattended()
    }

    /// True when work waits and no worker is alive to do it.
    pub fn unattended(&self) -> bool {
        self.live_workers == 0 && (self.queued_runs > 0 || self.enabled_schedules > 0)
    }
}

/// Queued runs of a tool that no live worker has registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnservedTool {
    /// The tool's name.
    pub tool: String,
    /// Its queued runs.
    pub queued: i64,
}

impl UnservedTool {
    /// The line `stats` and `status` print for it.
    pub fn message(&self) -> String {
        format!(
            "{} of {}: no live worker has this tool",
            plural(self.queued, "queued run"),
            self.tool
        )
    }
}

/// `n` and the noun, with an `s` unless `n` is 1.
pub fn plural(n: i64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The tools among `queued` (tool, queued runs) that none of the `live` workers has.
pub fn unserved<'a>(
    queued: &[(String, i64)],
    live: impl IntoIterator<Item = &'a WorkerRow>,
) -> Vec<UnservedTool> {
    let served: std::collections::HashSet<&str> = live
        .into_iter()
        .flat_map(|w| w.tools.iter().map(String::as_str))
        .collect();
    queued
        .iter()
        .filter(|(tool, n)| *n > 0 && !served.contains(tool.as_str()))
        .map(|(tool, n)| UnservedTool {
            tool: tool.clone(),
            queued: *n,
        })
        .collect()
}

/// Where the judging process runs, to tell which pids it can check.
#[derive(Debug, Clone)]
pub struct Here<'a> {
    /// This host's name.
    pub host: &'a str,
    /// This boot's id.
    pub boot_id: &'a str,
    /// This process's pid namespace.
    pub pid_namespace: &'a str,
}

/// Judges one worker row (pure but for `is_dead`, which checks a pid on this host).
pub fn classify(
    row: &WorkerRow,
    now: DateTime<Utc>,
    here: &Here<'_>,
    is_dead: impl Fn(i64, &str) -> bool,
) -> Liveness {
    if row.stopped_at.is_some() {
        return Liveness::Stopped;
    }
    let local = row.host == here.host
        && row.boot_id == here.boot_id
        && row.pid_namespace == here.pid_namespace;
    if local && is_dead(row.pid, &row.process_start_time) {
        return Liveness::Dead;
    }
    let age = |t: Option<&str>| t.and_then(parse_ts).map(|t| now - t);
    let heartbeat_age = age(Some(&row.heartbeat_at)).unwrap_or(Duration::MAX);
    if !local && heartbeat_age > Duration::milliseconds(row.lease_ms) {
        return Liveness::Dead;
    }
    let poll_age = age(row.last_poll_at.as_deref())
        .or_else(|| age(Some(&row.started_at)))
        .unwrap_or(Duration::MAX);
    let stale_after = Duration::milliseconds(3 * row.poll_interval_ms + row.heartbeat_interval_ms);
    if poll_age > stale_after {
        Liveness::Stale
    } else {
        Liveness::Alive
    }
}

/// Lists worker processes (with `include_stopped`, also those that stopped) and judges each.
pub async fn status(client: &Client, include_stopped: bool) -> Result<StatusReport> {
    let overview = client.engine().worker_overview(include_stopped).await?;
    let (rows, queued, enabled_schedules) = (
        overview.workers,
        overview.queued_by_tool,
        overview.enabled_schedules,
    );
    let now = client.now();
    let (host, boot_id, pid_ns) = (
        identity::host_of(&client.config().worker),
        identity::boot_id(),
        identity::pid_namespace(),
    );
    let here = Here {
        host: &host,
        boot_id: &boot_id,
        pid_namespace: &pid_ns,
    };
    let workers: Vec<WorkerStatus> = rows
        .into_iter()
        .map(|row| WorkerStatus {
            liveness: classify(&row, now, &here, identity::is_dead),
            row,
        })
        .collect();
    let live: Vec<&WorkerRow> = workers
        .iter()
        .filter(|w| matches!(w.liveness, Liveness::Alive | Liveness::Stale))
        .map(|w| &w.row)
        .collect();
    let (live_workers, unserved_tools) = (live.len(), unserved(&queued, live));
    let paused = client.pauses().await?;
    Ok(StatusReport {
        paused,
        now: crate::clock::ts(now),
        live_workers,
        queued_runs: queued.iter().map(|(_, n)| n).sum(),
        enabled_schedules,
        unserved_tools,
        stale: workers
            .iter()
            .filter(|w| w.liveness == Liveness::Stale)
            .count(),
        busy_retries: workers.iter().map(|w| w.row.busy_retries).sum(),
        workers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("literal instant")
            .with_timezone(&Utc)
    }

    fn row(host: &str, heartbeat: &str, poll: Option<&str>) -> WorkerRow {
        WorkerRow {
            id: "wk_1".into(),
            host: host.into(),
            boot_id: "boot".into(),
            pid_namespace: "ns".into(),
            pid: 42,
            process_start_time: "100".into(),
            started_at: "2026-11-01T11:00:00.000Z".into(),
            heartbeat_at: heartbeat.into(),
            last_poll_at: poll.map(str::to_string),
            stopped_at: None,
            stop_reason: None,
            concurrency: 64,
            poll_interval_ms: 500,
            heartbeat_interval_ms: 2000,
            lease_ms: 30_000,
            busy_retries: 0,
            version: "0".into(),
            tools: Vec::new(),
        }
    }

    const HERE: Here<'static> = Here {
        host: "h1",
        boot_id: "boot",
        pid_namespace: "ns",
    };
    const NOW: &str = "2026-11-01T12:00:00Z";

    #[test]
    fn polling_worker_is_alive_until_three_polls_plus_a_heartbeat_are_missed() {
        let alive = |_: i64, _: &str| false;
        let r = row(
            "h1",
            "2026-11-01T11:59:59.000Z",
            Some("2026-11-01T11:59:58.000Z"),
        );
        assert_eq!(classify(&r, at(NOW), &HERE, alive), Liveness::Alive);
        // 3 * 500ms + 2s = 3.5s: 3.5s ago is still fine, 3.6s is stale.
        let r = row(
            "h1",
            "2026-11-01T11:59:59.000Z",
            Some("2026-11-01T11:59:56.500Z"),
        );
        assert_eq!(classify(&r, at(NOW), &HERE, alive), Liveness::Alive);
        let r = row(
            "h1",
            "2026-11-01T11:59:59.000Z",
            Some("2026-11-01T11:59:56.400Z"),
        );
        assert_eq!(classify(&r, at(NOW), &HERE, alive), Liveness::Stale);
        // Never polled: judged from its start.
        let r = row("h1", "2026-11-01T11:59:59.000Z", None);
        assert_eq!(classify(&r, at(NOW), &HERE, alive), Liveness::Stale);
    }

    #[test]
    fn a_gone_local_pid_is_dead_and_a_silent_remote_worker_too() {
        let r = row(
            "h1",
            "2026-11-01T11:59:59.000Z",
            Some("2026-11-01T11:59:59.000Z"),
        );
        assert_eq!(classify(&r, at(NOW), &HERE, |_, _| true), Liveness::Dead);
        // Another host: the pid cannot be checked; a heartbeat older than the lease means dead.
        let r = row(
            "h2",
            "2026-11-01T11:59:29.000Z",
            Some("2026-11-01T11:59:29.000Z"),
        );
        assert_eq!(classify(&r, at(NOW), &HERE, |_, _| true), Liveness::Dead);
        // Another host that heartbeats but does not poll: stale, never judged by pid.
        let r = row(
            "h2",
            "2026-11-01T11:59:59.000Z",
            Some("2026-11-01T11:59:50.000Z"),
        );
        assert_eq!(classify(&r, at(NOW), &HERE, |_, _| true), Liveness::Stale);
        // A hung local process (alive pid, no heartbeat, no poll) is stale, not dead.
        let r = row(
            "h1",
            "2026-11-01T11:50:00.000Z",
            Some("2026-11-01T11:50:00.000Z"),
        );
        assert_eq!(classify(&r, at(NOW), &HERE, |_, _| false), Liveness::Stale);
    }

    #[test]
    fn a_pid_in_another_namespace_is_never_judged_by_pid() {
        let mut r = row(
            "h1",
            "2026-11-01T11:59:59.000Z",
            Some("2026-11-01T11:59:59.000Z"),
        );
        r.pid_namespace = "pid:[other]".into();
        assert_eq!(classify(&r, at(NOW), &HERE, |_, _| true), Liveness::Alive);
    }

    #[test]
    fn queued_tools_no_live_worker_has_are_unserved() {
        let mut a = row("h1", "2026-11-01T11:59:59.000Z", None);
        a.tools = vec!["echo".into(), "sleep".into()];
        let mut b = a.clone();
        b.tools = vec!["deploy".into()];
        let queued = [
            ("deploy".to_string(), 2),
            ("disk_check".to_string(), 3),
            ("echo".to_string(), 1),
        ];
        let u = unserved(&queued, [&a, &b]);
        assert_eq!(
            u,
            [UnservedTool {
                tool: "disk_check".into(),
                queued: 3
            }]
        );
        assert_eq!(
            u[0].message(),
            "3 queued runs of disk_check: no live worker has this tool"
        );
        assert_eq!(unserved(&queued, []).len(), 3);
        assert_eq!(plural(1, "queued run"), "1 queued run");
    }

    #[test]
    fn stopped_wins() {
        let mut r = row("h1", "2026-11-01T11:00:00.000Z", None);
        r.stopped_at = Some("2026-11-01T11:00:01.000Z".into());
        assert_eq!(classify(&r, at(NOW), &HERE, |_, _| true), Liveness::Stopped);
    }
}
