//! Claims, heartbeats, live views, releases and the rescue's reads on Postgres.
//!
//! A claim runs under the claim lock ([`super::locks::CLAIM`]): the running counts per
//! session and per tool, the rate windows and the claim's own writes form one critical
//! section over all hosts, so two workers can never both take a session's or a tool's last
//! slot. Candidate rows are read with `FOR UPDATE SKIP LOCKED`, so a claim never waits on a
//! queued run that a cancel or approval is changing at that moment: it takes the next one.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::codec::{RUN_COLUMNS, run_from_row, runs_from_rows};
use super::{exec, get, locks, query};
use crate::clock::ts;
use crate::error::StoreError;
use crate::run::Run;
use crate::store::pick::{Head, pick};
use crate::store::{Claim, ProgressWrite, RescueReason};

/// Distinct sessions with queued runs after `$1`, in order: a loose index scan of
/// `runs_claimable_idx` (one probe per session), at most `$2`.
const SESSIONS: &str = "WITH RECURSIVE s(session_id) AS ( \
      (SELECT session_id FROM runs WHERE state = 'queued' AND session_id > $1 ORDER BY session_id LIMIT 1) \
      UNION ALL \
      SELECT (SELECT r.session_id FROM runs r WHERE r.state = 'queued' AND r.session_id > s.session_id \
              ORDER BY r.session_id LIMIT 1) FROM s WHERE s.session_id IS NOT NULL) \
    SELECT session_id FROM s WHERE session_id IS NOT NULL LIMIT $2";

/// The head of each (session, tool) pair given: its best runnable runs, at most the
/// session's free slots and the tool's room, locked for this claim (rows another
/// transaction holds are skipped).
/// `$6` false leaves background runs out (a worker at its per-worker limit of them).
const HEADS: &str = "SELECT h.id, h.session_id, h.tool, h.priority, h.run_at, h.background \
    FROM unnest($1::text[], $2::bigint[]) AS s(session_id, take) \
    CROSS JOIN unnest($3::text[], $4::bigint[]) AS t(tool, cap) \
    CROSS JOIN LATERAL (SELECT r.id, r.session_id, r.tool, r.priority, r.run_at, r.background FROM runs r \
        WHERE r.state = 'queued' AND r.session_id = s.session_id AND r.tool = t.tool \
        AND r.run_at <= $5 AND ($6::boolean OR r.background = 0) ORDER BY r.priority DESC, r.run_at, r.id LIMIT least(s.take, t.cap) \
        FOR UPDATE SKIP LOCKED) h";

/// A fresh lease token: 24 hex digits (96 random bits).
fn lease_token() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes: [u8; 12] = rand::random();
    bytes
        .iter()
        .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])
        .map(char::from)
        .collect()
}

/// What a claim reads before it picks: the pauses, the running counts per session and per
/// tool, and the sessions with queued runs from the cursor on (wrapping around).
struct Counts {
    paused: crate::flow::Paused,
    running: HashMap<String, i64>,
    running_tool: HashMap<String, i64>,
    sessions: Vec<String>,
}

