//! Claims, heartbeats, live views and releases on Postgres.
//!
//! A claim first reads, without any lock, the sessions with queued runs and each one's best
//! due run per tool, and ranks the sessions as its pick would visit them. It then holds the
//! claim locks of the first few of them that no other claim holds, no more than it has
//! slots ([`super::locks::try_claim_sessions`]; [`super::locks::take_claim`] when it must
//! wait), and of the limited tools it may start, and reads their running counts after
//! taking them: two workers can never both take a session's or a tool's last slot, and
//! claims refilling at the same moment spread over the sessions instead of one of them
//! holding them all (that would serialise them all again). The runs are then read under
//! those locks with `FOR UPDATE SKIP LOCKED`, so a claim never waits on a queued run that a
//! cancel or an approval is changing at that moment, and takes the next one instead.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::codec::{RUN_COLUMNS, runs_from_rows};
use super::{exec, get, locks, query};
use crate::clock::ts;
use crate::error::StoreError;
use crate::run::Run;
use crate::store::claim_plan::{self, BackgroundRoom, Running, lease_token};
use crate::store::end_plan::BlobRow;
use crate::store::pick::{Head, SessionHeads, pick};
use crate::store::room::{self, RoomPlan};
use crate::store::{Claim, ProgressWrite};

/// Distinct sessions with queued runs after `$1`, in order, then (wrapping around) those up
/// to and including `$1`: a loose index scan of `runs_claimable_idx` (one probe per
/// session), at most `$2`, on one round trip. The wrapped part is read only when the first
/// gives fewer than `$2` (the CTEs are read as the limit asks for rows).
///
/// Each probe orders by all of `runs_claimable_idx`'s columns, which only that index gives.
/// Ordered by `session_id` alone, the planner took `runs_session_created_idx` (schema 6) for the first
/// probes (statistics of a queue that was all queued when last analysed), and that index
/// holds every run: mid-drain, each claim read the ended runs at the start of the next
/// session from the heap, one by one (~330 buffers and 2-3 ms a claim over 50 sessions).
pub(super) const SESSIONS: &str = "WITH RECURSIVE s(session_id) AS ( \
      (SELECT session_id FROM runs WHERE state = 'queued' AND session_id > $1 \
       ORDER BY session_id, tool, priority DESC, run_at, id LIMIT 1) \
      UNION ALL \
      SELECT (SELECT r.session_id FROM runs r WHERE r.state = 'queued' AND r.session_id > s.session_id \
              ORDER BY r.session_id, r.tool, r.priority DESC, r.run_at, r.id LIMIT 1) \
      FROM s WHERE s.session_id IS NOT NULL), \
    w(session_id) AS ( \
      (SELECT session_id FROM runs WHERE state = 'queued' AND $1 <> '' \
       ORDER BY session_id, tool, priority DESC, run_at, id LIMIT 1) \
      UNION ALL \
      SELECT (SELECT r.session_id FROM runs r WHERE r.state = 'queued' AND r.session_id > w.session_id \
              ORDER BY r.session_id, r.tool, r.priority DESC, r.run_at, r.id LIMIT 1) \
      FROM w WHERE w.session_id < $1), \
    v(session_id) AS (SELECT session_id FROM s WHERE session_id IS NOT NULL \
      UNION ALL SELECT session_id FROM w WHERE session_id <= $1) \
    SELECT session_id FROM v LIMIT $2";

