//! Claiming runnable runs under the per-session limit, heartbeating leases, and fenced
//! progress writes while a run executes.

use chrono::{DateTime, Utc};
use rusqlite::{Transaction, named_params};
use std::collections::HashMap;

use super::Ctx;
use super::codec::{RUN_COLUMNS, run_from_row, ts};
use super::survey::{Survey, Visited, survey};
use crate::error::StoreError;
use crate::run::Run;
use crate::store::ProgressWrite;
use crate::store::claim_plan::{self, BackgroundRoom, Running, lease_token};
use crate::store::pick::{Head, LazyHeads, pick_lazy};
use crate::store::room::{self, RoomPlan};

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
    let can = |running: &Running, (session, tools): &Visited| {
        running.take(session, p.per_session, p.max).is_some()
            && tools
                .iter()
                .any(|(tool, _)| running.may_start(p.limits, tool))
    };
    let Some(s) = survey(conn, p.tools, (p.max, p.after_session), can)? else {
        return Ok(false);
    };
    Ok(s.sessions.iter().any(|v| can(&s.running, v)))
}

/// Claims up to `max` runnable runs (state queued, run_at <= now) of the worker's tools in
/// priority then age order, sharing slots fairly between sessions and never exceeding
/// `per_session` running runs in a session. Marks them running with a fresh lease token and
/// attempt + 1, in the caller's transaction.
pub fn claim(tx: &Transaction<'_>, p: &ClaimParams<'_>) -> Result<Vec<Run>, StoreError> {
    if p.max == 0 {
        return Ok(Vec::new());
    }
    let never = |_: &Running, _: &Visited| false;
    let Some(survey) = survey(tx, p.tools, (p.max, p.after_session), never)? else {
        return Ok(Vec::new());
    };
    let now = ts(p.now);
    // Room per tool met on the way, spent by `pick_lazy`.
    let mut room: HashMap<String, i64> = HashMap::new();
    let visits = session_heads(tx, p, &survey, &now, &mut room)?;
    let lazy = visits.iter().map(|v| v.lazy.clone()).collect();
    let mut head = tx.prepare_cached(head_sql(p)).ctx("prepare session head")?;
    let candidates = pick_lazy(lazy, &mut room, p.max, |i| {
        let v = &visits[i];
        let mut heads = Vec::new();
        for &(tool, at_most) in &v.tools {
            read_heads(&mut head, (v.session, tool), &now, at_most, &mut heads)?;
        }
        Ok::<_, StoreError>(heads)
    })?;
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let mut claimed = claim_heads(tx, p, &candidates, &now)?;
    // One counter update per rate-limited tool claimed (all start at `now`, in one slice).
    let tools = claimed.iter().map(|r| r.tool.as_str());
    for starts in room::starts_to_record(p.limits, tools, p.now) {
        super::flow::record_starts(tx, &starts)?;
    }
    claim_plan::order_claimed(&mut claimed);
    Ok(claimed)
}

/// The head query a claim reads a session's heads with: without background runs for a
/// worker at its per-worker limit of them.
fn head_sql(p: &ClaimParams<'_>) -> &'static str {
    if BackgroundRoom::new(p.background_room).full() {
        SESSION_HEAD_NOT_BACKGROUND
    } else {
        SESSION_HEAD
    }
}

/// A session a claim may take runs from: its tools with room, each with how many of its
/// heads to read at most, and what `pick_lazy` starts from.
struct Visit<'a> {
    session: &'a str,
    tools: Vec<(&'a str, i64)>,
    lazy: LazyHeads<i64>,
}

/// Each visited session with room, with its take and its tools with room (each tool's room
/// worked out into `room` the first time the tool is met: a claim's cost follows the tools it
/// visits, not the number of limits configured). What is known of its heads is the walk's
/// first run of each tool when every one of those is due (the session's best head is then
/// the best of them); otherwise (or when background runs are to be left out, which the walk
/// cannot see) its heads are read whole here, as `pick` is given them.
fn session_heads<'a>(
    tx: &Transaction<'_>,
    p: &ClaimParams<'_>,
    survey: &'a Survey,
    now: &str,
    room: &mut HashMap<String, i64>,
) -> Result<Vec<Visit<'a>>, StoreError> {
    let mut head = tx.prepare_cached(head_sql(p)).ctx("prepare session head")?;
    let read_first = !BackgroundRoom::new(p.background_room).full();
    let mut visits = Vec::new();
    for (session, tools) in &survey.sessions {
        let Some(take) = survey.running.take(session, p.per_session, p.max) else {
            continue;
        };
        let mut visit = Visit {
            session,
            tools: Vec::new(),
            lazy: LazyHeads {
                heads: Vec::new(),
                complete: false,
                take: take as usize,
            },
        };
        let mut firsts_due = read_first;
        for (tool, first) in tools {
            let cap = tool_room(tx, p, &survey.running, room, tool)?;
            if cap > 0 {
                visit.tools.push((tool, take.min(cap)));
                firsts_due &= first.run_at.as_str() <= now;
                visit.lazy.heads.push(first.clone());
            }
        }
        if visit.tools.is_empty() {
            continue;
        }
        if firsts_due {
            visit.lazy.heads.sort_by(|a, b| {
                b.priority
                    .cmp(&a.priority)
                    .then_with(|| a.run_at.cmp(&b.run_at))
                    .then_with(|| a.id.cmp(&b.id))
            });
            visit.lazy.heads.truncate(1);
        } else {
            visit.lazy.heads.clear();
            for &(tool, at_most) in &visit.tools {
                read_heads(
                    &mut head,
                    (session, tool),
                    now,
                    at_most,
                    &mut visit.lazy.heads,
                )?;
            }
            visit.lazy.complete = true;
        }
        visits.push(visit);
    }
    Ok(visits)
}

