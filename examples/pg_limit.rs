//! The physical limit of Postgres on this machine (WORKLOAD.md, "Physical limit", on Postgres):
//! one connection, the server's default durability, an emptied database per figure,
//! tokio-postgres directly.
//!
//! `cargo run --profile dist --example pg_limit -- <postgres-url> <n>` prints one JSON line:
//! insert commits/s (one INSERT per transaction), lifecycle jobs/s (insert, claim with
//! `FOR UPDATE SKIP LOCKED`, complete, each its own transaction) and batched lifecycle jobs/s
//! (100 per transaction for each step).

use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;
use tokio_postgres::{Client, NoTls};

const SCHEMA: &str = "DROP TABLE IF EXISTS limit_jobs; \
    CREATE TABLE limit_jobs (id BIGSERIAL PRIMARY KEY, payload TEXT NOT NULL, \
    state TEXT NOT NULL DEFAULT 'queued', owner TEXT, result TEXT); \
    CREATE INDEX limit_jobs_queued ON limit_jobs (id) WHERE state = 'queued';";
const INSERT: &str = "INSERT INTO limit_jobs (payload) VALUES ($1)";
const CLAIM: &str = "UPDATE limit_jobs SET state = 'running', owner = 'w' WHERE id IN \
    (SELECT id FROM limit_jobs WHERE state = 'queued' ORDER BY id LIMIT $1 \
    FOR UPDATE SKIP LOCKED) RETURNING id";
const COMPLETE: &str =
    "UPDATE limit_jobs SET state = 'done', result = '{}' WHERE id = $1 AND state = 'running'";

fn payload(i: usize) -> String {
    format!(r#"{{"kind":"noop","i":{i},"pad":"0123456789abcdef"}}"#)
}

async fn fresh(c: &Client) -> Result<(), tokio_postgres::Error> {
    c.batch_execute(SCHEMA).await
}

async fn inserts(c: &mut Client, n: usize) -> Result<f64, tokio_postgres::Error> {
    fresh(c).await?;
    let insert = c.prepare(INSERT).await?;
    let t = Instant::now();
    for i in 0..n {
        let tx = c.transaction().await?;
        tx.execute(&insert, &[&payload(i)]).await?;
        tx.commit().await?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Inserts, claims and completes `n` jobs, `per_tx` of each step in one transaction.
async fn lifecycle(c: &mut Client, n: usize, per_tx: usize) -> Result<f64, tokio_postgres::Error> {
    fresh(c).await?;
    let (insert, claim, complete) = (
        c.prepare(INSERT).await?,
        c.prepare(CLAIM).await?,
        c.prepare(COMPLETE).await?,
    );
    let t = Instant::now();
    let mut i = 0;
    while i < n {
        let k = per_tx.min(n - i);
        let tx = c.transaction().await?;
        for j in i..i + k {
            tx.execute(&insert, &[&payload(j)]).await?;
        }
        tx.commit().await?;
        let tx = c.transaction().await?;
        let ids: Vec<i64> = tx
            .query(&claim, &[&(k as i64)])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        tx.commit().await?;
        let tx = c.transaction().await?;
        for id in ids {
            tx.execute(&complete, &[&id]).await?;
        }
        tx.commit().await?;
        i += k;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

async fn run(url: &str, n: usize) -> Result<serde_json::Value, tokio_postgres::Error> {
    let (mut c, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(conn);
    let version: String = c.query_one("SHOW server_version", &[]).await?.get(0);
    let sync: String = c.query_one("SHOW synchronous_commit", &[]).await?.get(0);
    let line = json!({
        "mode": "pg-limit", "n": n,
        "insert_commits_per_s": inserts(&mut c, n).await?.round(),
        "lifecycle_per_s": lifecycle(&mut c, n, 1).await?.round(),
        "batched_lifecycle_per_s": lifecycle(&mut c, n, 100).await?.round(),
        "synchronous_commit": sync, "postgres": version,
    });
    c.batch_execute("DROP TABLE IF EXISTS limit_jobs").await?;
    Ok(line)
}

fn main() -> ExitCode {
    let v: Vec<String> = std::env::args().skip(1).collect();
    let (Some(url), Some(n)) = (v.first(), v.get(1).and_then(|n| n.parse::<usize>().ok())) else {
        eprintln!("usage: pg_limit <postgres-url> <n>");
        return ExitCode::from(2);
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pg_limit: tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(url, n)) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pg_limit: {e}");
            ExitCode::from(1)
        }
    }
}
