//! Why a running tool is asked to stop. The worker sets the reason before it cancels the
//! tool's token, so a tool learns whether an operator cancelled it (or the worker is shutting
//! down, lost the lease, or the time limit passed) without reading the database.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// Why the worker asks a tool to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// An operator cancelled the run.
    Cancel,
    /// The worker is shutting down or lost the run's lease: the run goes back to the queue.
    Shutdown,
    /// The attempt's time limit passed.
    TimedOut,
}

/// Signals from the worker to one attempt: a token that fires once, and the first reason.
#[derive(Debug, Clone, Default)]
pub struct StopSignal {
    token: CancellationToken,
    reason: Arc<std::sync::Mutex<Option<StopReason>>>,
}

impl StopSignal {
    /// Asks the attempt to stop for `reason` (the first reason wins).
    pub fn stop(&self, reason: StopReason) {
        self.note(reason);
        self.token.cancel();
    }

    /// Records `reason` (if none is yet) without firing the token: the worker stops the
    /// tool through its own token afterwards.
    pub fn note(&self, reason: StopReason) {
        let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        r.get_or_insert(reason);
    }

    /// The reason, once stopped.
    pub fn reason(&self) -> Option<StopReason> {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves once [`StopSignal::stop`] was called.
    pub async fn stopped(&self) {
        self.token.cancelled().await
    }
}
