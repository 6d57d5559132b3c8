//! Pickup latency (enqueue in this process or in a child process) and the idle cost of a worker.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolq::{Client, WorkerOptions};

use crate::throughput::round;
use crate::{Recorder, fresh, mono_ns, open, request, with_info};

/// The idle gaps before each sample: uniform in 0..=100 ms from a fixed xorshift64 sequence.
pub struct Gaps(u64);

impl Gaps {
    /// The fixed sequence every latency mode uses.
    pub fn new() -> Self {
        Gaps(0x9E37_79B9_7F4A_7C15)
    }
}

impl Iterator for Gaps {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        Some(Duration::from_micros(x % 100_001))
    }
}

/// A worker running on a fresh database, warmed up for one second.
async fn warm_worker(
    db: &Path,
    concurrency: usize,
    recorder: Recorder,
) -> anyhow::Result<(
    Client,
    CancellationToken,
    tokio::task::JoinHandle<toolq::Result<toolq::WorkerReport>>,
)> {
    fresh(db).await?;
    let client = open(db, concurrency, recorder)?;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(
        client
            .worker(WorkerOptions::default())
            .run(shutdown.clone()),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok((client, shutdown, task))
}

/// Waits for the handler start of job `k`.
async fn start_of(rx: &mut mpsc::UnboundedReceiver<(u64, i64)>, k: u64) -> anyhow::Result<i64> {
    loop {
        let (i, t1) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .with_context(|| format!("job {k} did not start within 30 s"))?
            .context("the handler's channel closed")?;
        if i == k {
            return Ok(t1);
        }
    }
}

/// `latency`: enqueue in this process, one job at a time after an idle gap.
pub async fn same_process(db: &Path, samples: usize, concurrency: usize) -> anyhow::Result<Value> {
    let (recorder, mut rx) = Recorder::timing();
    let (client, shutdown, task) = warm_worker(db, concurrency, recorder).await?;
    let mut lat = Vec::with_capacity(samples);
    for (k, gap) in (0..samples).zip(Gaps::new()) {
        tokio::time::sleep(gap).await;
        let t0 = mono_ns();
        client.enqueue(request(k)).await?;
        let t1 = start_of(&mut rx, k as u64).await?;
        lat.push(t1 - t0);
    }
    shutdown.cancel();
    task.await??;
    with_info(&client, summary("latency", &mut lat)).await
}

/// How far in the future `latency-delayed` schedules each run (the issue's `--in 100ms`).
const DELAY: Duration = Duration::from_millis(100);

/// `latency-delayed` (toolq's own): after an idle gap, enqueue one run due [`DELAY`] from now
/// and record how late its handler starts: t1 - (t0 + DELAY). The due instant is stored as
/// wall-clock time; t0 pairs it with CLOCK_MONOTONIC, read together.
pub async fn delayed(db: &Path, samples: usize, concurrency: usize) -> anyhow::Result<Value> {
    let (recorder, mut rx) = Recorder::timing();
    let (client, shutdown, task) = warm_worker(db, concurrency, recorder).await?;
    let delay = chrono::Duration::from_std(DELAY)?;
    let mut late = Vec::with_capacity(samples);
    for (k, gap) in (0..samples).zip(Gaps::new()) {
        tokio::time::sleep(gap).await;
        let (wall, t0) = (chrono::Utc::now(), mono_ns());
        let mut req = request(k);
        req.run_at = Some(wall + delay);
        client.enqueue(req).await?;
        let t1 = start_of(&mut rx, k as u64).await?;
        late.push(t1 - (t0 + DELAY.as_nanos() as i64));
    }
    shutdown.cancel();
    task.await??;
    let mut v = summary("latency-delayed", &mut late);
    v["delay_ms"] = json!(DELAY.as_millis() as u64);
    with_info(&client, v).await
}

/// `latency-xproc`: the worker runs here; a child process enqueues, one job at a time after an
/// idle gap, and reports its CLOCK_MONOTONIC t0 on stdout; t1 is the handler's start here.
pub async fn cross_process(db: &Path, samples: usize, concurrency: usize) -> anyhow::Result<Value> {
    let (recorder, mut rx) = Recorder::timing();
    let (client, shutdown, task) = warm_worker(db, concurrency, recorder).await?;
    let exe = std::env::current_exe().context("path of this program")?;
    let mut child = tokio::process::Command::new(exe)
        .arg("enqueue-one")
        .arg(db)
        .arg(samples.to_string())
        .arg("1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("start the enqueuing child")?;
    let mut to_child = child.stdin.take().context("child stdin")?;
    let mut from_child = BufReader::new(child.stdout.take().context("child stdout")?).lines();
    let mut lat = Vec::with_capacity(samples);
    for k in 0..samples {
        let line = from_child
            .next_line()
            .await?
            .context("the enqueuing child stopped early")?;
        let (i, t0) = line
            .split_once(' ')
            .and_then(|(i, t)| Some((i.parse::<u64>().ok()?, t.parse::<i64>().ok()?)))
            .with_context(|| format!("child line {line:?}"))?;
        anyhow::ensure!(i == k as u64, "child enqueued job {i}, expected {k}");
        let t1 = start_of(&mut rx, i).await?;
        lat.push(t1 - t0);
        to_child.write_all(b"next\n").await?;
    }
    drop(to_child);
    let status = child.wait().await?;
    anyhow::ensure!(status.success(), "the enqueuing child failed: {status}");
    shutdown.cancel();
    task.await??;
    with_info(&client, summary("latency-xproc", &mut lat)).await
}

/// The child of `latency-xproc`: after each gap, enqueue job k, print "k t0", wait for a line.
pub async fn enqueue_child(db: &Path, samples: usize) -> anyhow::Result<()> {
    let client = open(db, 1, Recorder::counting())?;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout().lock();
    for (k, gap) in (0..samples).zip(Gaps::new()) {
        tokio::time::sleep(gap).await;
        let t0 = mono_ns();
        client.enqueue(request(k)).await?;
        writeln!(out, "{k} {t0}")?;
        out.flush()?;
        lines.next().context("parent closed stdin")??;
    }
    Ok(())
}

/// `idle`: a worker with nothing to do, measured for `secs` seconds after a 1 s warm-up:
/// CPU time of the whole process and how much it appended to the WAL (its commits).
pub async fn idle(db: &Path, secs: usize, concurrency: usize) -> anyhow::Result<Value> {
    let (client, shutdown, task) = warm_worker(db, concurrency, Recorder::counting()).await?;
    // On Postgres there is no WAL file of ours to watch: 0 appended, reported as null.
    let on_pg = crate::pg::url(db).is_some();
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let wal_size = || {
        if on_pg {
            return 0;
        }
        std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0)
    };
    let (cpu0, wal0, t0) = (cpu_secs()?, wal_size(), mono_ns());
    tokio::time::sleep(Duration::from_secs(secs as u64)).await;
    let (cpu1, wal1, t1) = (cpu_secs()?, wal_size(), mono_ns());
    shutdown.cancel();
    task.await??;
    let wall = (t1 - t0) as f64 / 1e9;
    let v = json!({
        "mode": "idle", "secs": round(wall, 3),
        "cpu_pct": round((cpu1 - cpu0) / wall * 100.0, 3),
        "wal_bytes_appended": (!on_pg).then(|| wal1.saturating_sub(wal0)),
        // One WAL frame is a 24-byte header plus a 4096-byte page.
        "wal_frames_appended": (!on_pg).then(|| wal1.saturating_sub(wal0) / 4120),
    });
    with_info(&client, v).await
}

/// User plus system CPU time of this process, in seconds.
fn cpu_secs() -> anyhow::Result<f64> {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_SELF).context("getrusage")?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Ok(secs(u.user_time()) + secs(u.system_time()))
}

/// Sorts the latencies (ns) and reports p50, p99 and max in ms.
pub fn summary(mode: &str, lat: &mut [i64]) -> Value {
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let rank = ((p * lat.len() as f64).ceil() as usize).clamp(1, lat.len());
        round(lat[rank - 1] as f64 / 1e6, 3)
    };
    json!({
        "mode": mode, "samples": lat.len(),
        "p50_ms": pct(0.50), "p99_ms": pct(0.99),
        "max_ms": round(lat.last().copied().unwrap_or(0) as f64 / 1e6, 3),
    })
}
