//! The integration suite of `tests/it` on Postgres: the same modules (by `#[path]`), with
//! `support::TestDb` and `TestEnv` giving each test a fresh database on a throwaway server
//! (`support::pg`) instead of a SQLite file, plus the Postgres-only tests in this directory.
//!
//! Left out, SQLite-only by nature (so named, or their whole subject is the file):
//! `migrate` (upgrades SQLite files of older schemas), `faults` (`toolq check` and storage
//! faults on the file), `checkpoints` (the WAL), `deploy`, `manifest`,
//! `readme`, `custom_cli`, `typed_tools` and `config` (no database, or the default file of the
//! working directory: engine-independent, they run once in `tests/it`). Within shared modules,
//! tests about the SQLite file are `sqlite_only_*` (and `ops::wal`), dropped here by the
//! `sqlite_only!` macro.
//!
//! Postgres-only: `harness` (the throwaway server itself), `bad_input` (bad URL, refused
//! connection, wrong credentials, a foreign database, a newer schema), `hosts` (three worker
//! processes with different host ids on one database; a host that stops heartbeating),
//! `ticks` (three workers, one cron schedule, 20 ticks), `postgres_open` and
//! `postgres_outage` (a lost connection), `postgres_claim` (a claim against rows other
//! transactions hold), `postgres_durable` (durable runs through the engine: step
//! saves, events, suspensions), `postgres_compose` (composition on two hosts at once: a
//! batch's last two ends, a waiting parent's two children, an `--after` insert against its
//! parent's end, a child's end against its parent's step save), `postgres_tls` (sslmode and sslrootcert, on a second
//! throwaway server with TLS on). The kill -9 crash tests are the shared `crash`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The engine these tests run on (see `support::TestDb`).
pub const ENGINE: support::Engine = support::Engine::Postgres;

/// Drops the SQLite-only items (see `tests/it/main.rs`).
macro_rules! sqlite_only {
    ($($item:item)*) => {};
}

#[allow(dead_code, reason = "shared helpers; each test module uses a subset")]
#[path = "../it/support.rs"]
mod support;

mod bad_input;
mod harness;
mod hosts;
mod postgres_claim;
mod postgres_compose;
mod postgres_credentials;
mod postgres_durable;
mod postgres_inbox;
mod postgres_open;
mod postgres_outage;
mod postgres_startup;
mod postgres_tls;
mod ticks;

#[path = "../it/api.rs"]
mod api;
#[path = "../it/api_batches.rs"]
mod api_batches;
#[path = "../it/api_input.rs"]
mod api_input;
#[path = "../it/api_python.rs"]
mod api_python;
#[path = "../it/api_runs.rs"]
mod api_runs;
#[path = "../it/api_schedules.rs"]
mod api_schedules;
#[path = "../it/api_stream.rs"]
mod api_stream;
#[path = "../it/approvals.rs"]
mod approvals;
#[path = "../it/async_ops.rs"]
mod async_ops;
#[path = "../it/async_tool.rs"]
mod async_tool;
#[path = "../it/browser.rs"]
mod browser;
#[path = "../it/bulk.rs"]
mod bulk;
#[path = "../it/cli.rs"]
mod cli;
#[path = "../it/cli_input.rs"]
mod cli_input;
#[path = "../it/cli_output.rs"]
mod cli_output;
#[path = "../it/cli_tools.rs"]
mod cli_tools;
#[path = "../it/compose.rs"]
mod compose;
#[path = "../it/compose_cli.rs"]
mod compose_cli;
#[path = "../it/compose_crash.rs"]
mod compose_crash;
#[path = "../it/compose_tools.rs"]
mod compose_tools;
#[path = "../it/compose_web.rs"]
mod compose_web;
#[path = "../it/crash.rs"]
mod crash;
#[path = "../it/durable.rs"]
mod durable;
#[path = "../it/durable_cli.rs"]
mod durable_cli;
#[path = "../it/durable_crash.rs"]
mod durable_crash;
#[path = "../it/durable_race.rs"]
mod durable_race;
#[path = "../it/durable_tools.rs"]
mod durable_tools;
#[path = "../it/durable_web.rs"]
mod durable_web;
#[path = "../it/ends.rs"]
mod ends;
#[path = "../it/engine_contract/mod.rs"]
mod engine_contract;
#[path = "../it/enqueue.rs"]
mod enqueue;
#[path = "../it/examples.rs"]
mod examples;
#[path = "../it/executor.rs"]
mod executor;
#[path = "../it/finish.rs"]
mod finish;
#[path = "../it/flow.rs"]
mod flow;
#[path = "../it/http.rs"]
mod http;
#[path = "../it/leases.rs"]
mod leases;
#[path = "../it/limits.rs"]
mod limits;
#[path = "../it/open.rs"]
mod open;
#[path = "../it/ops/mod.rs"]
mod ops;
#[path = "../it/output.rs"]
mod output;
#[path = "../it/retries.rs"]
mod retries;
#[path = "../it/retry_policy.rs"]
mod retry_policy;
#[path = "../it/routing.rs"]
mod routing;
#[path = "../it/run_end_log.rs"]
mod run_end_log;
#[path = "../it/schedule_cli.rs"]
mod schedule_cli;
#[path = "../it/schedules.rs"]
mod schedules;
#[path = "../it/seed_contract.rs"]
mod seed_contract;
#[path = "../it/shutdown.rs"]
mod shutdown;
#[path = "../it/spawn_background.rs"]
mod spawn_background;
#[path = "../it/stats_size.rs"]
mod stats_size;
#[path = "../it/status.rs"]
mod status;
#[path = "../it/tags.rs"]
mod tags;
#[path = "../it/tools.rs"]
mod tools;
#[path = "../it/traces.rs"]
mod traces;
#[path = "../it/wakeup.rs"]
mod wakeup;
#[path = "../it/web.rs"]
mod web;
#[path = "../it/workers.rs"]
mod workers;
