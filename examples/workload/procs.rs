//! Modes with P worker processes on one database (toolq's own), each with the workload's
//! concurrency. The processes are started and open the database first; the clock starts when
//! all are ready and told to go, and stops when the database has no unfinished run. Each mode
//! with P = 1 measures one process the same way, so the two compare like with like. SQLite
//! files and `postgres://` URLs alike.
//!
//! - `drain-procs-P`: the drain of the database an enqueue mode left (one session, the
//!   per-session limit at the concurrency, as `drain`); `drain-part` is its child.
//! - `drain-sessions-procs-P` / `drain-sessions-64-procs-P`: the drain of `count` runs over
//!   [`SESSIONS`] sessions (seeded by `enqueue-sessions`, a child), with the default
//!   per-session limit (5) or 64, as `drain-sessions` and `drain-sessions-64`.
//! - `drain-sleep-procs-P`: `count` runs in one session (seeded by `enqueue-batch`, a child)
//!   whose tool sleeps [`SLEEP`] (a tokio sleep: the slot stays taken), the per-session limit
//!   at 16 x P (or the slots of all processes, if more) so that it never binds: where hosts
//!   should add throughput.
//!
//! The children are `part-TOOL-LIMIT` (TOOL `noop` or `sleep`, LIMIT the per-session limit
//! or `default`).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;
use toolq::WorkerOptions;

use crate::durable::child;
use crate::throughput::{connect_checks, round, verify_on, wait_finished};
use crate::{Noop, Recorder, Sleepy, Tune, open, open_tuned, peak_rss_kib, with_info};

pub use crate::sessions::SESSIONS;

/// How long each run of `drain-sleep-procs-P` sleeps.
pub const SLEEP: Duration = Duration::from_millis(20);

/// What the draining children of a mode run: their tool and their per-session limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `drain-part`: the no-op tool, the per-session limit at the concurrency.
    Drain,
    /// `part-noop-LIMIT` / `part-sleep-LIMIT`: the no-op tool or the sleeping one, with this
    /// per-session limit (`None`: the default).
    Tuned {
        /// Whether the tool sleeps [`SLEEP`].
        sleep: bool,
        /// The per-session limit; `None`: the default.
        per_session: Option<i64>,
    },
}

impl Part {
    /// The child's mode name.
    fn mode(self) -> String {
        match self {
            Part::Drain => "drain-part".to_string(),
            Part::Tuned { sleep, per_session } => format!(
                "part-{}-{}",
                if sleep { "sleep" } else { "noop" },
                per_session.map_or("default".to_string(), |n| n.to_string())
            ),
        }
    }

    /// Parses a child's mode name (`drain-part`, `part-noop-5`, `part-sleep-default`).
    pub fn parse(mode: &str) -> Option<Part> {
        if mode == "drain-part" {
            return Some(Part::Drain);
        }
        let (tool, limit) = mode.strip_prefix("part-")?.split_once('-')?;
        let sleep = match tool {
            "noop" => false,
            "sleep" => true,
            _ => return None,
        };
        let per_session = match limit {
            "default" => None,
            n => Some(n.parse().ok()?),
        };
        Some(Part::Tuned { sleep, per_session })
    }
}

/// A multi-process mode parsed from its name: `drain-procs-P`, `drain-sessions-procs-P`,
/// `drain-sessions-64-procs-P`, `drain-sleep-procs-P`.
pub fn parse_mode(mode: &str) -> Option<anyhow::Result<(Kind, usize)>> {
    let (kind, p) = [
        ("drain-procs-", Kind::Drain),
        ("drain-sessions-procs-", Kind::Sessions(None)),
        ("drain-sessions-64-procs-", Kind::Sessions(Some(64))),
        ("drain-sleep-procs-", Kind::Sleep),
    ]
    .into_iter()
    .find_map(|(prefix, kind)| mode.strip_prefix(prefix).map(|p| (kind, p)))?;
    Some(
        p.parse()
            .map(|p| (kind, p))
            .map_err(|e| anyhow::anyhow!("mode {mode:?}: process count {p:?}: {e}")),
    )
}

/// The kinds of multi-process modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `drain-procs-P`.
    Drain,
    /// `drain-sessions[-64]-procs-P`, with this per-session limit (`None`: the default).
    Sessions(Option<i64>),
    /// `drain-sleep-procs-P`.
    Sleep,
}

/// Runs the multi-process mode `kind` with `procs` processes: seeds the database where the
/// mode does, then times the drain.
pub async fn run(
    db: &Path,
    (n, concurrency): (usize, usize),
    kind: Kind,
    procs: usize,
) -> anyhow::Result<Value> {
    anyhow::ensure!(
        procs >= 1,
        "a multi-process mode needs at least one process"
    );
    let (part, mode, seed) = match kind {
        Kind::Drain => (Part::Drain, format!("drain-procs-{procs}"), None),
        Kind::Sessions(per_session) => {
            let sleep = false;
            let limit = per_session.map_or(String::new(), |n| format!("-{n}"));
            let mode = format!("drain-sessions{limit}-procs-{procs}");
            (
                Part::Tuned { sleep, per_session },
                mode,
                Some("enqueue-sessions"),
            )
        }
        Kind::Sleep => {
            let per_session = Some((16 * procs).max(concurrency * procs) as i64);
            let part = Part::Tuned {
                sleep: true,
                per_session,
            };
            (
                part,
                format!("drain-sleep-procs-{procs}"),
                Some("enqueue-batch"),
            )
        }
    };
    if let Some(seed) = seed {
        let v = child(seed, db, n, concurrency).await?;
        eprintln!("seeded: {v}");
    }
    let mut v = drain(db, (n, concurrency), part, procs).await?;
    v["mode"] = json!(mode);
    if let Part::Tuned { per_session, .. } = part {
        v["per_session"] =
            json!(per_session.unwrap_or(toolq::Config::default().worker.per_session));
    }
    if matches!(kind, Kind::Sessions(_)) {
        v["sessions"] = json!(SESSIONS);
    }
    if kind == Kind::Sleep {
        v["sleep_ms"] = json!(SLEEP.as_millis() as u64);
    }
    Ok(v)
}

/// The parent: starts `procs` children of `part` on `db` (seeded already), times the drain.
pub async fn drain(
    db: &Path,
    (n, concurrency): (usize, usize),
    part: Part,
    procs: usize,
) -> anyhow::Result<Value> {
    let sql = connect_checks(db).await?;
    anyhow::ensure!(procs >= 1, "drain-procs needs at least one process");
    let exe = std::env::current_exe().context("path of this program")?;
    let mut children = Vec::with_capacity(procs);
    for _ in 0..procs {
        let mut child = tokio::process::Command::new(&exe)
            .arg(part.mode())
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
    wait_finished(&client, sql.as_ref()).await?;
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
    let done = verify_on(&client, sql.as_ref()).await?;
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
pub async fn part(db: &Path, concurrency: usize, part: Part) -> anyhow::Result<Value> {
    let recorder = Recorder::counting();
    let client = match part {
        Part::Drain => open(db, concurrency, recorder.clone())?,
        Part::Tuned { sleep, per_session } => {
            let tune = Tune {
                limited: false,
                per_session,
            };
            if sleep {
                open_tuned(db, concurrency, Sleepy(recorder.clone(), SLEEP), tune)?
            } else {
                open_tuned(db, concurrency, Noop(recorder.clone()), tune)?
            }
        }
    };
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
