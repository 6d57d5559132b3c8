//! `[tools.NAME]`: the command tools an operator defines, as written and as validated. The
//! tool that runs them is `tool::command`; it reads these types from here, so the config
//! (a foundation) never imports the tool layer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::clock::parse_duration;
use crate::error::ConfigError;

/// A validated `[tools.NAME]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandToolConfig {
    /// Tool name (the table key).
    pub name: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// What the tool does.
    pub description: String,
    /// JSON schema of the args (default: any object).
    pub args_schema: Value,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Default timeout of a run.
    pub timeout: Option<Duration>,
    /// Log cap for this tool's runs, in bytes (at most the worker's `runs.log_cap_bytes`).
    pub output_cap: Option<usize>,
    /// Runs wait for an operator's approval.
    pub requires_approval: bool,
    /// An approval not given within this long expires the run.
    pub approval_deadline: Option<Duration>,
    /// Between SIGTERM and SIGKILL when a run is cancelled or times out.
    pub kill_grace: Duration,
    /// At most this many running runs of this tool over all workers (also `[limits.NAME]`).
    pub max_running: Option<i64>,
}

/// A `[tools.NAME]` table as written (unknown keys are rejected by the config loader).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileCommandTool {
    command: Vec<String>,
    description: Option<String>,
    args_schema: Option<toml::Value>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    timeout: Option<String>,
    output_cap: Option<i64>,
    #[serde(default)]
    requires_approval: bool,
    approval_deadline: Option<String>,
    kill_grace: Option<String>,
    max_running: Option<i64>,
    max_attempts: Option<i64>,
    backoff_base: Option<String>,
    backoff_max: Option<String>,
    retry_on: Option<Vec<String>>,
}

impl FileCommandTool {
    /// Takes the retry keys out (validated with `[limits.NAME]`'s by `retry::merge`).
    pub(super) fn take_retry(&mut self) -> super::retry::RawRetry {
        super::retry::RawRetry {
            max_attempts: self.max_attempts.take(),
            backoff_base: self.backoff_base.take(),
            backoff_max: self.backoff_max.take(),
            retry_on: self.retry_on.take(),
        }
    }
}

/// The names of the built-in tools that are always registered, in registry order. A list
/// here rather than a call to `tool::builtin::all()`, which sits a layer above the config;
/// a test in `tool/builtin` checks that the two agree.
pub const BUILTIN_TOOLS: &[&str] = &[
    "echo",
    "get_current_time",
    "add",
    "subtract",
    "multiply",
    "divide",
    "sleep",
    "await_event",
    "http_request",
    "spawn_background",
];

/// The built-ins registered only while `[shell] enabled` (checked beside [`BUILTIN_TOOLS`]).
pub const SHELL_TOOLS: &[&str] = &["shell", "detached_command"];

/// Validates every `[tools.NAME]` table; errors name `tools.NAME.key` and, through
/// `origin` (dotted key -> where it was set), the file and line.
pub(crate) fn parse_tools(
    raw: BTreeMap<String, FileCommandTool>,
    origin: &dyn Fn(&str) -> String,
) -> Result<BTreeMap<String, CommandToolConfig>, ConfigError> {
    raw.into_iter()
        .map(|(name, f)| {
            let keys = ToolKeys {
                name: &name,
                origin,
            };
            Ok((name.clone(), keys.parse(f)?))
        })
        .collect()
}

/// Refuses a `[tools.NAME]` whose name a built-in tool has (`shell` and `detached_command`
/// only while `[shell] enabled`): the registry would refuse the pair without saying where.
pub(crate) fn refuse_builtin_names(
    tools: &BTreeMap<String, CommandToolConfig>,
    shell: bool,
    origin: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    let mut builtins: Vec<String> = BUILTIN_TOOLS.iter().map(|n| n.to_string()).collect();
    if shell {
        builtins.extend(SHELL_TOOLS.iter().map(|n| n.to_string()));
    }
    match tools.keys().find(|name| builtins.contains(name)) {
        None => Ok(()),
        Some(name) => Err(ConfigError::Key {
            origin: origin(&format!("tools.{name}")),
            message: format!(
                "[tools.{name}]: {name} is built in, so a command tool cannot have that name\n  \
                 give it another name (built-in tools: {})",
                builtins.join(", ")
            ),
        }),
    }
}

