//! Durable runs as data: a run's recorded steps and waits ([`StepRecord`], written as a
//! [`StepEntry`]), the events sent to it ([`RunEvent`]), and what a suspended run waits for
//! ([`Suspension`], [`Waiting`]). Pure types: the tool's journal decides, the store writes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::str::FromStr;

use crate::error::InputError;
use crate::ids::RunId;

/// What a recorded step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// `ctx.step(name, …)`: a closure whose result is recorded.
    Step,
    /// `ctx.sleep` / `ctx.sleep_until`: a durable timer.
    Sleep,
    /// `ctx.wait_for_event`: a wait for a named event.
    Event,
    /// `ctx.wait_children`: a wait for the run's spawned children to end.
    Children,
}

impl StepKind {
    /// The kind as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Step => "step",
            StepKind::Sleep => "sleep",
            StepKind::Event => "event",
            StepKind::Children => "children",
        }
    }
}

impl FromStr for StepKind {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            StepKind::Step,
            StepKind::Sleep,
            StepKind::Event,
            StepKind::Children,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
        .ok_or_else(|| InputError::new("step kind", s, "must be step, sleep, event or children"))
    }
}

/// Where a recorded step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Finished: its output is recorded (a wait: the event's payload, or a timeout).
    Done,
    /// The step's closure returned an error (recorded; a later attempt runs it again).
    Failed,
    /// A wait that has not ended yet.
    Waiting,
}

impl StepStatus {
    /// The status as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Done => "done",
            StepStatus::Failed => "failed",
            StepStatus::Waiting => "waiting",
        }
    }
}

impl FromStr for StepStatus {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [StepStatus::Done, StepStatus::Failed, StepStatus::Waiting]
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| InputError::new("step status", s, "must be done, failed or waiting"))
    }
}

/// One recorded step of a run, as stored (`step_records`; the ops view `run_steps`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct StepRecord {
    /// Its place in the run's sequence (1-based): a replay asks for the steps in this order.
    pub seq: i64,
    /// Its name, unique within the run.
    pub name: String,
    /// Step, sleep or event wait.
    pub kind: StepKind,
    /// Done, failed or waiting.
    pub status: StepStatus,
    /// The recorded JSON result (a wait that ended: `{"event": payload}` or
    /// `{"timed_out": true}`; a sleep: `null`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The step's error, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A wait: when it ends at the latest (the sleep's end, the event wait's timeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<DateTime<Utc>>,
    /// The attempt that recorded it.
    pub attempt: i64,
    /// When it was recorded.
    pub recorded_at: DateTime<Utc>,
}

/// A step to record (insert, or replace the record with the same `seq`), fenced by the
/// attempt that writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepEntry {
    /// Its place in the sequence.
    pub seq: i64,
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: StepKind,
    /// Its status.
    pub status: StepStatus,
    /// The output as JSON text.
    pub output: Option<String>,
    /// The error, when it failed.
    pub error: Option<String>,
    /// A wait's latest end.
    pub wake_at: Option<DateTime<Utc>>,
    /// An event wait that ended with its event: the event it consumed (marked consumed in
    /// the same transaction).
    pub consumes: Option<String>,
}

/// Steps recorded by a running attempt, fenced by its lease: written only while
/// `(id, attempt, token)` still hold the run.
#[derive(Debug, Clone)]
pub struct StepSave {
    /// Run id.
    pub id: RunId,
    /// The attempt.
    pub attempt: i64,
    /// Its lease token.
    pub token: String,
    /// The steps, in order.
    pub entries: Vec<StepEntry>,
}

/// An event sent to a run (`toolq signal`, `Client::signal`, the dashboard).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RunEvent {
    /// Its name: the first delivery of a name wins.
    pub name: String,
    /// Its JSON payload (`null` without one).
    pub payload: Value,
    /// When it was stored.
    pub sent_at: DateTime<Utc>,
    /// Who sent it, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_by: Option<String>,
    /// When a wait of the run took it; `None` while it waits to be taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumed_at: Option<DateTime<Utc>>,
}

/// What a run has recorded: its steps in order and its events in the order they came.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Journal {
    /// Recorded steps, by `seq`.
    pub steps: Vec<StepRecord>,
    /// Events sent to the run, oldest first.
    pub events: Vec<RunEvent>,
}

impl Journal {
    /// The event named `name`, if one was sent.
    pub fn event(&self, name: &str) -> Option<&RunEvent> {
        self.events.iter().find(|e| e.name == name)
    }
}

/// An event to deliver.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The run.
    pub run: RunId,
    /// The event's name.
    pub name: String,
    /// Its payload as JSON text.
    pub payload: String,
    /// Who sends it.
    pub sent_by: Option<String>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// What delivering an event did.
#[derive(Debug, Clone, PartialEq)]
pub enum EventSent {
    /// Stored; `woke`: the run was waiting for it and is due now.
    Stored {
        /// Whether the run was waiting for this event (it is now due).
        woke: bool,
    },
    /// No run has that id.
    UnknownRun,
    /// The run has ended (its state).
    Finished(super::RunState),
    /// An event of that name was delivered before: the first one.
    Duplicate(RunEvent),
}

