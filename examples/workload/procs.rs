//! `drain-procs-P` (toolq's own): the drain with P worker processes on one file, each with the
//! workload's concurrency. The processes are started and open the database first; the clock
//! starts when all are ready and told to go, and stops when the database has no unfinished
//! run. `drain-procs-1` measures one process the same way, so the two compare like with like.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;
use toolq::WorkerOptions;

use crate::throughput::{round, verify};
use crate::{Recorder, open, peak_rss_kib, with_info};

/// The parent: starts `procs` children on `db` (left by an enqueue mode), times the drain.
pub async fn drain(db: &Path, n: usize, concurrency: usize, procs: usize) -> anyhow::Result<Value> {
    if !db.exists() {
        anyhow::bail!("{}: no such file; run an enqueue mode first", db.display());
    }
    anyhow::ensure!(procs >= 1, "drain-procs needs at least one process");
    let exe = std::env::current_exe().context("path of this program")?;
    let mut children = Vec::with_capacity(procs);
    for _ in 0..procs {
        let mut child = tokio::process::Command::new(&exe)
            .arg("drain-part")
            .arg(db)
            .arg(n.to_string())
            .arg(concurrency.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("start a draining child")?;
        let stdin = child.stdin.take().context("child stdin")?;
        let lines = BufReader::new(child.stdout.take().context("child stdout")?).lines();
        children.push((child, stdin, lines));
    }
    for (_, _, lines) in &mut children {
        let line = lines
            .next_line()
            .await?
            .context("a child stopped before ready")?;
        anyhow::ensure!(line == "ready", "child said {line:?}, expected ready");
    }
    let client = open(db, 1, Recorder::counting())?;
    let started = Instant::now();
    for (_, stdin, _) in &mut children {
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
    }
    loop {
        let now = client.now();
        let (runnable, running) = client
            .store()
            .read_async(move |c| toolq::store::sqlite::runs::has_unfinished(c, now))
            .await?;
        if !runnable && !running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let (mut handled, mut peak_rss) = (0u64, 0u64);
    for (mut child, stdin, mut lines) in children {
        drop(stdin);
        let line = lines.next_line().await?.context("a child stopped early")?;
        let v: Value = serde_json::from_str(&line).with_context(|| format!("child {line:?}"))?;
        handled += v["handled"].as_u64().unwrap_or(0);
        peak_rss = peak_rss.max(v["peak_rss_kib"].as_u64().unwrap_or(0));
        let status = child.wait().await?;
        anyhow::ensure!(status.success(), "a draining child failed: {status}");
    }
    let done = verify(&client).await?;
    if handled != n as u64 || done.iter().any(|&c| c != n as i64) {
        anyhow::bail!(
            "drain incomplete: handled {handled}, completed/log/result/inbox {done:?}, expected {n}"
        );
    }
    let v = json!({
        "mode": format!("drain-procs-{procs}"), "n": n, "procs": procs,
        "concurrency": concurrency, "secs": round(secs, 4), "rate": round(n as f64 / secs, 1),
        "handled": handled, "peak_rss_kib": peak_rss,
    });
    with_info(&client, v).await
}

/// A child: opens the database, says `ready`, runs a worker from `go` until stdin closes,
/// then prints how many runs its handler ran and its peak RSS.
pub async fn part(db: &Path, concurrency: usize) -> anyhow::Result<Value> {
    let recorder = Recorder::counting();
    let client = open(db, concurrency, recorder.clone())?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    println!("ready");
    let go = stdin.next_line().await?.context("no go from the parent")?;
    anyhow::ensure!(go == "go", "parent said {go:?}, expected go");
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(
        client
            .worker(WorkerOptions::default())
            .run(shutdown.clone()),
    );
    // The parent closes stdin when the database has no unfinished run.
    while stdin.next_line().await?.is_some() {}
    shutdown.cancel();
    task.await??;
    Ok(json!({"handled": recorder.handled(), "peak_rss_kib": peak_rss_kib()}))
}