/// One `[tools.NAME]` table being validated: its name, and where its keys were set.
struct ToolKeys<'a> {
    name: &'a str,
    origin: &'a dyn Fn(&str) -> String,
}

impl ToolKeys<'_> {
    /// An error about `tools.NAME.key` (`key` empty: the table itself).
    fn bad(&self, key: &str, value: String, reason: impl Into<String>) -> ConfigError {
        let name = self.name;
        let key = format!("tools.{name}{}{key}", if key.is_empty() { "" } else { "." });
        ConfigError::Invalid {
            path: (self.origin)(&key),
            key,
            value,
            reason: reason.into(),
        }
    }

    /// The table as a [`CommandToolConfig`]; checks run in the order the keys' errors are
    /// reported.
    fn parse(&self, f: FileCommandTool) -> Result<CommandToolConfig, ConfigError> {
        self.check_name()?;
        if f.command.first().is_none_or(|p| p.is_empty()) {
            return Err(self.bad(
                "command",
                format!("{:?}", f.command),
                "must be a non-empty array: program first, then its arguments",
            ));
        }
        let args_schema = self.args_schema(f.args_schema)?;
        let output_cap = self.output_cap(f.output_cap)?;
        self.check_max_running(f.max_running)?;
        Ok(CommandToolConfig {
            max_running: f.max_running,
            name: self.name.to_string(),
            description: f
                .description
                .unwrap_or_else(|| format!("Runs {}", f.command.join(" "))),
            command: f.command,
            args_schema,
            cwd: f.cwd.map(PathBuf::from),
            env: f.env,
            timeout: self.duration("timeout", f.timeout)?,
            output_cap,
            requires_approval: f.requires_approval,
            approval_deadline: self.duration("approval_deadline", f.approval_deadline)?,
            kill_grace: self
                .duration("kill_grace", f.kill_grace)?
                .unwrap_or(Duration::from_secs(3)),
        })
    }

    fn check_name(&self) -> Result<(), ConfigError> {
        let name = self.name;
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if valid {
            return Ok(());
        }
        let rule = "tool names use letters, digits, '_' and '-'";
        Err(self.bad("", format!("{name:?}"), rule))
    }

    /// `args_schema` as a table or a JSON string, which must be a valid JSON schema.
    fn args_schema(&self, v: Option<toml::Value>) -> Result<Value, ConfigError> {
        let schema = match v {
            None => json!({"type": "object"}),
            Some(toml::Value::String(s)) => serde_json::from_str(&s)
                .map_err(|e| self.bad("args_schema", s.clone(), format!("is not JSON: {e}")))?,
            Some(v @ toml::Value::Table(_)) => serde_json::to_value(&v).map_err(|e| {
                self.bad(
                    "args_schema",
                    v.to_string(),
                    format!("cannot become JSON: {e}"),
                )
            })?,
            Some(v) => {
                return Err(self.bad(
                    "args_schema",
                    v.to_string(),
                    "must be a table or a JSON string",
                ));
            }
        };
        if let Err(e) = jsonschema::validator_for(&schema) {
            return Err(self.bad(
                "args_schema",
                schema.to_string(),
                format!("is not a valid JSON schema: {e}"),
            ));
        }
        Ok(schema)
    }

    fn output_cap(&self, v: Option<i64>) -> Result<Option<usize>, ConfigError> {
        match v {
            None => Ok(None),
            Some(n) if (1024..=1 << 30).contains(&n) => Ok(Some(n as usize)),
            Some(n) => Err(self.bad(
                "output_cap",
                n.to_string(),
                "must be between 1024 and 1073741824 bytes",
            )),
        }
    }

    fn check_max_running(&self, v: Option<i64>) -> Result<(), ConfigError> {
        match v {
            Some(n) if !(1..=1_000_000).contains(&n) => Err(self.bad(
                "max_running",
                n.to_string(),
                "must be between 1 and 1000000",
            )),
            _ => Ok(()),
        }
    }

    /// A duration key, greater than zero when given.
    fn duration(&self, key: &str, v: Option<String>) -> Result<Option<Duration>, ConfigError> {
        v.map(|s| match parse_duration(&s) {
            Ok(d) if d.is_zero() => {
                Err(self.bad(key, format!("{s:?}"), "must be greater than zero"))
            }
            Ok(d) => Ok(d),
            Err(r) => Err(self.bad(key, format!("{s:?}"), r)),
        })
        .transpose()
    }
}
