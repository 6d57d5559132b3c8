//! Inserting runs: idempotency keys and unique runs looked up first, the rest in multi-row
//! INSERTs, and a run that waits for approval stored `awaiting_approval` with its request.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Transaction};

use crate::error::StoreError;
use crate::ids::RunId;
use crate::run::{Inserted, NewRun};
use crate::store::run_params::RunApprove;
use crate::store::sqlite::codec::ts;
use crate::store::sqlite::{Ctx, approvals};

const FIND_BY_KEY: &str = "SELECT id, tool, args FROM runs WHERE idempotency_key = ?1";
/// One run's INSERT; a batch repeats its value list ([`insert_sql`]).
///
/// `OR FAIL`: a failing row stops the statement and leaves the rows before it, which the
/// caller's transaction then rolls back with the rest. A multi-row statement that could undo
/// itself (SQLite's default, `ABORT`) keeps a statement journal, a copy of every page it
/// changes (schema version 11).
pub(crate) const INSERT: &str = "INSERT OR FAIL INTO runs (id, session_id, tool, args, title, state, priority, max_attempts, \
    run_at, created_at, idempotency_key, timeout_ms, signal_on_completion, delivery, schedule_id, fire_at, ticks, \
    unique_key, batch_id, parent_run_id, tags, traceparent) VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?7, ?8, ?9, ?10, ?11, \
    ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)";
/// One `run_tags` row (`key=value`) of a tagged run; an untagged run writes none.
const INSERT_TAG: &str = "INSERT INTO run_tags (run_id, tag) VALUES (?1, ?2)";
/// A unique enqueue's match in one state: one seek of `runs_unique_idx`, newest first.
pub(crate) const FIND_UNIQUE: &str = "SELECT id FROM runs WHERE unique_key = ?1 AND state = ?2 AND created_at >= ?3 \
    ORDER BY created_at DESC LIMIT 1";

/// Inserts a queued run, or returns the run that already holds its idempotency key.
pub fn insert(tx: &Transaction<'_>, run: &NewRun) -> Result<Inserted, StoreError> {
    insert_many(tx, std::slice::from_ref(run)).map(|mut v| v.remove(0))
}

/// [`insert`] for each run in order, in the caller's transaction. Runs without an idempotency
/// key or a unique check go in multi-row INSERTs of up to `ROWS_PER_INSERT` (64): every INSERT
/// statement opens a cursor on the table and on each of its 12 indexes and closes them at its
/// end, and a statement of many rows pays that once and keeps its index cursors at the end of
/// each index, so the next row's entry needs no seek from the root (a 20,000-run batch enqueue:
/// 28 % fewer instructions, BENCHMARKS.md). A run with a key is looked up and inserted alone,
/// after the runs before it, so a key repeated in one batch finds its first run.
pub fn insert_many(tx: &Transaction<'_>, runs: &[NewRun]) -> Result<Vec<Inserted>, StoreError> {
    let mut done = Vec::with_capacity(runs.len());
    // Start of the runs not yet inserted that need no lookup.
    let mut plain_from = 0;
    for (index, run) in runs.iter().enumerate() {
        if run.idempotency_key.is_none() && run.unique.is_none() {
            done.push(Inserted::New(run.id.clone()));
            continue;
        }
        insert_plain(tx, &runs[plain_from..index])?;
        plain_from = index + 1;
        if let Some(id) = existing_key(tx, run, index)? {
            done.push(Inserted::Existing(id));
            continue;
        }
        if let Some(id) = existing_unique(tx, run)? {
            done.push(Inserted::Existing(id));
            continue;
        }
        insert_plain(tx, std::slice::from_ref(run))?;
        // At once: a later unique run of this insert compares states with it.
        await_approval(tx, run)?;
        done.push(Inserted::New(run.id.clone()));
    }
    insert_plain(tx, &runs[plain_from..])?;
    insert_tags(tx, runs, &done)?;
    // Runs without a key or unique check are never compared with: mark them after.
    for run in runs
        .iter()
        .filter(|r| r.idempotency_key.is_none() && r.unique.is_none())
    {
        await_approval(tx, run)?;
    }
    Ok(done)
}

