//! Background runs (`runs.background` = 1: spawn_background, a Background-mode tool): the
//! count of a session's active ones, the mark, and the insert within the session's limit.

use chrono::{DateTime, Utc};
use rusqlite::{Transaction, named_params};

use crate::error::StoreError;
use crate::run::Inserted;
use crate::store::run_params::{LimitedInsert, RunInsertLimited};
use crate::store::sqlite::codec::ts;
use crate::store::sqlite::{Ctx, approvals};

/// [`count_active_background`]'s statement.
pub(crate) const COUNT_ACTIVE_BACKGROUND: &str = "SELECT count(*) FROM (SELECT 1 FROM runs \
    INDEXED BY runs_background_idx WHERE background = 1 AND session_id = :session \
    AND (state = 'running' OR (state IN ('queued', 'awaiting_approval') AND run_at <= :now)) \
    AND id <> coalesce(:except, '') LIMIT :cap)";

/// Active background runs of `session` (`runs.background` = 1): queued or awaiting approval
/// and due at `now`, or running; not counting `except` (the calling spawn_background run).
/// Delayed runs are not active. Counts at most `cap` rows through `runs_background_idx`,
/// which holds background runs only, so neither the session's other runs nor the rest of the
/// queue are read.
pub fn count_active_background(
    conn: &rusqlite::Connection,
    session: &str,
    except: Option<&str>,
    now: DateTime<Utc>,
    cap: i64,
) -> Result<i64, StoreError> {
    conn.prepare_cached(COUNT_ACTIVE_BACKGROUND)
        .ctx("prepare count active background runs")?
        .query_row(
            named_params! {":session": session, ":except": except, ":now": ts(now), ":cap": cap},
            |r| r.get(0),
        )
        .ctx("count active background runs")
}

/// Marks a run just inserted as started in the background (`runs.background` = 1).
pub fn mark_background(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    tx.prepare_cached("UPDATE runs SET background = 1 WHERE id = ?1")
        .ctx("prepare mark background run")?
        .execute([id])
        .ctx("mark background run")?;
    Ok(())
}

/// Inserts one background run (`p.run`, its approval request already dropped when
/// `p.approval` is given) unless its session already has `p.limit` active ones
/// ([`crate::store::Engine::run_insert_within_limit`]); with `p.approval`, recorded as
/// approved before it is queued.
pub(crate) fn insert_within_limit(
    tx: &Transaction<'_>,
    p: &RunInsertLimited,
) -> Result<LimitedInsert, StoreError> {
    let run = &p.run;
    if let Some(limit) = p.limit {
        let session = run.session_id.as_str();
        let except = p.except.as_deref();
        if count_active_background(tx, session, except, p.now, limit)? >= limit {
            return Ok(LimitedInsert::OverSession(limit));
        }
    }
    let inserted = super::insert(tx, run)?;
    if let Inserted::New(id) = &inserted {
        mark_background(tx, id.as_str())?;
    }
    if let Some(a) = &p.approval {
        approvals::preapprove(tx, &approvals::Decision::of(a))?;
    }
    Ok(LimitedInsert::Inserted(inserted))
}
