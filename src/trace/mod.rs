//! OpenTelemetry traces (off by default): the exporter's setup and shutdown ([`init`]), the
//! W3C `traceparent` a run carries ([`traceparent`]), and the span helpers the enqueue, worker
//! and durable-step code call ([`Span`]). With tracing off every helper returns at its first
//! check, before it allocates anything.

mod client;
mod setup;
mod spans;
pub mod traceparent;

pub use setup::{Traces, init};
pub use spans::{Parent, Span, within};

/// Span names, one per stage of a run (what trace viewers list).
pub mod names {
    /// Inserting runs (a call of enqueue, one span for a batch).
    pub const ENQUEUE: &str = "toolq.enqueue";
    /// A worker claiming a run.
    pub const CLAIM: &str = "toolq.claim";
    /// One invocation of the run's tool.
    pub const EXECUTE: &str = "toolq.execute";
    /// One recorded step (`ctx.step`) that ran.
    pub const STEP: &str = "toolq.step";
    /// One durable wait (sleep, event, children) until it resolved or suspended the run.
    pub const WAIT: &str = "toolq.wait";
    /// Recording the attempt's end.
    pub const END: &str = "toolq.end";
}
