//! Executing one attempt: the tool runs in its own task (a panic stays there), under a
//! timeout and a cancellation signal, and is aborted after a grace period if it ignores them.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::finish::AttemptEnd;
use crate::tool::{Tool, ToolContext};

/// Why the worker asks a tool to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// An operator cancelled the run.
    Cancel,
    /// The worker is shutting down: hand the run back.
    Shutdown,
}

/// Signals from the worker to one attempt.
#[derive(Debug, Clone, Default)]
pub struct StopSignal {
    token: CancellationToken,
    reason: Arc<std::sync::Mutex<Option<StopReason>>>,
}

impl StopSignal {
    /// Asks the attempt to stop for `reason` (the first reason wins).
    pub fn stop(&self, reason: StopReason) {
        let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        r.get_or_insert(reason);
        drop(r);
        self.token.cancel();
    }

    /// The reason, once stopped.
    pub fn reason(&self) -> Option<StopReason> {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How an execution ended: either a normal attempt end, or handed back on shutdown.
#[derive(Debug)]
pub enum Executed {
    /// Record this end.
    End(AttemptEnd),
    /// Give the run back to the queue without counting the attempt.
    HandBack,
}

/// Runs the tool until it returns, times out, or is stopped.
pub async fn execute(
    tool: Arc<dyn Tool>,
    ctx: ToolContext,
    timeout: Duration,
    grace: Duration,
    stop: StopSignal,
) -> Executed {
    let tool_cancel = ctx.cancel.clone();
    let mut handle = tokio::spawn(async move { tool.call(ctx).await });
    let early = tokio::select! {
        joined = &mut handle => return Executed::End(joined_end(joined)),
        _ = tokio::time::sleep(timeout) => Executed::End(AttemptEnd::TimedOut(timeout)),
        _ = stop.token.cancelled() => match stop.reason() {
            Some(StopReason::Shutdown) => Executed::HandBack,
            _ => Executed::End(AttemptEnd::Cancelled),
        },
    };
    // Ask the tool to stop, give it the grace period, then abort it.
    tool_cancel.cancel();
    if tokio::time::timeout(grace, &mut handle).await.is_err() {
        handle.abort();
        tracing::warn!("tool ignored its cancellation for {grace:?}; aborted");
    }
    early
}

fn joined_end(joined: Result<crate::tool::ToolOutcome, tokio::task::JoinError>) -> AttemptEnd {
    match joined {
        Ok(outcome) => AttemptEnd::Returned(outcome),
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic with a non-text payload".into());
            AttemptEnd::Panicked(msg)
        }
        Err(e) => AttemptEnd::Panicked(format!("tool task ended abnormally: {e}")),
    }
}
