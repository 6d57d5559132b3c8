//! Flow control on Postgres: the pauses table and the per-slice start counts of rate-limited
//! tools (the same tables and rules as the SQLite engine's).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::{exec, get, query, query_one};
use crate::clock::{parse_ts, ts};
use crate::error::StoreError;
use crate::flow::{Pause, PauseScope, Paused, Rate, Room};
use crate::store::room;

/// Every pause in force, oldest first.
pub(crate) async fn list<C: GenericClient>(c: &C) -> Result<Vec<Pause>, StoreError> {
    let rows = query(
        c,
        "SELECT scope, value, since, by, reason FROM pauses ORDER BY since, scope, value",
        &[],
        "pauses",
    )
    .await?;
    let mut out = Vec::new();
    for r in &rows {
        let (kind, value, since): (String, String, String) = (get(r, 0)?, get(r, 1)?, get(r, 2)?);
        if let (Some(scope), Some(since)) =
            (PauseScope::from_stored(&kind, &value), parse_ts(&since))
        {
            out.push(Pause {
                scope,
                since,
                by: get(r, 3)?,
                reason: get(r, 4)?,
            });
        }
    }
    Ok(out)
}

/// The pauses as a claim applies them.
pub(crate) async fn paused<C: GenericClient>(c: &C) -> Result<Paused, StoreError> {
    Ok(Paused::of(&list(c).await?))
}

/// Records a pause unless one of the same scope exists; whether it is new.
pub(crate) async fn pause<C: GenericClient>(c: &C, p: &Pause) -> Result<bool, StoreError> {
    let n = exec(
        c,
        "INSERT INTO pauses (scope, value, since, by, reason) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (scope, value) DO NOTHING",
        &[
            &p.scope.kind(),
            &p.scope.value(),
            &ts(p.since),
            &p.by,
            &p.reason,
        ],
        "pause",
    )
    .await?;
    Ok(n == 1)
}

/// Removes a pause; returns it if it existed.
pub(crate) async fn resume<C: GenericClient>(
    c: &C,
    scope: &PauseScope,
) -> Result<Option<Pause>, StoreError> {
    let found = list(c).await?.into_iter().find(|p| &p.scope == scope);
    if found.is_some() {
        exec(
            c,
            "DELETE FROM pauses WHERE scope = $1 AND value = $2",
            &[&scope.kind(), &scope.value()],
            "resume",
        )
        .await?;
    }
    Ok(found)
}

/// What `rate` allows `tool` at `now` (reads only).
pub(crate) async fn room<C: GenericClient>(
    c: &C,
    tool: &str,
    rate: Rate,
    now: DateTime<Utc>,
) -> Result<Room, StoreError> {
    let rows = query(
        c,
        "SELECT slice_start, slice_end, starts FROM tool_starts WHERE tool = $1 AND slice_start > $2",
        &[&tool, &room::horizon(rate, now)],
        "rate window",
    )
    .await?;
    let rows = rows
        .iter()
        .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?)))
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(room::room_of_rows(rate, now, rows))
}

/// [`room`], forgetting the slices that left every window first (under the claim lock).
pub(crate) async fn room_and_forget<C: GenericClient>(
    c: &C,
    tool: &str,
    rate: Rate,
    now: DateTime<Utc>,
) -> Result<Room, StoreError> {
    exec(
        c,
        "DELETE FROM tool_starts WHERE tool = $1 AND slice_start <= $2",
        &[&tool, &room::horizon(rate, now)],
        "forget starts",
    )
    .await?;
    room(c, tool, rate, now).await
}

/// Adds starts to a rate-limited tool's counter for their slice.
pub(crate) async fn record_starts<C: GenericClient>(
    c: &C,
    s: &room::Starts<'_>,
) -> Result<(), StoreError> {
    exec(
        c,
        "INSERT INTO tool_starts (tool, slice_start, slice_end, starts) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (tool, slice_start) DO UPDATE SET starts = tool_starts.starts + excluded.starts",
        &[&s.tool, &s.slice_start, &s.slice_end, &s.n],
        "record starts",
    )
    .await?;
    Ok(())
}

/// The earliest time a full window among `rates` opens.
pub(crate) async fn next_open<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
    rates: &[(String, Rate)],
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let mut rooms = Vec::with_capacity(rates.len());
    for (tool, rate) in rates {
        rooms.push(room(c, tool, *rate, now).await?);
    }
    Ok(room::earliest_open(rooms))
}

/// Running runs of `tool` over all workers.
pub(crate) async fn running<C: GenericClient>(c: &C, tool: &str) -> Result<i64, StoreError> {
    get(
        &query_one(
            c,
            "SELECT count(*) FROM runs WHERE state = 'running' AND tool = $1",
            &[&tool],
            "running of tool",
        )
        .await?,
        0,
    )
}
