//! Async tools: a tool that starts an external operation ([`AsyncTool::execute`] returns
//! [`AsyncOutcome::InProgress`] with an operation id) and then follows it
//! ([`AsyncTool::check_status`] streams typed stages until it completes or fails).
//!
//! [`AsyncAdapter`] makes one a [`Tool`] for the ordinary [`super::Registry`]
//! (see [`super::RegistryBuilder::async_tool`]). The adapter stores the operation id on the run
//! as soon as `execute` returns, and every stage (with its time and attempt) in the run's stage
//! history. **The operation id belongs to the run, not to the attempt**: every later attempt of
//! the run (after a worker restart, a rescue, a timeout or an internal error) finds it in
//! [`ToolContext::operation_id`] and resumes `check_status`; `execute` is called only by an
//! attempt that finds no operation id, or one whose last stage says it failed or was
//! cancelled (`toolq retry` of such a run starts a new operation), and at most once per
//! attempt. A completed operation is resumed, never restarted. The one window left is a crash
//! inside `execute` itself, before it returns: the next attempt calls `execute` again, so a
//! service that can should take [`ToolContext::run_id`] as its idempotency key.
//!
//! An operation that reports rarely (a two-hour export polled every ten minutes) need not
//! hold a worker slot between its checks: its status stream yields
//! [`ToolStatus::CheckAgainIn`], and the run is suspended (queued, waiting for `check`, its
//! slot and lease freed) until then. A worker then claims it again, and the adapter resumes
//! the stored operation with a new [`AsyncTool::check_status`], without a `resumed` stage.

use std::future::Future;

use async_trait::async_trait;
use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};

use super::{StopReason, Tool, ToolContext, ToolDef, ToolOutcome, ToolSuccess};
use crate::clock::ts;
use crate::run::{Progress, WaitKind};

/// A typed stage of an async operation, stored by its name.
///
/// Usually an enum the tool defines; the name is what `show`, the `run_stages` view and the
/// JSON field `stages` carry, so keep names stable.
pub trait ProgressStage: Send + Sync + 'static {
    /// The stage's stored name, e.g. `"transferring"`.
    fn as_str(&self) -> &str;
}

/// What [`AsyncTool::execute`] returns.
#[derive(Debug, Clone)]
pub enum AsyncOutcome {
    /// The operation finished at once.
    Success(ToolSuccess),
    /// The operation was refused or failed at once (shown to the session, never retried).
    Failed(String),
    /// The operation started; follow it with [`AsyncTool::check_status`].
    InProgress {
        /// The external operation's id, stored on the run.
        operation_id: String,
        /// What started (the first stage's message).
        message: String,
    },
}

impl AsyncOutcome {
    /// An operation that started.
    pub fn in_progress(operation_id: impl Into<String>, message: impl Into<String>) -> Self {
        AsyncOutcome::InProgress {
            operation_id: operation_id.into(),
            message: message.into(),
        }
    }
}

/// One item of [`AsyncTool::check_status`]'s stream.
#[derive(Debug, Clone)]
pub enum ToolStatus<S> {
    /// The operation is at `stage`.
    Progress {
        /// The typed stage.
        stage: S,
        /// What is happening.
        message: String,
        /// How far along, from 0.0 to 1.0, when known.
        progress: Option<f64>,
    },
    /// It finished with this result.
    Completed(ToolSuccess),
    /// It failed (shown to the session, never retried).
    Failed(String),
    /// Nothing to report until this much later: the stream is dropped and
    /// [`AsyncTool::check_status`] is called again after the delay. In a queued run the run
    /// is suspended meanwhile (queued, waiting for `check`), so a worker slot is not held
    /// while the operation runs; its next check is a new invocation of the run, in the same
    /// attempt. In an inline call (no queued run) the adapter just waits.
    CheckAgainIn(std::time::Duration),
}

impl<S> ToolStatus<S> {
    /// A completion with just a JSON value.
    pub fn completed(value: Value) -> Self {
        ToolStatus::Completed(ToolSuccess {
            value,
            ..Default::default()
        })
    }
}

