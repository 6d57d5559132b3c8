//! # toolq
//!
//! A durable job-queue worker for **tool runs**, backed by one SQLite file.
//!
//! ## Flow
//! - **Enqueue** ([`Client::enqueue`], `toolq enqueue`, a schedule firing): the tool must exist
//!   and the args match its JSON schema *before* anything is written; an idempotency key that
//!   exists returns the existing run (with other args it is an error), and a unique enqueue
//!   ([`Unique`]) returns a run of the same tool and args in the given states and period.
//! - **Claim** ([`Worker`]): one short `BEGIN IMMEDIATE` transaction picks runnable runs by
//!   priority then age, sharing slots fairly between sessions, honouring the per-worker,
//!   per-session and per-tool limits (`max_running`, `rate`; counted in the database) and the
//!   pauses, and leases them with a fresh token.
//! - **Execute**: each run in its own task, under a timeout and a cancellation signal; a panic
//!   fails that run as an internal error. The tool reports through a [`tool::RunSink`].
//! - **Record**: the run's final state, its log and result blobs and its inbox message are
//!   written in one transaction, fenced by (run, attempt, lease token), batched across runs.
//! - **Rescue** ([`worker::rescue`]): every poll interval (and at start) a worker takes back the
//!   runs of dead workers on its host (pid gone or reused) and of expired leases: re-queued
//!   with backoff while attempts remain, else failed "worker lost"; fenced like a finish.
//!
//! ## Modules
//! The library's front door, all `impl Client`:
//! - [`client`]: open a database, enqueue, inspect, cancel, retry, pause and resume, inbox,
//!   logs and results;
//!   every way a run ends goes through one end-writer.
//! - [`approval`]: approve, deny, expire (tools that require an operator's decision).
//! - [`schedule`]: cron and one-shot schedules, their firing plan and the schedule tick.
//! - [`retention`]: pruning old finished work in bounded batches.
//! - [`bulk`]: cancel and retry every run a filter matches, in bounded batches.
//! - [`status`]: worker liveness and the health check; [`metrics`]: Prometheus counters and
//!   gauges, and their HTTP endpoint.
//!
//! The machinery:
//! - [`worker`]: claim, execute, finisher, leases, rescue, and the background ticks.
//! - [`tool`]: the [`Tool`] trait, the registry, built-ins and command tools, the run sink.
//! - `store` (internal): the engine contract (`trait Engine`: named operations, each its
//!   own transaction, plain types in and out, and a change feed) and today's SQLite engine.
//!   docs/architecture.md lists the operations and the invariants each keeps.
//!
//! Shared types and pure decisions: [`run`] (runs, states, how an attempt ends), [`flow`]
//! (pauses, per-tool limits and the rate window), [`inbox`]
//! (messages and their texts), [`ids`], [`config`], [`error`], and [`clock`], the only reader
//! of the wall clock. `cli` (internal) is the operator commands over the library.
//!
//! Only `store` names the database engine; nothing above it sees a connection, a transaction
//! or an engine error type (see docs/architecture.md for the import rules).
//!
//! Execution is at-least-once; recording is exactly-once.

pub mod approval;
pub mod bulk;
#[doc(hidden)]
pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod db_url;
pub mod error;
pub mod flow;
pub mod ids;
pub mod inbox;
pub mod metrics;
pub mod retention;
pub mod run;
pub mod schedule;
pub mod status;
#[doc(hidden)]
pub mod store;
pub mod tool;
pub mod web;
pub mod worker;

pub use bulk::{BulkAction, BulkAnswer, BulkOptions, BulkReport};
pub use client::{Client, EnqueueRequest, Enqueued};
pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use config::Config;
pub use error::{Error, InputError, Result};
pub use ids::{RunId, ScheduleId, WorkerId};
pub use run::{Delivery, Progress, Run, RunAnswer, RunFilter, RunState, Unique, UniqueBy};
pub use schedule::{MissedPolicy, OverlapPolicy, Schedule, ScheduleDetail, ScheduleRequest};
#[doc(hidden)]
pub use store::sqlite::Store;
pub use tool::{
    Registry, RegistryBuilder, RunSink, Tool, ToolContext, ToolDef, ToolOutcome, TypedTool,
};
pub use worker::{Worker, WorkerOptions, WorkerReport};
