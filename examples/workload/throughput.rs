//! Throughput modes: enqueue (one call at a time or in batches) and drain.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::WorkerOptions;
use toolq::error::StoreError;

use crate::{Noop, Recorder, Tune, fresh, open, open_tuned, peak_rss_kib, pg, request, with_info};

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
    let per_session = Some(concurrency.max(1) as i64);
    let tune = Tune {
        limited,
        per_session,
    };
    drain_tuned(db, (n, concurrency), tune, mode, recorder, tool).await
}

/// [`drain_with`] with the client set up by `tune` (the per-session limit of the
/// many-session modes).
pub async fn drain_tuned(
    db: &Path,
    (n, concurrency): (usize, usize),
    tune: Tune,
    mode: &str,
    recorder: Recorder,
    tool: impl toolq::Tool,
) -> anyhow::Result<Value> {
    let limited = tune.limited;
    let sql = connect_checks(db).await?;
    let client = open_tuned(db, concurrency, tool, tune)?;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let worker = client.worker(WorkerOptions::default());
    let task = tokio::spawn(worker.run(shutdown.clone()));
    recorder.wait_handled(n as u64).await;
    wait_finished(&client, sql.as_ref()).await?;
    let secs = started.elapsed().as_secs_f64();
    shutdown.cancel();
    let report = task.await??;
    let handled = recorder.handled();
    let done = verify_on(&client, sql.as_ref()).await?;
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
/// is stored only if it is not empty (an empty log costs no row, issue 38); results (schema
/// version 16: `runs.result`, which the view `blobs` shows as result.json); completion
/// messages. It reads the tables behind `blobs`: a correlated subquery over the view would
/// read the view's runs part once per run.
const VERIFY: &str = "SELECT (SELECT count(*) FROM runs WHERE state = 'completed'), \
     (SELECT count(*) FROM runs r WHERE r.state = 'completed' AND NOT EXISTS (SELECT 1 FROM blob_rows b \
         WHERE b.session_id = r.session_id AND b.path = '/.background/' || r.id || '/output.log' \
         AND b.size = 0 AND b.truncated = 0)), \
     (SELECT count(*) FROM runs WHERE result IS NOT NULL), \
     (SELECT count(*) FROM inbox WHERE kind = 'completed')";

/// The measurement's own connection on Postgres (`None` on SQLite); fails when a SQLite
/// file is missing (an enqueue mode makes it).
pub async fn connect_checks(db: &Path) -> anyhow::Result<Option<pg::Sql>> {
    match pg::url(db) {
        Some(url) => Ok(Some(pg::Sql::connect(url).await?)),
        None if !db.exists() => {
            anyhow::bail!("{}: no such file; run the enqueue mode first", db.display())
        }
        None => Ok(None),
    }
}

/// Whether a run is running or queued and due, on either engine (`sql`: the Postgres
/// connection of [`connect_checks`]). As `has_unfinished` on SQLite: queued runs not yet due
/// (blocked by their parents, waiting for children, delayed) are not counted. Two index
/// probes on either engine, cheap enough to poll while workers drain.
pub async fn unfinished(client: &toolq::Client, sql: Option<&pg::Sql>) -> anyhow::Result<bool> {
    Ok(match sql {
        Some(sql) => {
            let now = toolq::clock::ts(client.now());
            sql.ints(&format!(
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM runs WHERE state = 'running') \
                 OR EXISTS (SELECT 1 FROM runs WHERE state = 'queued' AND run_at <= '{now}') \
                 THEN 1::int8 ELSE 0::int8 END"
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
    })
}

/// Polls [`unfinished`] until it says no: every millisecond on SQLite (a read on the
/// file), every 5 ms on Postgres (a round trip to a server that the workers share).
pub async fn wait_finished(client: &toolq::Client, sql: Option<&pg::Sql>) -> anyhow::Result<()> {
    let every = Duration::from_millis(if sql.is_some() { 5 } else { 1 });
    while unfinished(client, sql).await? {
        tokio::time::sleep(every).await;
    }
    Ok(())
}

/// [`VERIFY`] on either engine (`sql` as for [`unfinished`]).
pub async fn verify_on(client: &toolq::Client, sql: Option<&pg::Sql>) -> anyhow::Result<[i64; 4]> {
    match sql {
        Some(sql) => {
            let v = sql.ints(VERIFY).await?;
            anyhow::ensure!(v.len() == 4, "verify counts: {} columns", v.len());
            Ok([v[0], v[1], v[2], v[3]])
        }
        None => verify(client).await,
    }
}

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
