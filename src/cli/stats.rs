//! `toolq stats`: counts by state, oldest queued run, busy retries, database settings, and
//! queued runs of tools no live worker has.

use serde_json::{Map, Value, json};

use super::{Ctx, render};
use crate::error::Result;

/// Flags of `stats` (none).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Prints the figures.
pub async fn run(ctx: &Ctx, _args: Args) -> Result<()> {
    let f = gather(ctx).await?;
    if let Some(w) = &f.wal.warning {
        tracing::warn!("{w}");
    }
    if ctx.json {
        render::json(&json_of(&f));
        return Ok(());
    }
    let mut pairs: Vec<(&str, String)> = crate::run::RunState::ALL
        .iter()
        .map(|s| (s.as_str(), f.by_state[s.as_str()].to_string()))
        .collect();
    if f.waiting > 0 {
        pairs.push((
            "waiting",
            format!(
                "{} of the queued runs are suspended (a sleep, an event, a snooze, a next check)",
                f.waiting
            ),
        ));
    }
    pairs.push((
        "oldest queued",
        f.oldest_age.map_or("-".into(), |a| {
            format!(
                "{} ago ({})",
                render::duration(std::time::Duration::from_secs_f64(a.max(0.0))),
                f.oldest.clone().unwrap_or_default()
            )
        }),
    ));
    pairs.push(("busy retries", f.busy.to_string()));
    pairs.push(("live workers", f.live.to_string()));
    pairs.extend(database_pairs(&f));
    for u in &f.unserved {
        pairs.push(("unserved", u.message()));
    }
    for p in &f.paused {
        pairs.push(("paused", super::pause::describe(p)));
    }
    if let Some(w) = &f.wal.warning {
        pairs.push(("WARNING", w.clone()));
    }
    render::fields(&pairs);
    Ok(())
}

/// Everything `stats` reports, read once.
struct Figures {
    /// Runs per state, every state present.
    by_state: Map<String, Value>,
    oldest: Option<String>,
    oldest_age: Option<f64>,
    busy: i64,
    live: usize,
    waiting: i64,
    unserved: Vec<crate::status::UnservedTool>,
    paused: Vec<crate::flow::Pause>,
    info: crate::store::DbInfo,
    wal: crate::store::WalHealth,
    /// Unknown (a Postgres server, or a file that cannot be measured) is None, not 0.
    size: Option<u64>,
    db: String,
    postgres: bool,
}

/// Reads the figures.
async fn gather(ctx: &Ctx) -> Result<Figures> {
    let now = ctx.client.now();
    let s = ctx.client.engine().stats_read(now).await?;
    // Liveness is judged as `toolq status` judges it: the row of a process killed with -9
    // is not live, though nobody has marked it stopped yet.
    let health = crate::status::status(&ctx.client, false).await?;
    let paused = ctx.client.pauses().await?;
    let info = ctx.client.engine().info().await?;
    let wal = ctx.client.wal_health().await?;
    let mut by_state = Map::new();
    for state in crate::run::RunState::ALL {
        let n = s
            .by_state
            .iter()
            .find(|(k, _)| k == state.as_str())
            .map_or(0, |(_, n)| *n);
        by_state.insert(state.as_str().into(), n.into());
    }
    let oldest_age = s
        .oldest_queued
        .as_deref()
        .and_then(crate::clock::parse_ts)
        .map(|t| (now - t).num_milliseconds().max(0) as f64 / 1000.0);
    Ok(Figures {
        by_state,
        oldest: s.oldest_queued,
        oldest_age,
        busy: s.busy_retries,
        live: health.live_workers,
        waiting: s.waiting,
        unserved: health.unserved_tools,
        paused,
        info,
        wal,
        size: ctx.client.engine().size_bytes(),
        db: ctx.client.engine().location(),
        postgres: ctx.client.is_postgres(),
    })
}

/// The figures as `--json` prints them.
fn json_of(f: &Figures) -> Value {
    let info = &f.info;
    json!({
        "runs": Value::Object(f.by_state.clone()),
        "oldest_queued_run_at": f.oldest,
        "oldest_queued_age_secs": f.oldest_age,
        "waiting": f.waiting,
        "busy_retries": f.busy,
        "live_workers": f.live,
        "unserved_tools": f.unserved,
        "paused": f.paused,
        "db": f.db,
        "db_bytes": f.size,
        "wal_bytes": f.wal.wal_bytes,
        "wal_backlog_frames": f.wal.checkpoint.backlog(),
        "wal_warning": f.wal.warning,
        "journal_mode": info.journal_mode,
        "synchronous": info.synchronous,
        "sqlite": (!info.sqlite_version.is_empty()).then_some(&info.sqlite_version),
        "engine": info.engine,
        "server_version": info.server_version,
    })
}

/// The database line (and the WAL's, on SQLite).
fn database_pairs(f: &Figures) -> Vec<(&'static str, String)> {
    let info = &f.info;
    if f.postgres {
        // A server: no file size, no WAL file of ours; its version and commit setting.
        let version = info
            .server_version
            .as_deref()
            .map_or("postgres".to_string(), |v| format!("postgres {v}"));
        return vec![(
            "database",
            format!("{} ({version}, {})", f.db, info.synchronous),
        )];
    }
    vec![
        (
            "database",
            format!(
                "{} ({}, journal {}, synchronous {}, sqlite {})",
                f.db,
                f.size
                    .map_or("size unknown".to_string(), |n| format!("{n} bytes")),
                info.journal_mode,
                info.synchronous,
                info.sqlite_version
            ),
        ),
        ("wal", format!("{} bytes", f.wal.wal_bytes)),
    ]
}
