//! Flow control on Postgres: the pauses table and the per-slice start counts of rate-limited
//! tools (the same tables and rules as the SQLite engine's).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::{exec, get, query, query_one};
use crate::clock::{parse_ts, ts};
use crate::error::StoreError;
use crate::flow::{Pause, PauseScope, Paused, Rate, Room, Slice, Window, room_in};

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
        &[&tool, &ts(rate.horizon(now))],
        "rate window",
    )
    .await?;
    let mut slices = Vec::new();
    for r in &rows {
        let (start, end, n): (String, String, i64) = (get(r, 0)?, get(r, 1)?, get(r, 2)?);
        if let (Some(start), Some(end)) = (parse_ts(&start), parse_ts(&end)) {
            slices.push(Slice {
                start,
                end,
                starts: n.max(0) as u64,
            });
        }
    }
    Ok(room_in(rate, &Window::of_slices(rate, now, &slices)))
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
        &[&tool, &ts(rate.horizon(now))],
        "forget starts",
    )
    .await?;
    room(c, tool, rate, now).await
}

/// Records `n` starts of a rate-limited tool at `now`, in its slice.
pub(crate) async fn record_starts<C: GenericClient>(
    c: &C,
    tool: &str,
    rate: Rate,
    now: DateTime<Utc>,
    n: u64,
) -> Result<(), StoreError> {
    let (start, end) = rate.slice_of(now);
    exec(
        c,
        "INSERT INTO tool_starts (tool, slice_start, slice_end, starts) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (tool, slice_start) DO UPDATE SET starts = tool_starts.starts + excluded.starts",
        &[&tool, &ts(start), &ts(end), &(n as i64)],
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
    let mut earliest: Option<DateTime<Utc>> = None;
    for (tool, rate) in rates {
        if let Some(at) = room(c, tool, *rate, now).await?.opens_at {
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
        }
    }
    Ok(earliest)
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
