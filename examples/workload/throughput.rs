//! Throughput modes: enqueue (one call at a time or in batches) and drain.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::WorkerOptions;
use toolq::error::StoreError;

use crate::{Noop, Recorder, fresh, open, open_with, peak_rss_kib, pg, request, with_info};

/// `enqueue` (batch = 1) and `enqueue-batch` (batch = 1000) on a fresh file.
pub async fn enqueue(db: &Path, n: usize, batch: usize) -> anyhow::Result<Value> {
    fresh(db).await?;
    let client = open(db, 1, Recorder::counting())?;
    let started = Instant::now();
    if batch == 1 {
        for i in 0..n {
            client.enqueue(request(i)).await?;
        }
    } else {
        let mut i = 0;
        while i < n {
            let end = (i + batch).min(n);
            client
                .enqueue_batch((i..end).map(request).collect())
                .await?;
            i = end;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let mut v = json!({"mode": if batch == 1 { "enqueue" } else { "enqueue-batch" }, "n": n});
    if batch > 1 {
        v["batch"] = json!(batch);
    }
    v["secs"] = json!(round(secs, 4));
    v["rate"] = json!(round(n as f64 / secs, 1));
    with_info(&client, v).await
}

/// `drain`: a new process on the file `enqueue` left; the clock runs from starting the worker
/// until the handler ran `n` times and no run is unfinished in the database.
/// With `limited`, the no-op tool has `max_running` and `rate` limits that never bind
/// (`drain-limited`).
pub async fn drain(
    db: &Path,
    n: usize,
    concurrency: usize,
    limited: bool,
) -> anyhow::Result<Value> {
    let recorder = Recorder::counting();
    let mode = if limited { "drain-limited" } else { "drain" };
    drain_with(
        db,
        n,
        concurrency,
        limited,
        mode,
        recorder.clone(),
        Noop(recorder),
    )
    .await
}

/// [`drain`] with `tool` as the `noop` tool, counting through `recorder`, reported as `mode`
/// (the durable modes time their runs the same way).
pub async fn drain_with(
    db: &Path,
    n: usize,
    concurrency: usize,
    limited: bool,
    mode: &str,
    recorder: Recorder,
    tool: impl toolq::Tool,
) -> anyhow::Result<Value> {
    let sql = match pg::url(db) {
        Some(url) => Some(pg::Sql::connect(url).await?),
        None if !db.exists() => {
            anyhow::bail!("{}: no such file; run the enqueue mode first", db.display())
        }
        None => None,
    };
    let client = open_with(db, concurrency, tool, limited)?;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let worker = client.worker(WorkerOptions::default());
    let task = tokio::spawn(worker.run(shutdown.clone()));
    recorder.wait_handled(n as u64).await;
    loop {
        let unfinished = match &sql {
            // As `has_unfinished` on SQLite: queued runs not yet due (blocked by their
            // parents, waiting for children, delayed) are not waited for.
            Some(sql) => {
                let now = toolq::clock::ts(client.now());
                sql.ints(&format!(
                    "SELECT count(*) FROM runs WHERE state = 'running' \
                     OR (state = 'queued' AND run_at <= '{now}')"
                ))
                .await?[0]
                    > 0
            }
            None => {
                let now = client.now();
                let (runnable, running) = client
                    .store()
                    .read_async(move |c| toolq::store::sqlite::runs::has_unfinished(c, now))
                    .await?;
                runnable || running
            }
        };
        if !unfinished {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    shutdown.cancel();
    let report = task.await??;
    let handled = recorder.handled();
    let done = match &sql {
        Some(sql) => {
            let v = sql.ints(VERIFY).await?;
            [v[0], v[1], v[2], v[3]]
        }
        None => verify(&client).await?,
    };
    if handled != n as u64 || done.iter().any(|&c| c != n as i64) {
        anyhow::bail!(
            "drain incomplete: handled {handled}, completed/log/result/inbox {done:?}, expected {n}"
        );
    }
    eprintln!("worker report: {report:?}");
    // The limits were counted: the starts of the last second are in the ledger.
    let starts: i64 = match &sql {
        Some(sql) => sql.ints("SELECT count(*) FROM tool_starts").await?[0],
        None => {
            eprintln!("writer: {:?}", client.store().write_stats());
            client
                .store()
                .read_async(|c| {
                    c.query_row("SELECT count(*) FROM tool_starts", [], |r| r.get(0))
                        .map_err(|e| StoreError::Task(format!("count starts: {e}")))
                })
                .await?
        }
    };
    if limited && starts == 0 {
        anyhow::bail!("drain-limited recorded no starts: the rate was not counted");
    }
    let v = json!({
        "mode": mode, "n": n, "concurrency": concurrency, "secs": round(secs, 4),
        "rate": round(n as f64 / secs, 1), "handled": handled,
        "peak_rss_kib": peak_rss_kib(),
    });
    with_info(&client, v).await
}

/// The drain's counts, each `n` when it is complete: completed runs; completed runs whose log
/// is stored only if it is not empty (an empty log costs no row, issue 38); result.json blobs;
/// completion messages.
const VERIFY: &str = "SELECT (SELECT count(*) FROM runs WHERE state = 'completed'), \
     (SELECT count(*) FROM runs r WHERE r.state = 'completed' AND NOT EXISTS (SELECT 1 FROM blobs b \
         WHERE b.session_id = r.session_id AND b.path = '/.background/' || r.id || '/output.log' \
         AND b.size = 0 AND b.truncated = 0)), \
     (SELECT count(*) FROM blobs WHERE path LIKE '/.background/%/result.json'), \
     (SELECT count(*) FROM inbox WHERE kind = 'completed')";

/// [`VERIFY`] on the SQLite file.
pub async fn verify(client: &toolq::Client) -> anyhow::Result<[i64; 4]> {
    let counts = client
        .store()
        .read_async(|c| {
            c.query_row(VERIFY, [], |r| {
                Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?])
            })
            .map_err(|e| StoreError::Task(format!("verify counts: {e}")))
        })
        .await?;
    Ok(counts)
}

/// Rounds to `places` decimals for the JSON line.
pub fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}