/// What a suspended run waits for. The run stays `queued` with this in `wait_kind` (and the
/// event's name in `wait_event`); its `run_at` is when it wakes at the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// `ctx.sleep`: until a time.
    Sleep,
    /// `ctx.wait_for_event`: an event, or its timeout.
    Event,
    /// `ToolOutcome::Snooze`: run again later without using an attempt.
    Snooze,
    /// An async tool's `CheckAgainIn`: check the external operation again later.
    Check,
    /// Handed back by a stopping worker after it recorded steps: due now, and its next
    /// invocation replays them.
    Resume,
    /// `ctx.wait_children`: due once every run it spawned is final.
    Children,
    /// Blocked by `--after`: due once its parents completed (`runs.deps_pending` 0).
    Parents,
}

impl WaitKind {
    /// The kind as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitKind::Sleep => "sleep",
            WaitKind::Event => "event",
            WaitKind::Snooze => "snooze",
            WaitKind::Check => "check",
            WaitKind::Resume => "resume",
            WaitKind::Children => "children",
            WaitKind::Parents => "parents",
        }
    }
}

impl FromStr for WaitKind {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            WaitKind::Sleep,
            WaitKind::Event,
            WaitKind::Snooze,
            WaitKind::Check,
            WaitKind::Resume,
            WaitKind::Children,
            WaitKind::Parents,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
        .ok_or_else(|| {
            InputError::new(
                "wait kind",
                s,
                "must be sleep, event, snooze, check, resume, children or parents",
            )
        })
    }
}

impl fmt::Display for WaitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a running attempt leaves its run suspended: it frees its slot and lease, does not
/// count as an attempt, writes no message, and the run is claimed again at `until` (or
/// earlier, when the event it waits for arrives).
#[derive(Debug, Clone, PartialEq)]
pub struct Suspension {
    /// What it waits for.
    pub kind: WaitKind,
    /// The event's name, for [`WaitKind::Event`].
    pub event: Option<String>,
    /// When it is due again at the latest.
    pub until: DateTime<Utc>,
}

/// What a queued run waits for, as read (`None` on [`super::Run::waiting`] for a run that
/// simply waits its turn).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Waiting {
    /// What it waits for.
    pub kind: WaitKind,
    /// The event's name, for an event wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// When it is due again at the latest (the run's `run_at`).
    pub until: DateTime<Utc>,
}

impl Waiting {
    /// One line for people: `sleep until T`, `event "x" (times out at T)`, `event "x" (no
    /// timeout)`, ...
    pub fn describe(&self) -> String {
        let at = crate::clock::ts(self.until);
        if self.kind == WaitKind::Event && self.until >= far_future() {
            return match &self.event {
                Some(name) => format!("event {name:?} (no timeout)"),
                None => "an event (no timeout)".to_string(),
            };
        }
        match (self.kind, &self.event) {
            (WaitKind::Event, Some(name)) => format!("event {name:?} (times out at {at})"),
            (WaitKind::Sleep, _) => format!("sleep until {at}"),
            (WaitKind::Snooze, _) => format!("snoozed until {at}"),
            (WaitKind::Check, _) => format!("next check of its operation at {at}"),
            (WaitKind::Resume, _) => {
                format!("resume from its recorded steps (handed back by a stopping worker at {at})")
            }
            (WaitKind::Event, None) => format!("an event (times out at {at})"),
            (WaitKind::Children, _) if self.until >= far_future() => {
                "its children to end".to_string()
            }
            (WaitKind::Children, _) => format!("its children to end (times out at {at})"),
            (WaitKind::Parents, _) => "its parents to complete".to_string(),
        }
    }
}

/// The latest instant toolq stores: a wait "forever" ends here.
pub fn far_future() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("9999-12-31T23:59:59.999Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip() {
        for k in [StepKind::Step, StepKind::Sleep, StepKind::Event] {
            assert_eq!(k.as_str().parse::<StepKind>().unwrap(), k);
        }
        for s in [StepStatus::Done, StepStatus::Failed, StepStatus::Waiting] {
            assert_eq!(s.as_str().parse::<StepStatus>().unwrap(), s);
        }
        for w in [
            WaitKind::Sleep,
            WaitKind::Event,
            WaitKind::Snooze,
            WaitKind::Check,
            WaitKind::Resume,
        ] {
            assert_eq!(w.as_str().parse::<WaitKind>().unwrap(), w);
        }
        assert!("nap".parse::<WaitKind>().is_err());
    }

    #[test]
    fn waits_describe_themselves() {
        let w = Waiting {
            kind: WaitKind::Event,
            event: Some("approved".into()),
            until: far_future(),
        };
        assert_eq!(w.describe(), "event \"approved\" (no timeout)");
        let w = Waiting {
            until: DateTime::parse_from_rfc3339("2026-11-02T12:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
            ..w
        };
        assert_eq!(
            w.describe(),
            "event \"approved\" (times out at 2026-11-02T12:00:00.000Z)"
        );
    }
}