/// An error from [`AsyncTool::execute`]: an internal error (retried while attempts remain).
pub type AsyncError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A tool that starts a long-running external operation and follows it.
///
/// The work happens outside the worker (a service, a process); the tool only starts it and
/// watches it, so a worker that dies loses nothing: the next attempt watches the same
/// operation. Register it with [`super::RegistryBuilder::async_tool`].
///
/// ```
/// use futures_util::Stream;
/// use serde_json::{Value, json};
/// use toolq::tool::async_tool::AsyncError;
/// use toolq::tool::{AsyncOutcome, AsyncTool, ProgressStage, ToolStatus};
/// use toolq::{RegistryBuilder, ToolContext, ToolDef};
///
/// enum Stage { Rendering }
///
/// impl ProgressStage for Stage {
///     fn as_str(&self) -> &str { "rendering" }
/// }
///
/// struct Render;
///
/// impl AsyncTool for Render {
///     type Stage = Stage;
///
///     fn definition(&self) -> ToolDef {
///         ToolDef::new("render", "Renders a video.", json!({"type": "object"}))
///     }
///
///     async fn execute(&self, ctx: &ToolContext, _input: Value) -> Result<AsyncOutcome, AsyncError> {
///         // Ask the service to start, with the run id as its idempotency key.
///         let job = format!("job-{}", ctx.run_id);
///         Ok(AsyncOutcome::in_progress(job, "render queued"))
///     }
///
///     fn check_status(&self, _ctx: &ToolContext, job: &str)
///         -> impl Stream<Item = ToolStatus<Stage>> + Send
///     {
///         futures_util::stream::iter([
///             ToolStatus::Progress { stage: Stage::Rendering, message: "50%".into(), progress: Some(0.5) },
///             ToolStatus::completed(json!({"video": format!("{job}.mp4")})),
///         ])
///     }
/// }
///
/// let registry = RegistryBuilder::new().async_tool(Render).build().unwrap();
/// assert!(registry.has("render"));
/// ```
pub trait AsyncTool: Send + Sync + 'static {
    /// The stages this tool reports.
    type Stage: ProgressStage;

    /// The tool's definition (name, schema, hints, policy), as for [`Tool::definition`].
    fn definition(&self) -> ToolDef;

    /// Starts the operation and returns quickly. Called at most once per attempt, and only
    /// when the run has no operation id yet. An `Err` is an internal error: the attempt is
    /// retried while attempts remain (and calls `execute` again, no operation being stored).
    fn execute(
        &self,
        ctx: &ToolContext,
        input: Value,
    ) -> impl Future<Output = Result<AsyncOutcome, AsyncError>> + Send;

    /// Streams the operation's status until it yields [`ToolStatus::Completed`] or
    /// [`ToolStatus::Failed`], or [`ToolStatus::CheckAgainIn`] to be called again later. A
    /// stream that ends before any of them is an internal error (the next attempt resumes
    /// it). Called again by every attempt that resumes the operation, and after each
    /// `CheckAgainIn`.
    fn check_status(
        &self,
        ctx: &ToolContext,
        operation_id: &str,
    ) -> impl Stream<Item = ToolStatus<Self::Stage>> + Send;

    /// Ends the operation when an operator cancels the run. A worker shutdown, a timeout or a
    /// lost lease does not call this: the operation keeps going for the next attempt. The
    /// default does nothing (the operation runs to its end unobserved).
    fn cancel(&self, ctx: &ToolContext, operation_id: &str) -> impl Future<Output = ()> + Send {
        let _ = (ctx, operation_id);
        async {}
    }

    /// Shapes inbox texts, as [`Tool::format_message`].
    fn format_message(&self, draft: &crate::inbox::NewMessage) -> Option<String> {
        let _ = draft;
        None
    }
}

/// Runs an [`AsyncTool`] as a [`Tool`]: execute once, store the operation, follow it.
#[derive(Debug, Clone)]
pub struct AsyncAdapter<T>(pub T);

/// A stage record for the run's stage history: `{stage, message, progress, at, attempt}`
/// plus `extra`'s fields.
pub fn stage_record(ctx: &ToolContext, stage: &str, message: Option<&str>, extra: Value) -> Value {
    let mut v = json!({"stage": stage, "at": ts(ctx.clock.now()), "attempt": ctx.attempt});
    if let Some(o) = v.as_object_mut() {
        if let Some(m) = message {
            o.insert("message".into(), m.into());
        }
        if let Value::Object(e) = extra {
            o.extend(e);
        }
    }
    v
}

