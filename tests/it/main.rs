//! Integration tests: real SQLite files in temp dirs, real workers, real child processes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[allow(dead_code, reason = "shared helpers; each test module uses a subset")]
mod support;

mod approvals;
mod async_ops;
mod bulk;
mod checkpoints;
mod cli;
mod cli_tools;
mod crash;
mod ends;
mod enqueue;
mod finish;
mod http;
mod leases;
mod limits;
mod migrate;
mod ops;
mod retries;
mod routing;
mod schedule_cli;
mod schedules;
mod shutdown;
mod spawn_background;
mod status;
mod tools;
mod wakeup;
mod workers;
