//! The tool model: what a tool declares ([`ToolDef`]), what it is given ([`ToolContext`]) and
//! what it returns ([`ToolOutcome`]). Outcomes are data, not errors.

pub mod async_tool;
pub mod builtin;
pub mod command;
pub mod durable;
pub mod executor;
pub mod host;
pub mod mode;
pub mod outcome;
pub mod process;
pub mod registry;
pub mod result;
pub mod sink;
pub mod stop;
pub mod time_limit;
pub mod typed;

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use async_tool::{AsyncAdapter, AsyncOutcome, AsyncTool, ProgressStage, ToolStatus};
pub use durable::{Durable, StepError};
pub use executor::{
    ApprovalRequest, BasicToolExecutor, ExecContext, ToolExecutionOutcome, ToolExecutor,
    ToolRequest,
};
pub use host::{BackgroundRun, ChildRun, Refused, ToolHost};
pub use mode::{
    Acknowledgement, DefaultResultFormatter, FunctionResponseScheduling, ResultFormatter,
    ToolExecutionMode,
};
pub use outcome::{INTERNAL_ERROR_TEXT, Image, ToolOutcome, ToolSuccess};
pub use registry::{Registry, RegistryBuilder};
pub use result::ToolResult;
pub use sink::{RunSink, Stream};
pub use stop::{StopReason, StopSignal};
pub use typed::{Typed, TypedTool, schema_of, typed_def};

use crate::ids::RunId;
use crate::run::{Linked, LinkedResult};

/// Hints about a tool's behaviour. Every hint defaults to `false`, as in the seed: a tool opts
/// in, e.g. `ToolHints::default().with_supports_background(true)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ToolHints {
    /// It only reads.
    pub readonly: bool,
    /// Running it twice with the same args has the effect of running it once.
    pub idempotent: bool,
    /// It may run in the background (via `spawn_background`). Opt-in.
    pub supports_background: bool,
}

impl ToolHints {
    /// Sets `readonly`.
    pub fn with_readonly(mut self, v: bool) -> Self {
        self.readonly = v;
        self
    }

    /// Sets `idempotent`.
    pub fn with_idempotent(mut self, v: bool) -> Self {
        self.idempotent = v;
        self
    }

    /// Sets `supports_background`.
    pub fn with_supports_background(mut self, v: bool) -> Self {
        self.supports_background = v;
        self
    }
}

/// Whether a run needs an operator's approval before it executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolPolicy {
    /// Runs without asking.
    #[default]
    Auto,
    /// Waits in `awaiting_approval` until approved.
    RequiresApproval,
}

/// What a tool declares about itself.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ToolDef {
    /// Unique name (what enqueue names).
    pub name: String,
    /// Human name.
    pub display_name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of its arguments.
    pub parameters: Value,
    /// Behaviour hints.
    pub hints: ToolHints,
    /// Approval policy.
    pub policy: ToolPolicy,
    /// Default timeout of a run (a run may override it).
    #[serde(serialize_with = "ser_opt_duration")]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Duration>,
    /// With [`ToolPolicy::RequiresApproval`]: an approval not given within this long expires
    /// the run (falls back to `[approvals] deadline`).
    #[serde(serialize_with = "ser_opt_duration")]
    #[schemars(with = "Option<String>")]
    pub approval_deadline: Option<Duration>,
}

fn ser_opt_duration<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_str(&crate::clock::format_duration(*d)),
        None => s.serialize_none(),
    }
}

impl ToolDef {
    /// A definition with default hints, auto policy and no timeout.
    pub fn new(name: &str, description: &str, parameters: Value) -> Self {
        Self {
            name: name.to_string(),
            display_name: name.to_string(),
            description: description.to_string(),
            parameters,
            hints: ToolHints::default(),
            policy: ToolPolicy::Auto,
            timeout: None,
            approval_deadline: None,
        }
    }