/// Whether the attempt was stopped by an operator's cancel (rather than a shutdown, a
/// timeout or a lost lease), as the worker's stop signal says. A context with no queue behind
/// it (a test's) counts a bare cancellation as an operator's; an executor's inline call
/// (a host, no worker) does not.
pub async fn operator_cancelled(ctx: &ToolContext) -> bool {
    match ctx.stop_reason() {
        Some(reason) => reason == StopReason::Cancel,
        None => ctx.host.is_none(),
    }
}

/// Stages after which an operation is over and a new attempt (`toolq retry`) starts a new one.
/// `completed` is not among them: an attempt that saw the end but died before recording it
/// resumes and sees the end again, instead of doing the work twice.
const ENDED_STAGES: [&str; 2] = ["failed", "cancelled"];

/// What the run's stored record says about its operation.
#[derive(Debug, Default)]
struct Stored {
    /// Its last stage says it failed or was cancelled: the attempt is a retry, which means a
    /// new operation, not a resume of the ended one.
    ended: bool,
    /// The attempt resumes a suspension (the wait for the operation's next check): the
    /// operation goes on where it was, so no `resumed` stage.
    after_wait: bool,
    /// The last stage entered (so a stage still current is not entered again).
    last: Option<String>,
}

/// Reads the run's stage history. Unknown (no host, or the read failed): resuming, which
/// never starts a second operation.
async fn stored(ctx: &ToolContext) -> Stored {
    let Some(host) = &ctx.host else {
        return Stored::default();
    };
    match host.run(&ctx.run_id).await {
        Ok(run) => {
            let last = run
                .stages
                .as_array()
                .and_then(|s| s.last())
                .and_then(|s| s["stage"].as_str())
                .map(str::to_string);
            Stored {
                ended: last.as_deref().is_some_and(|s| ENDED_STAGES.contains(&s)),
                after_wait: run.resumed,
                last,
            }
        }
        Err(_) => Stored::default(),
    }
}

/// Shows a progress item as the live status and progress; enters it in the stage history
/// only when its stage differs from `last` (the stage entered before), which it then becomes.
fn record_progress(
    ctx: &ToolContext,
    last: &mut Option<String>,
    stage: &str,
    message: String,
    progress: Option<f64>,
) {
    let name = stage.to_string();
    ctx.sink.status(message.clone());
    if let Some(p) = progress {
        ctx.sink.progress(Progress {
            current: p,
            total: Some(1.0),
            unit: None,
            label: Some(name.clone()),
        });
    }
    if last.as_ref() != Some(&name) {
        let extra = progress.map_or(json!({}), |p| json!({"progress": p}));
        ctx.sink
            .stage(stage_record(ctx, &name, Some(&message), extra));
        *last = Some(name);
    }
}

/// How one status stream ended.
enum Followed {
    /// The run's outcome.
    Done(ToolOutcome),
    /// Check again after this long.
    Later(std::time::Duration),
}

