//! Durable runs (issue 35, toolq's own modes). Each uses a variant of the `noop` tool with the
//! workload's payload, so the runs are enqueued exactly as the plain ones.
//!
//! - `wait-1s`: `count` runs whose tool sleeps 1 s durably ([`toolq::ToolContext::sleep`])
//!   once, then completes; timed like the drain (from starting the worker until every run
//!   completed, with its result and inbox message), with the peak RSS. A waiting run frees its
//!   slot, so this ends in about 1 s plus two passes of claims, not `count / concurrency` s.
//! - `drain-steps3`: the drain whose tool records three steps per run
//!   ([`toolq::ToolContext::step`], trivial closures), between two plain drains in the same
//!   invocation (fresh files, enqueued in batches): reports the steps drain's rate and its ratio
//!   to the mean of the plain drains. Every enqueue and drain is a child process of its own
//!   (`drain-steps3-part` is the steps drain), as `bench/run.sh` runs `drain`.
//! - `resume` / `resume-xproc`: `count` samples; each enqueues a run whose tool waits for the
//!   event `go`, waits until the run is suspended, idles a gap (the latency modes' sequence),
//!   then takes t0 and signals `go` with [`toolq::Client::signal`]: in this process (the worker
//!   is in-process), or from a child process with its own `Client` on the same file
//!   (`signal-one`), which the worker learns of through the database's change feed. Latency =
//!   the tool's next start (t1, CLOCK_MONOTONIC) - t0; `returned_*` is when the wait returned
//!   in that invocation (after the journal's replay).

use std::convert::Infallible;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolq::{RunId, StepError, Tool, ToolContext, ToolDef, ToolOutcome, WorkerOptions};

use crate::latency::{Gaps, summary};
use crate::noop::{definition, index};
use crate::throughput::{drain_with, round};
use crate::{Recorder, fresh, mono_ns, open, open_with, pg, request, with_info};

/// How long each `wait-1s` run sleeps.
const SLEEP: Duration = Duration::from_secs(1);

/// The event `resume` sends.
const EVENT: &str = "go";

/// `noop` that sleeps [`SLEEP`] durably once, then counts itself.
pub struct Sleeper(pub Recorder);

#[async_trait]
impl Tool for Sleeper {
    fn definition(&self) -> ToolDef {
        definition()
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let i = match index(&ctx) {
            Ok(i) => i,
            Err(e) => return e,
        };
        // The first invocation suspends here (the worker drops this future); the second finds
        // the sleep recorded as done and goes on.
        if let Err(e) = ctx.sleep(SLEEP).await {
            return e.into();
        }
        self.0.record(i, mono_ns());
        ToolOutcome::ok(json!({"i": i}))
    }
}

/// `noop` with three recorded steps of trivial closures before it counts itself.
pub struct Steps3(pub Recorder);

#[async_trait]
impl Tool for Steps3 {
    fn definition(&self) -> ToolDef {
        definition()
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let t1 = mono_ns();
        let i = match index(&ctx) {
            Ok(i) => i,
            Err(e) => return e,
        };
        let steps = async {
            for name in ["a", "b", "c"] {
                ctx.step(name, async { Ok::<u64, Infallible>(i) }).await?;
            }
            Ok::<(), StepError>(())
        };
        if let Err(e) = steps.await {
            return e.into();
        }
        self.0.record(i, t1);
        ToolOutcome::ok(json!({"i": i}))
    }
}

/// `noop` that waits for the event [`EVENT`]; once it has it, it sends (i, its start, when
/// the wait returned), CLOCK_MONOTONIC ns.
pub struct Waiter(pub mpsc::UnboundedSender<(u64, i64, i64)>);

#[async_trait]
impl Tool for Waiter {
    fn definition(&self) -> ToolDef {
        definition()
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let started = mono_ns();
        let i = match index(&ctx) {
            Ok(i) => i,
            Err(e) => return e,
        };
        match ctx.wait_for_event(EVENT, Duration::from_secs(3600)).await {
            Ok(Some(_)) => {}
            Ok(None) => return ToolOutcome::tool_error("no go within an hour"),
            Err(e) => return e.into(),
        }
        // The receiver goes away only when the measurement is over.
        let _ = self.0.send((i, started, mono_ns()));
        ToolOutcome::ok(json!({"i": i}))
    }
}

