//! # toolq
//!
//! A durable job-queue worker for **tool runs**, backed by one SQLite file.
//!
//! ## Flow
//! - **Enqueue** ([`Client::enqueue`], `toolq enqueue`, a schedule firing): the tool must exist
//!   and the args match its JSON schema *before* anything is written; an idempotency key that
//!   exists returns the existing run.
//! - **Claim** ([`Worker`]): one short `BEGIN IMMEDIATE` transaction picks runnable runs by
//!   priority then age, sharing slots fairly between sessions, honouring the per-worker and
//!   per-session limits (counted in the database), and leases them with a fresh token.
//! - **Execute**: each run in its own task, under a timeout and a cancellation signal; a panic
//!   fails that run as an internal error. The tool reports through a [`tool::RunSink`].
//! - **Record**: the run's final state, its log and result blobs and its inbox message are
//!   written in one transaction, fenced by (run, attempt, lease token), batched across runs.
//! - **Rescue** ([`worker::rescue`]): every poll interval (and at start) a worker takes back the
//!   runs of dead workers on its host (pid gone or reused) and of expired leases: re-queued
//!   with backoff while attempts remain, else failed "worker lost"; fenced like a finish.
//!
//! ## Layers
//! `store` holds all SQL; `tool` the tool model and built-ins; `schedule` cron and time zones;
//! `worker` claim/execute/lease/finish; `cli` the operator commands. Only [`clock`] reads the
//! wall clock.
//!
//! Execution is at-least-once; recording is exactly-once.

pub mod approval;
pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod error;
pub mod ids;
pub mod inbox;
pub mod metrics;
pub mod retention;
pub mod run;
pub mod schedule;
pub mod status;
pub mod store;
pub mod tool;
pub mod wal;
pub mod worker;

pub use client::{Client, EnqueueRequest, Enqueued};
pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use config::Config;
pub use error::{Error, InputError, Result};
pub use ids::{RunId, ScheduleId, WorkerId};
pub use run::{Delivery, Progress, Run, RunState};
pub use schedule::{MissedPolicy, OverlapPolicy, Schedule, ScheduleDetail, ScheduleRequest};
pub use store::Store;
pub use tool::{
    Registry, RegistryBuilder, RunSink, Tool, ToolContext, ToolDef, ToolOutcome, TypedTool,
};
pub use worker::{Worker, WorkerOptions, WorkerReport};
