//! Configuration: layers (built-in defaults, one config file, `TOOLQ_SECTION__KEY`
//! environment variables, flags; see [`layers`]) merged by figment into the file's shape
//! (every key optional, unknown keys rejected), then validated into a typed [`Config`].

mod command_tools;
pub mod explain;
mod file;
pub mod layers;
mod report;
pub mod retry;
mod sections;
mod toml_text;
mod validate;

use std::collections::BTreeMap;
use std::path::Path;

pub use crate::clock::parse_duration;
use crate::error::ConfigError;
pub use command_tools::{BUILTIN_TOOLS, CommandToolConfig, SHELL_TOOLS};
use file::FileConfig;
pub use layers::{ConfigFile, FileChoice, Layers, Origin, Override};
pub(crate) use report::suggest;
pub use sections::{
    ApprovalConfig, RetentionConfig, RunDefaults, SchedulesConfig, SessionLimits, ShellConfig,
    TracesConfig, WalConfig, WebConfig, WorkerConfig,
};
use validate::Checker;
pub(crate) use validate::refuse_endpoint;

/// The database file when neither the config nor `--db` names one.
const DEFAULT_DB_PATH: &str = "./toolq.db";

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
    /// Per-tool retry keys: `[limits.NAME]` merged with `[tools.NAME]` (each key in one of
    /// the two). See [`Config::retry_policy`].
    pub retry: BTreeMap<String, retry::ToolRetry>,
    /// OpenTelemetry traces (`[traces]`).
    pub traces: TracesConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            db_path: DEFAULT_DB_PATH.into(),
            db_url: None,
            worker: WorkerConfig::default(),
            runs: RunDefaults::default(),
            sessions: SessionLimits::default(),
            schedules: SchedulesConfig::default(),
            tools: BTreeMap::new(),
            shell: ShellConfig::default(),
            approvals: ApprovalConfig::default(),
            retention: RetentionConfig::default(),
            wal: WalConfig::default(),
            limits: crate::flow::ToolLimits::new(),
            web: WebConfig::default(),
            retry: BTreeMap::new(),
            traces: TracesConfig::default(),
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

    /// Validates the merged layers into a typed configuration. Sections are checked in a
    /// fixed order, so that of several bad keys the same one is reported first.
    pub fn from_layers(layers: &Layers) -> Result<Config, ConfigError> {
        let mut file: FileConfig = layers
            .figment
            .extract()
            .map_err(|e| report::from_figment(e, layers))?;
        let c = Checker { layers };
        let origin = |key: &str| c.origin(key);
        let (retention, wal) = validate::maintenance(&c, file.retention, file.wal)?;
        let database = file.database.unwrap_or_default();
        let (db_path, db_url) = validate::database(&c, database, DEFAULT_DB_PATH)?;
        let worker = validate::worker(&c, file.worker.unwrap_or_default())?;
        let runs = validate::runs(&c, file.runs.unwrap_or_default())?;
        let sessions = validate::sessions(&c, file.sessions.unwrap_or_default())?;
        let schedules = validate::schedules(&c, file.schedules.unwrap_or_default(), &worker)?;
        let retry = validate::retries(&c, &mut file.limits, &mut file.tools, &runs)?;
        let tools = command_tools::parse_tools(file.tools, &origin)?;
        command_tools::refuse_builtin_names(&tools, file.shell.enabled, &origin)?;
        let limits = validate::limits(&c, file.limits, &tools)?;
        validate::web(&c, &file.web)?;
        validate::traces(&c, &file.traces)?;
        let approvals = validate::approvals(&c, file.approvals)?;
        Ok(Config {
            retry,
            web: file.web,
            traces: file.traces,
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
            approvals,
        })
    }
}

