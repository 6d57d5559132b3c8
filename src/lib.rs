//! # toolq
//!
//! A durable job-queue worker for **tool runs**, on one SQLite file (the default) or a
//! Postgres server that many worker hosts share.
//!
//! ## Flow
//! - **Enqueue** ([`Client::enqueue`], `toolq enqueue`, a schedule firing): the tool must exist
//!   and the args match its JSON schema *before* anything is written; an idempotency key that
//!   exists returns the existing run (with other args it is an error), and a unique enqueue
//!   ([`Unique`]) returns a run of the same tool and args in the given states and period.
//! - **Claim** ([`Worker`]): one short write transaction picks runnable runs by priority then
//!   age, sharing slots fairly between sessions, honouring the per-worker, per-session and
//!   per-tool limits (`max_running`, `rate`; counted in the database) and the pauses, and
//!   leases them with a fresh token.
//! - **Execute**: each run in its own task, under a timeout and a stop signal; a panic fails
//!   that run as an internal error. The tool reports through a [`tool::RunSink`] and reaches
//!   the queue through a narrow [`tool::ToolHost`].
//! - **Record**: the run's final state, its log and result blobs and its inbox message are
//!   written in one transaction, fenced by (run, attempt, lease token), batched across runs.
//! - **Rescue** ([`worker::rescue`]): every poll interval (and at start) a worker takes back the
//!   runs of dead workers on its host (pid gone or reused) and of expired leases: re-queued
//!   with backoff while attempts remain, else failed "worker lost"; fenced like a finish.
//!
//! ## Modules, by layer (docs/architecture.md; `tests/it/architecture.rs` enforces them)
//! - The facade: [`client`] ([`Client`]: open a database, enqueue, inspect, cancel, retry,
//!   approve and deny, pause and resume, schedules, bulk actions, pruning, inbox, logs and
//!   results), [`status`] (worker liveness, the health check), [`tool::executor`] (an agent
//!   host's tool calls), `metrics::serve`. The dashboard ([`web`]) and the CLI (`cli`,
//!   internal) sit on top of it.
//! - What runs: [`worker`] (claim, execute, finisher, leases, rescue and the background
//!   ticks), `schedule::tick`, [`metrics`] (Prometheus counters and gauges).
//! - [`core`]: below all of those. It holds the engine, the registry, the configuration, the
//!   clock and the wake-ups, validates and inserts runs, creates schedules, prunes, expires
//!   approvals, and is the one place that turns a decided end into what the engine writes.
//! - `store` (internal): the engine contract (`trait Engine`: named operations, each its own
//!   transaction, plain types in and out, and a change feed), the plans both engines share,
//!   and the SQLite and Postgres engines. docs/architecture.md lists the operations and the
//!   invariants each keeps.
//! - [`tool`]: the [`Tool`] trait, the registry, built-ins and command tools, the run sink, the
//!   tools' handle; [`approval`]: which runs wait for an operator's decision.
//! - Shared types and pure decisions: [`run`] (runs, states, how a waiting run ends),
//!   [`flow`] (pauses, per-tool limits and the rate window), [`inbox`] (messages and their
//!   texts), [`schedule`] (cron, one-shot times, the firing plan), [`retention`], [`bulk`],
//!   [`ids`], [`config`], [`error`], [`db_url`], and [`clock`], the only reader of the wall
//!   clock.
//!
//! Only `store` names a database driver; nothing above it sees a connection, a transaction
//! or a driver error type.
//!
//! Execution is at-least-once; recording is exactly-once.

pub mod approval;
pub mod bulk;
#[doc(hidden)]
pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod core;
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
pub mod trace;
pub mod web;
pub mod worker;

pub use bulk::{BulkAction, BulkAnswer, BulkOptions, BulkReport};
pub use client::{Client, EnqueueRequest, Enqueued};
pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use config::Config;
pub use core::events::Signalled;
pub use core::{BatchCreated, BatchRequest, OnComplete};
pub use error::{Error, InputError, Result};
pub use ids::{BatchId, RunId, ScheduleId, WorkerId};
pub use run::{
    Delivery, Journal, Progress, Run, RunAnswer, RunEvent, RunFilter, RunState, StepRecord, Tags,
    Unique, UniqueBy, WaitKind, Waiting,
};
pub use schedule::{MissedPolicy, OverlapPolicy, Schedule, ScheduleDetail, ScheduleRequest};
#[doc(hidden)]
pub use store::sqlite::Store;
pub use tool::{
    Registry, RegistryBuilder, RunSink, StepError, Tool, ToolContext, ToolDef, ToolOutcome,
    TypedTool,
};
pub use worker::{Worker, WorkerOptions, WorkerReport};
