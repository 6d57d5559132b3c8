//! Where configuration values come from, in order of precedence (later wins): the built-in
//! defaults (the shipped `config.toml`), one config file, `TOOLQ_SECTION__KEY` environment
//! variables, then command-line flags. The layers are merged by figment; each value keeps the
//! name of the layer it came from, for errors and for `toolq config`.

use std::path::{Path, PathBuf};

use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use crate::error::ConfigError;

/// The shipped `config.toml`: every key with its built-in default.
pub(crate) const DEFAULTS: &str = include_str!("../../config.toml");

/// Prefix of environment variables that override keys (`TOOLQ_WORKER__CONCURRENCY`).
pub const ENV_PREFIX: &str = "TOOLQ_";
/// Separates nesting levels in an environment variable's name.
pub const ENV_SPLIT: &str = "__";

/// Name of the defaults layer (in `toolq config` and errors).
const DEFAULT_NAME: &str = "default";
/// Name of the environment layer.
const ENV_NAME: &str = "environment";
/// Metadata names of flag layers start with this.
const FLAG_MARK: &str = "flag ";

/// How the config file was chosen (the lookup order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileChoice {
    /// `--config PATH`.
    Flag,
    /// `TOOLQ_CONFIG`.
    Env,
    /// `./toolq.toml` in the working directory.
    WorkingDir,
    /// Given by the library caller ([`crate::Config::load`], [`crate::Config::parse`]).
    Given,
}

impl FileChoice {
    /// How it reads in logs and `toolq config`.
    pub fn describe(self) -> &'static str {
        match self {
            FileChoice::Flag => "from --config",
            FileChoice::Env => "from TOOLQ_CONFIG",
            FileChoice::WorkingDir => "found in the working directory",
            FileChoice::Given => "given",
        }
    }
}

/// The config file in use: its name (as given), its text, and how it was chosen.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// The path as given (or the origin name for text).
    pub name: String,
    /// Its contents.
    pub text: String,
    /// How it was chosen.
    pub choice: FileChoice,
}

impl ConfigFile {
    /// Reads `path`.
    pub fn read(path: &Path, choice: FileChoice) -> Result<Self, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            // Say which step of the lookup named it: a stale TOOLQ_CONFIG is easy to miss.
            path: match choice {
                FileChoice::Given => name.clone(),
                _ => format!("{name} ({})", choice.describe()),
            },
            source,
        })?;
        Ok(Self { name, text, choice })
    }

    /// The file the lookup order picks: `--config`, else `TOOLQ_CONFIG`, else `./toolq.toml`
    /// if it exists, else none (built-in defaults).
    pub fn lookup(flag: Option<&Path>) -> Result<Option<Self>, ConfigError> {
        if let Some(p) = flag {
            return Self::read(p, FileChoice::Flag).map(Some);
        }
        if let Some(p) = std::env::var_os("TOOLQ_CONFIG").filter(|v| !v.is_empty()) {
            return Self::read(&PathBuf::from(p), FileChoice::Env).map(Some);
        }
        let local = Path::new("./toolq.toml");
        if local.exists() {
            return Self::read(local, FileChoice::WorkingDir).map(Some);
        }
        Ok(None)
    }
}

/// A value set by a flag: `key` (dotted) = `value`, named `flag` in provenance and errors.
#[derive(Debug, Clone)]
pub struct Override {
    /// Dotted key, e.g. `worker.concurrency`.
    pub key: String,
    /// The value.
    pub value: Value,
    /// How it was given, e.g. `--concurrency` or `TOOLQ_DB`.
    pub flag: String,
}

impl Override {
    /// An override of `key` by `flag`.
    pub fn new(key: &str, value: impl Into<Value>, flag: &str) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            flag: flag.into(),
        }
    }
}

/// Where one value came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Origin {
    /// The built-in default.
    Default,
    /// The config file, at this line when known.
    File {
        /// The file.
        path: String,
        /// 1-based line of the key.
        line: Option<usize>,
    },
    /// An environment variable.
    Env {
        /// Its name, e.g. `TOOLQ_WORKER__CONCURRENCY`.
        var: String,
    },
    /// A command-line flag (or its environment variable, e.g. `TOOLQ_DB`).
    Flag {
        /// The flag, e.g. `--concurrency`.
        flag: String,
    },
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => write!(f, "built-in default"),
            Origin::File {
                path,
                line: Some(l),
            } => write!(f, "{path}, line {l}"),
            Origin::File { path, line: None } => write!(f, "{path}"),
            Origin::Env { var } => write!(f, "environment variable {var}"),
            Origin::Flag { flag } => write!(f, "{flag}"),
        }
    }
}

/// The layers of one configuration, merged.
pub struct Layers {
    /// The config file, if any.
    pub file: Option<ConfigFile>,
    pub(crate) figment: Figment,
    /// The `TOOLQ_*__*` variables read, as (dotted key in lower case, the name as set):
    /// figment matches names in any case, and origins name the variable as it was written.
    env_vars: Vec<(String, String)>,
}