/// `wait-1s`: a child process enqueues `n` runs in batches on a fresh file; this process
/// (which enqueued nothing, so its peak RSS is the worker's, as for `drain`) times their drain
/// with the sleeping tool.
pub async fn wait_1s(db: &Path, n: usize, concurrency: usize) -> anyhow::Result<Value> {
    let enq = child("enqueue-batch", db, n, concurrency).await?;
    let recorder = Recorder::counting();
    let mut v = drain_with(
        db,
        n,
        concurrency,
        false,
        "wait-1s",
        recorder.clone(),
        Sleeper(recorder),
    )
    .await?;
    v["sleep_s"] = json!(SLEEP.as_secs_f64());
    v["enqueue_secs"] = enq["secs"].clone();
    // Each run slept once: a recorded sleep per run.
    let sleeps = step_records(db, "kind = 'sleep'").await?;
    anyhow::ensure!(sleeps == n as i64, "{sleeps} sleeps recorded, expected {n}");
    Ok(v)
}

/// `drain-steps3`: plain drain, steps drain, plain drain, each on a fresh file enqueued in
/// batches and drained by a new process (as `drain`: the peak RSS is each drain's own); the
/// ratio is to the plain drains' mean (the VM drifts within minutes).
pub async fn drain_steps3(db: &Path, n: usize, concurrency: usize) -> anyhow::Result<Value> {
    let plain_db = beside(db, "plain");
    let mut plain = Vec::new();
    let mut plain_rss = Vec::new();
    let mut steps = json!(null);
    for round_ in 0..3 {
        let (file, mode) = if round_ == 1 {
            (db, "drain-steps3-part")
        } else {
            (plain_db.as_path(), "drain")
        };
        child("enqueue-batch", file, n, concurrency).await?;
        let v = child(mode, file, n, concurrency).await?;
        if round_ == 1 {
            steps = v;
        } else {
            plain.push(v["rate"].as_f64().context("plain drain rate")?);
            plain_rss.push(v["peak_rss_kib"].clone());
        }
    }
    let mean = plain.iter().sum::<f64>() / plain.len() as f64;
    let rate = steps["rate"].as_f64().context("steps drain rate")?;
    steps["mode"] = json!("drain-steps3");
    steps["steps_per_run"] = json!(3);
    steps["plain_rates"] = json!(plain);
    steps["plain_rate"] = json!(round(mean, 1));
    steps["plain_peak_rss_kib"] = json!(plain_rss);
    steps["ratio_to_plain"] = json!(round(rate / mean, 3));
    Ok(steps)
}

/// `drain-steps3-part`: the drain with [`Steps3`] on a file an enqueue left, then a check
/// that every run recorded its three steps.
pub async fn drain_steps3_part(db: &Path, n: usize, concurrency: usize) -> anyhow::Result<Value> {
    let recorder = Recorder::counting();
    let v = drain_with(
        db,
        n,
        concurrency,
        false,
        "drain-steps3-part",
        recorder.clone(),
        Steps3(recorder),
    )
    .await?;
    let recorded = step_records(db, "status = 'done'").await?;
    anyhow::ensure!(
        recorded == 3 * n as i64,
        "{recorded} steps recorded, expected {}",
        3 * n
    );
    Ok(v)
}

