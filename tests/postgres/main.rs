//! The integration suite of `tests/it` on Postgres: the same modules (by `#[path]`), with
//! `support::TestDb` and `TestEnv` giving each test a fresh database on a throwaway server
//! (`support::pg`) instead of a SQLite file, plus the Postgres-only tests in this directory.
//!
//! Left out, SQLite-only by nature (so named, or their whole subject is the file):
//! `migrate` (upgrades SQLite files of older schemas), `faults` (`toolq check` and storage
//! faults on the file), `checkpoints` and `ops::wal` (the WAL), `deploy`, `manifest`,
//! `readme`, `custom_cli` and `typed_tools` (no database, or SQLite as the README's default:
//! engine-independent, they run once in `tests/it`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The engine these tests run on (see `support::TestDb`).
pub const ENGINE: support::Engine = support::Engine::Postgres;

#[allow(dead_code, reason = "shared helpers; each test module uses a subset")]
#[path = "../it/support.rs"]
mod support;

mod harness;

#[path = "../it/approvals.rs"]
mod approvals;
#[path = "../it/tools.rs"]
mod tools;
