//! Claiming runnable runs under the per-session limit, heartbeating leases, and fenced
//! progress writes while a run executes.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Transaction, named_params};
use std::collections::HashMap;

use super::Ctx;
use super::codec::{RUN_COLUMNS, run_from_row, ts};
use crate::error::StoreError;
use crate::run::Run;
use crate::store::ProgressWrite;
use crate::store::pick::{Head, pick};

/// Parameters of one claim.
#[derive(Debug, Clone)]
pub struct ClaimParams<'a> {
    /// The claiming worker's id (becomes `lease_owner`).
    pub worker: &'a str,
    /// Now.
    pub now: DateTime<Utc>,
    /// The lease expiry to set.
    pub lease_until: DateTime<Utc>,
    /// Claim at most this many (the worker's free slots).
    pub max: usize,
    /// At most this many running runs per session, counted over all workers.
    pub per_session: i64,
    /// Visit sessions after this one first (round-robin across claims).
    pub after_session: Option<&'a str>,
    /// Claim runs of these tools only: the tools the claiming worker has registered. Runs of
    /// other tools stay queued for a worker that has them.
    pub tools: &'a [String],
    /// Per-tool limits (`max_running`, `rate`), counted over all workers.
    pub limits: &'a crate::flow::ToolLimits,
    /// At most this many background runs among those claimed; `None`: no limit.
    pub background_room: Option<usize>,
}

// Without ANALYZE statistics the planner may prefer another index on state for these,
// which walks every queued run; INDEXED BY pins the index each query is built on, so a
// claim costs the same with 20,000 or 1,000,000 runs queued. Running runs are few (at most
// the workers' slots): counting them per session reads the owner index whole. Within a
// session the claim skips from one queued tool to the next and reads the head of the tools
// the worker has only, so runs of tools it lacks are never walked.
// Version 6 added `tool` to the index, so the per-tool counts (max_running) come from the
// same read, whatever the number of limited tools.
pub(crate) const RUNNING_PER_SESSION: &str = "SELECT session_id, tool, count(*) FROM runs \
    INDEXED BY runs_running_owner_idx WHERE state = 'running' GROUP BY session_id, tool";
const NEXT_SESSION: &str = "SELECT session_id FROM runs INDEXED BY runs_claimable_idx \
    WHERE state = 'queued' AND session_id > ?1 ORDER BY session_id LIMIT 1";
pub(crate) const NEXT_TOOL: &str = "SELECT tool FROM runs INDEXED BY runs_claimable_idx \
    WHERE state = 'queued' AND session_id = ?1 AND tool > ?2 ORDER BY tool LIMIT 1";
pub(crate) const SESSION_HEAD: &str = "SELECT rowid, priority, run_at, id FROM runs INDEXED BY runs_claimable_idx \
    WHERE state = 'queued' AND session_id = ?1 AND tool = ?2 AND run_at <= ?3 \
    ORDER BY priority DESC, run_at, id LIMIT ?4";

/// [`SESSION_HEAD`] without background runs, for a worker at its per-worker limit of
/// background runs: the filter reads the table row of each head it passes (the index does not
/// hold `background`), which only such a claim pays.
pub(crate) const SESSION_HEAD_NOT_BACKGROUND: &str = "SELECT rowid, priority, run_at, id FROM runs \
    INDEXED BY runs_claimable_idx WHERE state = 'queued' AND session_id = ?1 AND tool = ?2 \
    AND run_at <= ?3 AND background = 0 ORDER BY priority DESC, run_at, id LIMIT ?4";

/// Marks one queued run running under a fresh lease. The run is addressed by the rowid the
/// claimable index gave in this transaction (one b-tree descent instead of two through the
/// id index), and there is no RETURNING: SQLite buffers returned rows in a temporary b-tree,
/// which made this statement cost twice the finish. [`CLAIMED`] reads the row back.
pub(crate) const CLAIM_ONE: &str = "UPDATE runs SET state = 'running', attempt = attempt + 1, \
    lease_owner = ?1, lease_token = ?2, lease_expires_at = ?3, heartbeat_at = ?4, started_at = ?4, \
    cancel_requested_at = NULL, status_text = NULL, progress = NULL, output_tail = NULL \
    WHERE rowid = ?5 AND state = 'queued'";
