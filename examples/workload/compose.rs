//! Composition (issue 36, toolq's own modes): batches, chains and blocked runs, all of the
//! workload's no-op runs, timed as the plain modes are.
//!
//! - `batch-enqueue`: `count` runs as batches of 1,000 ([`toolq::Client::create_batch`], one
//!   batch per call), on a fresh file: the same calls and transactions as `enqueue-batch`
//!   (1,000 runs per [`toolq::Client::enqueue_batch`] call) plus a batch record each.
//! - `batch-enqueue-all`: one batch of all `count` runs in one call (at most
//!   `runs.max_batch_runs`, 100,000 by default); `enqueue-batch-all` is its plain twin, one
//!   `enqueue_batch` call of all `count` runs.
//! - `drain-batch`: the drain of a file a batch enqueue left, timed as `drain`; then every
//!   batch must have completed exactly once with exactly one `batch_completed` message, or
//!   the mode fails.
//! - `chain`: `count` runs, each after the previous one (enqueued in one `enqueue_batch` call
//!   with `after_requests`), drained by one worker: total time and time per link. Fails
//!   unless the runs started in chain order, each after its parent's end.
//! - `drain-blocked`: a child process (`seed-blocked`) enqueues one parent due in a year and
//!   [`blocked`] runs after it (blocked: the claim never reaches them), interleaved in
//!   1,000-run calls with `count` runnable runs; this process times the drain of the runnable
//!   ones, as `drain`. The drain ends without them; afterwards all of them must still be
//!   blocked.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use toolq::{BatchRequest, Client, EnqueueRequest};

use crate::durable::child;
use crate::throughput::{drain_with, round};
use crate::{Noop, Recorder, fresh, open, pg, request, with_info};

/// Runs per call of `batch-enqueue` (and of `enqueue-batch`, which it is compared with) and
/// of the `seed-blocked` enqueues.
const CHUNK: usize = 1000;

/// `batch-enqueue` (`chunk` = 1,000, one batch per call) and `batch-enqueue-all` (`chunk` =
/// `n`); with `composed` false, the plain `enqueue_batch` of the same chunks
/// (`enqueue-batch-all`).
pub async fn enqueue(db: &Path, n: usize, chunk: usize, composed: bool) -> anyhow::Result<Value> {
    fresh(db).await?;
    let client = open(db, 1, Recorder::counting())?;
    let max = client.config().runs.max_batch_runs;
    anyhow::ensure!(
        !composed || chunk.min(n) <= max,
        "a batch of {} runs is over runs.max_batch_runs ({max})",
        chunk.min(n)
    );
    let mut calls = 0;
    let started = Instant::now();
    let mut i = 0;
    while i < n {
        let end = (i + chunk).min(n);
        let reqs: Vec<EnqueueRequest> = (i..end).map(request).collect();
        if composed {
            client
                .create_batch(BatchRequest::default(), reqs)
                .await
                .with_context(|| format!("create the batch of runs {i}..{end}"))?;
        } else {
            client.enqueue_batch(reqs).await?;
        }
        calls += 1;
        i = end;
    }
    let secs = started.elapsed().as_secs_f64();
    let mode = match (composed, chunk >= n) {
        (true, false) => "batch-enqueue",
        (true, true) => "batch-enqueue-all",
        (false, _) => "enqueue-batch-all",
    };
    let v = json!({
        "mode": mode, "n": n, "per_call": chunk.min(n), "calls": calls,
        "batches": if composed { calls } else { 0 },
        "secs": round(secs, 4), "rate": round(n as f64 / secs, 1),
    });
    with_info(&client, v).await
}

/// Batches, batches completed exactly once with nothing pending, `batch_completed` messages,
/// and the runs the batches hold.
const BATCHES: &str = "SELECT (SELECT count(*) FROM batches), \
     (SELECT count(*) FROM batches WHERE completions = 1 AND pending = 0 \
        AND completed_at IS NOT NULL), \
     (SELECT count(*) FROM inbox WHERE kind = 'batch_completed'), \
     (SELECT CAST(coalesce(sum(total), 0) AS BIGINT) FROM batches)";