/// Runs this program in `mode` on `db` as a child process and returns its JSON line.
pub async fn child(mode: &str, db: &Path, n: usize, concurrency: usize) -> anyhow::Result<Value> {
    let exe = std::env::current_exe().context("path of this program")?;
    let out = tokio::process::Command::new(exe)
        .arg(mode)
        .arg(db)
        .arg(n.to_string())
        .arg(concurrency.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .await
        .with_context(|| format!("run the {mode} child"))?;
    anyhow::ensure!(
        out.status.success(),
        "the {mode} child failed: {}",
        out.status
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("the {mode} child said {line:?}"))
}

/// Another database for the same measurement: `<db>.<what>` beside a file; on Postgres the
/// same database (each measurement empties it first).
fn beside(db: &Path, what: &str) -> PathBuf {
    if pg::url(db).is_some() {
        return db.to_path_buf();
    }
    let mut p = db.as_os_str().to_owned();
    p.push(format!(".{what}"));
    PathBuf::from(p)
}

/// Step records matching `filter` in the database at `db`.
async fn step_records(db: &Path, filter: &str) -> anyhow::Result<i64> {
    let sql = format!("SELECT count(*) FROM step_records WHERE {filter}");
    if let Some(url) = pg::url(db) {
        return Ok(pg::Sql::connect(url).await?.ints(&sql).await?[0]);
    }
    let client = open(db, 1, Recorder::counting())?;
    let n = client
        .store()
        .read_async(move |c| {
            c.query_row(&sql, [], |r| r.get(0))
                .map_err(|e| toolq::error::StoreError::Task(format!("count steps: {e}")))
        })
        .await?;
    Ok(n)
}

/// `resume` / `resume-xproc` (`xproc`: the signal comes from a child process).
pub async fn resume(
    db: &Path,
    samples: usize,
    concurrency: usize,
    xproc: bool,
) -> anyhow::Result<Value> {
    fresh(db).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let client = open_with(db, concurrency, Waiter(tx), false)?;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(
        client
            .worker(WorkerOptions::default())
            .run(shutdown.clone()),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut child = None;
    if xproc {
        let exe = std::env::current_exe().context("path of this program")?;
        let mut c = tokio::process::Command::new(exe)
            .arg("signal-one")
            .arg(db)
            .arg("0")
            .arg("1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("start the signalling child")?;
        let stdin = c.stdin.take().context("child stdin")?;
        let lines = BufReader::new(c.stdout.take().context("child stdout")?).lines();
        child = Some((c, stdin, lines));
    }
    let (mut started, mut returned) = (Vec::new(), Vec::new());
    for (k, gap) in (0..samples).zip(Gaps::new()) {
        let id = client.enqueue(request(k)).await?.run_id;
        let since = Instant::now();
        loop {
            if client.get(&id).await?.waiting.is_some() {
                break;
            }
            anyhow::ensure!(
                since.elapsed() < Duration::from_secs(30),
                "run {k} did not wait within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(gap).await;
        let t0 = match &mut child {
            None => {
                let t0 = mono_ns();
                let s = client
                    .signal(&id, EVENT, json!({"k": k}), Some("bench".into()))
                    .await?;
                anyhow::ensure!(s.woke, "run {k} was waiting but the signal did not wake it");
                t0
            }
            Some((_, stdin, lines)) => {
                stdin.write_all(format!("{id} {k}\n").as_bytes()).await?;
                stdin.flush().await?;
                let line = lines
                    .next_line()
                    .await?
                    .context("the signalling child stopped early")?;
                line.parse::<i64>()
                    .with_context(|| format!("child line {line:?}"))?
            }
        };
        let (t1, t2) = loop {
            let (i, t1, t2) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .with_context(|| format!("run {k} did not resume within 30 s"))?
                .context("the tool's channel closed")?;
            if i == k as u64 {
                break (t1, t2);
            }
        };
        started.push(t1 - t0);
        returned.push(t2 - t0);
    }
    if let Some((mut c, stdin, _)) = child {
        drop(stdin);
        let status = c.wait().await?;
        anyhow::ensure!(status.success(), "the signalling child failed: {status}");
    }
    shutdown.cancel();
    task.await??;
    let mode = if xproc { "resume-xproc" } else { "resume" };
    let mut v = summary(mode, &mut started);
    let r = summary(mode, &mut returned);
    v["returned_p50_ms"] = r["p50_ms"].clone();
    v["returned_p99_ms"] = r["p99_ms"].clone();
    with_info(&client, v).await
}

/// The child of `resume-xproc`: for each line "RUN K" on stdin, takes t0, signals `go` to RUN
/// through its own `Client` on the file, then prints t0.
pub async fn signal_child(db: &Path) -> anyhow::Result<()> {
    let client = open(db, 1, Recorder::counting())?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line?;
        let (id, k) = line
            .split_once(' ')
            .with_context(|| format!("parent line {line:?}"))?;
        let id: RunId = id.parse().with_context(|| format!("run id {id:?}"))?;
        let k: u64 = k.parse().with_context(|| format!("sample {k:?}"))?;
        let t0 = mono_ns();
        let s = client
            .signal(&id, EVENT, json!({"k": k}), Some("bench-child".into()))
            .await?;
        anyhow::ensure!(
            s.woke,
            "run {id} was waiting but the signal did not wake it"
        );
        writeln!(out, "{t0}")?;
        out.flush()?;
    }
    Ok(())
}