/// Writes the `run_tags` rows of the tagged runs of `runs` that were inserted (`done`, in the
/// same order); a run that an idempotency key or unique check returned keeps its own tags.
fn insert_tags(tx: &Transaction<'_>, runs: &[NewRun], done: &[Inserted]) -> Result<(), StoreError> {
    let mut tagged = runs
        .iter()
        .zip(done)
        .filter(|(r, d)| !r.tags.is_empty() && matches!(d, Inserted::New(_)))
        .peekable();
    if tagged.peek().is_none() {
        return Ok(());
    }
    let mut stmt = tx.prepare_cached(INSERT_TAG).ctx("prepare insert tag")?;
    for (run, _) in tagged {
        for tag in run.tags.rows() {
            stmt.execute(rusqlite::params![run.id.as_str(), tag])
                .ctx("insert run tag")?;
        }
    }
    Ok(())
}

/// Moves a run just inserted `queued` to `awaiting_approval` when it was created needing
/// approval (`NewRun::approval`); does nothing otherwise.
fn await_approval(tx: &Transaction<'_>, run: &NewRun) -> Result<(), StoreError> {
    match &run.approval {
        Some(p) => mark_awaiting(tx, &run.id, p, run.created_at),
        None => Ok(()),
    }
}

/// Moves a queued run (just inserted or re-queued by a retry, in this transaction) to
/// `awaiting_approval`: approval `pending` with its deadline, the decision fields of an
/// earlier one cleared, and posts its approval request.
pub(crate) fn mark_awaiting(
    tx: &Transaction<'_>,
    id: &RunId,
    p: &crate::run::PendingApproval,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE runs SET state = 'awaiting_approval', approval_state = 'pending', \
             approval_deadline = ?1, approval_by = NULL, approval_at = NULL, \
             approval_note = NULL, status_text = 'awaiting approval' \
             WHERE id = ?2 AND state = 'queued'",
        )
        .ctx("prepare await approval")?
        .execute(rusqlite::params![p.deadline.map(ts), id.as_str()])
        .ctx("await approval")?;
    if n != 1 {
        return Err(StoreError::Invalid(format!(
            "run {id}: written, but not found queued to await approval"
        )));
    }
    crate::store::sqlite::inbox::insert_many_encoded(tx, &[(&p.message, &p.message_data)], now)
}

/// Rows in one multi-row INSERT at most (21 parameters each: 1,344 of SQLite's 32,766).
pub(crate) const ROWS_PER_INSERT: usize = 64;

/// Parameters of one row of [`INSERT`].
const PARAMS: usize = 21;

/// Groups of [`INSERT`]'s columns that a multi-row statement binds once, as parameters
/// `?1..=?21` in the column's own position, when every row of the chunk has the same values
/// there (a batch from one caller mostly does); the other columns get a parameter per row,
/// numbered from `?22`. Each text bound is copied by SQLite, and binding the 17 values of
/// every row was a third of a batch's SQLite time (BENCHMARKS.md, issue 19, session 8).
/// Three groups, not a bit per column, keep the variants (and the statement cache) small.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Shared(u8);

impl Shared {
    /// Session, tool and title.
    const NAMES: u8 = 1;
    /// The due time and the creation time.
    const TIMES: u8 = 2;
    /// Priority, attempts, key, timeout, signal, delivery, schedule, tick, unique key, batch,
    /// spawning run, tags and trace context.
    const OPTIONS: u8 = 4;
    /// Variants: every combination of the three groups.
    const VARIANTS: usize = 8;
    /// Nothing shared: a parameter per column and row (a one-row insert).
    pub(crate) const NONE: Shared = Shared(0);