async fn read_counts<C: GenericClient>(c: &C, p: &Claim) -> Result<Counts, StoreError> {
    let max_sessions = (p.max * 4).max(64) as i64;
    let start = p.after_session.clone().unwrap_or_default();
    let session_params: [super::P<'_>; 2] = [&start, &max_sessions];
    let (paused, running_rows, session_rows) = tokio::try_join!(
        super::flow::paused(c),
        query(
            c,
            "SELECT session_id, tool, count(*) FROM runs WHERE state = 'running' \
             GROUP BY session_id, tool",
            &[],
            "count running",
        ),
        query(c, SESSIONS, &session_params, "next sessions"),
    )?;
    let mut running: HashMap<String, i64> = HashMap::new();
    let mut running_tool: HashMap<String, i64> = HashMap::new();
    for r in &running_rows {
        let (s, t, n): (String, String, i64) = (get(r, 0)?, get(r, 1)?, get(r, 2)?);
        *running.entry(s).or_default() += n;
        *running_tool.entry(t).or_default() += n;
    }
    let mut sessions: Vec<String> = Vec::new();
    for r in &session_rows {
        sessions.push(get(r, 0)?);
    }
    if (sessions.len() as i64) < max_sessions && !start.is_empty() {
        // Wrap around: the sessions up to and including the cursor.
        let more = max_sessions - sessions.len() as i64;
        for r in &query(c, SESSIONS, &[&"", &more], "next sessions").await? {
            let s: String = get(r, 0)?;
            if s > start || sessions.contains(&s) {
                break;
            }
            sessions.push(s);
        }
    }
    Ok(Counts {
        paused,
        running,
        running_tool,
        sessions,
    })
}

impl Counts {
    /// The worker's tools that are not paused, sorted, each once.
    fn wanted(&self, p: &Claim) -> Vec<String> {
        if self.paused.all {
            return Vec::new();
        }
        let mut wanted: Vec<String> = p
            .tools
            .iter()
            .filter(|t| !self.paused.tools.contains(*t))
            .cloned()
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        wanted
    }

    /// The sessions with a free slot, in claim order, and how many each may take.
    fn takes(&self, p: &Claim) -> (Vec<String>, Vec<i64>) {
        let mut take_sessions = Vec::new();
        let mut takes = Vec::new();
        for s in &self.sessions {
            if self.paused.sessions.contains(s) {
                continue;
            }
            let free = p.per_session - self.running.get(s).copied().unwrap_or(0);
            if free > 0 {
                take_sessions.push(s.clone());
                takes.push(free.min(p.max as i64));
            }
        }
        (take_sessions, takes)
    }
}

/// Whether a claim could take anything, read without the claim lock, so a worker with free
/// slots whose every candidate session or tool is at its limit (another worker holds the
/// slots) does not queue on the lock behind the workers that hold them, only to find nothing.
/// It errs towards yes: rates are left to the claim itself (reading them forgets old
/// windows, a write). A no can be stale by the time it is acted on; a slot freed after it
/// was read wakes the worker again (every end that frees one notifies, after its commit).
pub(crate) async fn may_claim<C: GenericClient>(c: &C, p: &Claim) -> Result<bool, StoreError> {
    if p.max == 0 {
        return Ok(false);
    }
    let counts = read_counts(c, p).await?;
    let wanted = counts.wanted(p);
    if wanted.is_empty() || counts.takes(p).0.is_empty() {
        return Ok(false);
    }
    Ok(wanted.iter().any(|tool| {
        let max = p.limits.get(tool).and_then(|l| l.max_running);
        max.is_none_or(|m| m > counts.running_tool.get(tool).copied().unwrap_or(0))
    }))
}

/// Claims up to `p.max` runnable runs of the worker's tools: priority first, sessions
/// round-robin after `p.after_session`, never more than `p.per_session` running in a session
/// nor more than a tool's limits allow, over all workers. Each gets attempt + 1 and a fresh
/// lease. In the caller's transaction.
pub(crate) async fn claim<C: GenericClient>(c: &C, p: &Claim) -> Result<Vec<Run>, StoreError> {
    if p.max == 0 {
        return Ok(Vec::new());
    }
    // The lock first, on its own round trip: the counts below must be read after it is held
    // (each statement's snapshot is taken when the server starts it, so every earlier claim
    // has committed or rolled back by then). Pipelining the lock with the counts let a count
    // run before the lock when their statements were prepared in a different order: a limit
    // then held in one process but not across processes. The reads after it are pipelined.
    locks::take(c, locks::CLAIM).await?;
    let counts = read_counts(c, p).await?;
    let wanted = counts.wanted(p);
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let running_tool = &counts.running_tool;
    let now = ts(p.now);
    let (take_sessions, takes) = counts.takes(p);
    if take_sessions.is_empty() {
        return Ok(Vec::new());
    }
    // Room per tool: max_running less those running anywhere, and what its rate allows.
    let mut room: HashMap<String, i64> = HashMap::new();
    for tool in &wanted {
        let n = tool_room(c, p, tool, running_tool).await?;
        room.insert(tool.clone(), n);
    }
    let tools: Vec<&String> = wanted.iter().filter(|t| room[*t] > 0).collect();
    let caps: Vec<i64> = tools.iter().map(|t| room[*t].min(p.max as i64)).collect();
    if tools.is_empty() {
        return Ok(Vec::new());
    }
    let background_ok = p.background_room != Some(0);
    let heads = query(
        c,
        HEADS,
        &[&take_sessions, &takes, &tools, &caps, &now, &background_ok],
        "session heads",
    )
    .await?;
    // Each session's heads, with its take.
    let take_of: HashMap<&str, i64> = take_sessions
        .iter()
        .map(String::as_str)
        .zip(takes.iter().copied())
        .collect();
    // Each head's key: whether it is a background run.
    let mut by_session: HashMap<String, Vec<Head<bool>>> = HashMap::new();
    for r in &heads {
        let (id, session, tool, priority, run_at): (String, String, String, i64, String) =
            (get(r, 0)?, get(r, 1)?, get(r, 2)?, get(r, 3)?, get(r, 4)?);
        let background = get::<i64>(r, 5)? != 0;
        by_session.entry(session).or_default().push(Head {
            priority,
            run_at,
            id,
            tool,
            key: background,
        });
    }
    let per_session = by_session.into_iter().map(|(session, heads)| {
        let take = take_of.get(session.as_str()).copied().unwrap_or(0);
        (heads, usize::try_from(take).unwrap_or(0))
    });
    let mut candidates = pick(per_session, &mut room, p.max);
    // The per-worker limit of background runs: the best ones up to the room; the rest stay
    // queued (their rows are unlocked at commit).
    if let Some(mut left) = p.background_room {
        candidates.retain(|h| {
            let keep = !h.key || left > 0;
            if h.key && keep {
                left -= 1;
            }
            keep
        });
    }
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = candidates.iter().map(|c| c.id.as_str()).collect();
    let tokens: Vec<String> = candidates.iter().map(|_| lease_token()).collect();
    let sql = format!(
        "UPDATE runs SET state = 'running', attempt = attempt + 1, lease_owner = $1, \
         lease_token = u.u_token, lease_expires_at = $2, heartbeat_at = $3, started_at = $3, \
         cancel_requested_at = NULL, status_text = NULL, progress = NULL, output_tail = NULL \
         FROM unnest($4::text[], $5::text[]) AS u(u_id, u_token) \
         WHERE id = u.u_id AND state = 'queued' RETURNING {RUN_COLUMNS}"
    );
    let rows = query(
        c,
        &sql,
        &[&p.worker, &ts(p.lease_until), &now, &ids, &tokens],
        "claim runs",
    )
    .await?;
    let mut claimed = runs_from_rows(&rows)?;
    let mut started: HashMap<&str, u64> = HashMap::new();
    for r in &claimed {
        if p.limits.get(&r.tool).is_some_and(|l| l.rate.is_some()) {
            *started.entry(r.tool.as_str()).or_default() += 1;
        }
    }
    for (tool, n) in started {
        if let Some(rate) = p.limits.get(tool).and_then(|l| l.rate) {
            super::flow::record_starts(c, tool, rate, p.now, n).await?;
        }
    }
    claimed.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.run_at.cmp(&b.run_at)));
    Ok(claimed)
}