/// Adds to `heads` the best `at_most` queued runs of `tool` in `session` due at `now`,
/// keyed by rowid.
fn read_heads(
    head: &mut rusqlite::CachedStatement<'_>,
    (session, tool): (&str, &str),
    now: &str,
    at_most: i64,
    heads: &mut Vec<Head<i64>>,
) -> Result<(), StoreError> {
    let rows = head
        .query_map(rusqlite::params![session, tool, now, at_most], |r| {
            Ok(Head {
                priority: r.get(1)?,
                run_at: r.get(2)?,
                id: r.get(3)?,
                tool: tool.to_string(),
                key: r.get(0)?,
            })
        })
        .ctx("session head")?;
    for row in rows {
        heads.push(row.ctx("read session head")?);
    }
    Ok(())
}

/// Marks `candidates` running under fresh leases, in order, and reads them back: one
/// prepared UPDATE per candidate, all in the caller's transaction (cheaper than one UPDATE
/// over `json_each`: no JSON parse, no ephemeral table, and just as atomic). Once the room
/// for background runs is used up, the rest are claimed only if they are not background runs
/// (a background one stays queued for later).
fn claim_heads(
    tx: &Transaction<'_>,
    p: &ClaimParams<'_>,
    candidates: &[Head<i64>],
    now: &str,
) -> Result<Vec<Run>, StoreError> {
    let mut update = tx.prepare_cached(CLAIM_ONE).ctx("prepare claim")?;
    let mut read = tx.prepare_cached(&CLAIMED).ctx("prepare read claimed")?;
    let (until, mut claimed) = (ts(p.lease_until), Vec::with_capacity(candidates.len()));
    let mut background = BackgroundRoom::new(p.background_room);
    for c in candidates {
        let params = rusqlite::params![p.worker, lease_token(), until, now, c.key];
        let updated = if background.full() {
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
            background.take(run.background);
            claimed.push(run);
        }
    }
    Ok(claimed)
}

/// How many more runs of `tool` may start now under its limits (see [`RoomPlan`]), reading
/// (and trimming) its rate's window only when that can cut it; worked out once per claim and
/// kept in `room`.
fn tool_room(
    tx: &Transaction<'_>,
    p: &ClaimParams<'_>,
    running: &Running,
    room: &mut HashMap<String, i64>,
    tool: &str,
) -> Result<i64, StoreError> {
    if let Some(&n) = room.get(tool) {
        return Ok(n);
    }
    let plan = RoomPlan::of(p.limits, tool, running.of_tool(tool));
    let rate = plan
        .rate_to_read()
        .map(|rate| super::flow::room_and_forget(tx, tool, rate, p.now))
        .transpose()?;
    let n = plan.room(rate);
    room.insert(tool.to_string(), n);
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
/// A run that recorded steps is marked a resume (`wait_kind` `resume`, unless it already
/// resumed a wait): its next invocation reads its journal, and keeps its log so far.
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
             lease_token = NULL, lease_expires_at = NULL, \
             wait_kind = coalesce(wait_kind, CASE WHEN EXISTS (SELECT 1 FROM step_records s \
                 WHERE s.run_id = runs.id) THEN 'resume' END)",
        ))
        .ctx("prepare release")?
        .execute(named_params! {":now": ts(now), ":id": id, ":attempt": attempt, ":token": token})
        .ctx("release run")?;
    Ok(n == 1)
}