/// [`CLAIM_ONE`] for a claim whose room for background runs is used up: a background run is
/// left queued (the UPDATE reads the row anyway, so the filter costs nothing more).
pub(crate) const CLAIM_ONE_NOT_BACKGROUND: &str = "UPDATE runs SET state = 'running', attempt = attempt + 1, \
    lease_owner = ?1, lease_token = ?2, lease_expires_at = ?3, heartbeat_at = ?4, started_at = ?4, \
    cancel_requested_at = NULL, status_text = NULL, progress = NULL, output_tail = NULL \
    WHERE rowid = ?5 AND state = 'queued' AND background = 0";

/// A claimed run as stored, by rowid.
static CLAIMED: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("SELECT {RUN_COLUMNS} FROM runs WHERE rowid = ?1"));

/// A fresh lease token: 24 hex digits (96 random bits), the fence of one attempt.
fn lease_token() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes: [u8; 12] = rand::random();
    bytes
        .iter()
        .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])
        .map(char::from)
        .collect()
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

/// What a claim reads before it picks: the running counts per session and per tool over
/// all workers, and the sessions with queued runs of the worker's unpaused tools (visited
/// round-robin after the cursor), each with those tools.
struct Survey {
    running: HashMap<String, i64>,
    running_tool: HashMap<String, i64>,
    sessions: Vec<(String, Vec<String>)>,
}

/// Reads the [`Survey`] on `conn` (a claim's transaction or a reader); None when everything
/// is paused.
fn survey(conn: &rusqlite::Connection, p: &ClaimParams<'_>) -> Result<Option<Survey>, StoreError> {
    // Pauses: a handful of rows, read by every claim so every worker honours them at once.
    let paused = super::flow::paused(conn)?;
    if paused.all {
        return Ok(None);
    }
    let mut running: HashMap<String, i64> = HashMap::new();
    let mut running_tool: HashMap<String, i64> = HashMap::new();
    {
        let mut stmt = conn
            .prepare_cached(RUNNING_PER_SESSION)
            .ctx("prepare running count")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .ctx("count running")?;
        for row in rows {
            let (s, t, n) = row.ctx("read running count")?;
            *running.entry(s).or_default() += n;
            *running_tool.entry(t).or_default() += n;
        }
    }
    // Visit sessions that have queued runs, starting after the cursor and wrapping around,
    // each index probe a skip to the next distinct session.
    let max_sessions = (p.max * 4).max(64);
    let mut next_session = conn
        .prepare_cached(NEXT_SESSION)
        .ctx("prepare next session")?;
    let mut next_tool = conn.prepare_cached(NEXT_TOOL).ctx("prepare next tool")?;
    let mut wanted: Vec<String> = p
        .tools
        .iter()
        .filter(|t| !paused.tools.contains(t))
        .cloned()
        .collect();
    wanted.sort_unstable();
    let start = p.after_session.unwrap_or("").to_string();
    // (session, its queued tools this worker has); sessions with none do not count.
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
                let tools = session_tools(&mut next_tool, &s, &wanted)?;
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
    Ok(Some(Survey {
        running,
        running_tool,
        sessions,
    }))
}

/// Whether a claim could take anything, read on `conn` without the write lock: a worker
/// with free slots whose every candidate session or tool is at its limit (other processes
/// hold the slots) learns it without queueing on the database's write lock behind them, and
/// without making their next commit wait for its empty transaction (BENCHMARKS.md, issue 19,
/// session 8: three of four processes spent ~0.5 s each waiting on the lock in a 0.8 s
/// drain). It errs towards yes: due times and rates are left to the claim itself. A no can
/// be stale by the time it is acted on; the commit that freed a slot wakes the worker again.
pub fn may_claim(conn: &rusqlite::Connection, p: &ClaimParams<'_>) -> Result<bool, StoreError> {
    if p.max == 0 {
        return Ok(false);
    }
    let Some(s) = survey(conn, p)? else {
        return Ok(false);
    };
    Ok(s.sessions.iter().any(|(session, tools)| {
        p.per_session > s.running.get(session).copied().unwrap_or(0)
            && tools.iter().any(|tool| {
                p.limits
                    .get(tool)
                    .and_then(|l| l.max_running)
                    .is_none_or(|m| m > s.running_tool.get(tool).copied().unwrap_or(0))
            })
    }))
}

