//! What a claim reads before it picks, on SQLite: the running counts per session and per
//! tool over all workers, and the sessions with queued runs of the worker's unpaused tools
//! (visited round-robin after the cursor), each with those tools and each tool's first queued
//! run (its head in the session, when due): about one index seek per session and tool. A claim
//! reads it in its transaction; `super::claim::may_claim` reads it without the write lock,
//! stopping at the first session it could take a run from.

use rusqlite::{Connection, OptionalExtension};

use super::Ctx;
use crate::error::StoreError;
use crate::flow::Paused;
use crate::store::claim_plan::{self, Running};
use crate::store::pick::Head;

// See the note on the claim's queries in `super::claim`: INDEXED BY pins the index each is
// built on, whatever the statistics say.
pub(crate) const RUNNING_PER_SESSION: &str = "SELECT session_id, tool, count(*) FROM runs \
    INDEXED BY runs_running_owner_idx WHERE state = 'running' GROUP BY session_id, tool";
/// The first queued (session, tool) pair after a session, with its first run in the
/// claimable index's order (its head, when that run is due): one seek.
pub(crate) const NEXT_SESSION: &str = "SELECT session_id, tool, priority, run_at, id, rowid \
    FROM runs INDEXED BY runs_claimable_idx WHERE state = 'queued' AND session_id > ?1 \
    ORDER BY session_id, tool, priority DESC, run_at, id LIMIT 1";
/// [`NEXT_SESSION`] for the session's next queued tool after one: with it, a walk of every
/// session's tools and heads costs about one seek per (session, tool) pair. (A row
/// value `(session_id, tool) > (?1, ?2)` would be one statement, but SQLite seeks it by
/// `session_id` alone and steps over every run of the session.)
pub(crate) const NEXT_TOOL: &str = "SELECT session_id, tool, priority, run_at, id, rowid \
    FROM runs INDEXED BY runs_claimable_idx WHERE state = 'queued' AND session_id = ?1 \
    AND tool > ?2 ORDER BY tool, priority DESC, run_at, id LIMIT 1";

/// A visited session: its id and its queued tools this worker has, each with its first run
/// in the claimable index's order (priority, then age: the tool's head in the session when
/// it is due; a later one may be due when it is not).
pub(crate) type Visited = (String, Vec<(String, Head<i64>)>);

/// What a claim reads before it picks.
pub(crate) struct Survey {
    /// Running runs per session and per tool, over all workers.
    pub running: Running,
    /// The sessions to visit, in order.
    pub sessions: Vec<Visited>,
}

/// Reads the [`Survey`] on `conn` (a claim's transaction or a reader) for a claim of at most
/// `max` runs of `tools`, visiting sessions after `after_session` first; None when everything
/// is paused. The walk stops early once `enough` says so of the running counts and a
/// visited session (a reader asking whether a claim could take anything stops at the first
/// session that can).
pub(crate) fn survey(
    conn: &Connection,
    tools: &[String],
    (max, after_session): (usize, Option<&str>),
    enough: impl FnMut(&Running, &Visited) -> bool,
) -> Result<Option<Survey>, StoreError> {
    // Pauses: a handful of rows, read by every claim so every worker honours them at once.
    let paused = super::flow::paused(conn)?;
    let Some(wanted) = claim_plan::wanted(&paused, tools) else {
        return Ok(None);
    };
    let running = running(conn)?;
    let sessions = sessions(
        conn,
        (max, after_session),
        (&paused, &wanted),
        &running,
        enough,
    )?;
    Ok(Some(Survey { running, sessions }))
}

fn running(conn: &Connection) -> Result<Running, StoreError> {
    let mut stmt = conn
        .prepare_cached(RUNNING_PER_SESSION)
        .ctx("prepare running count")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .ctx("count running")?
        .collect::<Result<Vec<_>, _>>()
        .ctx("read running count")?;
    Ok(Running::of(rows))
}

/// A queued pair as [`NEXT_SESSION`] and [`NEXT_TOOL`] read it: (session, its first run).
fn pair(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, Head<i64>)> {
    Ok((
        r.get(0)?,
        Head {
            tool: r.get(1)?,
            priority: r.get(2)?,
            run_at: r.get(3)?,
            id: r.get(4)?,
            key: r.get(5)?,
        },
    ))
}

/// The sessions that have queued runs of `wanted` (sorted), starting after the cursor and
/// wrapping around, at most `claim_plan::max_sessions(max)` of them, each with those tools
/// and their first runs: one index seek per queued (session, tool) pair, and one more per
/// session that has tools after the worker's last. Sessions with none of those tools, and
/// paused ones, do not count.
fn sessions(
    conn: &Connection,
    (max, after_session): (usize, Option<&str>),
    (paused, wanted): (&Paused, &[String]),
    running: &Running,
    mut enough: impl FnMut(&Running, &Visited) -> bool,
) -> Result<Vec<Visited>, StoreError> {
    let max_sessions = claim_plan::max_sessions(max);
    let mut next_session = conn
        .prepare_cached(NEXT_SESSION)
        .ctx("prepare next session")?;
    let mut next_tool = conn.prepare_cached(NEXT_TOOL).ctx("prepare next tool")?;
    let start = after_session.unwrap_or("").to_string();
    let mut sessions: Vec<Visited> = Vec::new();
    // The session being walked; the next probe: the first pair after a session (`jump`), else
    // the pair after the last one seen (`at`).
    let mut current: Option<Visited> = None;
    let mut jump = Some(start.clone());
    let mut at = (String::new(), String::new());
    let mut wrapped = false;
    loop {
        let row = match jump.take() {
            Some(after) => next_session.query_row([&after], pair),
            None => match next_tool.query_row([&at.0, &at.1], pair) {
                Err(rusqlite::Error::QueryReturnedNoRows) => next_session.query_row([&at.0], pair),
                other => other,
            },
        }
        .optional()
        .ctx("next queued session and tool")?;
        let Some((session, head)) = row else {
            if !wrapped && !start.is_empty() {
                wrapped = true;
                jump = Some(String::new());
                continue;
            }
            break;
        };
        if wrapped && session > start {
            break;
        }
        if current.as_ref().is_none_or(|(s, _)| *s != session) {
            if let Some(done) = current.take().filter(|(_, tools)| !tools.is_empty()) {
                sessions.push(done);
                if sessions.last().is_some_and(|v| enough(running, v)) {
                    return Ok(sessions);
                }
            }
            if sessions.len() >= max_sessions {
                break;
            }
            if paused.sessions.contains(&session) {
                jump = Some(session);
                continue;
            }
            current = Some((session.clone(), Vec::new()));
        }
        // Past the last tool the worker has, the session has nothing more for it: on to the
        // next session without probing its other tools (one seek per session, not two, for a
        // worker whose tools all sort before those the session has left).
        let last_wanted = wanted.last().is_none_or(|w| head.tool >= *w);
        if last_wanted {
            jump = Some(session.clone());
        }
        at = (session, head.tool.clone());
        if wanted.binary_search(&head.tool).is_ok()
            && let Some((_, tools)) = current.as_mut()
        {
            tools.push((head.tool.clone(), head));
        }
    }
    if let Some(done) = current.filter(|(_, tools)| !tools.is_empty())
        && sessions.len() < max_sessions
    {
        sessions.push(done);
    }
    Ok(sessions)
}
