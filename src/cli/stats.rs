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
    let now = ctx.client.now();
    let s = ctx.client.engine().stats_read(now).await?;
    let (counts, oldest, busy, live) =
        (s.by_state, s.oldest_queued, s.busy_retries, s.live_workers);
    // Liveness is judged as `toolq status` judges it (a row of a dead process is not live).
    let unserved = crate::status::status(&ctx.client, false)
        .await?
        .unserved_tools;
    let paused = ctx.client.pauses().await?;
    let info = ctx.client.engine().info().await?;
    let wal = ctx.client.wal_health().await?;
    if let Some(w) = &wal.warning {
        tracing::warn!("{w}");
    }
    let mut by_state = Map::new();
    for s in crate::run::RunState::ALL {
        let n = counts
            .iter()
            .find(|(k, _)| k == s.as_str())
            .map_or(0, |(_, n)| *n);
        by_state.insert(s.as_str().into(), n.into());
    }
    let oldest_age = oldest
        .as_deref()
        .and_then(crate::clock::parse_ts)
        .map(|t| (now - t).num_milliseconds().max(0) as f64 / 1000.0);
    // Unknown (a Postgres server, or a file that cannot be measured) is null, not 0.
    let size = ctx.client.engine().size_bytes();
    let v = json!({
        "runs": Value::Object(by_state.clone()),
        "oldest_queued_run_at": oldest,
        "oldest_queued_age_secs": oldest_age,
        "busy_retries": busy,
        "live_workers": live,
        "unserved_tools": unserved,
        "paused": paused,
        "db": ctx.client.engine().location(),
        "db_bytes": size,
        "wal_bytes": wal.wal_bytes,
        "wal_backlog_frames": wal.checkpoint.backlog(),
        "wal_warning": wal.warning,
        "journal_mode": info.journal_mode,
        "synchronous": info.synchronous,
        "sqlite": (!info.sqlite_version.is_empty()).then_some(&info.sqlite_version),
        "engine": info.engine,
        "server_version": info.server_version,
    });
    if ctx.json {
        render::json(&v);
        return Ok(());
    }
    let mut pairs: Vec<(&str, String)> = crate::run::RunState::ALL
        .iter()
        .map(|s| (s.as_str(), by_state[s.as_str()].to_string()))
        .collect();
    pairs.push((
        "oldest queued",
        oldest_age.map_or("-".into(), |a| {
            format!(
                "{} ago ({})",
                render::duration(std::time::Duration::from_secs_f64(a.max(0.0))),
                oldest.unwrap_or_default()
            )
        }),
    ));
    pairs.push(("busy retries", busy.to_string()));
    pairs.push(("live workers", live.to_string()));
    if ctx.client.is_postgres() {
        // A server: no file size, no WAL file of ours; its version and commit setting.
        pairs.push((
            "database",
            format!(
                "{} ({}, {})",
                v["db"].as_str().unwrap_or(""),
                info.server_version
                    .as_deref()
                    .map_or("postgres".to_string(), |v| format!("postgres {v}")),
                info.synchronous
            ),
        ));
    } else {
        pairs.push((
            "database",
            format!(
                "{} ({}, journal {}, synchronous {}, sqlite {})",
                v["db"].as_str().unwrap_or(""),
                size.map_or("size unknown".to_string(), |n| format!("{n} bytes")),
                info.journal_mode,
                info.synchronous,
                info.sqlite_version
            ),
        ));
        pairs.push(("wal", format!("{} bytes", wal.wal_bytes)));
    }
    let lines: Vec<String> = unserved.iter().map(|u| u.message()).collect();
    for line in &lines {
        pairs.push(("unserved", line.clone()));
    }
    for p in &paused {
        pairs.push(("paused", super::pause::describe(p)));
    }
    if let Some(w) = &wal.warning {
        pairs.push(("WARNING", w.clone()));
    }
    render::fields(&pairs);
    Ok(())
}
