//! Inline execution for agent hosts (the seed's `ToolExecutor` trait, implemented by
//! [`BasicToolExecutor`] over the client's registry): `specs`, `execute` and
//! `execute_approved`. A Standard tool runs in the caller's task and its outcome is returned; a
//! Background tool is queued for the session and its acknowledgement returned at once. A tool
//! whose policy (or `[approvals] require`) needs approval is not run: the call returns
//! [`ToolExecutionOutcome::Interrupted`] and the host retries with `execute_approved`.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::registry::Entry;
use super::sink::SinkLimits;
use super::{Acknowledgement, DefaultResultFormatter, ResultFormatter, ToolContext, ToolDef};
use super::{RunSink, ToolOutcome, ToolPolicy};
use crate::client::{Client, EnqueueRequest};
use crate::ids::{RunId, validate_session};
use crate::store::RunApprove;

/// One tool call from the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolRequest {
    /// The model's id for the call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments (checked against the tool's schema).
    pub args: Value,
}

impl ToolRequest {
    /// A call of `tool` with `args`.
    pub fn new(call_id: impl Into<String>, tool: impl Into<String>, args: Value) -> Self {
        Self {
            call_id: call_id.into(),
            tool: tool.into(),
            args,
        }
    }
}

/// A call that waits for the user's approval; pass it back to
/// [`ToolExecutor::execute_approved`] once approved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalRequest {
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments to approve.
    pub args: Value,
    /// Why approval is needed.
    pub reason: String,
}

/// How a call ended.
#[derive(Debug, Clone)]
pub enum ToolExecutionOutcome {
    /// It ran (or, for a background tool, was queued: the outcome is its acknowledgement).
    Completed(ToolOutcome),
    /// It needs approval first; nothing ran.
    Interrupted(ApprovalRequest),
}

/// Who is calling: the session (background runs and their messages belong to it), who
/// approves, and a token that cancels an inline call.
#[derive(Debug, Clone)]
pub struct ExecContext {
    /// The calling session.
    pub session: String,
    /// Recorded as the approver of approved background runs.
    pub approved_by: String,
    /// Cancels an inline call (the tool sees it as `ctx.cancel`).
    pub cancel: CancellationToken,
}

impl ExecContext {
    /// A context for `session`; approvals are recorded as by "host".
    pub fn new(session: impl Into<String>) -> Self {
        Self {
            session: session.into(),
            approved_by: "host".into(),
            cancel: CancellationToken::new(),
        }
    }
}

/// The seed's executor contract, for hosts that wrap or replace toolq's executor.
#[async_trait::async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Every available tool's definition.
    fn specs(&self) -> Vec<ToolDef>;

    /// Looks up the tool, checks the arguments and the approval rules, and runs it.
    async fn execute(&self, request: ToolRequest, ctx: &ExecContext) -> ToolExecutionOutcome;

    /// Runs a call that was interrupted for approval. The default ignores the approval and
    /// calls [`ToolExecutor::execute`]; [`BasicToolExecutor`] skips the gate for that call.
    async fn execute_approved(
        &self,
        request: ToolRequest,
        approval: &ApprovalRequest,
        ctx: &ExecContext,
    ) -> ToolExecutionOutcome {
        let _ = approval;
        self.execute(request, ctx).await
    }
}

/// Runs a host's tool calls over a client's registry (`client.executor()`).
#[derive(Debug, Clone)]
pub struct BasicToolExecutor {
    client: Client,
}

impl Client {
    /// An executor over this client's tools.
    pub fn executor(&self) -> BasicToolExecutor {
        BasicToolExecutor {
            client: self.clone(),
        }
    }
}

#[async_trait::async_trait]
impl ToolExecutor for BasicToolExecutor {
    fn specs(&self) -> Vec<ToolDef> {
        BasicToolExecutor::specs(self)
    }

    async fn execute(&self, request: ToolRequest, ctx: &ExecContext) -> ToolExecutionOutcome {
        BasicToolExecutor::execute(self, request, ctx).await
    }

    async fn execute_approved(
        &self,
        request: ToolRequest,
        approval: &ApprovalRequest,
        ctx: &ExecContext,
    ) -> ToolExecutionOutcome {
        BasicToolExecutor::execute_approved(self, request, approval, ctx).await
    }
}

// Inherent methods too, so a host needs no trait import.
impl BasicToolExecutor {
    /// Every tool's definition, sorted by name.
    pub fn specs(&self) -> Vec<ToolDef> {
        self.client.registry().tool_definitions()
    }

    /// Checks the call, stops it for approval when the tool needs one, otherwise runs it.
    pub async fn execute(&self, request: ToolRequest, ctx: &ExecContext) -> ToolExecutionOutcome {
        let entry = match self.check(&request, ctx) {
            Ok(entry) => entry,
            Err(outcome) => return ToolExecutionOutcome::Completed(outcome),
        };
        if let Some(reason) = self.approval_reason(entry) {
            return ToolExecutionOutcome::Interrupted(ApprovalRequest {
                call_id: request.call_id,
                tool: request.tool,
                args: request.args,
                reason,
            });
        }
        ToolExecutionOutcome::Completed(self.run(entry, request, ctx, false).await)
    }

