//! The workload's handler: records its start time, reads the payload, counts itself, succeeds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::{Notify, mpsc};
use toolq::tool::ToolHints;
use toolq::{Tool, ToolContext, ToolDef, ToolOutcome};

/// What the handler saw: how many runs started, and (when asked) each run's start time.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Inner>,
}

struct Inner {
    handled: AtomicU64,
    /// The count [`Recorder::wait_handled`] waits for: the handler wakes it only then, not on
    /// every run (a wake-up per run would measure the benchmark's waiter, not the queue).
    target: AtomicU64,
    notify: Notify,
    starts: Option<mpsc::UnboundedSender<(u64, i64)>>,
}

impl Recorder {
    /// Counts only.
    pub fn counting() -> Self {
        Self {
            inner: Arc::new(Inner {
                handled: AtomicU64::new(0),
                target: AtomicU64::new(0),
                notify: Notify::new(),
                starts: None,
            }),
        }
    }

    /// Counts and sends (payload i, CLOCK_MONOTONIC ns at start) for every run.
    pub fn timing() -> (Self, mpsc::UnboundedReceiver<(u64, i64)>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let r = Self {
            inner: Arc::new(Inner {
                handled: AtomicU64::new(0),
                target: AtomicU64::new(0),
                notify: Notify::new(),
                starts: Some(tx),
            }),
        };
        (r, rx)
    }

    /// Runs handled so far.
    pub fn handled(&self) -> u64 {
        self.inner.handled.load(Ordering::Acquire)
    }

    /// Counts run `i` as handled (waking [`Recorder::wait_handled`] at its target) and, when
    /// timing, sends its start `t1`.
    pub fn record(&self, i: u64, t1: i64) {
        if let Some(tx) = &self.inner.starts {
            // The receiver goes away only when the measurement is over.
            let _ = tx.send((i, t1));
        }
        let handled = self.inner.handled.fetch_add(1, Ordering::AcqRel) + 1;
        if handled >= self.inner.target.load(Ordering::Acquire) {
            self.inner.notify.notify_waiters();
        }
    }

    /// Waits until at least `n` runs were handled.
    pub async fn wait_handled(&self, n: u64) {
        self.inner.target.store(n, Ordering::Release);
        loop {
            let notified = self.inner.notify.notified();
            if self.handled() >= n {
                return;
            }
            notified.await;
        }
    }
}

/// The no-op tool `noop`.
pub struct Noop(pub Recorder);

/// The `noop` tool's definition (shared with the durable variants, which take its payload).
pub fn definition() -> ToolDef {
    ToolDef::new(
        "noop",
        "Benchmark no-op: records its start and returns the payload's index.",
        json!({
            "type": "object",
            "properties": {"kind": {"type": "string"}, "i": {"type": "integer"}, "pad": {"type": "string"}},
            "required": ["i"]
        }),
    )
    .hints(ToolHints {
        readonly: true,
        idempotent: true,
        supports_background: true,
    })
}

/// The payload's index `i`.
pub fn index(ctx: &ToolContext) -> Result<u64, ToolOutcome> {
    ctx.args
        .get("i")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| ToolOutcome::tool_error("payload has no integer \"i\""))
}

#[async_trait]
impl Tool for Noop {
    fn definition(&self) -> ToolDef {
        definition()
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let t1 = crate::mono_ns();
        let i = match index(&ctx) {
            Ok(i) => i,
            Err(e) => return e,
        };
        self.0.record(i, t1);
        ToolOutcome::ok(json!({"i": i}))
    }
}

/// The `noop` tool that sleeps first (a tokio sleep: its slot stays taken), then counts
/// itself: a run that waits on something outside, as most real tools do.
pub struct Sleepy(pub Recorder, pub std::time::Duration);

#[async_trait]
impl Tool for Sleepy {
    fn definition(&self) -> ToolDef {
        definition()
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let i = match index(&ctx) {
            Ok(i) => i,
            Err(e) => return e,
        };
        tokio::time::sleep(self.1).await;
        self.0.record(i, crate::mono_ns());
        ToolOutcome::ok(json!({"i": i}))
    }
}