/// [`SESSIONS`] with each session's best due run per tool (`$3` the tools, `$4` now, `$5`
/// false leaving background runs out), read without locks: what a claim ranks the sessions
/// by. A session without a due run gives one row, its id null.
///
/// Each session's probe carries the first row it found: the best run of the session's first
/// tool in `runs_claimable_idx` order, which is that tool's head when it is due (and not a
/// background run left out). Only the other tools, or that one when its first run is not
/// due, are probed again: a worker of one tool reads each session once, not twice.
pub(super) const SESSION_HEADS: &str = "WITH RECURSIVE \
    s(session_id, tool, id, priority, run_at, background) AS ( \
      (SELECT session_id, tool, id, priority, run_at, background FROM runs \
       WHERE state = 'queued' AND session_id > $1 \
       ORDER BY session_id, tool, priority DESC, run_at, id LIMIT 1) \
      UNION ALL \
      SELECT n.* FROM s CROSS JOIN LATERAL (SELECT r.session_id, r.tool, r.id, r.priority, \
          r.run_at, r.background FROM runs r WHERE r.state = 'queued' AND r.session_id > s.session_id \
          ORDER BY r.session_id, r.tool, r.priority DESC, r.run_at, r.id LIMIT 1) n), \
    w(session_id, tool, id, priority, run_at, background) AS ( \
      (SELECT session_id, tool, id, priority, run_at, background FROM runs \
       WHERE state = 'queued' AND $1 <> '' \
       ORDER BY session_id, tool, priority DESC, run_at, id LIMIT 1) \
      UNION ALL \
      SELECT n.* FROM w CROSS JOIN LATERAL (SELECT r.session_id, r.tool, r.id, r.priority, \
          r.run_at, r.background FROM runs r WHERE r.state = 'queued' AND r.session_id > w.session_id \
          ORDER BY r.session_id, r.tool, r.priority DESC, r.run_at, r.id LIMIT 1) n \
      WHERE w.session_id < $1), \
    v AS (SELECT * FROM s UNION ALL SELECT * FROM w WHERE session_id <= $1) \
    SELECT f.session_id, h.id, h.tool, h.priority, h.run_at, h.background \
    FROM (SELECT *, run_at <= $4 AND ($5::boolean OR background = 0) AS ready FROM v LIMIT $2) f \
    LEFT JOIN LATERAL ( \
      SELECT f.id, f.tool, f.priority, f.run_at, f.background \
      WHERE f.ready AND f.tool = ANY($3::text[]) \
      UNION ALL \
      SELECT r.id, r.tool, r.priority, r.run_at, r.background \
      FROM unnest($3::text[]) AS t(tool) CROSS JOIN LATERAL (SELECT r.id, r.tool, r.priority, \
          r.run_at, r.background FROM runs r WHERE r.state = 'queued' \
          AND r.session_id = f.session_id AND r.tool = t.tool AND r.run_at <= $4 \
          AND ($5::boolean OR r.background = 0) \
          ORDER BY r.priority DESC, r.run_at, r.id LIMIT 1) r \
      WHERE NOT (f.ready AND t.tool = f.tool)) h ON true";

/// The head of each (session, tool) pair given, read again under the sessions' claim locks:
/// its best runnable runs, at most the session's free slots and the tool's room, locked for
/// this claim (rows another transaction holds are skipped). `$6` false leaves background
/// runs out (a worker at its per-worker limit of them).
const HEADS: &str = "SELECT h.id, h.session_id, h.tool, h.priority, h.run_at, h.background \
    FROM unnest($1::text[], $2::bigint[]) AS s(session_id, take) \
    CROSS JOIN unnest($3::text[], $4::bigint[]) AS t(tool, cap) \
    CROSS JOIN LATERAL (SELECT r.id, r.session_id, r.tool, r.priority, r.run_at, r.background FROM runs r \
        WHERE r.state = 'queued' AND r.session_id = s.session_id AND r.tool = t.tool \
        AND r.run_at <= $5 AND ($6::boolean OR r.background = 0) ORDER BY r.priority DESC, r.run_at, r.id LIMIT least(s.take, t.cap) \
        FOR UPDATE SKIP LOCKED) h";

/// [`HEADS`] for a claim of unlimited tools, each session's take read in the same statement
/// (`$1` the sessions, `$2` the claim's max, `$3` per_session, `$4` the tools, `$5` now, `$6`
/// as in [`HEADS`]), so that it goes with the running counts on one round trip: both are
/// read after the sessions' locks are held.
const HEADS_COUNTING: &str = "SELECT h.id, h.session_id, h.tool, h.priority, h.run_at, h.background \
    FROM unnest($1::text[]) AS s(session_id) \
    CROSS JOIN LATERAL (SELECT greatest(least($2::bigint, $3::bigint - count(*)), 0) AS take FROM runs r \
        WHERE r.state = 'running' AND r.session_id = s.session_id) k \
    CROSS JOIN unnest($4::text[]) AS t(tool) \
    CROSS JOIN LATERAL (SELECT r.id, r.session_id, r.tool, r.priority, r.run_at, r.background FROM runs r \
        WHERE r.state = 'queued' AND r.session_id = s.session_id AND r.tool = t.tool \
        AND r.run_at <= $5 AND ($6::boolean OR r.background = 0) ORDER BY r.priority DESC, r.run_at, r.id LIMIT k.take \
        FOR UPDATE SKIP LOCKED) h";

