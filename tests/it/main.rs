//! Integration tests: real SQLite files in temp dirs, real workers, real child processes.
//! `tests/postgres` runs the same modules (all but the SQLite-only ones) on Postgres.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The engine these tests run on (see `support::TestDb`).
pub const ENGINE: support::Engine = support::Engine::Sqlite;

/// Keeps items in this (SQLite) binary only: tests whose subject is the SQLite file, named
/// `sqlite_only_*`. `tests/postgres/main.rs` defines it to drop them.
macro_rules! sqlite_only {
    ($($item:item)*) => { $($item)* };
}

#[allow(dead_code, reason = "shared helpers; each test module uses a subset")]
mod support;

mod api;
mod api_batches;
mod api_input;
mod api_python;
mod api_runs;
mod api_schedules;
mod api_stream;
mod approvals;
mod architecture;
mod async_ops;
mod async_tool;
mod browser;
mod bulk;
mod checkpoints;
mod cli;
mod cli_input;
mod cli_output;
mod cli_tools;
mod compose;
mod compose_cli;
mod compose_crash;
mod compose_tools;
mod compose_web;
mod config;
mod crash;
mod custom_cli;
mod db_locations;
mod deploy;
mod durable;
mod durable_cli;
mod durable_crash;
mod durable_race;
mod durable_tools;
mod durable_web;
mod ends;
mod engine_contract;
mod enqueue;
mod examples;
mod executor;
mod faults;
mod finish;
mod flow;
mod http;
mod leases;
mod limits;
mod link_order;
mod manifest;
mod migrate;
mod open;
mod ops;
mod output;
mod readme;
mod retries;
mod retry_policy;
mod routing;
mod run_end_log;
mod schedule_cli;
mod schedules;
mod seed_contract;
mod shutdown;
mod spawn_background;
mod sqlite_build;
mod stats_size;
mod status;
mod tags;
mod tools;
mod traces;
mod typed_tools;
mod wakeup;
mod web;
mod workers;
