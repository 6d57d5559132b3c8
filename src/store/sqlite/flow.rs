//! Flow control's statements: the pauses table, and the per-slice start counts of
//! rate-limited tools.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, Transaction};

use super::Ctx;
use super::codec::{parse_ts, ts};
use crate::error::StoreError;
use crate::flow::{Pause, PauseScope, Paused, Rate, Room, Window, room_in};
use crate::store::room;

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

/// A tool's slices that may still overlap a window: a range of the key (at most two windows'
/// worth of slices, 120 rows).
pub(crate) const SLICES: &str = "SELECT slice_start, slice_end, starts FROM tool_starts \
    WHERE tool = ?1 AND slice_start > ?2";
/// Forgets slices that left every window (a range of the key).
const FORGET: &str = "DELETE FROM tool_starts WHERE tool = ?1 AND slice_start <= ?2";
const RECORD: &str = "INSERT INTO tool_starts (tool, slice_start, slice_end, starts) \
    VALUES (?1, ?2, ?3, ?4) ON CONFLICT (tool, slice_start) DO UPDATE SET starts = starts + excluded.starts";

/// The window of `rate` for `tool` at `now` (see [`Window::of_slices`]): one range read of
/// at most a hundred-odd rows, whatever the rate.
pub fn window(
    conn: &Connection,
    tool: &str,
    rate: Rate,
    now: DateTime<Utc>,
) -> Result<Window, StoreError> {
    let mut stmt = conn.prepare_cached(SLICES).ctx("prepare rate window")?;
    let rows = stmt
        .query_map(rusqlite::params![tool, room::horizon(rate, now)], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .ctx("rate window")?
        .collect::<Result<Vec<_>, _>>()
        .ctx("read rate window")?;
    Ok(room::window_of_rows(rate, now, rows))
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

/// What `rate` allows `tool` at `now`, forgetting the slices that left every window first.
pub fn room_and_forget(
    tx: &Transaction<'_>,
    tool: &str,
    rate: Rate,
    now: DateTime<Utc>,
) -> Result<Room, StoreError> {
    tx.prepare_cached(FORGET)
        .ctx("prepare forget starts")?
        .execute([tool, &room::horizon(rate, now)])
        .ctx("forget starts")?;
    room(tx, tool, rate, now)
}

/// Adds starts to a rate-limited tool's counter for their slice.
pub(crate) fn record_starts(tx: &Transaction<'_>, s: &room::Starts<'_>) -> Result<(), StoreError> {
    tx.prepare_cached(RECORD)
        .ctx("prepare record starts")?
        .execute(rusqlite::params![s.tool, s.slice_start, s.slice_end, s.n])
        .ctx("record starts")?;
    Ok(())
}

/// When the window of the earliest of `rates` that is full now lets a start again (the
/// claim loop sleeps at most until then).
pub fn next_open(
    conn: &Connection,
    now: DateTime<Utc>,
    rates: &[(String, Rate)],
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let rooms = rates
        .iter()
        .map(|(tool, rate)| room(conn, tool, *rate, now))
        .collect::<Result<Vec<Room>, _>>()?;
    Ok(room::earliest_open(rooms))
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