/// `drain-batch`: `drain` on a file `batch-enqueue` or `batch-enqueue-all` left, then the
/// batch check ([`BATCHES`]).
pub async fn drain_batch(db: &Path, n: usize, concurrency: usize) -> anyhow::Result<Value> {
    let recorder = Recorder::counting();
    let mut v = drain_with(
        db,
        n,
        concurrency,
        false,
        "drain-batch",
        recorder.clone(),
        Noop(recorder),
    )
    .await?;
    let c = ints(db, BATCHES).await?;
    let (batches, once, messages, members) = (c[0], c[1], c[2], c[3]);
    anyhow::ensure!(
        batches > 0 && members == n as i64,
        "{batches} batches holding {members} runs; expected batches of the {n} drained runs \
         (run batch-enqueue first)"
    );
    anyhow::ensure!(
        once == batches && messages == batches,
        "{batches} batches: {once} completed exactly once, {messages} batch_completed \
         messages; expected one each"
    );
    v["batches"] = json!(batches);
    v["batch_completed_messages"] = json!(messages);
    Ok(v)
}

/// Edges of the chain whose child started at or after its parent's end, and those released
/// at the parent's end instant (the end's transaction sets the child's `run_at` to it).
const CHAIN: &str = "SELECT (SELECT count(*) FROM run_deps d \
        JOIN runs p ON p.id = d.parent_id JOIN runs c ON c.id = d.child_id \
        WHERE d.resolved = 'completed' AND c.started_at >= p.finished_at), \
     (SELECT count(*) FROM run_deps d \
        JOIN runs p ON p.id = d.parent_id JOIN runs c ON c.id = d.child_id \
        WHERE c.run_at = p.finished_at)";

/// `chain`: `n` runs, each after the one before, drained by one worker.
pub async fn chain(db: &Path, n: usize, concurrency: usize) -> anyhow::Result<Value> {
    anyhow::ensure!(n >= 2, "a chain needs at least 2 runs");
    fresh(db).await?;
    {
        let client = open(db, 1, Recorder::counting())?;
        let reqs = (0..n)
            .map(|i| {
                let mut r = request(i);
                if i > 0 {
                    r.after_requests = vec![i - 1];
                }
                r
            })
            .collect();
        client.enqueue_batch(reqs).await?;
    }
    let (recorder, mut starts) = Recorder::timing();
    let mut v = drain_with(
        db,
        n,
        concurrency,
        false,
        "chain",
        recorder.clone(),
        Noop(recorder),
    )
    .await?;
    // The handler saw the runs in chain order, each start later than the one before.
    let mut seen = Vec::with_capacity(n);
    while let Ok(s) = starts.try_recv() {
        seen.push(s);
    }
    anyhow::ensure!(
        seen.len() == n,
        "{} starts recorded, expected {n}",
        seen.len()
    );
    for (k, w) in seen.windows(2).enumerate() {
        anyhow::ensure!(
            w[1].0 == w[0].0 + 1 && w[1].1 > w[0].1,
            "start {} was run {} after run {}: out of chain order",
            k + 1,
            w[1].0,
            w[0].0
        );
    }
    anyhow::ensure!(seen[0].0 == 0, "the chain started with run {}", seen[0].0);
    let c = ints(db, CHAIN).await?;
    anyhow::ensure!(
        c[0] == n as i64 - 1,
        "{} of {} links started after their parent's end",
        c[0],
        n - 1
    );
    let secs = v["secs"].as_f64().context("chain secs")?;
    v["links"] = json!(n - 1);
    v["per_link_ms"] = json!(round(secs * 1000.0 / (n - 1) as f64, 3));
    v["released_at_parent_end"] = json!(c[1]);
    Ok(v)
}

