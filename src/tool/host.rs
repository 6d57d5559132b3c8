//! What a running tool may ask of the queue: a narrow handle ([`ToolHost`]), not the whole
//! client. A tool can start a background run or a child run in its session, create a monitor
//! schedule, read a run (its own) and the outcomes of the runs it is linked to, and look up
//! the tools of the process; it reports status and progress
//! through its [`crate::tool::RunSink`] and learns of cancellation from
//! [`crate::tool::ToolContext::stop_reason`].

use std::fmt;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::Result;
use crate::ids::RunId;
use crate::run::{Delivery, Linked, LinkedResult, Run};
use crate::schedule::api::ScheduleRequest;
use crate::schedule::model::Schedule;
use crate::tool::Registry;

/// A background run a tool asks for (`spawn_background`'s request).
#[derive(Debug, Clone)]
pub struct BackgroundRun {
    /// The session it belongs to (the calling run's).
    pub session: String,
    /// The tool to run.
    pub tool: String,
    /// Its arguments (validated against the tool's schema).
    pub args: Value,
    /// Its title.
    pub title: String,
    /// Post an inbox message when it ends.
    pub signal_on_completion: bool,
    /// How that message is delivered.
    pub delivery: Delivery,
    /// The run that starts it, when a queued run calls `spawn_background` (`None` for an
    /// inline call, which has no run): the new run is listed as its child.
    pub parent: Option<RunId>,
    /// Its tags (the call's `tags`; not inherited from the calling run).
    pub tags: crate::run::Tags,
}

/// A child run a running tool starts ([`crate::tool::ToolContext::spawn_child`]).
#[derive(Debug, Clone)]
pub struct ChildRun {
    /// The run that spawns it.
    pub parent: RunId,
    /// The session it belongs to (the parent's).
    pub session: String,
    /// The tool to run.
    pub tool: String,
    /// Its arguments (validated against the tool's schema).
    pub args: Value,
    /// Makes the insert exactly once: a second start with the same key returns the first
    /// child (a replay after a crash between the insert and the spawn's record).
    pub idempotency_key: String,
}

/// Why a background run was not started.
#[derive(Debug)]
pub enum Refused {
    /// Bad input (unknown tool, args that do not match its schema): the tool's error text.
    Input(String),
    /// The session is at its limit of active background runs: the seed's message.
    Limit(String),
    /// The database failed.
    Internal(crate::error::StoreError),
}

/// The narrow handle a running tool gets ([`crate::tool::ToolContext::host`]).
#[async_trait]
pub trait ToolHost: Send + Sync + fmt::Debug {
    /// The tools of this process.
    fn registry(&self) -> &Registry;

    /// Starts `run` as a background run of its session under the per-session limit (the
    /// calling run `caller` is not counted), and wakes this process's workers. Nothing is
    /// written when it is refused.
    async fn start_background(
        &self,
        run: BackgroundRun,
        caller: &RunId,
    ) -> std::result::Result<RunId, Refused>;

    /// Starts `run` as a child of its parent run: queued in the parent's session, with no
    /// message when it ends (the parent reads its outcome and reports), and not counted
    /// under the per-session limit of background runs. A start with a key that names a run
    /// already returns that run.
    async fn start_child(&self, run: ChildRun) -> std::result::Result<RunId, Refused>;

    /// The outcomes of the runs `id` waits for (`Linked::Parents`: `--after`, or a batch's
    /// summary for its callback) or of the runs it spawned (`Linked::Children`), in id order.
    async fn linked_results(&self, id: &RunId, which: Linked) -> Result<Vec<LinkedResult>>;

    /// Creates a schedule (a monitor), under the per-session limit of active schedules.
    async fn create_schedule(&self, req: ScheduleRequest) -> Result<Schedule>;

    /// Reads a run: a tool reads its own (its stored operation stages, for instance).
    async fn run(&self, id: &RunId) -> Result<Run>;
}
