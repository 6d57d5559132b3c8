//! [`RunSpec`]: a run described as JSON, the one shape that an enqueue file's lines
//! (`toolq enqueue --file`), the HTTP API's bodies and a batch's runs share. It reads the
//! fields the CLI's flags set, by the same names, and turns into an [`EnqueueRequest`];
//! [`resolve`] links specs that name each other (`ref`, `after`) within one request.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::parse_duration;
use crate::error::InputError;
use crate::ids::{BatchId, RunId};
use crate::run::request::EnqueueRequest;
use crate::run::{RunState, Unique};

/// One run to enqueue. Only `tool` is required; every other field has the default
/// `toolq enqueue` gives it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// The tool to run.
    pub tool: String,
    /// The tool's arguments (a JSON object; default `{}`).
    #[serde(default = "empty_object")]
    pub args: Value,
    /// The owning session (default `default`): its inbox gets the completion message.
    #[serde(default)]
    pub session: Option<String>,
    /// A title (default: the tool's display name).
    #[serde(default)]
    pub title: Option<String>,
    /// Higher runs first (default 0).
    #[serde(default)]
    pub priority: Option<i64>,
    /// Not before this instant (RFC 3339 with an offset).
    #[serde(default)]
    pub at: Option<String>,
    /// Not before this long from now (`90s`, `5m`, `2h`).
    #[serde(default, rename = "in")]
    pub in_: Option<String>,
    /// Attempts in all (default from the config).
    #[serde(default)]
    pub max_attempts: Option<i64>,
    /// The run's timeout (`30s`, `10m`; default: the tool's, else the config's).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Same key, same run: a second enqueue returns the first run.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Return the existing run of the same tool and `args` (or `args_and_session`) instead
    /// of adding one.
    #[serde(default)]
    pub unique_by: Option<String>,
    /// With `unique_by`: only runs created this long ago or less count.
    #[serde(default)]
    pub unique_for: Option<String>,
    /// With `unique_by`: the states that count (`"queued,running"` or a list).
    #[serde(default)]
    pub unique_states: Option<States>,
    /// Post a message to the session's inbox when it ends (default true).
    #[serde(default)]
    pub signal_on_completion: Option<bool>,
    /// The message's delivery: `when_idle` (default), `immediate` or `silent`.
    #[serde(default)]
    pub delivery: Option<String>,
    /// A name that other specs of the same request give in `after`.
    #[serde(default, rename = "ref")]
    pub ref_: Option<String>,
    /// Runs it waits for: refs of other specs of the same request, or run ids (`bg_...`).
    #[serde(default)]
    pub after: Option<Vec<String>>,
    /// Run once each parent is final, whatever its outcome (default: each must complete).
    #[serde(default)]
    pub after_any: Option<bool>,
    /// Join this existing batch (`bt_...`; it must not have completed).
    #[serde(default)]
    pub batch_id: Option<String>,
    /// Tags, key to value (`{"customer": "acme"}`): keys of 1-64 characters of
    /// `[A-Za-z0-9_.:/-]` starting with a letter or digit, values of 1-256 characters without
    /// control characters, at most 16.
    #[serde(default)]
    pub tags: Option<std::collections::BTreeMap<String, String>>,
}

/// States as `"queued,running"` or `["queued", "running"]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "unique_states must be a string like \"queued,running\" or a list of state names"
)]
pub enum States {
    /// Comma-separated names.
    Text(String),
    /// A list of names.
    List(Vec<String>),
}

impl States {
    fn names(&self) -> Vec<String> {
        match self {
            States::Text(s) => s.split(',').map(|x| x.trim().to_string()).collect(),
            States::List(v) => v.clone(),
        }
    }
}

fn empty_object() -> Value {
    json!({})
}

/// A spec as parsed: its request, its ref, and the names its `after` gives (resolved once
/// every spec's ref is known: a spec may wait for a later one).
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The request, without its `after` links.
    pub req: EnqueueRequest,
    /// Its `ref`.
    pub ref_: Option<String>,
    /// Its `after`, as given.
    pub after: Vec<String>,
}

impl RunSpec {
    /// Reads the spec (times relative to `now`); its `after` is resolved by [`resolve`].
    pub fn parse(mut self, now: DateTime<Utc>) -> Result<Parsed, InputError> {
        let ref_ = self.ref_.take();
        if let Some(r) = &ref_
            && (r.trim().is_empty() || r.starts_with("bg_"))
        {
            return Err(InputError::new(
                "ref",
                r,
                "must be a name that is neither blank nor a run id (bg_...)",
            ));
        }
        let after = self.after.take().unwrap_or_default();
        let after_any = self.after_any.take().unwrap_or(false);
        if after_any && after.is_empty() {
            return Err(InputError::about("after_any", "needs \"after\""));
        }
        let mut req = self.request(now)?;
        req.after_any = after_any;
        Ok(Parsed { req, ref_, after })
    }