/// What a claim reads before it locks: the pauses, the running counts per session and per
/// tool, the sessions with queued runs from the cursor on (wrapping around), and with
/// `heads`, each one's best due run per tool.
struct Counts {
    paused: crate::flow::Paused,
    running: Running,
    sessions: Vec<String>,
    heads: HashMap<String, Vec<Head<HeadKey>>>,
}

/// What a claim keeps of a head besides its order: its session, and whether it is a
/// background run.
#[derive(Debug, Clone)]
struct HeadKey {
    session: String,
    background: bool,
}

/// The running runs per (session, tool), over all workers.
const RUNNING: &str = "SELECT session_id, tool, count(*) FROM runs WHERE state = 'running' \
     GROUP BY session_id, tool";

async fn read_running<C: GenericClient>(c: &C) -> Result<Running, StoreError> {
    running_of(&query(c, RUNNING, &[], "count running").await?)
}

/// Rows of [`RUNNING`].
fn running_of(rows: &[tokio_postgres::Row]) -> Result<Running, StoreError> {
    let running = rows
        .iter()
        .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?)))
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(Running::of(running))
}

/// The counts, without locks; with `heads`, each session's best due run per tool too.
async fn read_counts<C: GenericClient>(
    c: &C,
    p: &Claim,
    heads: bool,
) -> Result<Counts, StoreError> {
    let max_sessions = claim_plan::max_sessions(p.max) as i64;
    let start = p.after_session.clone().unwrap_or_default();
    let tools: Vec<&str> = p.tools.iter().map(String::as_str).collect();
    let now = ts(p.now);
    let background_ok = !BackgroundRoom::new(p.background_room).full();
    let with_heads: [super::P<'_>; 5] = [&start, &max_sessions, &tools, &now, &background_ok];
    let (scan, args) = if heads {
        (SESSION_HEADS, &with_heads[..])
    } else {
        (SESSIONS, &with_heads[..2])
    };
    let (paused, running, rows) = tokio::try_join!(
        super::flow::paused(c),
        read_running(c),
        query(c, scan, args, "next sessions"),
    )?;
    let mut counts = Counts {
        paused,
        running,
        sessions: Vec::new(),
        heads: HashMap::new(),
    };
    for r in &rows {
        counts.add(r, heads)?;
    }
    Ok(counts)
}

impl Counts {
    /// Adds a row of [`SESSIONS`] or (`heads`) [`SESSION_HEADS`].
    fn add(&mut self, r: &tokio_postgres::Row, heads: bool) -> Result<(), StoreError> {
        let session: String = get(r, 0)?;
        if self.sessions.last() != Some(&session) {
            self.sessions.push(session.clone());
        }
        let id = if heads {
            get::<Option<String>>(r, 1)?
        } else {
            None
        };
        let Some(id) = id else {
            return Ok(());
        };
        let key = HeadKey {
            session: session.clone(),
            background: get::<i64>(r, 5)? != 0,
        };
        self.heads.entry(session).or_default().push(Head {
            id,
            tool: get(r, 2)?,
            priority: get(r, 3)?,
            run_at: get(r, 4)?,
            key,
        });
        Ok(())
    }

    /// The worker's tools that are not paused, sorted, each once.
    fn wanted(&self, p: &Claim) -> Vec<String> {
        claim_plan::wanted(&self.paused, &p.tools).unwrap_or_default()
    }

    /// The sessions with a free slot, in claim order, and how many each may take.
    fn takes(&self, p: &Claim) -> (Vec<String>, Vec<i64>) {
        let mut take_sessions = Vec::new();
        let mut takes = Vec::new();
        for s in &self.sessions {
            if self.paused.sessions.contains(s) {
                continue;
            }
            if let Some(take) = self.running.take(s, p.per_session, p.max) {
                take_sessions.push(s.clone());
                takes.push(take);
            }
        }
        (take_sessions, takes)
    }

    /// The sessions among `candidates` in the order [`pick`] would first take from each: by
    /// their best runs of the wanted tools with room (as read without locks; the room is not
    /// spent here, as a session's later runs of another tool may still be taken).
    fn ranked(
        &self,
        p: &Claim,
        candidates: &[String],
        wanted: &[String],
        room: &HashMap<String, i64>,
    ) -> Vec<String> {
        let best: SessionHeads<HeadKey> = candidates
            .iter()
            .filter_map(|s| {
                let heads = self
                    .heads
                    .get(s)?
                    .iter()
                    .filter(|h| wanted.binary_search(&h.tool).is_ok())
                    .filter(|h| room.get(&h.tool).is_some_and(|n| *n > 0))
                    .cloned()
                    .collect();
                Some((heads, 1))
            })
            .collect();
        let mut unlimited: HashMap<String, i64> =
            wanted.iter().map(|t| (t.clone(), i64::MAX)).collect();
        let mut background = BackgroundRoom::new(p.background_room);
        let mut ranked = Vec::new();
        for h in pick(best, &mut unlimited, candidates.len()) {
            if background.take(h.key.background) {
                ranked.push(h.key.session);
            }
        }
        ranked
    }

    /// What this claim takes from `heads` (read by [`counted_heads`] under the sessions'
    /// locks) under these counts: each session's take is from its running count read on the
    /// same round trip, which no claim can raise while the lock is held.
    fn pick_counted(
        &self,
        p: &Claim,
        heads: HashMap<String, Vec<Head<HeadKey>>>,
        room: &HashMap<String, i64>,
    ) -> Vec<Head<HeadKey>> {
        let per_session: SessionHeads<HeadKey> = heads
            .into_iter()
            .filter_map(|(s, heads)| {
                let take = self.running.take(&s, p.per_session, p.max)?;
                Some((heads, usize::try_from(take).unwrap_or(0)))
            })
            .collect();
        let mut picked = pick(per_session, &mut room.clone(), p.max);
        let mut background = BackgroundRoom::new(p.background_room);
        picked.retain(|h| background.take(h.key.background));
        picked
    }

    /// What this claim takes from `sessions` (whose claim locks it holds) under the counts
    /// read after taking them: their heads read and locked now, picked within `room`.
    async fn pick_locked<C: GenericClient>(
        &self,
        c: &C,
        p: &Claim,
        sessions: &[String],
        wanted: &[String],
        room: &mut HashMap<String, i64>,
    ) -> Result<Vec<Head<HeadKey>>, StoreError> {
        let mut take_sessions = Vec::new();
        let mut takes = Vec::new();
        for s in sessions {
            if let Some(take) = self.running.take(s, p.per_session, p.max) {
                take_sessions.push(s.clone());
                takes.push(take);
            }
        }
        let heads = locked_heads(c, p, (&take_sessions, &takes), wanted, room).await?;
        let mut picked = pick(heads, room, p.max);
        // The per-worker limit of background runs: the best ones up to the room; the rest
        // stay queued (their rows are unlocked at commit).
        let mut background = BackgroundRoom::new(p.background_room);
        picked.retain(|h| background.take(h.key.background));
        Ok(picked)
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
    let counts = read_counts(c, p, false).await?;
    let wanted = counts.wanted(p);
    if wanted.is_empty() || counts.takes(p).0.is_empty() {
        return Ok(false);
    }
    Ok(wanted
        .iter()
        .any(|tool| counts.running.may_start(&p.limits, tool)))
}

/// Claims up to `p.max` runnable runs of the worker's tools: priority first, sessions
/// round-robin after `p.after_session`, never more than `p.per_session` running in a session
/// nor more than a tool's limits allow, over all workers. Each gets attempt + 1 and a fresh
/// lease. In the caller's transaction, whose `BEGIN` is `begin`: it is sent first, on the
/// round trip of the claim's reads without locks.
pub(crate) async fn claim<C: GenericClient>(
    c: &C,
    p: &Claim,
    begin: impl std::future::Future<Output = Result<(), StoreError>>,
) -> Result<Vec<Run>, StoreError> {
    let ((), looked) = tokio::try_join!(biased; begin, look(c, p))?;
    let picked = pick_looked(c, p, looked).await?;
    Ok(take_then(c, p, picked, async { Ok(()) }).await?.0)
}

/// What a claim picked under its locks ([`pick_looked`]), locked for it and still queued:
/// [`take_then`] marks them running.
pub(crate) struct Picked(Vec<Head<HeadKey>>);

/// What a claim reads before it takes any lock ([`look`]): the counts, the sessions and
/// their heads, and the rate windows.
pub(crate) struct Look(Option<(Counts, HashMap<String, crate::flow::Room>)>);

/// A claim's reads without locks, which decide only where it looks: the statements that
/// decide are read again under its locks. A settle sends them on the round trip of its
/// ends' update (after it on the server, so they see its freed slots).
pub(crate) async fn look<C: GenericClient>(c: &C, p: &Claim) -> Result<Look, StoreError> {
    if p.max == 0 {
        return Ok(Look(None));
    }
    let read = tokio::try_join!(read_counts(c, p, true), rate_rooms(c, p))?;
    Ok(Look(Some(read)))
}

/// A claim's pick after its [`look`]: the runs it will take, locked for it under its
/// sessions' and tools' claim locks, not yet written.
pub(crate) async fn pick_looked<C: GenericClient>(
    c: &C,
    p: &Claim,
    looked: Look,
) -> Result<Picked, StoreError> {
    match looked.0 {
        Some((counts, rates)) => pick_heads(c, p, counts, rates).await.map(Picked),
        None => Ok(Picked(Vec::new())),
    }
}

/// Marks the `picked` runs running under fresh leases (and records their rate starts), then
/// runs `then` in the same transaction: on the same round trip as the runs' update when no
/// rate start is to be recorded, sent after it. A settle's messages go there, so the claim
/// locks it holds wait for one round trip fewer before its commit. `then` must take no row
/// lock another transaction may hold (the settle's messages take only inbox locks).
pub(crate) async fn take_then<C: GenericClient, T>(
    c: &C,
    p: &Claim,
    Picked(picked): Picked,
    then: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<(Vec<Run>, T), StoreError> {
    if picked.is_empty() {
        return Ok((Vec::new(), then.await?));
    }
    let rated = !room::starts_to_record(&p.limits, picked.iter().map(|h| h.tool.as_str()), p.now)
        .is_empty();
    let (mut claimed, out) = if rated {
        let claimed = claim_heads(c, p, &picked).await?;
        let tools = claimed.iter().map(|r| r.tool.as_str());
        for starts in room::starts_to_record(&p.limits, tools, p.now) {
            super::flow::record_starts(c, &starts).await?;
        }
        (claimed, then.await?)
    } else {
        let (sql, params) = ClaimHeads::of(p, &picked);
        // Prepared first, so the update is sent (and run) before anything `then` sends.
        let st = super::sql::prepare(c, &sql, "claim runs").await?;
        let args = params.args();
        tokio::try_join!(
            biased;
            async {
                let rows = super::sql::query_prepared(c, &st, &args, "claim runs").await?;
                runs_from_rows(&rows)
            },
            then,
        )?
    };
    claim_plan::order_claimed(&mut claimed);
    Ok((claimed, out))
}

/// [`pick_looked`]'s heads, from what its [`look`] read without locks: the sessions with
/// queued runs, their heads, the counts and the rate windows.
async fn pick_heads<C: GenericClient>(
    c: &C,
    p: &Claim,
    mut counts: Counts,
    rates: HashMap<String, crate::flow::Room>,
) -> Result<Vec<Head<HeadKey>>, StoreError> {
    let wanted = counts.wanted(p);
    let (candidates, _) = counts.takes(p);
    if wanted.is_empty() || candidates.is_empty() {
        return Ok(Vec::new());
    }
    // The sessions ranked by their best run, as the pick orders runs (priority, then each
    // session's first before any session's second, then age): a claim of `max` runs alone
    // takes them from the first `max` sessions of that ranking (a limited tool out of room
    // can move one further down). It locks the first that many that no other claim holds,
    // so claims refilling at the same moment spread over the sessions instead of queueing
    // for the same ones (each serves those it holds).
    let estimate = room_estimate(p, &wanted, &counts.running, &rates);
    let ranked = counts.ranked(p, &candidates, &wanted, &estimate);
    if ranked.is_empty() {
        return Ok(Vec::new());
    }
    let needed = ranked.len().min(p.max);
    let limited: Vec<&str> = wanted
        .iter()
        .map(String::as_str)
        .filter(|t| p.limits.contains_key(*t))
        .collect();
    // Read with the lock of a lone candidate, on its round trip (no tool lock to take first).
    let mut counted = None;
    let mut sessions = if ranked.len() == 1 {
        // One candidate: waiting for it is what a failed try would come to, a round trip
        // sooner.
        if limited.is_empty() {
            counted = Some(wait_and_count(c, p, &ranked, &wanted).await?);
        } else {
            locks::take_claim(c, &ranked, &[]).await?;
        }
        ranked.clone()
    } else {
        locks::try_claim_sessions(c, &ranked, needed).await?
    };
    if sessions.is_empty() {
        // Every one is held: wait for the first (holding no other claim lock), then try the
        // others again, which that claim has likely released too.
        locks::take_claim(c, &ranked[..1], &[]).await?;
        sessions = vec![ranked[0].clone()];
        sessions.extend(locks::try_claim_sessions(c, &ranked[1..], needed - 1).await?);
    }
    // The limited tools' locks, waiting, in key order: a claim never waits for a session
    // while it holds a tool, so two claims never wait on each other in a cycle. The counts
    // that decide are read after the locks, on a later round trip (each statement's
    // snapshot is taken when the server starts it, so every earlier claim of these sessions
    // and tools has committed or rolled back by then).
    if !limited.is_empty() {
        locks::take_claim(c, &[], &limited).await?;
    }
    let (mut picked, mut room) = if limited.is_empty() {
        // No tool's room to read first: the running counts and the heads on one round trip.
        let (running, heads) = match counted {
            Some(read) => read,
            None => tokio::try_join!(read_running(c), counted_heads(c, p, &sessions, &wanted))?,
        };
        counts.running = running;
        let room: HashMap<String, i64> = wanted.iter().map(|t| (t.clone(), i64::MAX)).collect();
        (counts.pick_counted(p, heads, &room), room)
    } else {
        counts.running = read_running(c).await?;
        let mut room = HashMap::new();
        for tool in &wanted {
            let n = tool_room(c, p, tool, &counts.running).await?;
            room.insert(tool.clone(), n);
        }
        let picked = counts
            .pick_locked(c, p, &sessions, &wanted, &mut room)
            .await?;
        (picked, room)
    };
    // Short where it looked (what it read was stale: a claim emptied those sessions as it
    // locked them, or a rate had less room than its window showed): it reads the sessions
    // again, now, and tries as many of the others, so a worker with free slots does not
    // leave them waiting. A few times at most; sessions other claims hold are theirs.
    for _ in 0..3 {
        // Short, with a session it holds giving nothing: what it read of them was stale.
        let idle = |s: &String| !picked.iter().any(|h| &h.key.session == s);
        if picked.len() >= p.max || !sessions.iter().any(idle) {
            break;
        }
        counts = read_counts(c, p, true).await?;
        let (fresh, _) = counts.takes(p);
        let others: Vec<String> = fresh
            .into_iter()
            .filter(|s| !sessions.contains(s))
            .collect();
        let ranked = counts.ranked(p, &others, &wanted, &room);
        let more = locks::try_claim_sessions(c, &ranked, needed).await?;
        if more.is_empty() {
            break;
        }
        counts.running = read_running(c).await?;
        let rest = Claim {
            max: p.max - picked.len(),
            background_room: p
                .background_room
                .map(|n| n.saturating_sub(picked.iter().filter(|h| h.key.background).count())),
            ..p.clone()
        };
        picked.extend(
            counts
                .pick_locked(c, &rest, &more, &wanted, &mut room)
                .await?,
        );
        sessions.extend(more);
    }
    Ok(picked)
}

/// The heads of `sessions` (whose claim locks this claim holds) over the wanted tools, at
/// most each session's free slots, locked for this claim, by session ([`HEADS_COUNTING`]).
async fn counted_heads<C: GenericClient>(
    c: &C,
    p: &Claim,
    sessions: &[String],
    wanted: &[String],
) -> Result<HashMap<String, Vec<Head<HeadKey>>>, StoreError> {
    let bounds = HeadsBounds::of(p);
    let rows = query(
        c,
        HEADS_COUNTING,
        &bounds.args(p, &sessions, &wanted),
        "session heads",
    )
    .await?;
    by_session(&rows)
}

/// What [`HEADS_COUNTING`] binds besides the sessions and tools: the claim's max, its time,
/// and whether it may take background runs.
struct HeadsBounds {
    max: i64,
    now: String,
    background_ok: bool,
}

impl HeadsBounds {
    fn of(p: &Claim) -> HeadsBounds {
        HeadsBounds {
            max: p.max as i64,
            now: ts(p.now),
            background_ok: !BackgroundRoom::new(p.background_room).full(),
        }
    }

    /// The parameters of [`HEADS_COUNTING`], in order.
    fn args<'a>(
        &'a self,
        p: &'a Claim,
        sessions: &'a &[String],
        wanted: &'a &[String],
    ) -> [super::P<'a>; 6] {
        [
            sessions,
            &self.max,
            &p.per_session,
            wanted,
            &self.now,
            &self.background_ok,
        ]
    }
}

/// Waits for the claim locks of `sessions` and reads the running counts and the
/// [`counted_heads`] on the same round trip: the three statements go out together, in that
/// order, and the server starts each read (taking its snapshot) once the locks are held, so
/// every earlier claim of these sessions has committed or rolled back by then. The critical
/// section a claim's session lock serialises is one round trip shorter.
async fn wait_and_count<C: GenericClient>(
    c: &C,
    p: &Claim,
    sessions: &[String],
    wanted: &[String],
) -> Result<(Running, HashMap<String, Vec<Head<HeadKey>>>), StoreError> {
    use super::sql::{prepare, query_prepared};
    let (lock, running, heads) = tokio::try_join!(
        prepare(c, locks::TAKE_CLAIM, "take claim locks"),
        prepare(c, RUNNING, "count running"),
        prepare(c, HEADS_COUNTING, "session heads"),
    )?;
    let names = locks::claim_names(sessions, &[]);
    let lock_args: [super::P<'_>; 1] = [&names];
    let bounds = HeadsBounds::of(p);
    let params = bounds.args(p, &sessions, &wanted);
    // `biased`: polled in order, so sent in order.
    let (_, running, heads) = tokio::try_join!(
        biased;
        query_prepared(c, &lock, &lock_args, "take claim locks"),
        query_prepared(c, &running, &[], "count running"),
        query_prepared(c, &heads, &params, "session heads"),
    )?;
    Ok((running_of(&running)?, by_session(&heads)?))
}

/// Rows of [`HEADS`] or [`HEADS_COUNTING`] (id, session, tool, priority, run_at,
/// background), by session.
fn by_session(
    rows: &[tokio_postgres::Row],
) -> Result<HashMap<String, Vec<Head<HeadKey>>>, StoreError> {
    let mut by_session: HashMap<String, Vec<Head<HeadKey>>> = HashMap::new();
    for r in rows {
        let session: String = get(r, 1)?;
        let key = HeadKey {
            session: session.clone(),
            background: get::<i64>(r, 5)? != 0,
        };
        by_session.entry(session).or_default().push(Head {
            priority: get(r, 3)?,
            run_at: get(r, 4)?,
            id: get(r, 0)?,
            tool: get(r, 2)?,
            key,
        });
    }
    Ok(by_session)
}

/// The heads of each session given (with its take) over the tools with room, read under
/// the claim locks and locked for this claim, grouped by session with its take, for `pick`.
async fn locked_heads<C: GenericClient>(
    c: &C,
    p: &Claim,
    (take_sessions, takes): (&[String], &[i64]),
    wanted: &[String],
    room: &HashMap<String, i64>,
) -> Result<SessionHeads<HeadKey>, StoreError> {
    let tools: Vec<&String> = wanted.iter().filter(|t| room[*t] > 0).collect();
    let caps: Vec<i64> = tools.iter().map(|t| room[*t].min(p.max as i64)).collect();
    if tools.is_empty() || take_sessions.is_empty() || p.max == 0 {
        return Ok(Vec::new());
    }
    let background_ok = !BackgroundRoom::new(p.background_room).full();
    let now = ts(p.now);
    let params: [super::P<'_>; 6] = [&take_sessions, &takes, &tools, &caps, &now, &background_ok];
    let rows = query(c, HEADS, &params, "session heads").await?;
    let by_session = by_session(&rows)?;
    let take_of: HashMap<&str, i64> = take_sessions
        .iter()
        .map(String::as_str)
        .zip(takes.iter().copied())
        .collect();
    Ok(by_session
        .into_iter()
        .map(|(session, heads)| {
            let take = take_of.get(session.as_str()).copied().unwrap_or(0);
            (heads, usize::try_from(take).unwrap_or(0))
        })
        .collect())
}

/// The rate windows of the worker's rate-limited tools, read without forgetting old slices
/// (that is a write, left to the claim under its tool locks).
async fn rate_rooms<C: GenericClient>(
    c: &C,
    p: &Claim,
) -> Result<HashMap<String, crate::flow::Room>, StoreError> {
    let mut rooms = HashMap::new();
    for tool in p.tools.iter() {
        if let Some(rate) = p.limits.get(tool).and_then(|l| l.rate) {
            rooms.insert(tool.clone(), super::flow::room(c, tool, rate, p.now).await?);
        }
    }
    Ok(rooms)
}

/// Each wanted tool's room by the counts and windows read without locks.
fn room_estimate(
    p: &Claim,
    wanted: &[String],
    running: &Running,
    rates: &HashMap<String, crate::flow::Room>,
) -> HashMap<String, i64> {
    wanted
        .iter()
        .map(|tool| {
            let plan = RoomPlan::of(&p.limits, tool, running.of_tool(tool));
            let rate = plan.rate_to_read().and_then(|_| rates.get(tool).cloned());
            (tool.clone(), plan.room(rate))
        })
        .collect()
}

/// Marks `candidates` running under fresh leases, in one statement; the runs it changed.
async fn claim_heads<C: GenericClient>(
    c: &C,
    p: &Claim,
    candidates: &[Head<HeadKey>],
) -> Result<Vec<Run>, StoreError> {
    let (sql, params) = ClaimHeads::of(p, candidates);
    let rows = query(c, &sql, &params.args(), "claim runs").await?;
    runs_from_rows(&rows)
}

/// The statement that marks picked runs running, and its parameters. Its state guard is
/// written `(state = 'queued') IS TRUE`, the same test in a form no partial index predicate
/// matches: as `state = 'queued'` it let the planner, with statistics taken while few runs
/// were queued, scan every queued run through `runs_claimable_idx` and hash-join them to the
/// picked ids (4.8 ms for 4 runs out of 6,000 queued) instead of probing the primary key
/// (0.35 ms).
struct ClaimHeads<'a> {
    worker: &'a str,
    lease_until: String,
    now: String,
    ids: Vec<&'a str>,
    tokens: Vec<String>,
}

impl<'a> ClaimHeads<'a> {
    fn of(p: &'a Claim, candidates: &'a [Head<HeadKey>]) -> (String, ClaimHeads<'a>) {
        let sql = format!(
            "UPDATE runs SET state = 'running', attempt = attempt + 1, lease_owner = $1, \
             lease_token = u.u_token, lease_expires_at = $2, heartbeat_at = $3, started_at = $3, \
             cancel_requested_at = NULL, status_text = NULL, progress = NULL, output_tail = NULL \
             FROM unnest($4::text[], $5::text[]) AS u(u_id, u_token) \
             WHERE id = u.u_id AND (state = 'queued') IS TRUE RETURNING {RUN_COLUMNS}"
        );
        let params = ClaimHeads {
            worker: &p.worker,
            lease_until: ts(p.lease_until),
            now: ts(p.now),
            ids: candidates.iter().map(|c| c.id.as_str()).collect(),
            tokens: candidates.iter().map(|_| lease_token()).collect(),
        };
        (sql, params)
    }

    fn args(&self) -> [super::P<'_>; 5] {
        [
            &self.worker,
            &self.lease_until,
            &self.now,
            &self.ids,
            &self.tokens,
        ]
    }
}

/// How many more runs of `tool` may start now under its limits (see [`RoomPlan`]), reading
/// (and trimming) its rate's window only when that can cut it.
async fn tool_room<C: GenericClient>(
    c: &C,
    p: &Claim,
    tool: &str,
    running: &Running,
) -> Result<i64, StoreError> {
    let plan = RoomPlan::of(&p.limits, tool, running.of_tool(tool));
    let rate = match plan.rate_to_read() {
        Some(rate) => Some(super::flow::room_and_forget(c, tool, rate, p.now).await?),
        None => None,
    };
    Ok(plan.room(rate))
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
        let blob = BlobRow {
            session_id: &w.session_id,
            path: crate::store::end_plan::log_path(&w.id),
            run_id: &w.id,
            content: std::borrow::Cow::Borrowed(log),
            truncated: *truncated,
        };
        super::finish::put_blobs(c, &[blob], now).await?;
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
             lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, \
             wait_kind = coalesce(wait_kind, CASE WHEN EXISTS (SELECT 1 FROM step_records s \
                 WHERE s.run_id = runs.id) THEN 'resume' END) {GUARD}"
        ),
        &[&id, &attempt, &token, &ts(now)],
        "release run",
    )
    .await?;
    Ok(n == 1)
}