/// The `TOOLQ_*__*` variables of this process, as (dotted key in lower case, name as set), in
/// the order figment reads them (a later one of the same key wins there, and here).
fn env_vars() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter_map(|name| {
            let head = name.get(..ENV_PREFIX.len())?;
            let rest = name.get(ENV_PREFIX.len()..)?;
            if !head.eq_ignore_ascii_case(ENV_PREFIX) || !rest.contains(ENV_SPLIT) {
                return None;
            }
            let key = rest
                .to_ascii_lowercase()
                .split(ENV_SPLIT)
                .collect::<Vec<_>>()
                .join(".");
            Some((key, name))
        })
        .collect()
}

/// A layer of already-parsed values under a chosen name.
struct Named {
    metadata: Metadata,
    dict: Dict,
}

impl Provider for Named {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// Parses TOML text into a figment dict; errors name the line and show it.
fn toml_dict(text: &str, name: &str) -> Result<Dict, ConfigError> {
    let table: toml::Table =
        toml::from_str(text).map_err(|e| super::toml_text::parse_error(&e, text, name))?;
    let value = Value::serialize(&table).map_err(|e| ConfigError::Parse {
        path: name.into(),
        message: e.to_string(),
    })?;
    Ok(value.into_dict().unwrap_or_default())
}

impl Layers {
    /// Defaults, then `file`, then (if `env`) `TOOLQ_*__*` variables, then `overrides`.
    pub fn new(
        file: Option<ConfigFile>,
        env: bool,
        overrides: &[Override],
    ) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Named {
            metadata: Metadata::named(DEFAULT_NAME),
            dict: toml_dict(DEFAULTS, "config.toml (built in)")?,
        });
        if let Some(f) = &file {
            figment = figment.merge(Named {
                metadata: Metadata::from(
                    f.name.clone(),
                    figment::Source::File(PathBuf::from(&f.name)),
                ),
                dict: toml_dict(&f.text, &f.name)?,
            });
        }
        let mut env_vars_read = Vec::new();
        if env {
            env_vars_read = env_vars();
            // Only names with a `__` are keys: every key sits in a section, and `TOOLQ_DB`,
            // `TOOLQ_CONFIG` (and a command tool's `TOOLQ_ARGS`) are not config keys.
            let mut data = figment::providers::Env::prefixed(ENV_PREFIX)
                .filter(|k| k.as_str().contains(ENV_SPLIT))
                .split(ENV_SPLIT)
                .data()
                .map_err(|e| ConfigError::Key {
                    origin: "environment".into(),
                    message: e.to_string(),
                })?;
            figment = figment.merge(Named {
                metadata: Metadata::named(ENV_NAME),
                dict: data.remove(&Profile::Default).unwrap_or_default(),
            });
        }
        for o in overrides {
            figment = figment.merge(Named {
                metadata: Metadata::named(format!("{FLAG_MARK}{}", o.flag)),
                dict: figment::util::nest(&o.key, o.value.clone())
                    .into_dict()
                    .unwrap_or_default(),
            });
        }
        Ok(Self {
            file,
            figment,
            env_vars: env_vars_read,
        })
    }

    /// Where the value at `path` (dotted key segments) came from.
    pub fn origin_of(&self, path: &[String]) -> Origin {
        let key = path.join(".");
        match self.figment.find_metadata(&key) {
            Some(md) => self.origin_from(md, path),
            None => Origin::Default,
        }
    }

    /// Turns a layer's metadata into an [`Origin`] for the value at `path`.
    fn origin_from(&self, md: &Metadata, path: &[String]) -> Origin {
        // Only the file layer has a source, so a file named like another layer is still a file.
        if md.source.is_some() {
            let line = self
                .file
                .as_ref()
                .and_then(|f| super::toml_text::line_of(&f.text, path));
            return Origin::File {
                path: md.name.to_string(),
                line,
            };
        }
        if md.name == DEFAULT_NAME {
            return Origin::Default;
        }
        if let Some(flag) = md.name.strip_prefix(FLAG_MARK) {
            return Origin::Flag { flag: flag.into() };
        }
        if md.name == ENV_NAME {
            let key = path.join(".").to_ascii_lowercase();
            if let Some((_, name)) = self.env_vars.iter().rev().find(|(k, _)| *k == key) {
                return Origin::Env { var: name.clone() };
            }
            let var = path
                .iter()
                .map(|k| k.to_ascii_uppercase())
                .collect::<Vec<_>>()
                .join(ENV_SPLIT);
            return Origin::Env {
                var: format!("{ENV_PREFIX}{var}"),
            };
        }
        Origin::Default
    }

    /// What the config file line of logs and `toolq config` says: its path and how it was
    /// chosen, or "built-in defaults".
    pub fn file_summary(&self) -> String {
        match &self.file {
            Some(f) => format!("{} ({})", f.name, f.choice.describe()),
            None => "built-in defaults (no config file)".into(),
        }
    }
}
