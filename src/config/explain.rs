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