    /// The groups whose values are the same in every run of `runs`.
    fn of(runs: &[NewRun]) -> Shared {
        let Some((first, rest)) = runs.split_first() else {
            return Shared::NONE;
        };
        if rest.is_empty() {
            return Shared::NONE;
        }
        let mut bits = Shared::NAMES | Shared::TIMES | Shared::OPTIONS;
        for run in rest {
            if run.session_id != first.session_id
                || run.tool != first.tool
                || run.title != first.title
            {
                bits &= !Shared::NAMES;
            }
            if run.run_at != first.run_at || run.created_at != first.created_at {
                bits &= !Shared::TIMES;
            }
            if run.priority != first.priority
                || run.max_attempts != first.max_attempts
                || run.idempotency_key != first.idempotency_key
                || run.timeout_ms != first.timeout_ms
                || run.signal_on_completion != first.signal_on_completion
                || run.delivery != first.delivery
                || run.schedule_id != first.schedule_id
                || run.fire_at != first.fire_at
                || run.ticks != first.ticks
                || run.unique.as_ref().map(|u| &u.key) != first.unique.as_ref().map(|u| &u.key)
                || run.batch_id != first.batch_id
                || run.parent_run_id != first.parent_run_id
                || run.tags != first.tags
                || run.traceparent != first.traceparent
            {
                bits &= !Shared::OPTIONS;
            }
            if bits == 0 {
                break;
            }
        }
        Shared(bits)
    }

    /// Whether parameter `param` (1-based, in [`INSERT`]'s order) is bound once.
    fn has(self, param: usize) -> bool {
        let group = match param {
            2 | 3 | 5 => Shared::NAMES,
            8 | 9 => Shared::TIMES,
            6 | 7 | 10..=21 => Shared::OPTIONS,
            _ => return false,
        };
        self.0 & group != 0
    }

    /// Parameters each row binds itself.
    fn per_row(self) -> usize {
        (1..=PARAMS).filter(|&p| !self.has(p)).count()
    }
}

/// The INSERT of `rows` runs (a power of two up to [`ROWS_PER_INSERT`]) with the `shared`
/// columns bound once: [`INSERT`] with `rows` value lists. Few distinct texts (7 sizes, 8
/// variants), so the statement cache keeps each prepared.
pub(crate) fn insert_sql(rows: usize, shared: Shared) -> &'static str {
    debug_assert!(
        rows.is_power_of_two() && rows <= ROWS_PER_INSERT,
        "{rows} rows"
    );
    const SIZES: usize = ROWS_PER_INSERT.trailing_zeros() as usize + 1;
    static SQL: [std::sync::OnceLock<String>; SIZES * Shared::VARIANTS] =
        [const { std::sync::OnceLock::new() }; SIZES * Shared::VARIANTS];
    SQL[shared.0 as usize * SIZES + rows.trailing_zeros() as usize].get_or_init(|| {
        let head = &INSERT[..INSERT.find(" VALUES ").unwrap_or(INSERT.len())];
        let per_row = shared.per_row();
        let values: Vec<String> = (0..rows)
            .map(|r| {
                let mut own = PARAMS + r * per_row;
                let params: Vec<String> = (1..=PARAMS)
                    .map(|p| {
                        if shared.has(p) {
                            format!("?{p}")
                        } else {
                            own += 1;
                            format!("?{own}")
                        }
                    })
                    .collect();
                format!(
                    "({}, 'queued', {})",
                    params[..5].join(", "),
                    params[5..].join(", ")
                )
            })
            .collect();
        format!("{head} VALUES {}", values.join(", "))
    })
}

/// Inserts runs that need no lookup: [`ROWS_PER_INSERT`] at a time, the rest in
/// power-of-two statements. Back in the cache a statement's bindings are cleared, which
/// frees the buffers SQLite copied the text into.
fn insert_plain(tx: &Transaction<'_>, runs: &[NewRun]) -> Result<(), StoreError> {
    let mut chunks = runs.chunks_exact(ROWS_PER_INSERT);
    for chunk in chunks.by_ref() {
        insert_chunk(tx, chunk)?;
    }
    let mut rest = chunks.remainder();
    while !rest.is_empty() {
        let (now, later) = rest.split_at(1 << rest.len().ilog2());
        insert_chunk(tx, now)?;
        rest = later;
    }
    Ok(())
}