impl<T: AsyncTool> AsyncAdapter<T> {
    /// Follows the operation to its end. `last` is the stage it is known to be in already.
    /// Between checks asked for with [`ToolStatus::CheckAgainIn`] the run is suspended (this
    /// future is then dropped by the worker and the run resumes in a later invocation), or,
    /// with no queued run, this waits.
    async fn follow(&self, ctx: &ToolContext, op: &str, mut last: Option<String>) -> ToolOutcome {
        loop {
            let d = match self.follow_stream(ctx, op, &mut last).await {
                Followed::Done(outcome) => return outcome,
                Followed::Later(d) => d,
            };
            let until = crate::clock::saturating_add(
                ctx.clock.now(),
                chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX),
            )
            .min(crate::run::steps::far_future());
            // The operation id reaches the database before the suspension is recorded: the
            // worker writes the sink's pending operation when the attempt ends, under the
            // lease, before its end (so the next invocation resumes instead of executing).
            if ctx.durable.suspend_for(WaitKind::Check, until).await {
                // A recording journal never gets here: the worker drops this future.
                return ToolOutcome::Internal(format!(
                    "operation {op}: the suspension until its next check was not taken"
                ));
            }
            ctx.sink.status(format!(
                "checking operation {op} again in {}",
                crate::clock::format_duration(d)
            ));
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = ctx.cancel.cancelled() => return self.stopped(ctx, op).await,
            }
        }
    }

    /// Reads one status stream until it ends the operation or asks for a later check.
    async fn follow_stream(
        &self,
        ctx: &ToolContext,
        op: &str,
        last: &mut Option<String>,
    ) -> Followed {
        let stream = self.0.check_status(ctx, op);
        let mut stream = std::pin::pin!(stream);
        // The history gets one record per stage entered; a stage repeated with new messages
        // or progress moves only the live status and progress (a poll loop would otherwise
        // grow the history without bound).
        loop {
            let item = tokio::select! {
                item = stream.next() => item,
                _ = ctx.cancel.cancelled() => return Followed::Done(self.stopped(ctx, op).await),
            };
            match item {
                Some(ToolStatus::Progress {
                    stage,
                    message,
                    progress,
                }) => record_progress(ctx, last, stage.as_str(), message, progress),
                Some(ToolStatus::Completed(success)) => {
                    ctx.sink
                        .stage(stage_record(ctx, "completed", None, json!({})));
                    return Followed::Done(ToolOutcome::Success(success));
                }
                Some(ToolStatus::Failed(error)) => {
                    ctx.sink
                        .stage(stage_record(ctx, "failed", Some(&error), json!({})));
                    return Followed::Done(ToolOutcome::ToolError(error));
                }
                Some(ToolStatus::CheckAgainIn(d)) => return Followed::Later(d),
                None => {
                    return Followed::Done(ToolOutcome::Internal(format!(
                        "check_status of operation {op} ended without Completed or Failed"
                    )));
                }
            }
        }
    }

    async fn stopped(&self, ctx: &ToolContext, op: &str) -> ToolOutcome {
        if operator_cancelled(ctx).await {
            self.0.cancel(ctx, op).await;
            ctx.sink
                .stage(stage_record(ctx, "cancelled", None, json!({})));
            return ToolOutcome::tool_error(format!("operation {op} cancelled"));
        }
        ctx.sink
            .stage(stage_record(ctx, "detached", None, json!({})));
        ToolOutcome::tool_error(format!(
            "stopped watching operation {op}; it keeps running and the next attempt resumes it"
        ))
    }
}

#[async_trait]
impl<T: AsyncTool> Tool for AsyncAdapter<T> {
    fn definition(&self) -> ToolDef {
        self.0.definition()
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        if let Some(op) = ctx.operation_id.clone() {
            let stored = stored(&ctx).await;
            if !stored.ended {
                if stored.after_wait {
                    // The next check after a wait: the operation goes on where it was.
                    ctx.sink.set_operation(op.clone(), None);
                    return self.follow(&ctx, &op, stored.last).await;
                }
                ctx.sink.set_operation(
                    op.clone(),
                    Some(stage_record(&ctx, "resumed", None, json!({}))),
                );
                return self.follow(&ctx, &op, None).await;
            }
        }
        // Not raced against a stop: an operation that started must get its id stored (and,
        // on an operator's cancel, be cancelled by `follow`).
        match self.0.execute(&ctx, ctx.args.clone()).await {
            Err(e) => ToolOutcome::internal(&*e),
            Ok(AsyncOutcome::Success(s)) => ToolOutcome::Success(s),
            Ok(AsyncOutcome::Failed(e)) => ToolOutcome::ToolError(e),
            Ok(AsyncOutcome::InProgress {
                operation_id,
                message,
            }) => {
                ctx.sink.status(message.clone());
                // Stored at the sink's next flush, which the sink asks for at once.
                ctx.sink.set_operation(
                    operation_id.clone(),
                    Some(stage_record(&ctx, "started", Some(&message), json!({}))),
                );
                self.follow(&ctx, &operation_id, None).await
            }
        }
    }

    fn format_message(&self, draft: &crate::inbox::NewMessage) -> Option<String> {
        self.0.format_message(draft)
    }
}
