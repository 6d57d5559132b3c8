//! Flow control's statements: the pauses table, and the starts ledger of rate-limited tools.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Transaction};

use super::Ctx;
use super::codec::{parse_ts, ts};
use crate::error::StoreError;
use crate::flow::{Pause, PauseScope, Paused, Rate, Room, Window, room_in};

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

/// The newest start of a tool: its number.
const LAST: &str = "SELECT seq FROM tool_starts WHERE tool = ?1 ORDER BY seq DESC LIMIT 1";
/// The first start inside the window: its number (one seek into the time index).
pub(crate) const FIRST_IN: &str = "SELECT seq FROM tool_starts INDEXED BY tool_starts_time_idx \
    WHERE tool = ?1 AND started_at > ?2 ORDER BY started_at LIMIT 1";
/// A start by number.
const AT: &str = "SELECT started_at FROM tool_starts WHERE tool = ?1 AND seq = ?2";
/// Forgets starts that left the window (a range of the time index).
const FORGET: &str = "DELETE FROM tool_starts WHERE tool = ?1 AND started_at <= ?2";
const RECORD: &str =
    "INSERT INTO tool_starts (tool, seq, started_at, run_id) VALUES (?1, ?2, ?3, ?4)";

fn last(conn: &Connection, tool: &str) -> Result<i64, StoreError> {
    Ok(conn
        .prepare_cached(LAST)
        .ctx("prepare last start")?
        .query_row([tool], |r| r.get::<_, i64>(0))
        .optional()
        .ctx("last start")?
        .unwrap_or(0))
}

/// The window of `rate` for `tool` at `now`: three seeks at most, whatever the rate. Starts
/// are numbered in claim order; the count assumes their times follow it (workers on one
/// host share its clock).
pub fn window(
    conn: &Connection,
    tool: &str,
    rate: Rate,
    now: DateTime<Utc>,
) -> Result<Window, StoreError> {
    let first: Option<i64> = conn
        .prepare_cached(FIRST_IN)
        .ctx("prepare rate window")?
        .query_row(rusqlite::params![tool, ts(now - rate.window)], |r| r.get(0))
        .optional()
        .ctx("rate window")?;
    let Some(first) = first else {
        return Ok(Window {
            starts: 0,
            nth_newest: None,
        });
    };
    let last = last(conn, tool)?;
    let starts = (last - first + 1).max(0) as u64;
    let nth_newest = if starts >= u64::from(rate.count) {
        let at: Option<String> = conn
            .prepare_cached(AT)
            .ctx("prepare start by number")?
            .query_row(
                rusqlite::params![tool, last - i64::from(rate.count) + 1],
                |r| r.get(0),
            )
            .optional()
            .ctx("start by number")?;
        at.as_deref().and_then(parse_ts)
    } else {
        None
    };
    Ok(Window { starts, nth_newest })
}

/// What `rate` allows `tool` at `now` (reads only).
pub fn room(
    conn: &Connection,
    tool: &str,
    rate: Rate,
    now: DateTime<Utc>,
) -> Result<Room, StoreError> {
    Ok(room_in(rate, &window(conn, tool, rate, now)?))
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

/// Records a start of a rate-limited tool under the next number.
pub fn record_start(
    tx: &Transaction<'_>,
    tool: &str,
    now: DateTime<Utc>,
    run_id: &str,
) -> Result<(), StoreError> {
    let seq = last(tx, tool)? + 1;
    tx.prepare_cached(RECORD)
        .ctx("prepare record start")?
        .execute(rusqlite::params![tool, seq, ts(now), run_id])
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