async fn tool_room<C: GenericClient>(
    c: &C,
    p: &Claim,
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
            super::flow::room_and_forget(c, tool, rate, p.now)
                .await?
                .starts,
        ));
    }
    Ok(n)
}

/// Extends the leases this worker still holds; returns (id, cancel requested) for each.
pub(crate) async fn heartbeat<C: GenericClient>(
    c: &C,
    worker: &str,
    held: &[(String, String)],
    now: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<Vec<(String, bool)>, StoreError> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = held.iter().map(|h| h.0.as_str()).collect();
    let tokens: Vec<&str> = held.iter().map(|h| h.1.as_str()).collect();
    let rows = query(
        c,
        "UPDATE runs SET heartbeat_at = $1, lease_expires_at = $2 \
         FROM unnest($4::text[], $5::text[]) AS u(u_id, u_token) \
         WHERE id = u.u_id AND lease_token = u.u_token AND state = 'running' AND lease_owner = $3 \
         RETURNING id, cancel_requested_at IS NOT NULL",
        &[&ts(now), &ts(until), &worker, &ids, &tokens],
        "heartbeat",
    )
    .await?;
    rows.iter().map(|r| Ok((get(r, 0)?, get(r, 1)?))).collect()
}

const GUARD: &str = "WHERE id = $1 AND state = 'running' AND attempt = $2 AND lease_token = $3";