/// Claims up to `max` runnable runs (state queued, run_at <= now) of the worker's tools in
/// priority then age order, sharing slots fairly between sessions and never exceeding
/// `per_session` running runs in a session. Marks them running with a fresh lease token and attempt + 1, in the caller's
/// transaction.
pub fn claim(tx: &Transaction<'_>, p: &ClaimParams<'_>) -> Result<Vec<Run>, StoreError> {
    if p.max == 0 {
        return Ok(Vec::new());
    }
    let Some(Survey {
        running,
        running_tool,
        sessions,
    }) = survey(tx, p)?
    else {
        return Ok(Vec::new());
    };
    let now = ts(p.now);
    // Each visited session's heads (keyed by rowid) with its take, for `pick`.
    let mut per_session: Vec<(Vec<Head<i64>>, usize)> = Vec::new();
    // A worker at its per-worker limit of background runs reads heads without them.
    let head_sql = match p.background_room {
        Some(0) => SESSION_HEAD_NOT_BACKGROUND,
        _ => SESSION_HEAD,
    };
    let mut head = tx.prepare_cached(head_sql).ctx("prepare session head")?;
    // Room per limited tool, worked out once per claim for the tools met on the way only:
    // the claim's cost follows the tools it visits, not the number of limits configured.
    let mut room: HashMap<String, i64> = HashMap::new();
    for (session, tools) in sessions {
        let free = p.per_session - running.get(&session).copied().unwrap_or(0);
        if free <= 0 {
            continue;
        }
        let take = free.min(p.max as i64);
        // The session's head is the best `take` over the heads of each of its tools.
        let mut heads: Vec<Head<i64>> = Vec::new();
        for tool in &tools {
            let cap = match room.get(tool) {
                Some(&n) => n,
                None => {
                    let n = tool_room(tx, p, tool, &running_tool)?;
                    room.insert(tool.clone(), n);
                    n
                }
            };
            if cap <= 0 {
                continue;
            }
            let rows = head
                .query_map(rusqlite::params![session, tool, now, take.min(cap)], |r| {
                    Ok((
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, i64>(0)?,
                    ))
                })
                .ctx("session head")?;
            for row in rows {
                let (priority, run_at, id, rowid) = row.ctx("read session head")?;
                heads.push(Head {
                    priority,
                    run_at,
                    id,
                    tool: tool.clone(),
                    key: rowid,
                });
            }
        }
        per_session.push((heads, take as usize));
    }
    let candidates = pick(per_session, &mut room, p.max);
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    // One prepared UPDATE per candidate, all in the caller's transaction: cheaper than one
    // UPDATE over `json_each` (no JSON parse, no ephemeral table) and just as atomic.
    let mut update = tx.prepare_cached(CLAIM_ONE).ctx("prepare claim")?;
    let mut read = tx.prepare_cached(&CLAIMED).ctx("prepare read claimed")?;
    let (until, mut claimed) = (ts(p.lease_until), Vec::with_capacity(candidates.len()));
    let mut started: HashMap<&str, u64> = HashMap::new();
    // Room for background runs: once it is used up, the rest of the candidates are claimed
    // only if they are not background runs (a background one stays queued for later).
    let mut background_room = p.background_room;
    for c in &candidates {
        let params = rusqlite::params![p.worker, lease_token(), until, now, c.key];
        let updated = if background_room == Some(0) {
            tx.prepare_cached(CLAIM_ONE_NOT_BACKGROUND)
                .ctx("prepare claim")?
                .execute(params)
                .ctx("claim run")?
        } else {
            update.execute(params).ctx("claim run")?
        };
        if updated == 1 {
            let run = read
                .query_row([c.key], run_from_row)
                .ctx("read claimed run")?;
            if run.background {
                background_room = background_room.map(|n| n.saturating_sub(1));
            }
            if p.limits.get(&c.tool).is_some_and(|l| l.rate.is_some()) {
                *started.entry(c.tool.as_str()).or_default() += 1;
            }
            claimed.push(run);
        }
    }
    // One counter update per rate-limited tool claimed (all start at `now`, in one slice).
    for (tool, n) in started {
        if let Some(rate) = p.limits.get(tool).and_then(|l| l.rate) {
            super::flow::record_starts(tx, tool, rate, p.now, n)?;
        }
    }
    claimed.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.run_at.cmp(&b.run_at)));
    Ok(claimed)
}

/// How many more runs of `tool` may start now under its limits: `max_running` less those
/// running on every worker, and what its rate's window allows. Unlimited tools get
/// `i64::MAX` without reading anything.
fn tool_room(
    tx: &Transaction<'_>,
    p: &ClaimParams<'_>,
    tool: &str,
    running_tool: &HashMap<String, i64>,
) -> Result<i64, StoreError> {
    let Some(limit) = p.limits.get(tool) else {
        return Ok(i64::MAX);
    };
    let mut n = i64::MAX;
    if let Some(max) = limit.max_running {
        n = max - running_tool.get(tool).copied().unwrap_or(0);
    }
    if n > 0
        && let Some(rate) = limit.rate
    {
        n = n.min(i64::from(
            super::flow::room_and_forget(tx, tool, rate, p.now)?.starts,
        ));
    }
    Ok(n)
}

