//! Per-tool retry policy: `max_attempts`, `backoff_base`, `backoff_max` and `retry_on` in
//! `[limits.NAME]` or `[tools.NAME]`, over the `[runs]` defaults. A run's own `max_attempts`
//! (enqueue, file, API, library) still wins; it is resolved at enqueue, while the backoff and
//! `retry_on` are read where a failed attempt is decided (the worker's end, the rescue).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Serialize, Serializer};

use super::sections::RunDefaults;
use crate::clock::parse_duration;
use crate::error::ConfigError;

/// A kind of failed attempt that a retry policy may retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureKind {
    /// The tool returned an error (`ToolOutcome::ToolError`).
    ToolError,
    /// The tool returned an internal error, or panicked.
    InternalError,
    /// The attempt ran past its timeout.
    Timeout,
    /// The worker running it died or lost its lease (found by the rescue).
    WorkerLost,
}

impl FailureKind {
    /// Every kind, in the order config and output list them.
    pub const ALL: [FailureKind; 4] = [
        FailureKind::ToolError,
        FailureKind::InternalError,
        FailureKind::Timeout,
        FailureKind::WorkerLost,
    ];

    /// The name written in `retry_on`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::ToolError => "tool_error",
            FailureKind::InternalError => "internal_error",
            FailureKind::Timeout => "timeout",
            FailureKind::WorkerLost => "worker_lost",
        }
    }

    /// The kind named `s`, if any.
    pub fn parse(s: &str) -> Option<FailureKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The set of failure kinds a policy retries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RetryOn(u8);

impl RetryOn {
    /// What toolq retried before policies existed: internal errors (and panics), timeouts
    /// and lost workers; a tool's own error is final, since the same input fails the same way.
    pub const DEFAULT: RetryOn = RetryOn(
        (1 << FailureKind::InternalError as u8)
            | (1 << FailureKind::Timeout as u8)
            | (1 << FailureKind::WorkerLost as u8),
    );

    /// No kind: every failure is final.
    pub const NONE: RetryOn = RetryOn(0);

    /// The set of `kinds`.
    pub fn of(kinds: &[FailureKind]) -> RetryOn {
        RetryOn(kinds.iter().fold(0, |acc, k| acc | k.bit()))
    }

    /// Whether failures of `kind` are retried.
    pub fn contains(self, kind: FailureKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// The kinds in the set, in [`FailureKind::ALL`] order.
    pub fn kinds(self) -> Vec<FailureKind> {
        FailureKind::ALL
            .into_iter()
            .filter(|k| self.contains(*k))
            .collect()
    }
}

impl Default for RetryOn {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Debug for RetryOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.kinds()).finish()
    }
}

impl fmt::Display for RetryOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.kinds().into_iter().map(FailureKind::as_str).collect();
        write!(f, "[{}]", names.join(", "))
    }
}

impl Serialize for RetryOn {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let names: Vec<&str> = self.kinds().into_iter().map(FailureKind::as_str).collect();
        names.serialize(s)
    }
}

/// The retry policy in force for one tool's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, for runs that do not set their own (resolved at enqueue).
    pub max_attempts: i64,
    /// First retry delay.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// The failures that are retried while attempts remain.
    pub retry_on: RetryOn,
}

impl RetryPolicy {
    /// The policy of tools with no retry keys of their own: `[runs]`, and the default
    /// `retry_on`.
    pub fn of_runs(runs: &RunDefaults) -> RetryPolicy {
        RetryPolicy {
            max_attempts: runs.max_attempts,
            backoff_base: runs.backoff_base,
            backoff_max: runs.backoff_max,
            retry_on: RetryOn::DEFAULT,
        }
    }

    /// Whether an attempt (1-based) that failed with `kind` is followed by another; `None`
    /// is a failure no policy retries (a cancellation, a missing connection).
    pub fn retries(&self, kind: Option<FailureKind>, attempt: i64, max_attempts: i64) -> bool {
        kind.is_some_and(|k| self.retry_on.contains(k)) && attempt < max_attempts
    }
}

/// One tool's own retry keys (unset keys fall back to `[runs]`), and the table each came
/// from (`limits` or `tools`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolRetry {
    /// `max_attempts`.
    pub max_attempts: Option<i64>,
    /// `backoff_base`.
    pub backoff_base: Option<Duration>,
    /// `backoff_max`.
    pub backoff_max: Option<Duration>,
    /// `retry_on`.
    pub retry_on: Option<RetryOn>,
    /// Each set key's full dotted name (`limits.http.max_attempts`), by key.
    pub set_at: BTreeMap<&'static str, String>,
}

impl ToolRetry {
    /// Whether any key is set.
    pub fn is_empty(&self) -> bool {
        self.set_at.is_empty()
    }

    /// This tool's effective policy over `runs`.
    pub fn over(&self, runs: &RunDefaults) -> RetryPolicy {
        let d = RetryPolicy::of_runs(runs);
        RetryPolicy {
            max_attempts: self.max_attempts.unwrap_or(d.max_attempts),
            backoff_base: self.backoff_base.unwrap_or(d.backoff_base),
            backoff_max: self.backoff_max.unwrap_or(d.backoff_max),
            retry_on: self.retry_on.unwrap_or(d.retry_on),
        }
    }
}

/// The retry keys as written in one `[limits.NAME]` or `[tools.NAME]` table.
#[derive(Debug, Default)]
pub(super) struct RawRetry {
    pub max_attempts: Option<i64>,
    pub backoff_base: Option<String>,
    pub backoff_max: Option<String>,
    pub retry_on: Option<Vec<String>>,
}