/// Inserts `runs` (a power of two of them) with one [`insert_sql`] statement.
fn insert_chunk(tx: &Transaction<'_>, runs: &[NewRun]) -> Result<(), StoreError> {
    let shared = Shared::of(runs);
    let mut stmt = tx
        .prepare_cached(insert_sql(runs.len(), shared))
        .ctx("prepare insert run")?;
    // A per-row value's place within its row's parameters.
    let mut own = [0; PARAMS + 1];
    let mut per_row = 0;
    for (p, slot) in own.iter_mut().enumerate().skip(1) {
        if !shared.has(p) {
            per_row += 1;
            *slot = per_row;
        }
    }
    for (r, run) in runs.iter().enumerate() {
        bind_run(&mut stmt, run, |p| {
            if shared.has(p) {
                (r == 0).then_some(p)
            } else {
                Some(PARAMS + r * per_row + own[p])
            }
        })?;
    }
    stmt.raw_execute().ctx("insert run")?;
    Ok(())
}

/// Binds `run`'s values: value `p` (1-based, in [`INSERT`]'s order) to parameter `at(p)`,
/// if any (by position: binding by name scans the names for each one). Only what is bound
/// is encoded, so a shared creation time is formatted once per statement.
fn bind_run(
    stmt: &mut rusqlite::CachedStatement<'_>,
    run: &NewRun,
    at: impl Fn(usize) -> Option<usize>,
) -> Result<(), StoreError> {
    let bind =
        |stmt: &mut rusqlite::CachedStatement<'_>, p: usize, v: &dyn rusqlite::ToSql| match at(p) {
            Some(i) => stmt.raw_bind_parameter(i, v).ctx("bind run"),
            None => Ok(()),
        };
    bind(stmt, 1, &run.id.as_str())?;
    bind(stmt, 2, &run.session_id)?;
    bind(stmt, 3, &run.tool)?;
    bind(stmt, 4, &run.args)?;
    bind(stmt, 5, &run.title)?;
    bind(stmt, 6, &run.priority)?;
    bind(stmt, 7, &run.max_attempts)?;
    if at(8).is_some() || at(9).is_some() {
        let created = ts(run.created_at);
        if run.run_at == run.created_at {
            bind(stmt, 8, &created)?;
        } else {
            bind(stmt, 8, &ts(run.run_at))?;
        }
        bind(stmt, 9, &created)?;
    }
    bind(stmt, 10, &run.idempotency_key)?;
    bind(stmt, 11, &run.timeout_ms)?;
    bind(stmt, 12, &(run.signal_on_completion as i64))?;
    bind(stmt, 13, &run.delivery.as_str())?;
    bind(stmt, 14, &run.schedule_id.as_ref().map(|s| s.as_str()))?;
    bind(stmt, 15, &run.fire_at.map(ts))?;
    bind(stmt, 16, &run.ticks)?;
    bind(stmt, 17, &run.unique.as_ref().map(|u| u.key.as_str()))?;
    bind(stmt, 18, &run.batch_id.as_ref().map(|b| b.as_str()))?;
    bind(stmt, 19, &run.parent_run_id.as_ref().map(|p| p.as_str()))?;
    if at(20).is_some() {
        bind(stmt, 20, &run.tags.to_json())?;
    }
    bind(stmt, 21, &run.traceparent)?;
    Ok(())
}

/// The run that already holds `run`'s idempotency key, if any; an error when that run has
/// another tool or other args (`index`: the run's position in its insert).
fn existing_key(
    tx: &Transaction<'_>,
    run: &NewRun,
    index: usize,
) -> Result<Option<RunId>, StoreError> {
    let Some(key) = &run.idempotency_key else {
        return Ok(None);
    };
    let existing: Option<(String, String, String)> = tx
        .prepare_cached(FIND_BY_KEY)
        .ctx("prepare idempotency lookup")?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .ctx("look up idempotency key")?;
    let Some((id, tool, args)) = existing else {
        return Ok(None);
    };
    crate::store::keys::same_request(run, index, (id, tool, args)).map(Some)
}

