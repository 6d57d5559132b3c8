//! The benchmark adapter of /work/shared/WORKLOAD.md for toolq, through the public library API.
//!
//! `cargo run --profile dist --example workload -- <mode> <db-path> <count> <concurrency>`
//!
//! `<db-path>` may be a `postgres://` URL: the same modes on Postgres, each on an emptied
//! database (see [`pg`]); `idle` then reports no WAL figures (the server keeps its own).
//!
//! Modes: enqueue | enqueue-batch | drain | drain-limited | latency | latency-xproc |
//! latency-delayed | idle | drain-procs-P | enqueue-sessions | drain-sessions | drain-sessions-64 |
//! drain-sessions-procs-P | drain-sessions-64-procs-P | drain-sleep-procs-P | wait-1s | drain-steps3 | resume | resume-xproc |
//! batch-enqueue | batch-enqueue-all | enqueue-batch-all | drain-batch | chain | drain-blocked.
//! Prints exactly one JSON line on stdout; everything else goes to stderr. `idle` (toolq's own)
//! measures the CPU time and the commits of a worker that has nothing to do; `latency-delayed`
//! (toolq's own) how late a run enqueued 100 ms ahead starts (lateness p50/p99).
//! `drain-limited` (toolq's own) is `drain` with a per-tool limit and a rate on the no-op tool
//! that never bind ([`LIMITS`]): what counting them costs a claim. `enqueue-one` is the helper the
//! `latency-xproc` mode starts as its enqueuing child process. `drain-procs-P` (toolq's own) is
//! the drain by P worker processes on one file (`drain-part` is its child), e.g. `drain-procs-4`
//! beside `drain-procs-1`.
//!
//! Many sessions and many hosts (issue 38, toolq's own): `enqueue-sessions` enqueues over 50
//! sessions; `drain-sessions` and `drain-sessions-64` time its drain with the default
//! per-session limit (5) and with 64; `drain-sessions-procs-P` (default limit) and
//! `drain-sessions-64-procs-P` drain it with P worker processes; `drain-sleep-procs-P` drains
//! runs whose tool sleeps 20 ms with P processes of 16 slots each (see [`sessions`],
//! [`procs`]). Each seeds its own database (in a child process).
//!
//! Durable runs (issue 35, toolq's own): `wait-1s` enqueues `count` runs whose tool sleeps 1 s
//! durably (the slot is freed while they wait) and times until all completed; `drain-steps3` is
//! the drain with three recorded steps per run, beside the plain drain in the same invocation
//! (`drain-steps3-part` is its steps drain, a child process); `resume` and `resume-xproc` time
//! from `Client::signal` to the waiting tool running again, the signal sent in this process or
//! by a child process on the same file (`signal-one` is that child). See [`durable`].
//!
//! Composition (issue 36, toolq's own): `batch-enqueue` (batches of 1,000 runs, one per
//! `Client::create_batch` call, beside `enqueue-batch`), `batch-enqueue-all` (one batch of all
//! `count` runs) and its plain twin `enqueue-batch-all`, `drain-batch` (the drain of batched
//! runs, checking one `batch_completed` message per batch), `chain` (`count` runs each after
//! the previous: time per link), `drain-blocked` (the drain beside 100,000 blocked runs, which
//! `seed-blocked`, its child, enqueues). See [`compose`].

mod compose;
mod durable;
mod latency;
mod noop;
mod pg;
mod procs;
mod sessions;
mod throughput;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde_json::{Value, json};
use toolq::{Client, Config, EnqueueRequest, RegistryBuilder};

pub use noop::{Noop, Recorder, Sleepy};

/// The padding every payload carries (WORKLOAD.md).
const PAD: &str = "0123456789abcdef";

/// Parsed command line.
struct Args {
    mode: String,
    db: PathBuf,
    count: usize,
    concurrency: usize,
}