/// Validates and merges the retry keys of `[limits.NAME]` (`limits`) and `[tools.NAME]`
/// (`tools`), one entry per tool that sets any. A key given in both tables for one tool is
/// an error naming both. `bad(key, value, reason)` makes an error at a dotted key; `origin`
/// says where a key was set. Each tool's effective base must not exceed its effective max.
pub(super) fn merge(
    limits: BTreeMap<String, RawRetry>,
    tools: BTreeMap<String, RawRetry>,
    runs: &RunDefaults,
    bad: &dyn Fn(&str, String, String) -> ConfigError,
    origin: &dyn Fn(&str) -> String,
) -> Result<BTreeMap<String, ToolRetry>, ConfigError> {
    let mut out: BTreeMap<String, ToolRetry> = BTreeMap::new();
    // [tools] first, so a key given twice is reported at its [limits] key, as max_running is.
    for (table, raw) in [("tools", tools), ("limits", limits)] {
        for (name, r) in raw {
            let entry = out.entry(name.clone()).or_default();
            one(table, &name, r, entry, bad, origin)?;
        }
    }
    out.retain(|_, t| !t.is_empty());
    for (name, t) in &out {
        let p = t.over(runs);
        if p.backoff_base > p.backoff_max {
            let key = t
                .set_at
                .get("backoff_base")
                .or_else(|| t.set_at.get("backoff_max"))
                .cloned()
                .unwrap_or_else(|| format!("limits.{name}.backoff_base"));
            return Err(bad(
                &key,
                crate::clock::format_duration(p.backoff_base),
                format!(
                    "the backoff base of {name} ({}) must be at most its backoff max ({})",
                    crate::clock::format_duration(p.backoff_base),
                    crate::clock::format_duration(p.backoff_max)
                ),
            ));
        }
    }
    Ok(out)
}

/// Validates one table's keys into `entry`, refusing a key the other table already set.
fn one(
    table: &'static str,
    name: &str,
    r: RawRetry,
    entry: &mut ToolRetry,
    bad: &dyn Fn(&str, String, String) -> ConfigError,
    origin: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    let key = |k: &str| format!("{table}.{name}.{k}");
    let claim = |k: &'static str, entry: &mut ToolRetry, value: String| {
        if let Some(other) = entry.set_at.get(k) {
            return Err(bad(
                &key(k),
                value,
                format!(
                    "{other} is set too ({}); give it in one place",
                    origin(other)
                ),
            ));
        }
        entry.set_at.insert(k, key(k));
        Ok(())
    };
    if let Some(n) = r.max_attempts {
        if !(1..=1000).contains(&n) {
            return Err(bad(
                &key("max_attempts"),
                n.to_string(),
                "must be between 1 and 1000".into(),
            ));
        }
        claim("max_attempts", entry, n.to_string())?;
        entry.max_attempts = Some(n);
    }
    for (k, v) in [
        ("backoff_base", r.backoff_base),
        ("backoff_max", r.backoff_max),
    ] {
        let Some(s) = v else { continue };
        let d = match parse_duration(&s) {
            Ok(d) if d.is_zero() => {
                return Err(bad(
                    &key(k),
                    format!("{s:?}"),
                    "must be greater than zero".into(),
                ));
            }
            Ok(d) => d,
            Err(reason) => return Err(bad(&key(k), format!("{s:?}"), reason)),
        };
        claim(k, entry, format!("{s:?}"))?;
        if k == "backoff_base" {
            entry.backoff_base = Some(d);
        } else {
            entry.backoff_max = Some(d);
        }
    }
    if let Some(list) = r.retry_on {
        let mut kinds = Vec::new();
        for s in &list {
            match FailureKind::parse(s) {
                Some(k) => kinds.push(k),
                None => {
                    let allowed: Vec<&str> = FailureKind::ALL.iter().map(|k| k.as_str()).collect();
                    return Err(bad(
                        &key("retry_on"),
                        format!("{s:?}"),
                        format!("is not a failure kind; use any of {}", allowed.join(", ")),
                    ));
                }
            }
        }
        claim("retry_on", entry, format!("{list:?}"))?;
        entry.retry_on = Some(RetryOn::of(&kinds));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_retries_what_toolq_always_retried() {
        let on = RetryOn::DEFAULT;
        assert!(!on.contains(FailureKind::ToolError));
        assert!(on.contains(FailureKind::InternalError));
        assert!(on.contains(FailureKind::Timeout));
        assert!(on.contains(FailureKind::WorkerLost));
        assert_eq!(on.to_string(), "[internal_error, timeout, worker_lost]");
        assert_eq!(
            serde_json::to_value(RetryOn::of(&[FailureKind::ToolError])).unwrap(),
            serde_json::json!(["tool_error"])
        );
    }

    #[test]
    fn a_policy_retries_its_kinds_while_attempts_remain() {
        let p = RetryPolicy {
            retry_on: RetryOn::of(&[FailureKind::ToolError]),
            ..RetryPolicy::of_runs(&RunDefaults::default())
        };
        assert!(p.retries(Some(FailureKind::ToolError), 1, 2));
        assert!(!p.retries(Some(FailureKind::ToolError), 2, 2));
        assert!(!p.retries(Some(FailureKind::Timeout), 1, 2));
        assert!(!p.retries(None, 1, 2));
    }
}