    /// Sets the display name.
    pub fn display_name(mut self, n: &str) -> Self {
        self.display_name = n.to_string();
        self
    }

    /// Sets the hints.
    pub fn hints(mut self, h: ToolHints) -> Self {
        self.hints = h;
        self
    }

    /// Sets the approval policy.
    pub fn policy(mut self, p: ToolPolicy) -> Self {
        self.policy = p;
        self
    }

    /// Sets the default timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }
}

/// What a running tool gets.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The run.
    pub run_id: RunId,
    /// Its session.
    pub session_id: String,
    /// Its title.
    pub title: String,
    /// The validated arguments.
    pub args: Value,
    /// This attempt's number (1-based).
    pub attempt: i64,
    /// Where to report status, output and progress.
    pub sink: RunSink,
    /// Fires when the run is cancelled, timed out or the worker shuts down: stop soon.
    pub cancel: CancellationToken,
    /// Why it fired, set by the worker before it fires (see [`ToolContext::stop_reason`]).
    pub stop: StopSignal,
    /// For async tools resumed after a restart: the operation a previous attempt started.
    pub operation_id: Option<String>,
    /// What the tool may ask of the queue (start a background run, create a monitor, read
    /// its run): a narrow handle, `None` where no queue is at hand (a test's context).
    pub host: Option<std::sync::Arc<dyn ToolHost>>,
    /// The worker's clock.
    pub clock: crate::clock::SharedClock,
    /// The run's journal: recorded steps and durable waits ([`ToolContext::step`],
    /// [`ToolContext::sleep`], [`ToolContext::wait_for_event`]). [`Durable::none`] where
    /// there is no queued run (an inline call, a test's context): steps just run.
    pub durable: Durable,
}

