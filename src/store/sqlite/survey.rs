//! What a claim reads before it picks, on SQLite: the running counts per session and per
//! tool over all workers, and the sessions with queued runs of the worker's unpaused tools
//! (visited round-robin after the cursor), each with those tools. A claim reads it in its
//! transaction; `super::claim::may_claim` reads it without the write lock.

use rusqlite::{Connection, OptionalExtension};

use super::Ctx;
use crate::error::StoreError;
use crate::flow::Paused;
use crate::store::claim_plan::{self, Running};

// See the note on the claim's queries in `super::claim`: INDEXED BY pins the index each is
// built on, whatever the statistics say.
pub(crate) const RUNNING_PER_SESSION: &str = "SELECT session_id, tool, count(*) FROM runs \
    INDEXED BY runs_running_owner_idx WHERE state = 'running' GROUP BY session_id, tool";
const NEXT_SESSION: &str = "SELECT session_id FROM runs INDEXED BY runs_claimable_idx \
    WHERE state = 'queued' AND session_id > ?1 ORDER BY session_id LIMIT 1";
pub(crate) const NEXT_TOOL: &str = "SELECT tool FROM runs INDEXED BY runs_claimable_idx \
    WHERE state = 'queued' AND session_id = ?1 AND tool > ?2 ORDER BY tool LIMIT 1";

/// What a claim reads before it picks.
pub(crate) struct Survey {
    /// Running runs per session and per tool, over all workers.
    pub running: Running,
    /// The sessions to visit, in order, each with its queued tools this worker has.
    pub sessions: Vec<(String, Vec<String>)>,
}

/// Reads the [`Survey`] on `conn` (a claim's transaction or a reader) for a claim of at most
/// `max` runs of `tools`, visiting sessions after `after_session` first; None when everything
/// is paused.
pub(crate) fn survey(
    conn: &Connection,
    tools: &[String],
    max: usize,
    after_session: Option<&str>,
) -> Result<Option<Survey>, StoreError> {
    // Pauses: a handful of rows, read by every claim so every worker honours them at once.
    let paused = super::flow::paused(conn)?;
    let Some(wanted) = claim_plan::wanted(&paused, tools) else {
        return Ok(None);
    };
    let running = running(conn)?;
    let sessions = sessions(conn, (max, after_session), &paused, &wanted)?;
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

/// The sessions that have queued runs of `wanted` (sorted), starting after the cursor and
/// wrapping around, each index probe a skip to the next distinct session; sessions with none
/// of those tools, and paused ones, do not count.
fn sessions(
    conn: &Connection,
    (max, after_session): (usize, Option<&str>),
    paused: &Paused,
    wanted: &[String],
) -> Result<Vec<(String, Vec<String>)>, StoreError> {
    let max_sessions = claim_plan::max_sessions(max);
    let mut next_session = conn
        .prepare_cached(NEXT_SESSION)
        .ctx("prepare next session")?;
    let mut next_tool = conn.prepare_cached(NEXT_TOOL).ctx("prepare next tool")?;
    let start = after_session.unwrap_or("").to_string();
    let mut sessions: Vec<(String, Vec<String>)> = Vec::new();
    let mut cursor = start.clone();
    let mut wrapped = false;
    while sessions.len() < max_sessions {
        let next: Option<String> = next_session
            .query_row([&cursor], |r| r.get(0))
            .optional()
            .ctx("next session")?;
        match next {
            Some(s) if wrapped && s > start => break,
            Some(s) => {
                cursor.clone_from(&s);
                if paused.sessions.contains(&s) {
                    continue;
                }
                let tools = session_tools(&mut next_tool, &s, wanted)?;
                if !tools.is_empty() {
                    sessions.push((s, tools));
                }
            }
            None if !wrapped && !start.is_empty() => {
                wrapped = true;
                cursor.clear();
            }
            None => break,
        }
    }
    Ok(sessions)
}

/// The tools among `wanted` (sorted) that `session` has queued runs of: one index probe per
/// distinct queued tool of the session, plus one.
fn session_tools(
    next_tool: &mut rusqlite::CachedStatement<'_>,
    session: &str,
    wanted: &[String],
) -> Result<Vec<String>, StoreError> {
    let (mut found, mut after) = (Vec::new(), String::new());
    while let Some(tool) = next_tool
        .query_row([session, &after], |r| r.get::<_, String>(0))
        .optional()
        .ctx("next tool of session")?
    {
        if wanted.binary_search(&tool).is_ok() {
            found.push(tool.clone());
        }
        after = tool;
    }
    Ok(found)
}
