//! The physical limit of SQLite on this disk (WORKLOAD.md): one thread, WAL, synchronous
//! NORMAL (toolq's default), a fresh file per figure, rusqlite directly.
//!
//! `cargo run --profile dist --example sqlite_limit -- <dir> <n>` prints one JSON line:
//! insert commits/s (one INSERT per transaction), lifecycle jobs/s (insert, claim, complete,
//! each its own transaction) and batched lifecycle jobs/s (100 per transaction for each step).
//! `runs_insert_commits_per_s` is the first figure with toolq's own schema (schema.sql) and
//! row: what SQLite alone costs a one-at-a-time enqueue, with no toolq code around it.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use rusqlite::{Connection, params};
use serde_json::json;

#[path = "common/sqlite_bench.rs"]
mod common;
use common::payload;

const SCHEMA: &str = "CREATE TABLE jobs (id INTEGER PRIMARY KEY, payload TEXT NOT NULL, \
    state TEXT NOT NULL DEFAULT 'queued', owner TEXT, result TEXT); \
    CREATE INDEX jobs_queued ON jobs (id) WHERE state = 'queued';";
const INSERT: &str = "INSERT INTO jobs (payload) VALUES (?1)";
const CLAIM_ONE: &str = "UPDATE jobs SET state = 'running', owner = 'w' WHERE id = \
    (SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1) RETURNING id";
const CLAIM_MANY: &str = "UPDATE jobs SET state = 'running', owner = 'w' WHERE id IN \
    (SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT ?1) RETURNING id";
const COMPLETE: &str =
    "UPDATE jobs SET state = 'done', result = '{}' WHERE id = ?1 AND state = 'running'";

fn fresh(dir: &Path, name: &str) -> rusqlite::Result<Connection> {
    let c = common::fresh_wal(dir, name)?;
    c.execute_batch(SCHEMA)?;
    Ok(c)
}

fn inserts(dir: &Path, n: usize) -> rusqlite::Result<f64> {
    let c = fresh(dir, "limit-insert.db")?;
    let t = Instant::now();
    for i in 0..n {
        let tx = c.unchecked_transaction()?;
        tx.prepare_cached(INSERT)?.execute([payload(i)])?;
        tx.commit()?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// toolq's enqueue INSERT (src/store/sqlite/runs.rs) with a workload job's values.
const RUNS_INSERT: &str = "INSERT INTO runs (id, session_id, tool, args, title, state, priority, \
    max_attempts, run_at, created_at, idempotency_key, timeout_ms, signal_on_completion, delivery, \
    schedule_id, fire_at, ticks, unique_key) VALUES (?1, 'default', 'noop', ?2, 'noop', 'queued', 0, \
    3, ?3, ?3, NULL, NULL, 1, 'when_idle', NULL, NULL, 1, NULL)";

fn runs_inserts(dir: &Path, n: usize) -> rusqlite::Result<f64> {
    let c = fresh(dir, "limit-runs.db")?;
    c.execute_batch(include_str!("../schema.sql"))?;
    let t = Instant::now();
    for i in 0..n {
        let tx = c.unchecked_transaction()?;
        let now = toolq::clock::ts(chrono::Utc::now());
        tx.prepare_cached(RUNS_INSERT)?.execute(params![
            toolq::RunId::generate().as_str(),
            payload(i),
            now
        ])?;
        tx.commit()?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn lifecycle(dir: &Path, n: usize) -> rusqlite::Result<f64> {
    let c = fresh(dir, "limit-lifecycle.db")?;
    let t = Instant::now();
    for i in 0..n {
        let tx = c.unchecked_transaction()?;
        tx.prepare_cached(INSERT)?.execute([payload(i)])?;
        tx.commit()?;
        let tx = c.unchecked_transaction()?;
        let id: i64 = tx.prepare_cached(CLAIM_ONE)?.query_row([], |r| r.get(0))?;
        tx.commit()?;
        let tx = c.unchecked_transaction()?;
        tx.prepare_cached(COMPLETE)?.execute([id])?;
        tx.commit()?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn batched(dir: &Path, n: usize, per_tx: usize) -> rusqlite::Result<f64> {
    let c = fresh(dir, "limit-batched.db")?;
    let t = Instant::now();
    let mut i = 0;
    while i < n {
        let k = per_tx.min(n - i);
        let tx = c.unchecked_transaction()?;
        for j in i..i + k {
            tx.prepare_cached(INSERT)?.execute([payload(j)])?;
        }
        tx.commit()?;
        let tx = c.unchecked_transaction()?;
        let ids: Vec<i64> = tx
            .prepare_cached(CLAIM_MANY)?
            .query_map(params![k as i64], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        tx.commit()?;
        let tx = c.unchecked_transaction()?;
        for id in ids {
            tx.prepare_cached(COMPLETE)?.execute([id])?;
        }
        tx.commit()?;
        i += k;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn main() -> ExitCode {
    common::run_main("sqlite_limit", "sqlite-limit", |dir, n| {
        Ok(json!({
            "insert_commits_per_s": inserts(dir, n)?.round(),
            "runs_insert_commits_per_s": runs_inserts(dir, n)?.round(),
            "lifecycle_per_s": lifecycle(dir, n)?.round(),
            "batched_lifecycle_per_s": batched(dir, n, 100)?.round(),
        }))
    })
}
