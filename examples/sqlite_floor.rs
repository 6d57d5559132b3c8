//! The floor under toolq's own writes (issue 19): what SQLite alone, driven by rusqlite on one
//! thread with no toolq code around it, does with toolq's rows, schema and statements. Where a
//! figure of `examples/workload` is at or near its floor here, no change to toolq's code can
//! lift it much: only a change of what is written (the data model) can.
//!
//! `cargo run --profile dist --example sqlite_floor -- <dir> <n>` prints one JSON line:
//! - `runs_batch_insert_per_s`: toolq's enqueue row into `schema.sql`, 1,000 runs per
//!   transaction in multi-row INSERTs of 64 (what `Client::enqueue_batch` writes);
//! - `runs_batch_insert_inline_checkpoint_per_s`: the same with SQLite's default checkpoint (the
//!   commit past 1,000 WAL pages copies them into the database file before it returns), and
//!   `runs_batch_insert_thread_checkpoint_per_s` with toolq's (a thread of its own checkpoints
//!   every 256 new WAL pages while the writer goes on);
//! - `runs_insert_commits_per_s`: one run per transaction, as `Client::enqueue` writes it
//!   (`sqlite_limit` has the same figure with SQLite's own checkpoints);
//! - `lean_runs_insert_commits_per_s`: the same into the leanest table that still finds a run
//!   by id and claims: keyed by its text id (`WITHOUT ROWID`, so the id index
//!   is the table) with the claim index only (no session, delay, schedule or key index);
//! - `drain_c16_per_s`, `drain_c256_per_s`: the drain's writes with toolq's schema and its
//!   statements, in cohorts of 16 (the workload's concurrency) and 256: one transaction per
//!   cohort records the previous cohort's ends (the fenced state change with the result, no
//!   row for the empty log, an inbox message) and claims the next one (the running counts, the session's
//!   head, the claim and the read-back), as the worker's finisher does;
//! - `narrow_drain_c16_per_s`, `narrow_drain_c256_per_s`: the same drain if the state, attempt,
//!   lease and timestamps lived in a narrow table of their own (issue 19's "narrow hot table"
//!   lever), with the same indexes on it and the same results and messages;
//! - `sessions_drain_c16_per_s` (issue 38): the c=16 drain of runs spread round-robin over 50
//!   sessions, as `examples/workload`'s `drain-sessions` seeds them, claimed as toolq claims
//!   over many sessions: one index seek per session for its head (toolq's survey), then each
//!   session's best runs under the per-session limit of 5, every session's first before any
//!   session's second, oldest first; each message goes to its run's session;
//! - `drain_c16_wal_frames_per_run`, `sessions_drain_c16_wal_frames_per_run`: the WAL frames
//!   those two drains append per run (each page a commit changed is one frame), which says how
//!   much more a commit writes when its runs belong to many sessions.
//!
//! Seeding the runs a drain takes is not timed. WAL, synchronous NORMAL, a fresh file each,
//! and no checkpoints (`wal_autocheckpoint = 0`) except where a figure says otherwise: toolq
//! checkpoints on a thread of its own, so a floor that did them inline would not bound it.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde_json::json;

#[path = "common/sqlite_bench.rs"]
mod common;
use common::payload;

/// Multi-row INSERT statements hold this many rows at most (as toolq's enqueue does).
const ROWS_PER_INSERT: usize = 64;
/// Runs per transaction when seeding or batch-enqueueing.
const PER_BATCH: usize = 1_000;

/// A fresh WAL file with toolq's schema, foreign keys on, statement journals in memory (as
/// toolq's writer keeps them) and no checkpoints.
fn fresh(dir: &Path, name: &str) -> rusqlite::Result<Connection> {
    let c = common::fresh_wal(dir, name)?;
    c.execute_batch(
        "PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 0;",
    )?;
    c.execute_batch(include_str!("../schema.sql"))?;
    Ok(c)
}

/// `head VALUES (..), (..)` with `rows` groups of `per_row` numbered parameters after `?1`.
fn values(head: &str, row: &str, rows: usize) -> String {
    let per_row = row.matches('#').count();
    let mut sql = format!("{head} VALUES ");
    let mut next = 2;
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        for part in row.split_inclusive('#') {
            match part.strip_suffix('#') {
                Some(text) => {
                    sql.push_str(&format!("{text}?{next}"));
                    next += 1;
                }
                None => sql.push_str(part),
            }
        }
    }
    debug_assert_eq!(next, 2 + rows * per_row);
    sql
}

