//! Flow control's statements: the pauses table, and the starts ledger of rate-limited tools.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, Transaction};

use super::Ctx;
use super::codec::{parse_ts, ts};
use crate::error::StoreError;
use crate::flow::{Pause, PauseScope, Paused, Rate, Room};

const LIST: &str =
    "SELECT scope, value, since, by, reason FROM pauses ORDER BY since, scope, value";

/// Every pause in force, oldest first. The table holds a handful of rows.
pub fn list(conn: &Connection) -> Result<Vec<Pause>, StoreError> {
    let mut stmt = conn.prepare_cached(LIST).ctx("prepare pauses")?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, Option<String>>(4)?,
            ))
        })
        .ctx("pauses")?;
    let mut out = Vec::new();
    for row in rows {
        let (kind, value, since, by, reason) = row.ctx("read pause")?;
        // A kind this build does not know (a newer writer) is ignored, not guessed at.
        if let (Some(scope), Some(since)) =
            (PauseScope::from_stored(&kind, &value), parse_ts(&since))
        {
            out.push(Pause {
                scope,
                since,
                by,
                reason,
            });
        }
    }
    Ok(out)
}

/// The pauses as a claim applies them.
pub fn paused(conn: &Connection) -> Result<Paused, StoreError> {
    Ok(Paused::of(&list(conn)?))
}

/// Records a pause; an existing pause of the same scope is kept as it was (its `since` and
/// `by` stay true). Returns whether it is new.
pub fn pause(tx: &Transaction<'_>, p: &Pause) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(
            "INSERT INTO pauses (scope, value, since, by, reason) VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (scope, value) DO NOTHING",
        )
        .ctx("prepare pause")?
        .execute(rusqlite::params![
            p.scope.kind(),
            p.scope.value(),
            ts(p.since),
            p.by,
            p.reason
        ])
        .ctx("pause")?;
    Ok(n == 1)
}

/// Removes a pause; returns it if it existed.
pub fn resume(tx: &Transaction<'_>, scope: &PauseScope) -> Result<Option<Pause>, StoreError> {
    let found = list(tx)?.into_iter().find(|p| &p.scope == scope);
    if found.is_some() {
        tx.prepare_cached("DELETE FROM pauses WHERE scope = ?1 AND value = ?2")
            .ctx("prepare resume")?
            .execute([scope.kind(), scope.value()])
            .ctx("resume")?;
    }
    Ok(found)
}

/// The starts of `tool` within the window of `rate` before `now`, oldest first: a range of
/// the ledger's key.
pub(crate) const WINDOW: &str =
    "SELECT started_at FROM tool_starts WHERE tool = ?1 AND started_at > ?2 ORDER BY started_at";
/// Forgets starts that left the window (also a range of the key).
const FORGET: &str = "DELETE FROM tool_starts WHERE tool = ?1 AND started_at <= ?2";
const RECORD: &str =
    "INSERT OR IGNORE INTO tool_starts (tool, started_at, run_id) VALUES (?1, ?2, ?3)";

/// What `rate` allows `tool` at `now` (reads the window only).
pub fn room(
    conn: &Connection,
    tool: &str,
    rate: Rate,
    now: DateTime<Utc>,
) -> Result<Room, StoreError> {
    let from = ts(now - rate.window);
    let mut stmt = conn.prepare_cached(WINDOW).ctx("prepare rate window")?;
    let rows = stmt
        .query_map([tool, &from], |r| r.get::<_, String>(0))
        .ctx("rate window")?;
    let mut recent = Vec::new();
    for row in rows {
        if let Some(t) = parse_ts(&row.ctx("read rate window")?) {
            recent.push(t);
        }
    }
    Ok(crate::flow::room(rate, now, &recent))
}

/// What `rate` allows `tool` at `now`, forgetting the starts that left the window first.
pub fn room_and_forget(
    tx: &Transaction<'_>,
    tool: &str,
    rate: Rate,
    now: DateTime<Utc>,
) -> Result<Room, StoreError> {
    tx.prepare_cached(FORGET)
        .ctx("prepare forget starts")?
        .execute([tool, &ts(now - rate.window)])
        .ctx("forget starts")?;
    room(tx, tool, rate, now)
}

/// Records a start of a rate-limited tool.
pub fn record_start(
    tx: &Transaction<'_>,
    tool: &str,
    now: DateTime<Utc>,
    run_id: &str,
) -> Result<(), StoreError> {
    tx.prepare_cached(RECORD)
        .ctx("prepare record start")?
        .execute([tool, &ts(now), run_id])
        .ctx("record start")?;
    Ok(())
}

/// When the window of the earliest of `rates` that is full now lets a start again (the
/// claim loop sleeps at most until then).
pub fn next_open(
    conn: &Connection,
    now: DateTime<Utc>,
    rates: &[(String, Rate)],
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let mut earliest: Option<DateTime<Utc>> = None;
    for (tool, rate) in rates {
        if let Some(at) = room(conn, tool, *rate, now)?.opens_at {
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
        }
    }
    Ok(earliest)
}

/// Running runs of `tool` over all workers (the small running-owner index, read whole).
pub fn running(conn: &Connection, tool: &str) -> Result<i64, StoreError> {
    conn.prepare_cached(
        "SELECT count(*) FROM runs INDEXED BY runs_running_owner_idx WHERE state = 'running' AND tool = ?1",
    )
    .ctx("prepare running of tool")?
    .query_row([tool], |r| r.get(0))
    .ctx("running of tool")
}
