//! Executing one attempt: the tool's future runs inside the attempt's task with its panics
//! caught (a panic ends that attempt only), under a timeout and a cancellation signal, and is
//! dropped after a grace period if it ignores them.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::finish::AttemptEnd;
pub use crate::tool::stop::{StopReason, StopSignal};
use crate::tool::{Tool, ToolContext};

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
    suspend: crate::tool::durable::SuspendSignal,
) -> Executed {
    let tool_cancel = ctx.cancel.clone();
    // Polled in this task rather than spawned: a second task per run cost a spawn and a
    // cross-task wake-up on the path between a claim and the next commit.
    let mut call = CatchPanic(tool.call(ctx));
    let early = tokio::select! {
        // The tool first: one that is done at its first poll never arms the timeout's timer.
        biased;
        returned = &mut call => return Executed::End(returned_end(returned)),
        // The tool waits durably: it is parked in its wait, so its future is dropped now
        // (no grace), and the run resumes in a later invocation.
        req = suspend.requested() => return Executed::End(AttemptEnd::Suspended(req)),
        _ = tokio::time::sleep(timeout) => {
            stop.note(StopReason::TimedOut);
            Executed::End(AttemptEnd::TimedOut(timeout))
        }
        _ = stop.stopped() => match stop.reason() {
            Some(StopReason::Shutdown) => Executed::HandBack,
            _ => Executed::End(AttemptEnd::Cancelled),
        },
    };
    // Ask the tool to stop, give it the grace period, then drop its future (the abort).
    tool_cancel.cancel();
    if tokio::time::timeout(grace, &mut call).await.is_err() {
        drop(call);
        tracing::warn!(
            "tool ignored its cancellation for {}; aborted",
            crate::clock::format_duration(grace)
        );
    }
    early
}

/// A tool's boxed future whose panics come out as `Err(payload)` instead of unwinding
/// through the worker. It is never polled again after it panicked: the caller stops at the
/// first `Ready`.
struct CatchPanic<F: ?Sized>(Pin<Box<F>>);

impl<F: Future + ?Sized> Future for CatchPanic<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

fn returned_end(returned: Result<crate::tool::ToolOutcome, Box<dyn Any + Send>>) -> AttemptEnd {
    match returned {
        Ok(outcome) => AttemptEnd::Returned(outcome),
        Err(payload) => AttemptEnd::Panicked(
            payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic with a non-text payload".into()),
        ),
    }
}