/// Blocked runs beside the runnable ones (`WORKLOAD_BLOCKED`, default 100,000).
pub fn blocked() -> anyhow::Result<usize> {
    match std::env::var("WORKLOAD_BLOCKED") {
        Ok(s) => s.parse().with_context(|| format!("WORKLOAD_BLOCKED={s:?}")),
        Err(_) => Ok(100_000),
    }
}

/// How far ahead the blocked runs' parent is due: never within a measurement.
const PARENT_DUE_IN: Duration = Duration::from_secs(365 * 24 * 3600);

/// `seed-blocked`: on a fresh file, one parent due in a year, then per 1,000 runnable runs
/// the blocked runs' share (1,000 at a time, after the parent), so blocked and runnable rows
/// are interleaved through the table and its indexes.
pub async fn seed_blocked(db: &Path, n: usize) -> anyhow::Result<Value> {
    let blocked = blocked()?;
    fresh(db).await?;
    let client = open(db, 1, Recorder::counting())?;
    let started = Instant::now();
    let mut parent = request(n + blocked);
    parent.run_at = Some(client.now() + PARENT_DUE_IN);
    let parent = client.enqueue(parent).await?.run_id;
    let (mut b, mut r) = (0, 0);
    let rounds = n.div_ceil(CHUNK).max(1);
    for k in 1..=rounds {
        // Blocked runs up to this round's share, in 1,000-run calls.
        while b < blocked * k / rounds {
            let end = (b + CHUNK).min(blocked * k / rounds);
            let reqs = (n + b..n + end)
                .map(|i| request(i).after([parent.clone()]))
                .collect();
            client.enqueue_batch(reqs).await?;
            b = end;
        }
        let end = (r + CHUNK).min(n);
        if end > r {
            client
                .enqueue_batch((r..end).map(request).collect())
                .await?;
            r = end;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let v = json!({
        "mode": "seed-blocked", "n": n, "blocked": blocked, "secs": round(secs, 4),
        "rate": round((n + blocked + 1) as f64 / secs, 1),
    });
    with_info(&client, v).await
}

/// Runs still blocked by their parents.
const BLOCKED: &str = "SELECT count(*) FROM runs WHERE state = 'queued' AND wait_kind = 'parents'";

/// `drain-blocked`: `seed-blocked` in a child process (so this process's peak RSS is the
/// worker's, as for `drain`), then the drain of the `n` runnable runs.
pub async fn drain_blocked(db: &Path, n: usize, concurrency: usize) -> anyhow::Result<Value> {
    let seed = child("seed-blocked", db, n, concurrency).await?;
    let recorder = Recorder::counting();
    let mut v = drain_with(
        db,
        n,
        concurrency,
        false,
        "drain-blocked",
        recorder.clone(),
        Noop(recorder),
    )
    .await?;
    let blocked = seed["blocked"].as_i64().context("seed's blocked count")?;
    let still = ints(db, BLOCKED).await?[0];
    anyhow::ensure!(
        still == blocked,
        "{still} runs blocked after the drain, expected {blocked}"
    );
    v["blocked"] = json!(blocked);
    v["seed_secs"] = seed["secs"].clone();
    Ok(v)
}

/// The integers of the one row `sql` returns on the database at `db` (a connection of its
/// own on Postgres; a client's reader on SQLite).
async fn ints(db: &Path, sql: &'static str) -> anyhow::Result<Vec<i64>> {
    if let Some(url) = pg::url(db) {
        return pg::Sql::connect(url).await?.ints(sql).await;
    }
    let client: Client = open(db, 1, Recorder::counting())?;
    let row = client
        .store()
        .read_async(move |c| {
            let err = |e: rusqlite::Error| toolq::error::StoreError::Task(format!("{sql}: {e}"));
            let mut stmt = c.prepare(sql).map_err(err)?;
            let cols = stmt.column_count();
            stmt.query_row([], |r| (0..cols).map(|i| r.get(i)).collect())
                .map_err(err)
        })
        .await?;
    Ok(row)
}