    fn request(self, now: DateTime<Utc>) -> Result<EnqueueRequest, InputError> {
        let mut req = EnqueueRequest::new(self.tool, self.args);
        if let Some(s) = self.session {
            req = req.session(s);
        }
        req.title = self.title;
        req.priority = self.priority.unwrap_or(0);
        req.run_at = run_at(now, ["at", "in"], self.at.as_deref(), self.in_.as_deref())?;
        req.max_attempts = self.max_attempts;
        req.timeout = self
            .timeout
            .as_deref()
            .map(|t| parse_dur("timeout", t))
            .transpose()?;
        req.idempotency_key = self.idempotency_key;
        req.unique = unique(
            ["unique_by", "unique_for", "unique_states"],
            self.unique_by.as_deref(),
            self.unique_for.as_deref(),
            self.unique_states.as_ref().map(States::names),
        )?;
        req.signal_on_completion = self.signal_on_completion.unwrap_or(true);
        if let Some(d) = self.delivery {
            req.delivery = d.parse().map_err(|e: InputError| InputError {
                field: "delivery".into(),
                ..e
            })?;
        }
        req.batch = self
            .batch_id
            .map(|b| {
                b.parse::<BatchId>().map_err(|e| InputError {
                    field: "batch_id".into(),
                    ..e
                })
            })
            .transpose()?;
        if let Some(tags) = self.tags {
            req.tags = crate::run::Tags::from_map(tags)?;
        }
        Ok(req)
    }
}

/// Turns each spec's `after` into run ids and indexes of other specs (by their `ref`); a
/// ref no spec has, or two specs with one ref, is an error naming the spec by `place(i)`
/// (`runs.jsonl line 3`, `runs[2]`).
pub fn resolve(
    parsed: Vec<Parsed>,
    place: impl Fn(usize) -> String,
    whole: &str,
) -> Result<Vec<EnqueueRequest>, InputError> {
    let mut refs: HashMap<&str, usize> = HashMap::new();
    for (i, p) in parsed.iter().enumerate() {
        if let Some(r) = &p.ref_
            && let Some(first) = refs.insert(r.as_str(), i)
        {
            return Err(InputError::new(
                format!("{}: ref", place(i)),
                r,
                format!("is also the ref of {}", place(first)),
            ));
        }
    }
    let mut links = Vec::with_capacity(parsed.len());
    for (i, p) in parsed.iter().enumerate() {
        let mut ids = Vec::new();
        let mut indexes = Vec::new();
        for a in &p.after {
            let at = || format!("{}: after", place(i));
            if a.starts_with("bg_") {
                ids.push(
                    a.parse::<RunId>()
                        .map_err(|e| InputError { field: at(), ..e })?,
                );
            } else {
                let j = refs.get(a.as_str()).ok_or_else(|| {
                    InputError::new(
                        at(),
                        a,
                        format!(
                            "is the ref of nothing in {whole} (give the \"ref\" of another run, or a run id bg_...)"
                        ),
                    )
                })?;
                indexes.push(*j);
            }
        }
        links.push((ids, indexes));
    }
    Ok(parsed
        .into_iter()
        .zip(links)
        .map(|(p, (ids, indexes))| {
            let mut req = p.req;
            req.after = ids;
            req.after_requests = indexes;
            req
        })
        .collect())
}