/// A lease this worker holds: (run id, lease token).
pub type Held = (String, String);

/// Extends the leases this worker still holds (one statement for all of them) and returns the
/// ids among them whose cancellation was requested. Runs whose lease was lost are not touched.
pub fn heartbeat(
    tx: &Transaction<'_>,
    worker: &str,
    held: &[Held],
    now: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<Vec<(String, bool)>, StoreError> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let held_json = serde_json::to_string(held).map_err(|e| StoreError::Task(e.to_string()))?;
    let mut stmt = tx
        .prepare_cached(
            "UPDATE runs INDEXED BY runs_running_owner_idx SET heartbeat_at = :now, lease_expires_at = :until \
             WHERE state = 'running' AND lease_owner = :worker AND (id, lease_token) IN \
             (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:held)) \
             RETURNING id, cancel_requested_at IS NOT NULL",
        )
        .ctx("prepare heartbeat")?;
    let rows = stmt
        .query_map(
            named_params! {":now": ts(now), ":until": ts(until), ":worker": worker, ":held": held_json},
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .ctx("heartbeat")?;
    rows.collect::<Result<_, _>>().ctx("read heartbeat")
}

/// Writes a running attempt's live view, fenced by its lease. Returns false (and writes
/// nothing) when the lease was lost.
pub fn write_progress(
    tx: &Transaction<'_>,
    w: &ProgressWrite,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(&super::runs::guard_sql(
            "status_text = :status, progress = :progress, output_tail = :tail",
        ))
        .ctx("prepare progress")?
        .execute(named_params! {
            ":status": w.status_text, ":progress": w.progress, ":tail": w.output_tail,
            ":id": w.id, ":attempt": w.attempt, ":token": w.token,
        })
        .ctx("write progress")?;
    if n == 0 {
        return Ok(false);
    }
    if let Some((log, truncated)) = &w.log {
        super::artifacts::put(
            tx,
            &super::artifacts::BlobWrite {
                session_id: &w.session_id,
                path: &format!("/.background/{}/output.log", w.id),
                run_id: &w.id,
                content: log,
                truncated: *truncated,
            },
            now,
        )?;
    }
    Ok(true)
}

/// Stores an async tool's operation id on its running attempt (fenced).
pub fn set_operation(
    tx: &Transaction<'_>,
    id: &str,
    attempt: i64,
    token: &str,
    operation_id: &str,
    stage: Option<&serde_json::Value>,
) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(&super::runs::guard_sql(
            "operation_id = :op, stages = CASE WHEN :stage IS NULL THEN stages \
             ELSE json_insert(stages, '$[#]', json(:stage)) END",
        ))
        .ctx("prepare set operation")?
        .execute(named_params! {
            ":op": operation_id, ":stage": stage.map(|s| s.to_string()),
            ":id": id, ":attempt": attempt, ":token": token,
        })
        .ctx("set operation")?;
    Ok(n == 1)
}

/// Stores an operation id and each of its new stages, in order, on a running attempt (fenced).
pub fn set_operation_stages(
    tx: &Transaction<'_>,
    id: &str,
    attempt: i64,
    token: &str,
    operation_id: &str,
    stages: &[serde_json::Value],
) -> Result<bool, StoreError> {
    if stages.is_empty() {
        return set_operation(tx, id, attempt, token, operation_id, None);
    }
    let mut ok = true;
    for st in stages {
        ok &= set_operation(tx, id, attempt, token, operation_id, Some(st))?;
    }
    Ok(ok)
}

/// Gives a running attempt back to the queue without counting it (clean shutdown), fenced.
pub fn release(
    tx: &Transaction<'_>,
    id: &str,
    attempt: i64,
    token: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(&super::runs::guard_sql(
            "state = 'queued', attempt = attempt - 1, run_at = :now, lease_owner = NULL, \
             lease_token = NULL, lease_expires_at = NULL",
        ))
        .ctx("prepare release")?
        .execute(named_params! {":now": ts(now), ":id": id, ":attempt": attempt, ":token": token})
        .ctx("release run")?;
    Ok(n == 1)
}