impl ToolContext {
    /// Why the worker asked this attempt to stop, once it did: an operator's cancel, a
    /// shutdown (or a lost lease), or the time limit. `None` while it runs, and when the
    /// token was fired by someone other than a worker (an executor's host).
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop.reason()
    }

    /// Runs `fut` as the recorded step `name`. The first time, it runs and its JSON result
    /// (or its error) is recorded for the run, fenced by the lease: the record commits before
    /// the run's next step runs (and with the attempt's end at the latest). On
    /// a later invocation of the same run (a retry, a rescue after a crash, a resume after a
    /// wait) a recorded result is returned and `fut` does not run; a step that failed in an
    /// earlier attempt runs again. Names are unique within a run, and a replay must ask for
    /// the steps in the order they were recorded: either mistake is an error naming the
    /// steps. The closure of a step runs again only if its worker died after it finished
    /// and before its record committed.
    ///
    /// ```no_run
    /// # async fn f(ctx: toolq::ToolContext) -> Result<(), toolq::StepError> {
    /// let order: u64 = ctx.step("create order", async { Ok::<_, std::io::Error>(42) }).await?;
    /// ctx.sleep(std::time::Duration::from_secs(3600)).await?; // frees the worker's slot
    /// let paid = ctx.wait_for_event("paid", std::time::Duration::from_secs(86400)).await?;
    /// # let _ = (order, paid); Ok(()) }
    /// ```
    pub async fn step<T, E, F>(&self, name: &str, fut: F) -> Result<T, StepError>
    where
        T: Serialize + serde::de::DeserializeOwned,
        E: std::fmt::Display,
        F: std::future::Future<Output = Result<T, E>>,
    {
        self.durable.step(name, fut).await
    }

    /// Sleeps for `d` without holding a worker slot: the run is suspended (queued, waiting
    /// for `sleep`), its slot and lease are released, and a worker claims it again when the
    /// time comes. The tool is then invoked again from the top: its recorded steps replay
    /// and this call returns. Code after the call runs in that later invocation. Without a
    /// queued run (an inline call) it just sleeps.
    pub async fn sleep(&self, d: Duration) -> Result<(), StepError> {
        self.durable.sleep(d).await
    }

    /// [`ToolContext::sleep`] until an instant.
    pub async fn sleep_until(&self, t: chrono::DateTime<chrono::Utc>) -> Result<(), StepError> {
        self.durable.sleep_until(t).await
    }

    /// Waits for the event `name` (sent with `toolq signal RUN NAME`, `Client::signal` or the
    /// dashboard) for at most `timeout`, without holding a worker slot: returns its payload,
    /// or `None` when the timeout passed first. An event sent before the wait is kept and
    /// returned at once. The result is recorded: a replay returns the same answer.
    pub async fn wait_for_event(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<Value>, StepError> {
        self.durable.wait_for_event(name, timeout).await
    }

    /// Starts a child run of this run: `tool` with `args`, queued in this run's session and
    /// listed under it (`runs.parent_run_id`; `show` lists its children). Returns the
    /// child's id. Args are checked against the tool's schema: an unknown tool or bad args
    /// is [`StepError::Refused`] naming the tool, and nothing is written.
    ///
    /// Exactly once: the spawn is the recorded step `spawn#N` (the N-th spawn of the run), so
    /// a replay returns the recorded id; and the child is inserted with the idempotency key
    /// `toolq:{this run}:spawn:{N}`, so a replay after a crash between the insert and its
    /// record gets the same child back instead of a second one. As for any step, a replay
    /// must spawn in the same order, with the same args.
    ///
    /// A child posts no message when it ends, whether it completed, failed or was cancelled
    /// (`signal_on_completion` false; a child that needs approval still asks for it): the
    /// parent reads its children's outcomes with [`ToolContext::wait_children`] and reports,
    /// so a fan-out of a thousand children does not post a thousand messages. It is not
    /// counted under spawn_background's per-session limit. Without a queued run (an inline
    /// call) it is [`StepError::NoRun`].
    ///
    /// ```no_run
    /// # async fn f(ctx: toolq::ToolContext) -> Result<(), toolq::StepError> {
    /// use serde_json::json;
    /// for n in 1..=10 {
    ///     ctx.spawn_child("square", json!({"n": n})).await?;
    /// }
    /// // Frees the worker's slot until all ten have ended.
    /// let children = ctx.wait_children().await?;
    /// let sum: i64 = children.iter().filter_map(|c| c.result["result"]["square"].as_i64()).sum();
    /// # let _ = sum; Ok(()) }
    /// ```
    pub async fn spawn_child(&self, tool: &str, args: Value) -> Result<RunId, StepError> {
        let host = self.queue(&format!("spawn_child({tool:?})"))?;
        self.durable
            .spawn_child(&*host, &self.run_id, &self.session_id, tool, args)
            .await
    }

    /// Waits until every child of this run has ended, without holding a worker slot, and
    /// returns their outcomes in id order: each with its state (`completed`, `failed`,
    /// `cancelled`), its stored result (`{"status": "completed", "result": ...}`, `null`
    /// unless it completed) and its error. A failed child is in the list, not an error of
    /// the wait. The children are the runs spawned with [`ToolContext::spawn_child`] and
    /// with `spawn_background` from inside this run.
    ///
    /// Like [`ToolContext::sleep`], the run is suspended (queued, waiting for `children`)
    /// and invoked again from the top once the last child ended; its recorded steps replay
    /// (the spawns return the same ids) and this call returns. If every child has already
    /// ended (or there are none) it returns at once. The outcomes are recorded (the step
    /// `children#N`, within `runs.max_step_bytes`): a replay returns the same list without
    /// reading it again.
    pub async fn wait_children(&self) -> Result<Vec<LinkedResult>, StepError> {
        let host = self.queue("wait_children()")?;
        self.durable.wait_children(&*host, &self.run_id, None).await
    }

    /// [`ToolContext::wait_children`] for at most `timeout`: after it the outcomes are
    /// returned as they stand, unfinished children with their current state (`queued`,
    /// `running`, ...) and a `null` result.
    pub async fn wait_children_for(
        &self,
        timeout: Duration,
    ) -> Result<Vec<LinkedResult>, StepError> {
        let host = self.queue("wait_children_for()")?;
        self.durable
            .wait_children(&*host, &self.run_id, Some(timeout))
            .await
    }

    /// The outcomes of the runs this run waited for (`--after`, [`crate::EnqueueRequest::after`]),
    /// in id order, each with its state, its stored result (`{"status": "completed",
    /// "result": ...}`) and its error; for a batch's callback run, one entry: the batch
    /// (`bt_…`, tool `None`) whose result is its [`crate::run::BatchSummary`]. Empty for a
    /// run with no parents. Read when called (the parents have ended, so it does not
    /// change). Command tools get the same list as a file: `TOOLQ_PARENT_RESULTS`. An
    /// inline call (no queued run) has no parents: empty.
    pub async fn parent_results(&self) -> Result<Vec<LinkedResult>, StepError> {
        let Ok(host) = self.queue("parent_results()") else {
            return Ok(Vec::new());
        };
        host.linked_results(&self.run_id, Linked::Parents)
            .await
            .map_err(|e| StepError::Store(e.to_string()))
    }

    /// The queue, for a call that needs a queued run.
    fn queue(&self, call: &str) -> Result<std::sync::Arc<dyn ToolHost>, StepError> {
        match &self.host {
            Some(h) if self.durable.is_recording() => Ok(h.clone()),
            _ => Err(StepError::NoRun(call.to_string())),
        }
    }
}

