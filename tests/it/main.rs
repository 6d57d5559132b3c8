//! Integration tests: real SQLite files in temp dirs, real workers, real child processes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[allow(dead_code, reason = "shared helpers; each test module uses a subset")]
mod support;

mod approvals;
mod async_ops;
mod bulk;
mod checkpoints;
mod cli;
mod cli_output;
mod cli_tools;
mod crash;
mod custom_cli;
mod ends;
mod enqueue;
mod faults;
mod finish;
mod http;
mod leases;
mod limits;
mod manifest;
mod migrate;
mod open;
mod ops;
mod output;
mod retries;
mod routing;
mod schedule_cli;
mod schedules;
mod shutdown;
mod spawn_background;
mod status;
mod tools;
mod typed_tools;
mod wakeup;
mod workers;