    /// Runs a call the user approved. The approval must be for this very call (id, tool and
    /// arguments); a background run is queued already approved, so no worker asks again.
    pub async fn execute_approved(
        &self,
        request: ToolRequest,
        approval: &ApprovalRequest,
        ctx: &ExecContext,
    ) -> ToolExecutionOutcome {
        if approval.call_id != request.call_id
            || approval.tool != request.tool
            || approval.args != request.args
        {
            return ToolExecutionOutcome::Completed(ToolOutcome::tool_error(format!(
                "the approval is for call {} of {}, not for call {} of {} with these arguments",
                approval.call_id, approval.tool, request.call_id, request.tool
            )));
        }
        let entry = match self.check(&request, ctx) {
            Ok(entry) => entry,
            Err(outcome) => return ToolExecutionOutcome::Completed(outcome),
        };
        ToolExecutionOutcome::Completed(self.run(entry, request, ctx, true).await)
    }

    fn check(&self, request: &ToolRequest, ctx: &ExecContext) -> Result<&Entry, ToolOutcome> {
        validate_session(&ctx.session).map_err(|e| ToolOutcome::tool_error(e.to_string()))?;
        self.client
            .registry()
            .validate(&request.tool, &request.args)
            .map_err(|e| ToolOutcome::tool_error(e.to_string()))
    }

    /// Same rule as the queue's gate: the tool's policy or `[approvals] require`.
    fn approval_reason(&self, entry: &Entry) -> Option<String> {
        let by_config = self
            .client
            .config()
            .approvals
            .require
            .contains(&entry.def.name);
        (entry.def.policy == ToolPolicy::RequiresApproval || by_config)
            .then(|| format!("tool {} requires approval", entry.def.name))
    }

    async fn run(
        &self,
        entry: &Entry,
        request: ToolRequest,
        ctx: &ExecContext,
        approved: bool,
    ) -> ToolOutcome {
        if entry.mode.is_background() {
            let needs_approval = approved && self.approval_reason(entry).is_some();
            return self.enqueue(entry, request, ctx, needs_approval).await;
        }
        let tool_ctx = ToolContext {
            run_id: RunId::generate(),
            session_id: ctx.session.clone(),
            title: entry.def.display_name.clone(),
            args: request.args,
            attempt: 1,
            sink: RunSink::new(SinkLimits::default()),
            cancel: ctx.cancel.child_token(),
            stop: super::StopSignal::default(),
            operation_id: None,
            host: Some(std::sync::Arc::new(self.client.core().clone())),
            clock: self.client.clock().clone(),
            durable: crate::tool::Durable::none(),
        };
        let cancel = tool_ctx.cancel.clone();
        let limit = entry
            .def
            .timeout
            .unwrap_or(self.client.config().runs.timeout);
        inline(entry.tool.clone(), tool_ctx, cancel, limit).await
    }

    async fn enqueue(
        &self,
        entry: &Entry,
        request: ToolRequest,
        ctx: &ExecContext,
        preapprove: bool,
    ) -> ToolOutcome {
        let mut req = EnqueueRequest::new(request.tool, request.args).session(ctx.session.clone());
        req.delivery = entry.mode.delivery();
        let row = match self.client.prepare(&req) {
            Ok(row) => row,
            Err(e) => return ToolOutcome::tool_error(e.to_string()),
        };
        let ack = Acknowledgement {
            run_id: row.id.clone(),
            title: row.title.clone(),
            tool: row.tool.clone(),
            signal_on_completion: row.signal_on_completion,
        };
        let (by, now) = (ctx.approved_by.clone(), self.client.now());
        let approval = preapprove.then(|| RunApprove {
            id: row.id.clone(),
            by,
            note: Some("approved by the host before it was queued".into()),
            now,
        });
        // A background run of the session, under spawn_background's limits.
        let written = self
            .client
            .core()
            .insert_background(row, None, approval)
            .await;
        match written {
            Ok(Ok(_)) => {}
            Ok(Err(message)) => return ToolOutcome::tool_error(message),
            Err(e) => return ToolOutcome::internal(&e),
        }
        let value = match entry.mode.formatter() {
            Some(f) => f.acknowledgement(&ack),
            None => DefaultResultFormatter.acknowledgement(&ack),
        };
        ToolOutcome::ok(value)
    }
}

/// Runs a tool in its own task, so a panic becomes an internal error and a timeout cancels it.
async fn inline(
    tool: std::sync::Arc<dyn super::Tool>,
    ctx: ToolContext,
    cancel: CancellationToken,
    limit: Duration,
) -> ToolOutcome {
    let mut task = tokio::spawn(async move { tool.call(ctx).await });
    match tokio::time::timeout(limit, &mut task).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) if e.is_panic() => ToolOutcome::Internal(format!("tool panicked: {e}")),
        Ok(Err(e)) => ToolOutcome::internal(&e),
        Err(_) => {
            cancel.cancel();
            task.abort();
            ToolOutcome::tool_error(format!(
                "timed out after {}",
                crate::clock::format_duration(limit)
            ))
        }
    }
}