/// A tool: a named unit of work with a JSON schema for its arguments. (To get the schema
/// from a Rust type and the arguments parsed, implement [`TypedTool`] instead.)
///
/// ```
/// use async_trait::async_trait;
/// use serde_json::json;
/// use toolq::{RegistryBuilder, Tool, ToolContext, ToolDef, ToolOutcome};
///
/// /// Counts the words of a text.
/// struct WordCount;
///
/// #[async_trait]
/// impl Tool for WordCount {
///     fn definition(&self) -> ToolDef {
///         ToolDef::new(
///             "word_count",
///             "Counts the words of a text.",
///             json!({"type": "object", "properties": {"text": {"type": "string"}},
///                    "required": ["text"]}),
///         )
///     }
///
///     async fn call(&self, ctx: ToolContext) -> ToolOutcome {
///         ctx.sink.status("counting");
///         let text = ctx.args["text"].as_str().unwrap_or_default();
///         ToolOutcome::ok(json!({ "words": text.split_whitespace().count() }))
///     }
/// }
///
/// let registry = RegistryBuilder::new().tool(WordCount).build().expect("valid schema");
/// assert!(registry.validate("word_count", &json!({"text": "a b"})).is_ok());
/// assert!(registry.validate("word_count", &json!({"text": 3})).is_err());
/// ```
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The tool's definition; called once when it is registered.
    fn definition(&self) -> ToolDef;

    /// Executes one run. Report through `ctx.sink`; watch `ctx.cancel`.
    async fn call(&self, ctx: ToolContext) -> ToolOutcome;

    /// Shapes the text of an inbox message about one of this tool's runs (approval request,
    /// completion, failure, cancellation). `draft` holds the kind, the default text (the
    /// seed's) and the structured data; return `Some(text)` to replace the text. The
    /// structured data and the delivery mode stay as they are.
    fn format_message(&self, draft: &crate::inbox::NewMessage) -> Option<String> {
        let _ = draft;
        None
    }
}

/// Applies `tool`'s formatter to `msg`, keeping the default text when it has none.
pub fn apply_format(tool: &dyn Tool, msg: &mut crate::inbox::NewMessage) {
    if let Some(text) = tool.format_message(msg) {
        msg.body = text;
    }
}