/// toolq's enqueue INSERT (src/store/sqlite/runs.rs): one row binds its 17 values; a
/// statement of many rows whose runs share all but their id and args (a batch from one caller)
/// binds the shared 15 once as `?1..=?17` in their column's place and each row's id and args
/// from `?18` on, as toolq does.
const RUNS_HEAD: &str = "INSERT INTO runs (id, session_id, tool, args, title, state, priority, \
    max_attempts, run_at, created_at, idempotency_key, timeout_ms, signal_on_completion, delivery, \
    schedule_id, fire_at, ticks, unique_key)";
/// Parameters of one row.
const RUNS_PARAMS: usize = 17;

fn runs_sql(rows: usize) -> String {
    let mut sql = format!("{RUNS_HEAD} VALUES ");
    for r in 0..rows {
        if r > 0 {
            sql.push_str(", ");
        }
        if rows == 1 {
            sql.push_str("(?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)");
        } else {
            let own = RUNS_PARAMS + 1 + 2 * r;
            sql.push_str(&format!(
                "(?{own}, ?2, ?3, ?{}, ?5, 'queued', ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
                own + 1
            ));
        }
    }
    sql
}

/// The sessions of the `sessions_*` figures: run `i` is in session `i % SESSIONS`, as
/// `examples/workload`'s `enqueue-sessions` spreads them.
const SESSIONS: usize = 50;
/// toolq's default per-session limit, which the claim over many sessions honours.
const PER_SESSION: usize = 5;

/// The session of run `i` of a seed over `sessions` sessions (one: toolq's default session).
fn session_of(i: usize, sessions: usize) -> String {
    if sessions == 1 {
        "default".to_string()
    } else {
        format!("session-{:02}", i % sessions)
    }
}

/// Inserts `count` runs due now in multi-row statements, in the caller's transaction.
fn insert_runs(tx: &Transaction<'_>, from: usize, count: usize) -> rusqlite::Result<()> {
    insert_runs_over(tx, from, count, 1)
}

/// [`insert_runs`] with run `i` in session `i % sessions`: one row per statement when there
/// are several sessions (a statement's rows share their session).
fn insert_runs_over(
    tx: &Transaction<'_>,
    from: usize,
    count: usize,
    sessions: usize,
) -> rusqlite::Result<()> {
    let now = toolq::clock::ts(chrono::Utc::now());
    let null: Option<&str> = None;
    let mut done = 0;
    while done < count {
        let per_insert = if sessions == 1 { ROWS_PER_INSERT } else { 1 };
        let rows = per_insert.min(count - done);
        let session = session_of(from + done, sessions);
        let mut stmt = tx.prepare_cached(&runs_sql(rows))?;
        let values: [&dyn rusqlite::ToSql; RUNS_PARAMS] = [
            &null,
            &session,
            &"noop",
            &null,
            &"noop",
            &0_i64,
            &3_i64,
            &now,
            &now,
            &null,
            &null,
            &1_i64,
            &"when_idle",
            &null,
            &null,
            &1_i64,
            &null,
        ];
        for (i, v) in values.into_iter().enumerate() {
            if rows == 1 || ![0, 3].contains(&i) {
                stmt.raw_bind_parameter(i + 1, v)?;
            }
        }
        for r in 0..rows {
            let id = toolq::RunId::generate();
            let args = payload(from + done + r);
            let (id_at, args_at) = if rows == 1 {
                (1, 4)
            } else {
                (RUNS_PARAMS + 1 + 2 * r, RUNS_PARAMS + 2 + 2 * r)
            };
            stmt.raw_bind_parameter(id_at, id.as_str())?;
            stmt.raw_bind_parameter(args_at, args)?;
        }
        stmt.raw_execute()?;
        done += rows;
    }
    Ok(())
}

