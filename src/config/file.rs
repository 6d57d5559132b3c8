//! The config's shape as written: every key optional, unknown keys rejected. figment merges
//! the layers into [`FileConfig`]; `validate` turns it into the typed sections.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::command_tools::FileCommandTool;
use super::sections::{ShellConfig, TracesConfig, WebConfig};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub database: Option<FileDatabase>,
    pub worker: Option<FileWorker>,
    pub runs: Option<FileRuns>,
    pub sessions: Option<FileSessions>,
    pub schedules: Option<FileSchedules>,
    #[serde(default)]
    pub tools: BTreeMap<String, FileCommandTool>,
    #[serde(default)]
    pub shell: ShellConfig,
    #[serde(default)]
    pub approvals: FileApprovals,
    pub retention: Option<FileRetention>,
    pub wal: Option<FileWal>,
    #[serde(default)]
    pub limits: BTreeMap<String, FileLimit>,
    #[serde(default)]
    pub web: WebConfig,
    #[serde(default)]
    pub traces: TracesConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileApprovals {
    #[serde(default)]
    pub require: Vec<String>,
    pub deadline: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLimit {
    pub max_running: Option<i64>,
    pub rate: Option<String>,
    pub max_attempts: Option<i64>,
    pub backoff_base: Option<String>,
    pub backoff_max: Option<String>,
    pub retry_on: Option<Vec<String>>,
}

impl FileLimit {
    /// Takes the retry keys out (validated by `retry::merge`).
    pub fn take_retry(&mut self) -> super::retry::RawRetry {
        super::retry::RawRetry {
            max_attempts: self.max_attempts.take(),
            backoff_base: self.backoff_base.take(),
            backoff_max: self.backoff_max.take(),
            retry_on: self.retry_on.take(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRetention {
    pub enabled: Option<bool>,
    pub finished_runs: Option<String>,
    pub failed_runs: Option<String>,
    pub cancelled_runs: Option<String>,
    pub unacked_runs: Option<String>,
    pub acked_inbox: Option<String>,
    pub occurrences: Option<String>,
    pub batch_size: Option<i64>,
    pub interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileWal {
    pub checkpoint_interval: Option<String>,
    pub warn_frames: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileDatabase {
    pub path: Option<String>,
    pub url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileWorker {
    pub concurrency: Option<i64>,
    pub per_session: Option<i64>,
    pub poll_interval: Option<String>,
    pub lease: Option<String>,
    pub heartbeat_interval: Option<String>,
    pub flush_interval: Option<String>,
    pub shutdown_grace: Option<String>,
    pub cancel_grace: Option<String>,
    pub stall_timeout: Option<String>,
    pub host_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRuns {
    pub max_attempts: Option<i64>,
    pub timeout: Option<String>,
    pub backoff_base: Option<String>,
    pub backoff_max: Option<String>,
    pub log_cap_bytes: Option<i64>,
    pub tail_chars: Option<i64>,
    pub max_snoozes: Option<i64>,
    pub max_step_bytes: Option<i64>,
    pub max_batch_runs: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSessions {
    pub max_active_runs: Option<i64>,
    pub max_active_runs_per_worker: Option<i64>,
    pub queue_beyond_limit: Option<bool>,
    pub max_active_schedules: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSchedules {
    pub catchup_starts_per_second: Option<i64>,
    pub late_after: Option<String>,
}
