//! One run with everything `toolq show` says about it: its paths, why it is held, its
//! effective timeout and where that comes from, its recorded steps and events, and its links.
//! `toolq show --json` prints it and `GET /api/v1/runs/{id}` answers it.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;

use crate::client::Client;
use crate::error::{Error, Result, StoreError};
use crate::ids::RunId;
use crate::run::{Run, RunEvent, RunLinks, StepRecord};

/// A run as `toolq show --json` prints it: the run's fields, then what `show` adds.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RunDetail {
    /// The run.
    #[serde(flatten)]
    pub run: Run,
    /// Where its result is kept.
    pub result_path: String,
    /// Where its log is kept.
    pub log_path: String,
    /// Its recorded steps, by `seq`.
    pub steps: Vec<StepRecord>,
    /// The events sent to it, oldest first.
    pub events: Vec<RunEvent>,
    /// Why a queued run is held back (a pause, its tool's limits), if it is.
    pub held: Option<String>,
    /// The time limit a worker applies to it, in milliseconds.
    pub timeout_effective_ms: u64,
    /// Where that limit comes from: `run`, `tool` or `runs.timeout`.
    pub timeout_source: String,
    /// The same, for people ([`TimeoutSource::describe`]).
    #[serde(skip)]
    pub source: TimeoutSource,
    /// Its batch, the runs it waits for and that wait for it, the run that spawned it and
    /// the runs it spawned.
    pub links: RunLinks,
}

impl RunDetail {
    /// The effective time limit.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_effective_ms)
    }
}

/// Where a run's time limit comes from, in the order the worker looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeoutSource {
    /// The run's own (`enqueue --timeout`, a schedule's `--timeout`).
    Run,
    /// A command tool's `[tools.NAME] timeout`.
    CommandTool,
    /// A tool's own default (built in or registered by a host).
    Tool,
    /// `runs.timeout`, the default of every run.
    #[default]
    Config,
    /// `runs.timeout`, because the tool is not registered in this configuration (a worker
    /// that has it may know better).
    ConfigUnknownTool,
}

impl TimeoutSource {
    /// The JSON value of `timeout_source`.
    pub fn key(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::CommandTool | Self::Tool => "tool",
            Self::Config | Self::ConfigUnknownTool => "runs.timeout",
        }
    }

    /// For people: where the limit is set (`tools.NAME.timeout`, `runs.timeout`, ...).
    pub fn describe(self, tool: &str) -> String {
        match self {
            Self::Run => "the run's own --timeout".into(),
            Self::CommandTool => format!("tools.{tool}.timeout"),
            Self::Tool => format!("tool {tool:?}'s own timeout"),
            Self::Config => "runs.timeout".into(),
            Self::ConfigUnknownTool => {
                format!("runs.timeout; tool {tool:?} is not registered in this configuration")
            }
        }
    }
}

impl Client {
    /// Run `id` with its paths, hold reason, effective timeout, journal and links.
    pub async fn run_detail(&self, id: &RunId) -> Result<RunDetail> {
        let run = self.get(id).await?;
        let held = self.hold_reason(&run).await?;
        let journal = self.journal(id).await?;
        let links = self.links_or_row(&run).await?;
        let (limit, source) = self.effective_timeout(&run);
        Ok(RunDetail {
            result_path: run.result_path(),
            log_path: run.log_path(),
            steps: journal.steps,
            events: journal.events,
            held,
            timeout_effective_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
            timeout_source: source.key().to_string(),
            source,
            links,
            run,
        })
    }

    /// The run's links. An engine that cannot read them yet gives what the run's row says
    /// (batch, spawning run), so `show` keeps working on it.
    async fn links_or_row(&self, run: &Run) -> Result<RunLinks> {
        match self.links(&run.id).await {
            Err(Error::Store(StoreError::Unsupported { .. })) => Ok(RunLinks {
                batch_id: run.batch_id.as_ref().map(ToString::to_string),
                parent_run_id: run.parent_run_id.as_ref().map(ToString::to_string),
                ..RunLinks::default()
            }),
            other => other,
        }
    }

    /// The limit the worker applies to `run` (as this configuration says, in the worker's
    /// order: [`crate::tool::time_limit`]), and where it comes from.
    fn effective_timeout(&self, run: &Run) -> (Duration, TimeoutSource) {
        use crate::tool::time_limit::{LimitSource, time_limit};
        let config = self.config();
        let entry = self.registry().get(&run.tool);
        let (limit, source) = time_limit(
            run.timeout_ms,
            entry.and_then(|e| e.def.timeout),
            config.runs.timeout,
        );
        let source = match source {
            LimitSource::Run => TimeoutSource::Run,
            LimitSource::Tool if config.tools.contains_key(&run.tool) => TimeoutSource::CommandTool,
            LimitSource::Tool => TimeoutSource::Tool,
            LimitSource::Default if entry.is_some() => TimeoutSource::Config,
            LimitSource::Default => TimeoutSource::ConfigUnknownTool,
        };
        (limit, source)
    }
}