/// The newest run matching a unique enqueue (same key, one of its states, created within
/// its period), if any. Read in the insert's transaction: the check holds across processes.
fn existing_unique(tx: &Transaction<'_>, run: &NewRun) -> Result<Option<RunId>, StoreError> {
    let Some(u) = &run.unique else {
        return Ok(None);
    };
    let since = u.since.map(ts).unwrap_or_default();
    let mut stmt = tx
        .prepare_cached(FIND_UNIQUE)
        .ctx("prepare unique lookup")?;
    let mut best: Option<String> = None;
    for state in &u.states {
        let found: Option<String> = stmt
            .query_row(rusqlite::params![u.key, state.as_str(), since], |r| {
                r.get(0)
            })
            .optional()
            .ctx("look up unique run")?;
        // Ids grow with creation time: the newest match wins.
        if found.as_deref() > best.as_deref() {
            best = found;
        }
    }
    Ok(best.map(RunId::from_db))
}

/// Inserts one run and, with `approval`, records it as approved before it is queued.
pub(crate) fn insert_preapproved(
    tx: &Transaction<'_>,
    run: &NewRun,
    approval: Option<&RunApprove>,
) -> Result<(), StoreError> {
    insert(tx, run)?;
    if let Some(a) = approval {
        approvals::preapprove(tx, &approvals::Decision::of(a))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_group_is_bound_once_and_the_rest_per_row() {
        let all = Shared(Shared::NAMES | Shared::TIMES | Shared::OPTIONS);
        assert_eq!(all.per_row(), 2, "id and args");
        let sql = insert_sql(2, all);
        let values = &sql[sql.find(" VALUES ").expect("values")..];
        assert_eq!(
            values,
            " VALUES (?22, ?2, ?3, ?23, ?5, 'queued', ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21), \
             (?24, ?2, ?3, ?25, ?5, 'queued', ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"
        );
        let times = Shared(Shared::TIMES);
        assert_eq!(times.per_row(), PARAMS - 2);
        let sql = insert_sql(2, times);
        assert!(
            sql.contains("(?22, ?23, ?24, ?25, ?26, 'queued', ?27, ?28, ?8, ?9, ?29,"),
            "{sql}"
        );
        assert!(
            sql.contains("(?41, ?42, ?43, ?44, ?45, 'queued', ?46, ?47, ?8, ?9, ?48,"),
            "{sql}"
        );
        let none = insert_sql(1, Shared::NONE);
        assert!(none.ends_with("(?22, ?23, ?24, ?25, ?26, 'queued', ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36, ?37, ?38, ?39, ?40, ?41, ?42)"), "{none}");
    }

    /// A plain queued run of tool `t` with title `t`, created `now`.
    fn new_run(session: &str, args: serde_json::Value, now: DateTime<Utc>) -> NewRun {
        NewRun {
            id: RunId::generate(),
            session_id: session.into(),
            tool: "t".into(),
            args: args.to_string(),
            title: "t".into(),
            priority: 0,
            max_attempts: 3,
            run_at: now,
            created_at: now,
            idempotency_key: None,
            timeout_ms: None,
            signal_on_completion: true,
            delivery: crate::run::Delivery::WhenIdle,
            schedule_id: None,
            fire_at: None,
            ticks: 1,
            unique: None,
            approval: None,
            batch_id: None,
            parent_run_id: None,
            after: Vec::new(),
            after_mode: crate::run::DepMode::All,
            tags: crate::run::Tags::new(),
            traceparent: None,
        }
    }

    #[test]
    fn the_shared_groups_are_those_equal_in_every_run() {
        let now = chrono::Utc::now();
        let run = |session: &str, priority: i64, at: i64| NewRun {
            priority,
            run_at: now + chrono::Duration::seconds(at),
            ..new_run(session, serde_json::json!({}), now)
        };
        let all = Shared::NAMES | Shared::TIMES | Shared::OPTIONS;
        assert_eq!(Shared::of(&[run("a", 0, 0), run("a", 0, 0)]), Shared(all));
        assert_eq!(
            Shared::of(&[run("a", 0, 0), run("b", 0, 0)]),
            Shared(all & !Shared::NAMES)
        );
        assert_eq!(
            Shared::of(&[run("a", 0, 0), run("a", 1, 0)]),
            Shared(all & !Shared::OPTIONS)
        );
        assert_eq!(
            Shared::of(&[run("a", 0, 0), run("a", 0, 1), run("b", 1, 0)]),
            Shared::NONE
        );
        assert_eq!(
            Shared::of(&[run("a", 0, 0)]),
            Shared::NONE,
            "one row: nothing to share"
        );
    }

    /// Runs enough to fill a file with a few thousand rows in batches of 1,000.
    fn six_thousand_runs() -> Vec<NewRun> {
        let now = chrono::Utc::now();
        (0..6_000)
            .map(|i| {
                let args = serde_json::json!({"i": i, "pad": "0123456789abcdef0123456789abcdef"});
                new_run("s", args, now)
            })
            .collect()
    }

    /// Temporary files SQLite holds open in this process (its names start with `etilqs_`;
    /// they are unlinked at once, so only `/proc/self/fd` still shows them).
    #[cfg(target_os = "linux")]
    fn open_sqlite_temp_files() -> usize {
        std::fs::read_dir("/proc/self/fd")
            .expect("list /proc/self/fd")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().contains("etilqs_"))
            .count()
    }

    /// A batch's multi-row INSERTs each keep a statement journal (the pages they change, to
    /// undo the one statement). SQLite spills one past 64 KiB to a file in the temporary
    /// directory, which the batches of a file with a few thousand runs did: half the `pwrite`
    /// calls of a 20,000-run batch enqueue, and an error where that directory is full. The
    /// writer keeps them in memory. (Fails with SQLite's default `temp_store`.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_batch_insert_writes_no_temporary_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = crate::store::sqlite::Store::open(dir.path().join("q.db")).expect("open");
        let runs = six_thousand_runs();
        for batch in runs.chunks(1_000) {
            let held = store
                .write(|tx| {
                    insert_many(tx, batch)?;
                    Ok(open_sqlite_temp_files())
                })
                .expect("insert");
            assert_eq!(held, 0, "temporary files open at the end of a batch");
        }
        let count: i64 = store
            .read(|c| {
                c.query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
                    .ctx("count")
            })
            .expect("count");
        assert_eq!(count, 6_000);
    }

    /// A multi-row INSERT that may stop halfway keeps a statement journal, to undo its own
    /// rows (SQLite copies every page the statement changes first, and the journal's 1 KiB
    /// chunks churned the allocator: a fifth of a batch enqueue's time, BENCHMARKS.md, issue
    /// 19, session 10). The batch statements are `INSERT OR FAIL` (a failure leaves the
    /// statement's earlier rows, and the caller's transaction rolls back) and no immediate
    /// foreign key or function call is checked on insert, so they keep none. Seen from a
    /// connection with SQLite's default `temp_store`, which spills a journal past 64 KiB to a
    /// temporary file.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_batch_insert_keeps_no_statement_journal() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("q.db");
        drop(crate::store::sqlite::Store::open(&path).expect("create the schema"));
        let mut conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA temp_store = DEFAULT")
            .expect("pragmas");
        let runs = six_thousand_runs();
        for batch in runs.chunks(1_000) {
            let tx = conn.transaction().expect("begin");
            insert_many(&tx, batch).expect("insert");
            assert_eq!(
                open_sqlite_temp_files(),
                0,
                "a statement journal spilled to a file"
            );
            tx.commit().expect("commit");
        }
    }
}