fn parse_args() -> Result<Args, String> {
    let v: Vec<String> = std::env::args().skip(1).collect();
    if v.len() != 4 {
        return Err(format!(
            "usage: workload <mode> <db-path> <count> <concurrency> (got {} arguments)",
            v.len()
        ));
    }
    let count = v[2].parse().map_err(|e| format!("count {:?}: {e}", v[2]))?;
    let concurrency = v[3]
        .parse()
        .map_err(|e| format!("concurrency {:?}: {e}", v[3]))?;
    Ok(Args {
        mode: v[0].clone(),
        db: PathBuf::from(&v[1]),
        count,
        concurrency,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("workload: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("workload: tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(Some(line)) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("workload: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(a: Args) -> anyhow::Result<Option<Value>> {
    let out = match a.mode.as_str() {
        "enqueue" => throughput::enqueue(&a.db, a.count, 1).await?,
        "enqueue-batch" => throughput::enqueue(&a.db, a.count, 1000).await?,
        "drain" => throughput::drain(&a.db, a.count, a.concurrency, false).await?,
        "drain-limited" => throughput::drain(&a.db, a.count, a.concurrency, true).await?,
        "latency" => latency::same_process(&a.db, a.count, a.concurrency).await?,
        "latency-xproc" => latency::cross_process(&a.db, a.count, a.concurrency).await?,
        "latency-delayed" => latency::delayed(&a.db, a.count, a.concurrency).await?,
        "idle" => latency::idle(&a.db, a.count, a.concurrency).await?,
        "enqueue-sessions" => sessions::enqueue(&a.db, a.count).await?,
        "drain-sessions" => sessions::drain(&a.db, a.count, a.concurrency, None).await?,
        "drain-sessions-64" => sessions::drain(&a.db, a.count, a.concurrency, Some(64)).await?,
        m if procs::Part::parse(m).is_some() => {
            let part = procs::Part::parse(m).context("child mode")?;
            procs::part(&a.db, a.concurrency, part).await?
        }
        m if procs::parse_mode(m).is_some() => {
            let (kind, procs) = procs::parse_mode(m).context("multi-process mode")??;
            procs::run(&a.db, (a.count, a.concurrency), kind, procs).await?
        }
        "wait-1s" => durable::wait_1s(&a.db, a.count, a.concurrency).await?,
        "drain-steps3" => durable::drain_steps3(&a.db, a.count, a.concurrency).await?,
        "drain-steps3-part" => durable::drain_steps3_part(&a.db, a.count, a.concurrency).await?,
        "resume" => durable::resume(&a.db, a.count, a.concurrency, false).await?,
        "resume-xproc" => durable::resume(&a.db, a.count, a.concurrency, true).await?,
        "batch-enqueue" => compose::enqueue(&a.db, a.count, 1000, true).await?,
        "batch-enqueue-all" => compose::enqueue(&a.db, a.count, a.count, true).await?,
        "enqueue-batch-all" => compose::enqueue(&a.db, a.count, a.count, false).await?,
        "drain-batch" => compose::drain_batch(&a.db, a.count, a.concurrency).await?,
        "chain" => compose::chain(&a.db, a.count, a.concurrency).await?,
        "drain-blocked" => compose::drain_blocked(&a.db, a.count, a.concurrency).await?,
        "seed-blocked" => compose::seed_blocked(&a.db, a.count).await?,
        "signal-one" => {
            durable::signal_child(&a.db).await?;
            return Ok(None);
        }
        "enqueue-one" => {
            latency::enqueue_child(&a.db, a.count).await?;
            return Ok(None);
        }
        other => anyhow::bail!(
            "mode {other:?}: expected enqueue, enqueue-batch, drain, drain-limited, latency, latency-xproc, latency-delayed, idle, drain-procs-P, enqueue-sessions, drain-sessions, drain-sessions-64, drain-sessions-procs-P, drain-sessions-64-procs-P, drain-sleep-procs-P, wait-1s, drain-steps3, resume, resume-xproc, batch-enqueue, batch-enqueue-all, enqueue-batch-all, drain-batch, chain or drain-blocked"
        ),
    };
    Ok(Some(out))
}

/// `drain-limited`'s limits on the no-op tool: four times the slots, and 100,000 starts a
/// second (a drain here does about 40,000/s), so they are counted on every claim and never
/// hold a run back.
pub const LIMITS: &str = "[limits.noop]\nmax_running = 64\nrate = \"100000/1s\"\n";

/// A client on `db` with the no-op tool, `concurrency` slots, all usable by one session.
fn open(db: &Path, concurrency: usize, recorder: Recorder) -> anyhow::Result<Client> {
    open_with(db, concurrency, Noop(recorder), false)
}

/// [`open`] with `tool` as the `noop` tool (the plain one, or a durable variant of
/// [`durable`]), and with [`LIMITS`] if `limited`.
fn open_with(
    db: &Path,
    concurrency: usize,
    tool: impl toolq::Tool,
    limited: bool,
) -> anyhow::Result<Client> {
    let per_session = Some(concurrency.max(1) as i64);
    open_tuned(
        db,
        concurrency,
        tool,
        Tune {
            limited,
            per_session,
        },
    )
}

/// How a mode sets up its client besides the tool and the slots.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tune {
    /// [`LIMITS`] on the tool (`drain-limited`).
    pub limited: bool,
    /// `worker.per_session`; `None`: the default (5).
    pub per_session: Option<i64>,
}

/// [`open_with`] with `tune`'s limits and per-session limit.
fn open_tuned(
    db: &Path,
    concurrency: usize,
    tool: impl toolq::Tool,
    tune: Tune,
) -> anyhow::Result<Client> {
    let Tune {
        limited,
        per_session,
    } = tune;
    let mut config = Config::default();
    match pg::url(db) {
        Some(url) => config.db_url = Some(url.to_string()),
        None => config.db_path = db.to_string_lossy().into_owned(),
    }
    config.worker.concurrency = concurrency.max(1);
    // Most benchmark jobs are in one session: those modes let it use every slot.
    if let Some(per_session) = per_session {
        config.worker.per_session = per_session;
    }
    config.sessions.max_active_runs = 1_000_000;
    if limited {
        config.limits = Config::parse(LIMITS, "workload")?.limits;
    }
    let registry = RegistryBuilder::new().tool(tool).build()?;
    Ok(Client::open(config, registry)?)
}

/// Removes the database and its WAL and shared-memory files, so a measurement starts fresh
/// (on Postgres: empties the database).
async fn fresh(db: &Path) -> anyhow::Result<()> {
    if let Some(url) = pg::url(db) {
        return pg::reset(url).await;
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => anyhow::bail!("remove {}: {e}", Path::new(&p).display()),
        }
    }
    Ok(())
}

/// Job `i` of the workload.
fn request(i: usize) -> EnqueueRequest {
    EnqueueRequest::new("noop", json!({"kind": "noop", "i": i, "pad": PAD}))
}

/// The fields every line carries: durability settings read back from the database (on
/// Postgres: the engine and the server's version).
async fn with_info(client: &Client, mut v: Value) -> anyhow::Result<Value> {
    if let Some(url) = client.config().db_url.as_deref() {
        v["engine"] = json!("postgres");
        v["postgres"] = json!(pg::Sql::connect(url).await?.version().await?);
        return Ok(v);
    }
    let info = client.store().info()?;
    v["journal_mode"] = json!(info.journal_mode);
    v["synchronous"] = json!(info.synchronous);
    v["sqlite"] = json!(info.sqlite_version);
    Ok(v)
}

/// CLOCK_MONOTONIC in nanoseconds: comparable across processes on one machine.
fn mono_ns() -> i64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => t.tv_sec() * 1_000_000_000 + t.tv_nsec(),
        // CLOCK_MONOTONIC always exists on Linux; a failure here is a broken system.
        Err(e) => panic!("clock_gettime(CLOCK_MONOTONIC): {e}"),
    }
}

/// Peak resident set size of this process in KiB (VmHWM).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