/// One run per transaction into `schema.sql`, or (`lean`) into the leanest table described
/// in the module doc.
fn single_inserts(dir: &Path, n: usize, lean: bool) -> rusqlite::Result<f64> {
    let c = if !lean {
        fresh(dir, "floor-single.db")?
    } else {
        let c = common::fresh_wal(dir, "floor-lean.db")?;
        c.execute_batch("PRAGMA wal_autocheckpoint = 0;")?;
        let full = Connection::open_in_memory()?;
        full.execute_batch(include_str!("../schema.sql"))?;
        let runs: String = full.query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'runs'",
            [],
            |r| r.get(0),
        )?;
        let claim: String = full.query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'runs_claimable_idx'",
            [],
            |r| r.get(0),
        )?;
        // The schedules reference needs its table; no row here has a schedule.
        c.execute_batch(&format!(
            "{} WITHOUT ROWID; {claim};",
            runs.replace(" REFERENCES schedules(id) ON DELETE SET NULL", "")
        ))?;
        c
    };
    let t = Instant::now();
    for i in 0..n {
        let tx = c.unchecked_transaction()?;
        insert_runs(&tx, i, 1)?;
        tx.commit()?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Inserts `n` runs, [`PER_BATCH`] per transaction.
fn insert_batches(c: &Connection, n: usize) -> rusqlite::Result<()> {
    insert_batches_then(c, (n, 1), || ())
}

/// Inserts `n` runs over `sessions` sessions, [`PER_BATCH`] per transaction.
fn insert_batches_over(c: &Connection, n: usize, sessions: usize) -> rusqlite::Result<()> {
    insert_batches_then(c, (n, sessions), || ())
}

/// Inserts `n` runs over `sessions` sessions ([`insert_runs_over`]), [`PER_BATCH`] per
/// transaction, calling `after_commit` after each transaction.
fn insert_batches_then(
    c: &Connection,
    (n, sessions): (usize, usize),
    mut after_commit: impl FnMut(),
) -> rusqlite::Result<()> {
    let mut i = 0;
    while i < n {
        let k = PER_BATCH.min(n - i);
        let tx = c.unchecked_transaction()?;
        insert_runs_over(&tx, i, k, sessions)?;
        tx.commit()?;
        i += k;
        after_commit();
    }
    Ok(())
}

/// How the WAL is checkpointed while [`batch_inserts`] writes.
#[derive(Clone, Copy)]
enum Checkpoints {
    /// Not at all: the WAL grows without bound (the floor of the other figures).
    None,
    /// SQLite's default: the commit that takes the WAL past 1,000 pages copies it into the
    /// database file before it returns (the plainjob peer's setting; its 20,000 runs never
    /// reach that size).
    Inline,
    /// toolq's: a thread of its own checkpoints (PASSIVE) on its own connection, woken every
    /// 256 new WAL pages (src/store/sqlite/checkpointer.rs, without its fallback at 4,000).
    Thread,
}

/// The WAL pages after the writer's last commit, as its WAL hook saw them.
static WAL_PAGES: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

fn remember_wal_pages(_: &rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_PAGES.store(pages, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// [`insert_batches`] on a fresh file, timed, with `checkpoints`.
fn batch_inserts(dir: &Path, n: usize, checkpoints: Checkpoints) -> rusqlite::Result<f64> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let name = match checkpoints {
        Checkpoints::None => "floor-batch.db",
        Checkpoints::Inline => "floor-batch-inline.db",
        Checkpoints::Thread => "floor-batch-thread.db",
    };
    let c = fresh(dir, name)?;
    if let Checkpoints::Inline = checkpoints {
        c.execute_batch("PRAGMA wal_autocheckpoint = 1000;")?;
    }
    let Checkpoints::Thread = checkpoints else {
        let t = Instant::now();
        insert_batches(&c, n)?;
        return Ok(n as f64 / t.elapsed().as_secs_f64());
    };
    let checkpointer = Connection::open(dir.join(name))?;
    let stop = AtomicBool::new(false);
    c.wal_hook(Some(remember_wal_pages));
    WAL_PAGES.store(0, Ordering::Relaxed);
    std::thread::scope(|s| {
        let stop = &stop;
        let thread = s.spawn(move || {
            while !stop.load(Ordering::Acquire) {
                std::thread::park();
                let _ = checkpointer.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
        });
        let t = Instant::now();
        let mut signalled = 0;
        let done = insert_batches_then(&c, (n, 1), || {
            let pages = WAL_PAGES.load(Ordering::Relaxed);
            if pages < signalled {
                signalled = 0;
            } else if pages - signalled >= 256 {
                signalled = pages;
                thread.thread().unpark();
            }
        });
        let rate = n as f64 / t.elapsed().as_secs_f64();
        // Stopped on every path: the scope waits for the thread before it returns.
        stop.store(true, Ordering::Release);
        thread.thread().unpark();
        done.map(|()| rate)
    })
}

/// The narrow hot table of the `narrow_*` figures: what a claim and an end change, plus the
/// columns the claim and limit indexes need. The wide `runs` row is written once and not
/// touched again.
const NARROW_SCHEMA: &str = "CREATE TABLE hot (run INTEGER PRIMARY KEY, session_id TEXT NOT NULL, \
    tool TEXT NOT NULL, priority INTEGER NOT NULL, run_at TEXT NOT NULL, state TEXT NOT NULL, \
    attempt INTEGER NOT NULL DEFAULT 0, started_at TEXT, finished_at TEXT, lease_owner TEXT, \
    lease_token TEXT, lease_expires_at TEXT, heartbeat_at TEXT, result BLOB); \
    CREATE INDEX hot_claimable_idx ON hot (session_id, tool, priority DESC, run_at) WHERE state = 'queued'; \
    CREATE INDEX hot_running_idx ON hot (lease_owner, lease_expires_at, session_id, tool) WHERE state = 'running'; \
    CREATE INDEX hot_final_idx ON hot (state, finished_at) WHERE state IN ('completed', 'failed', 'cancelled');";

/// One layout's drain statements: the claim's reads and writes and the end's state change.
struct Layout {
    running: &'static str,
    head: &'static str,
    claim: &'static str,
    read_back: &'static str,
    finish: &'static str,
}

/// toolq's own statements (src/store/sqlite/claim.rs and finish.rs).
const TOOLQ: Layout = Layout {
    running: "SELECT session_id, tool, count(*) FROM runs INDEXED BY runs_running_owner_idx \
        WHERE state = 'running' GROUP BY session_id, tool",
    head: "SELECT rowid, id FROM runs INDEXED BY runs_claimable_idx WHERE state = 'queued' \
        AND session_id = 'default' AND tool = 'noop' AND run_at <= ?1 \
        ORDER BY priority DESC, run_at, id LIMIT ?2",
    claim: "UPDATE runs SET state = 'running', attempt = attempt + 1, lease_owner = ?1, \
        lease_token = ?2, lease_expires_at = ?3, heartbeat_at = ?4, started_at = ?4, \
        cancel_requested_at = NULL, status_text = NULL, progress = NULL, output_tail = NULL \
        WHERE rowid = ?5 AND state = 'queued'",
    read_back: "SELECT * FROM runs WHERE rowid = ?1",
    finish: "UPDATE runs SET state = ?1, run_at = coalesce(?2, run_at), finished_at = ?3, \
        error = ?4, internal_error = ?5, \
        errors = CASE WHEN ?6 IS NULL THEN errors ELSE json_insert(errors, '$[#]', json(?6)) END, \
        status_text = coalesce(?7, status_text), progress = coalesce(?8, progress), \
        output_tail = coalesce(?9, output_tail), approval_state = coalesce(?10, approval_state), \
        approval_deadline = coalesce(?11, approval_deadline), \
        attempt = CASE WHEN ?1 = 'awaiting_approval' THEN attempt - 1 ELSE attempt END, \
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, \
        result = coalesce(?15, result) \
        WHERE id = ?12 AND state = 'running' AND attempt = ?13 AND lease_token = ?14",
};

/// The same statements against the narrow hot table (the run's id read from the wide row).
const NARROW: Layout = Layout {
    running: "SELECT session_id, tool, count(*) FROM hot INDEXED BY hot_running_idx \
        WHERE state = 'running' GROUP BY session_id, tool",
    head: "SELECT run, (SELECT id FROM runs WHERE rowid = run) FROM hot INDEXED BY hot_claimable_idx \
        WHERE state = 'queued' AND session_id = 'default' AND tool = 'noop' AND run_at <= ?1 \
        ORDER BY priority DESC, run_at LIMIT ?2",
    claim: "UPDATE hot SET state = 'running', attempt = attempt + 1, lease_owner = ?1, \
        lease_token = ?2, lease_expires_at = ?3, heartbeat_at = ?4, started_at = ?4 \
        WHERE run = ?5 AND state = 'queued'",
    read_back: "SELECT * FROM runs JOIN hot ON hot.run = runs.rowid WHERE runs.rowid = ?1",
    finish: "UPDATE hot SET state = ?1, run_at = coalesce(?2, run_at), finished_at = ?3, \
        attempt = CASE WHEN ?1 = 'awaiting_approval' THEN attempt - 1 ELSE attempt END, \
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, \
        result = coalesce(?15, result) \
        WHERE run = (SELECT rowid FROM runs WHERE id = ?12) AND state = 'running' \
        AND attempt = ?13 AND lease_token = ?14",
};

const INBOX_HEAD: &str =
    "INSERT INTO inbox (session_id, run_id, attempt, kind, body, data, delivery, created_at)";
const INBOX_ROW: &str = "(#, #, 1, 'completed', #, #, 'when_idle', ?1)";

/// A claimed run: its id, its session and the lease token its end must show.
struct Claimed {
    id: String,
    session: String,
    token: String,
}

/// Records the ends of `cohort` as toolq does: the fenced state change with the run's result
/// (schema version 16), no log row (the log is empty), and one message per run in multi-row
/// statements.
fn record_ends(tx: &Transaction<'_>, layout: &Layout, cohort: &[Claimed]) -> rusqlite::Result<()> {
    if cohort.is_empty() {
        return Ok(());
    }
    let now = toolq::clock::ts(chrono::Utc::now());
    let mut finish = tx.prepare_cached(layout.finish)?;
    let result = br#"{"ok":true}"#.as_slice();
    for run in cohort {
        finish.raw_bind_parameter(1, "completed")?;
        finish.raw_bind_parameter(3, &now)?;
        finish.raw_bind_parameter(12, &run.id)?;
        finish.raw_bind_parameter(13, 1)?;
        finish.raw_bind_parameter(14, &run.token)?;
        finish.raw_bind_parameter(15, result)?;
        let changed = finish.raw_execute()?;
        assert_eq!(changed, 1, "the end of {} did not apply", run.id);
    }
    for chunk in cohort.chunks(ROWS_PER_INSERT) {
        let mut inbox = tx.prepare_cached(&values(INBOX_HEAD, INBOX_ROW, chunk.len()))?;
        inbox.raw_bind_parameter(1, &now)?;
        let mut i = 2;
        for run in chunk {
            inbox.raw_bind_parameter(i, &run.session)?;
            inbox.raw_bind_parameter(i + 1, &run.id)?;
            inbox.raw_bind_parameter(i + 2, format!("Background run {} completed.", run.id))?;
            inbox.raw_bind_parameter(
                i + 3,
                format!(r#"{{"run_id":"{}","status":"completed"}}"#, run.id),
            )?;
            i += 4;
        }
        inbox.raw_execute()?;
    }
    Ok(())
}

/// Now, and a lease's expiry 30 s later, as stored text.
fn now_and_until() -> (String, String) {
    let now = chrono::Utc::now();
    (
        toolq::clock::ts(now),
        toolq::clock::ts(now + chrono::Duration::seconds(30)),
    )
}

/// The running runs per (session, tool), which a claim reads first.
fn running_counts(
    tx: &Transaction<'_>,
    layout: &Layout,
) -> rusqlite::Result<Vec<(String, String, i64)>> {
    tx.prepare_cached(layout.running)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect()
}

/// Claims up to `size` runs as toolq's claim does and returns them.
fn claim(
    tx: &Transaction<'_>,
    layout: &Layout,
    size: usize,
    seq: &mut u64,
) -> rusqlite::Result<Vec<Claimed>> {
    let (now, until) = now_and_until();
    let _running = running_counts(tx, layout)?;
    let heads: Vec<(i64, String)> = tx
        .prepare_cached(layout.head)?
        .query_map(params![now, size as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let picked = heads
        .into_iter()
        .map(|(rowid, id)| (rowid, id, "default".to_string()));
    take(tx, layout, picked, seq, (&until, &now))
}

/// Marks the `picked` runs (rowid, id, session) running under fresh leases and reads each
/// back, as toolq's claim does after its pick.
fn take(
    tx: &Transaction<'_>,
    layout: &Layout,
    picked: impl IntoIterator<Item = (i64, String, String)>,
    seq: &mut u64,
    (until, now): (&str, &str),
) -> rusqlite::Result<Vec<Claimed>> {
    let mut update = tx.prepare_cached(layout.claim)?;
    let mut read = tx.prepare_cached(layout.read_back)?;
    let mut out = Vec::new();
    for (rowid, id, session) in picked {
        *seq += 1;
        let token = format!("{:024x}", *seq);
        let changed = update.execute(params!["wk_floor", token, until, now, rowid])?;
        assert_eq!(changed, 1, "the claim of {id} did not apply");
        read.query_row([rowid], |r| r.get::<_, String>(0))?;
        out.push(Claimed { id, session, token });
    }
    Ok(out)
}

/// toolq's survey probe (src/store/sqlite/survey.rs): the first queued run after a session,
/// in the claimable index's order.
const NEXT_SESSION: &str = "SELECT session_id, rowid, id, run_at FROM runs \
    INDEXED BY runs_claimable_idx WHERE state = 'queued' AND session_id > ?1 \
    ORDER BY session_id, tool, priority DESC, run_at, id LIMIT 1";
/// toolq's head query (src/store/sqlite/claim.rs) for one session.
const SESSION_HEADS: &str = "SELECT rowid, id, run_at FROM runs INDEXED BY runs_claimable_idx \
    WHERE state = 'queued' AND session_id = ?1 AND tool = 'noop' AND run_at <= ?2 \
    ORDER BY priority DESC, run_at, id LIMIT ?3";

/// A session's head as the claim over many sessions ranks it: (rank in its session, run_at,
/// id, rowid, session).
type Ranked = (usize, String, String, i64, String);

/// Claims up to `size` runs over many sessions as toolq does: the running counts, one probe
/// per session after `cursor` (wrapping round) for its first run, each session's further
/// heads only when the sessions' first runs are too few, then every session's first before
/// any session's second, oldest first, at most [`PER_SESSION`] running in a session. Moves
/// `cursor` to the last session claimed from.
fn claim_over_sessions(
    tx: &Transaction<'_>,
    size: usize,
    seq: &mut u64,
    cursor: &mut String,
) -> rusqlite::Result<Vec<Claimed>> {
    let (now, until) = now_and_until();
    let running = running_counts(tx, &TOOLQ)?;
    let room = |session: &str| {
        let busy: i64 = running.iter().filter(|r| r.0 == session).map(|r| r.2).sum();
        PER_SESSION.saturating_sub(usize::try_from(busy).unwrap_or(PER_SESSION))
    };
    let mut probe = tx.prepare_cached(NEXT_SESSION)?;
    let next = |probe: &mut rusqlite::CachedStatement<'_>, after: &str| {
        probe
            .query_row([after], |r| {
                Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()
    };
    // Each session with room: its first run, and its room.
    let mut firsts: Vec<(Ranked, usize)> = Vec::new();
    let mut at = cursor.clone();
    let mut wrapped = false;
    loop {
        let Some((session, rowid, id, run_at)) = next(&mut probe, &at)? else {
            if wrapped || cursor.is_empty() {
                break;
            }
            wrapped = true;
            at = String::new();
            continue;
        };
        if wrapped && session > *cursor {
            break;
        }
        let take = room(&session);
        if take > 0 && run_at <= now {
            firsts.push(((0, run_at, id, rowid, session.clone()), take));
        }
        at = session;
    }
    let mut candidates: Vec<Ranked> = Vec::new();
    if firsts.len() >= size {
        candidates.extend(firsts.into_iter().map(|(first, _)| first));
    } else {
        let mut heads = tx.prepare_cached(SESSION_HEADS)?;
        for ((.., session), take) in firsts {
            let rows = heads.query_map(params![session, now, take as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })?;
            for (rank, row) in rows.enumerate() {
                let (rowid, id, run_at) = row?;
                candidates.push((rank, run_at, id, rowid, session.clone()));
            }
        }
    }
    candidates.sort();
    candidates.truncate(size);
    let picked = candidates
        .into_iter()
        .map(|(_, _, id, rowid, session)| (rowid, id, session));
    let out = take(tx, &TOOLQ, picked, seq, (&until, &now))?;
    if let Some(last) = out.last() {
        cursor.clone_from(&last.session);
    }
    Ok(out)
}

/// The drain of `n` runs over [`SESSIONS`] sessions in cohorts of `cohort`, as
/// `sessions_drain_c16_per_s` describes: its rate (the timed part only) and the WAL frames
/// it appended per run.
fn drain_over_sessions(dir: &Path, n: usize, cohort: usize) -> rusqlite::Result<(f64, f64)> {
    let name = format!("floor-drain-sessions-{cohort}.db");
    let c = fresh(dir, &name)?;
    insert_batches_over(&c, n, SESSIONS)?;
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    let (mut seq, mut cursor) = (0, String::new());
    let t = Instant::now();
    let mut running: Vec<Claimed> = Vec::new();
    let mut ended = 0;
    loop {
        let tx = c.unchecked_transaction()?;
        record_ends(&tx, &TOOLQ, &running)?;
        ended += running.len();
        running = claim_over_sessions(&tx, cohort, &mut seq, &mut cursor)?;
        tx.commit()?;
        if running.is_empty() {
            break;
        }
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    assert_eq!(
        ended, n,
        "the drain over sessions ended {ended} runs of {n}"
    );
    Ok((rate, wal_frames(&dir.join(&name)) as f64 / n as f64))
}

/// The frames in `db`'s WAL file (toolq's 4 KiB pages, each after a 24-byte header).
fn wal_frames(db: &Path) -> u64 {
    let wal = format!("{}-wal", db.display());
    let bytes = std::fs::metadata(wal).map_or(0, |m| m.len());
    bytes.saturating_sub(32) / (4096 + 24)
}

/// Drains `n` seeded runs in cohorts of `cohort`; the rate counts the timed part only.
fn drain(dir: &Path, n: usize, cohort: usize, narrow: bool) -> rusqlite::Result<f64> {
    drain_counted(dir, n, cohort, narrow).map(|(rate, _)| rate)
}

/// [`drain`], with the WAL frames it appended per run.
fn drain_counted(
    dir: &Path,
    n: usize,
    cohort: usize,
    narrow: bool,
) -> rusqlite::Result<(f64, f64)> {
    let name = format!(
        "floor-drain-{}-{cohort}.db",
        if narrow { "narrow" } else { "toolq" }
    );
    let c = fresh(dir, &name)?;
    let layout = if narrow {
        c.execute_batch(NARROW_SCHEMA)?;
        &NARROW
    } else {
        &TOOLQ
    };
    insert_batches(&c, n)?;
    if narrow {
        c.execute_batch(
            "INSERT INTO hot (run, session_id, tool, priority, run_at, state) \
             SELECT rowid, session_id, tool, priority, run_at, state FROM runs",
        )?;
    }
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    let mut seq = 0;
    let t = Instant::now();
    let mut running: Vec<Claimed> = Vec::new();
    let mut ended = 0;
    loop {
        let tx = c.unchecked_transaction()?;
        record_ends(&tx, layout, &running)?;
        ended += running.len();
        running = claim(&tx, layout, cohort, &mut seq)?;
        tx.commit()?;
        if running.is_empty() {
            break;
        }
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    assert_eq!(ended, n, "the drain ended {ended} runs of {n}");
    Ok((rate, wal_frames(&dir.join(&name)) as f64 / n as f64))
}

fn main() -> ExitCode {
    common::run_main("sqlite_floor", "sqlite-floor", |dir, n| {
        let (drain_c16, frames_c16) = drain_counted(dir, n, 16, false)?;
        let (sessions_c16, sessions_frames_c16) = drain_over_sessions(dir, n, 16)?;
        Ok(json!({
            "runs_insert_commits_per_s": single_inserts(dir, n, false)?.round(),
            "lean_runs_insert_commits_per_s": single_inserts(dir, n, true)?.round(),
            "runs_batch_insert_per_s": batch_inserts(dir, n, Checkpoints::None)?.round(),
            "runs_batch_insert_inline_checkpoint_per_s": batch_inserts(dir, n, Checkpoints::Inline)?
                .round(),
            "runs_batch_insert_thread_checkpoint_per_s": batch_inserts(dir, n, Checkpoints::Thread)?
                .round(),
            "drain_c16_per_s": drain_c16.round(),
            "drain_c16_wal_frames_per_run": (frames_c16 * 100.0).round() / 100.0,
            "sessions_drain_c16_per_s": sessions_c16.round(),
            "sessions_drain_c16_wal_frames_per_run": (sessions_frames_c16 * 100.0).round() / 100.0,
            "drain_c256_per_s": drain(dir, n, 256, false)?.round(),
            "narrow_drain_c16_per_s": drain(dir, n, 16, true)?.round(),
            "narrow_drain_c256_per_s": drain(dir, n, 256, true)?.round(),
        }))
    })
}