/// The [`Unique`] of `unique_by`, `unique_for` and `unique_states`; `names` are how errors
/// call those three (flags, or a spec's fields).
pub fn unique(
    names: [&str; 3],
    by: Option<&str>,
    within: Option<&str>,
    states: Option<Vec<String>>,
) -> Result<Option<Unique>, InputError> {
    let [by_name, for_name, states_name] = names;
    let Some(by) = by else {
        if within.is_some() || states.is_some() {
            return Err(InputError::about(
                by_name,
                format!("is needed with {for_name} and {states_name}"),
            ));
        }
        return Ok(None);
    };
    let mut u = Unique {
        by: by.parse().map_err(|e: InputError| InputError {
            field: by_name.into(),
            ..e
        })?,
        ..Unique::default()
    };
    if let Some(w) = within {
        u.within = Some(parse_dur(for_name, w)?);
    }
    if let Some(names) = states {
        u.states = names
            .iter()
            .map(|n| {
                n.parse::<RunState>().map_err(|e| InputError {
                    field: states_name.into(),
                    ..e
                })
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(Some(u))
}

/// An RFC 3339 instant with an offset, named `field` in errors.
pub fn parse_at(field: &str, s: &str) -> Result<DateTime<Utc>, InputError> {
    DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            InputError::new(
                field,
                s,
                format!(
                    "is not an RFC 3339 instant with an offset, like 2026-12-01T09:00:00Z ({e})"
                ),
            )
        })
}

/// A duration like `90s` or `2h`, named `field` in errors.
pub fn parse_dur(field: &str, s: &str) -> Result<Duration, InputError> {
    parse_duration(s).map_err(|r| InputError::new(field, s, r))
}

/// When a run is due: at `at`, or `in_` from `now`, or now (`None`); `names` are how errors
/// call the two (`--at`/`--in`, or `at`/`in`).
pub fn run_at(
    now: DateTime<Utc>,
    names: [&str; 2],
    at: Option<&str>,
    in_: Option<&str>,
) -> Result<Option<DateTime<Utc>>, InputError> {
    let [at_name, in_name] = names;
    match (at, in_) {
        (Some(_), Some(_)) => Err(InputError::about(
            at_name,
            format!("give either {at_name} or {in_name}, not both"),
        )),
        (Some(a), None) => parse_at(at_name, a).map(Some),
        (None, Some(d)) => {
            let given = d;
            let d = parse_dur(in_name, d)?;
            chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .filter(|t| *t <= crate::clock::latest())
                .map(Some)
                .ok_or_else(|| InputError::new(in_name, given, "is too far in the future"))
        }
        (None, None) => Ok(None),
    }
}

/// An error the core reported about its `request N` (1-based: `request 3: timeout`) named by
/// where that request came from: `place(i)` for the request at index `i` (`runs.jsonl line
/// 4`, `runs[2]`), giving `runs[2]: timeout`. A cycle among the requests' `after`
/// (`requests 1 -> 3 -> 1`) is renamed by `cycle`, which gets the indexes on it and returns
/// the field and value to report.
pub fn at_request(
    e: crate::error::Error,
    place: impl Fn(usize) -> Option<String>,
    cycle: impl FnOnce(Vec<usize>) -> (String, String),
) -> crate::error::Error {
    use crate::error::Error;
    let Error::Input(mut ie) = e else { return e };
    if ie.field == "after"
        && let Some(on) = ie.value.strip_prefix("requests ")
    {
        let indexes: Option<Vec<usize>> = on
            .split(" -> ")
            .map(|n| n.parse::<usize>().ok()?.checked_sub(1))
            .collect();
        if let Some(indexes) = indexes {
            (ie.field, ie.value) = cycle(indexes);
        }
        return Error::Input(ie);
    }
    let placed = ie
        .field
        .strip_prefix("request ")
        .and_then(|rest| rest.split_once(": "))
        .and_then(|(n, tail)| {
            let i = n.parse::<usize>().ok()?.checked_sub(1)?;
            Some(format!("{}: {tail}", place(i)?))
        });
    if let Some(field) = placed {
        ie.field = field;
    }
    Error::Input(ie)
}

#[cfg(test)]
mod tests {
    use super::at_request;
    use crate::error::{Error, InputError};

    fn input(field: &str, value: &str) -> Error {
        Error::Input(InputError::new(field, value, "is wrong"))
    }

    fn placed(e: Error) -> (String, String) {
        match at_request(
            e,
            |i| (i < 3).then(|| format!("runs[{i}]")),
            |on| ("runs: after".into(), format!("{on:?}")),
        ) {
            Error::Input(ie) => (ie.field, ie.value),
            e => panic!("{e}"),
        }
    }

    #[test]
    fn a_request_is_named_by_its_place_and_a_cycle_by_its_indexes() {
        assert_eq!(
            placed(input("request 3: timeout", "0s")),
            ("runs[2]: timeout".into(), "0s".into())
        );
        assert_eq!(
            placed(input("after", "requests 1 -> 3 -> 1")),
            ("runs: after".into(), "[0, 2, 0]".into())
        );
        // Places it does not know, and other fields, stay as they were.
        assert_eq!(
            placed(input("request 9: tool", "x")),
            ("request 9: tool".into(), "x".into())
        );
        assert_eq!(placed(input("tool", "x")), ("tool".into(), "x".into()));
    }
}