impl Config {
    /// The retry policy of `tool`'s runs: its own keys over `[runs]`.
    pub fn retry_policy(&self, tool: &str) -> retry::RetryPolicy {
        match self.retry.get(tool) {
            Some(t) => t.over(&self.runs),
            None => retry::RetryPolicy::of_runs(&self.runs),
        }
    }
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
    fn retry_keys_merge_from_both_tables_over_runs() {
        use retry::{FailureKind, RetryOn};
        let c = Config::parse(
            "[runs]\nmax_attempts = 4\n\
             [tools.fetch]\ncommand = [\"true\"]\nretry_on = [\"tool_error\", \"timeout\"]\n\
             [limits.fetch]\nmax_attempts = 9\nbackoff_base = \"2s\"\n\
             [limits.http]\nmax_running = 3\n",
            "c.toml",
        )
        .unwrap();
        let fetch = c.retry_policy("fetch");
        assert_eq!(fetch.max_attempts, 9);
        assert_eq!(fetch.backoff_base, std::time::Duration::from_secs(2));
        assert_eq!(fetch.backoff_max, c.runs.backoff_max);
        assert_eq!(
            fetch.retry_on,
            RetryOn::of(&[FailureKind::ToolError, FailureKind::Timeout])
        );
        assert_eq!(
            c.retry["fetch"].set_at["retry_on"],
            "tools.fetch.retry_on".to_string()
        );
        // A tool without keys of its own (a max_running alone sets none): [runs], default kinds.
        assert!(!c.retry.contains_key("http"));
        let other = c.retry_policy("http");
        assert_eq!((other.max_attempts, other.retry_on), (4, RetryOn::DEFAULT));
        assert_eq!(c.limits["http"].max_running, Some(3));
        assert_eq!(
            Config::parse("[limits.x]\nretry_on = []\n", "c")
                .unwrap()
                .retry_policy("x")
                .retry_on,
            RetryOn::NONE
        );
        for (text, key) in [
            ("[limits.x]\nmax_attempts = 1001\n", "limits.x.max_attempts"),
            ("[limits.x]\nbackoff_max = \"0s\"\n", "limits.x.backoff_max"),
            (
                "[limits.x]\nbackoff_base = \"soon\"\n",
                "limits.x.backoff_base",
            ),
            ("[limits.x]\nretry_on = [\"crash\"]\n", "limits.x.retry_on"),
            (
                "[limits.x]\nbackoff_max = \"100ms\"\n",
                "limits.x.backoff_max",
            ),
            (
                "[tools.t]\ncommand = [\"x\"]\nretry_on = []\n[limits.t]\nretry_on = [\"timeout\"]\n",
                "limits.t.retry_on",
            ),
        ] {
            let e = Config::parse(text, "c.toml").unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
        let e = Config::parse(
            "[tools.t]\ncommand = [\"x\"]\nmax_attempts = 2\n[limits.t]\nmax_attempts = 3\n",
            "c.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tools.t.max_attempts") && e.contains("limits.t.max_attempts"),
            "{e}"
        );
    }

    #[test]
    fn failed_and_cancelled_retention_default_to_finished_runs() {
        let c = Config::parse("[retention]\nfinished_runs = \"3d\"\n", "c").unwrap();
        let day = std::time::Duration::from_secs(86_400);
        assert_eq!(c.retention.failed_runs, 3 * day);
        assert_eq!(c.retention.cancelled_runs, 3 * day);
        let c = Config::parse("[retention]\nfailed_runs = \"90d\"\n", "c").unwrap();
        assert_eq!(c.retention.failed_runs, 90 * day);
        assert_eq!(c.retention.cancelled_runs, 7 * day);
    }

    #[test]
    fn traces_section_takes_an_http_endpoint_and_refuses_others() {
        let c = Config::parse(
            "[traces]\nenabled = true\nendpoint = \"https://otel.example:4318/v1/traces\"\n\
             service_name = \"jobs\"\n",
            "c.toml",
        )
        .unwrap();
        assert!(c.traces.enabled);
        assert_eq!(c.traces.service_name.as_deref(), Some("jobs"));
        for (text, shown) in [
            (
                "[traces]\nendpoint = \"localhost:4318\"\n",
                "localhost:4318",
            ),
            ("[traces]\nendpoint = \"grpc://c:4317\"\n", "grpc://c:4317"),
            ("[traces]\nendpoint = \"http://\"\n", "http://"),
            ("[traces]\nservice_name = \" \"\n", "traces.service_name"),
        ] {
            let e = Config::parse(text, "c.toml").unwrap_err().to_string();
            assert!(e.contains("traces.") && e.contains(shown), "{text}: {e}");
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
