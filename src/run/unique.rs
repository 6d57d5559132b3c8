//! Unique runs: an enqueue with a [`Unique`] returns a run of the same tool with the same
//! canonical args, in the given states and period, instead of inserting another.

use std::fmt::Write;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::RunState;
use crate::error::InputError;

/// What an enqueue's uniqueness compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UniqueBy {
    /// The tool and its args as canonical JSON (keys sorted at every level).
    #[default]
    Args,
}

impl FromStr for UniqueBy {
    type Err = InputError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "args" => Ok(UniqueBy::Args),
            _ => Err(InputError::new("unique_by", s, "must be args")),
        }
    }
}

/// Makes an enqueue unique: when a run enqueued with a `Unique` of the same tool and the
/// same canonical args is in one of `states` and was created within `within`, the enqueue
/// returns it (`created: false`) instead of inserting another. Checked in the insert's own
/// transaction, so it holds across processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unique {
    /// What is compared.
    pub by: UniqueBy,
    /// Only runs created at most this long ago (`None`: any age).
    pub within: Option<std::time::Duration>,
    /// Only runs in these states.
    pub states: Vec<RunState>,
}

impl Default for Unique {
    /// By args, any age, while queued, awaiting approval or running.
    fn default() -> Self {
        Self {
            by: UniqueBy::Args,
            within: None,
            states: vec![
                RunState::Queued,
                RunState::AwaitingApproval,
                RunState::Running,
            ],
        }
    }
}

/// A unique enqueue as the store checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueCheck {
    /// [`unique_key`] of the tool and args (stored in `runs.unique_key`).
    pub key: String,
    /// A run in one of these states matches.
    pub states: Vec<RunState>,
    /// ... if created at or after this instant (`None`: any age).
    pub since: Option<DateTime<Utc>>,
}

/// The hex SHA-256 of the tool's name and its canonical args.
pub fn unique_key(tool: &str, args: &Value) -> String {
    let mut text = String::with_capacity(64);
    text.push_str(tool);
    text.push('\n');
    canonical(args, &mut text);
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// Canonical JSON: object keys sorted at every level, no whitespace (independent of
/// serde_json's map order feature).
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_key_ignores_key_order_and_tells_tools_and_values_apart() {
        let a = unique_key(
            "t",
            &json!({"a": 1, "b": {"y": [1, {"q": 2, "p": 1}], "x": null}}),
        );
        let b = unique_key(
            "t",
            &json!({"b": {"x": null, "y": [1, {"p": 1, "q": 2}]}, "a": 1}),
        );
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(
            a,
            unique_key(
                "u",
                &json!({"a": 1, "b": {"y": [1, {"q": 2, "p": 1}], "x": null}})
            )
        );
        assert_ne!(
            unique_key("t", &json!({"a": 1})),
            unique_key("t", &json!({"a": "1"}))
        );
        assert_ne!(
            unique_key("t", &json!([1, 2])),
            unique_key("t", &json!([2, 1]))
        );
    }
}
