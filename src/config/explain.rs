//! `toolq config`: every effective key, its value, and where the value came from.

use figment::value::Value;
use serde::Serialize;

use super::layers::{Layers, Origin};

/// One effective key.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Dotted key, e.g. `worker.concurrency`.
    pub key: String,
    /// Its value as set (durations as written, e.g. `"500ms"`).
    pub value: serde_json::Value,
    /// Where it came from.
    #[serde(flatten)]
    pub origin: Origin,
}

/// The effective configuration: the file in use and every key set by some layer, sorted.
#[derive(Debug, Clone, Serialize)]
pub struct Effective {
    /// The config file's path, or null when only built-in defaults (and overrides) apply.
    pub file: Option<String>,
    /// How the file was chosen (`--config`, `TOOLQ_CONFIG`, the working directory).
    pub file_choice: Option<String>,
    /// Every key with its value and origin.
    pub values: Vec<Entry>,
    /// The effective retry policy of each tool (see [`retry_policies`]); empty (and left out
    /// of the JSON) when not computed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retry_policies: Vec<ToolRetryPolicy>,
}

/// One value of a tool's retry policy and where it came from.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyValue {
    /// The value (durations as `toolq` writes them, `retry_on` as a list of kinds).
    pub value: serde_json::Value,
    /// The dotted key it was read from (`limits.http.max_attempts`, `runs.max_attempts`), or
    /// null for `retry_on`'s built-in default.
    pub key: Option<String>,
    /// Where that key was set.
    #[serde(flatten)]
    pub origin: Origin,
}

/// A tool's effective retry policy. A run's own `max_attempts` still wins over this one.
#[derive(Debug, Clone, Serialize)]
pub struct ToolRetryPolicy {
    /// The tool, or `*` for every tool without retry keys of its own.
    pub tool: String,
    /// Attempts in all of a run that sets none.
    pub max_attempts: PolicyValue,
    /// First retry delay.
    pub backoff_base: PolicyValue,
    /// Longest retry delay.
    pub backoff_max: PolicyValue,
    /// The failure kinds retried.
    pub retry_on: PolicyValue,
}

/// The effective retry policy of `*` (tools without keys of their own), then of each tool in
/// `tools` and of each tool the config gives retry keys, with where each value came from.
pub fn retry_policies(
    config: &crate::config::Config,
    layers: &Layers,
    tools: &[String],
) -> Vec<ToolRetryPolicy> {
    let mut names = vec!["*".to_string()];
    names.extend(tools.iter().cloned());
    for name in config.retry.keys() {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
        .into_iter()
        .map(|tool| policy_of(config, layers, tool))
        .collect()
}

fn policy_of(config: &crate::config::Config, layers: &Layers, tool: String) -> ToolRetryPolicy {
    use crate::clock::format_duration;
    let p = config.retry_policy(&tool);
    let own = config.retry.get(&tool);
    let value = |k: &str, v: serde_json::Value| {
        let key = match own.and_then(|t| t.set_at.get(k)) {
            Some(dotted) => Some(dotted.clone()),
            None if k == "retry_on" => None,
            None => Some(format!("runs.{k}")),
        };
        let origin = match &key {
            Some(dotted) => {
                let path: Vec<String> = dotted.split('.').map(String::from).collect();
                layers.origin_of(&path)
            }
            None => Origin::Default,
        };
        PolicyValue {
            value: v,
            key,
            origin,
        }
    };
    let retry_on = serde_json::to_value(p.retry_on).unwrap_or(serde_json::Value::Null);
    ToolRetryPolicy {
        max_attempts: value("max_attempts", p.max_attempts.into()),
        backoff_base: value("backoff_base", format_duration(p.backoff_base).into()),
        backoff_max: value("backoff_max", format_duration(p.backoff_max).into()),
        retry_on: value("retry_on", retry_on),
        tool,
    }
}

/// Lists the merged layers' keys; tables are walked down to their leaves.
pub fn effective(layers: &Layers) -> Effective {
    let mut values = Vec::new();
    if let Ok(dict) = layers.figment.extract::<figment::value::Dict>() {
        walk(layers, &mut Vec::new(), &Value::from(dict), &mut values);
    }
    Effective {
        file: layers.file.as_ref().map(|f| f.name.clone()),
        file_choice: layers
            .file
            .as_ref()
            .map(|f| f.choice.describe().to_string()),
        values,
        retry_policies: Vec::new(),
    }
}

/// Keys whose values `toolq config` does not print.
const SECRETS: &[&str] = &["web.token", "web.read_token"];

fn walk(layers: &Layers, path: &mut Vec<String>, v: &Value, out: &mut Vec<Entry>) {
    match v {
        // A non-empty table is shown key by key; an empty one (`env = {}`) as itself.
        Value::Dict(_, d) if !d.is_empty() => {
            for (k, child) in d {
                path.push(k.clone());
                walk(layers, path, child, out);
                path.pop();
            }
        }
        _ => {
            let key = path.join(".");
            // A secret is shown as set, never as itself, and a database URL never shows its
            // password: `toolq config` output gets pasted.
            let value = if SECRETS.contains(&key.as_str()) {
                serde_json::Value::String("(set, hidden)".into())
            } else {
                match serde_json::to_value(v).unwrap_or(serde_json::Value::Null) {
                    serde_json::Value::String(s) => {
                        serde_json::Value::String(crate::db_url::redact(&s))
                    }
                    other => other,
                }
            };
            out.push(Entry {
                key,
                value,
                origin: layers.origin_of(path),
            })
        }
    }
}