/// Writes a running attempt's live view (and its log so far), fenced by its lease.
pub(crate) async fn write_progress<C: GenericClient>(
    c: &C,
    w: &ProgressWrite,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = exec(
        c,
        &format!("UPDATE runs SET status_text = $4, progress = $5, output_tail = $6 {GUARD}"),
        &[
            &w.id,
            &w.attempt,
            &w.token,
            &w.status_text,
            &w.progress,
            &w.output_tail,
        ],
        "write progress",
    )
    .await?;
    if n == 0 {
        return Ok(false);
    }
    if let Some((log, truncated)) = &w.log {
        let path = format!("/.background/{}/output.log", w.id);
        super::finish::put_blobs(c, &[(&w.session_id, path, &w.id, log, *truncated)], now).await?;
    }
    Ok(true)
}

/// Stores an operation id and its new stages, in order, on a running attempt (fenced).
pub(crate) async fn set_operation_stages<C: GenericClient>(
    c: &C,
    id: &str,
    attempt: i64,
    token: &str,
    operation_id: &str,
    stages: &[serde_json::Value],
) -> Result<bool, StoreError> {
    // The stored array with the new entries appended as text, keeping it as written.
    let added: Vec<String> = stages.iter().map(|s| s.to_string()).collect();
    let added = added.join(",");
    let n = exec(
        c,
        &format!(
            "UPDATE runs SET operation_id = $4, stages = CASE WHEN $5 = '' THEN stages \
             WHEN stages = '[]' THEN '[' || $5 || ']' \
             ELSE left(stages, length(stages) - 1) || ',' || $5 || ']' END {GUARD}"
        ),
        &[&id, &attempt, &token, &operation_id, &added],
        "set operation",
    )
    .await?;
    Ok(n == 1)
}

/// Gives a running attempt back to the queue uncounted (clean shutdown), fenced.
pub(crate) async fn release<C: GenericClient>(
    c: &C,
    id: &str,
    attempt: i64,
    token: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = exec(
        c,
        &format!(
            "UPDATE runs SET state = 'queued', attempt = attempt - 1, run_at = $4, \
             lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL {GUARD}"
        ),
        &[&id, &attempt, &token, &ts(now)],
        "release run",
    )
    .await?;
    Ok(n == 1)
}

/// Live workers registered on this host, boot and pid namespace: (id, pid, start time).
pub(crate) async fn live_workers_on<C: GenericClient>(
    c: &C,
    host: &str,
    boot: &str,
    ns: &str,
) -> Result<Vec<(String, i64, String)>, StoreError> {
    let rows = query(
        c,
        "SELECT id, pid, process_start_time FROM workers \
         WHERE stopped_at IS NULL AND host = $1 AND boot_id = $2 AND pid_namespace = $3",
        &[&host, &boot, &ns],
        "live workers",
    )
    .await?;
    rows.iter()
        .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?)))
        .collect()
}

/// Marks workers whose process is gone as stopped (`died`); how many changed.
pub(crate) async fn mark_died<C: GenericClient>(
    c: &C,
    ids: &[String],
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(exec(
        c,
        "UPDATE workers SET stopped_at = $1, stop_reason = 'died' WHERE id = ANY($2) AND stopped_at IS NULL",
        &[&ts(now), &ids],
        "mark workers died",
    )
    .await? as usize)
}

/// Running runs whose owner is missing, stopped or dead, or whose lease expired.
pub(crate) async fn rescuable<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
) -> Result<Vec<(Run, RescueReason)>, StoreError> {
    let cols: String = RUN_COLUMNS
        .split(',')
        .map(|c| format!("r.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT {cols}, CASE WHEN w.id IS NULL THEN 'owner_missing' \
            WHEN w.stop_reason = 'died' THEN 'owner_died' \
            WHEN w.stopped_at IS NOT NULL THEN 'owner_stopped' \
            ELSE 'lease_expired' END \
         FROM runs r LEFT JOIN workers w ON w.id = r.lease_owner \
         WHERE r.state = 'running' AND (w.id IS NULL OR w.stopped_at IS NOT NULL OR r.lease_expires_at < $1) \
         ORDER BY r.id"
    );
    let reason_col = RUN_COLUMNS.split(',').count();
    let rows = query(c, &sql, &[&ts(now)], "rescuable runs").await?;
    rows.iter()
        .map(|r| {
            let reason: String = get(r, reason_col)?;
            Ok((
                run_from_row(r)?,
                RescueReason::parse(&reason).unwrap_or(RescueReason::LeaseExpired),
            ))
        })
        .collect()
}
