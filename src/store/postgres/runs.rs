//! The `runs` table outside the claim and the end-writer: inserts (idempotency keys, unique
//! runs), reads, cancel requests, retries, approvals, bulk selections and counts.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::codec::{RUN_COLUMNS, run_from_row, runs_from_rows};
use super::{P, exec, get, locks, query, query_one, query_opt};
use crate::clock::{parse_ts, ts};
use crate::error::StoreError;
use crate::ids::RunId;
use crate::run::{Inserted, ListFilter, NewRun, Run, RunFilter, RunState};

const INSERT_MANY: &str = "INSERT INTO runs (id, session_id, tool, args, title, state, priority, \
    max_attempts, run_at, created_at, idempotency_key, timeout_ms, signal_on_completion, delivery, \
    schedule_id, fire_at, ticks, unique_key) \
    SELECT id, session_id, tool, args, title, 'queued', priority, max_attempts, run_at, created_at, \
    idempotency_key, timeout_ms, signal_on_completion, delivery, schedule_id, fire_at, ticks, unique_key \
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], \
    $7::bigint[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::bigint[], $13::text[], \
    $14::text[], $15::text[], $16::bigint[], $17::text[]) AS t(id, session_id, tool, args, title, \
    priority, max_attempts, run_at, created_at, idempotency_key, timeout_ms, signal_on_completion, \
    delivery, schedule_id, fire_at, ticks, unique_key)";

/// Column arrays of a multi-row insert.
#[derive(Default)]
struct Columns {
    id: Vec<String>,
    session: Vec<String>,
    tool: Vec<String>,
    args: Vec<String>,
    title: Vec<String>,
    priority: Vec<i64>,
    max_attempts: Vec<i64>,
    run_at: Vec<String>,
    created: Vec<String>,
    key: Vec<Option<String>>,
    timeout: Vec<Option<i64>>,
    signal: Vec<i64>,
    delivery: Vec<String>,
    schedule: Vec<Option<String>>,
    fire_at: Vec<Option<String>>,
    ticks: Vec<i64>,
    unique: Vec<Option<String>>,
}

impl Columns {
    fn push(&mut self, r: &NewRun) -> Result<(), StoreError> {
        self.id.push(r.id.to_string());
        self.session.push(r.session_id.clone());
        self.tool.push(r.tool.clone());
        self.args.push(r.args.clone());
        self.title.push(r.title.clone());
        self.priority.push(r.priority);
        self.max_attempts.push(r.max_attempts);
        let created = ts(r.created_at);
        self.run_at.push(if r.run_at == r.created_at {
            created.clone()
        } else {
            ts(r.run_at)
        });
        self.created.push(created);
        self.key.push(r.idempotency_key.clone());
        self.timeout.push(r.timeout_ms);
        self.signal.push(r.signal_on_completion as i64);
        self.delivery.push(r.delivery.as_str().to_string());
        self.schedule
            .push(r.schedule_id.as_ref().map(|s| s.to_string()));
        self.fire_at.push(r.fire_at.map(ts));
        self.ticks.push(r.ticks);
        self.unique.push(r.unique.as_ref().map(|u| u.key.clone()));
        Ok(())
    }

    async fn insert<C: GenericClient>(&self, c: &C) -> Result<(), StoreError> {
        if self.id.is_empty() {
            return Ok(());
        }
        let params: [P<'_>; 17] = [
            &self.id,
            &self.session,
            &self.tool,
            &self.args,
            &self.title,
            &self.priority,
            &self.max_attempts,
            &self.run_at,
            &self.created,
            &self.key,
            &self.timeout,
            &self.signal,
            &self.delivery,
            &self.schedule,
            &self.fire_at,
            &self.ticks,
            &self.unique,
        ];
        exec(c, INSERT_MANY, &params, "insert runs").await?;
        Ok(())
    }
}

/// Inserts one queued run, or returns the run holding its idempotency key (or its unique match).
pub(crate) async fn insert<C: GenericClient>(c: &C, run: &NewRun) -> Result<Inserted, StoreError> {
    let mut v = insert_many(c, std::slice::from_ref(run)).await?;
    v.pop()
        .ok_or_else(|| StoreError::Invalid("an insert of one run returned none".into()))
}

/// Inserts runs in order in the caller's transaction. A run with an idempotency key or a
/// unique check is looked up under an advisory lock on its key (two hosts inserting the same
/// key wait for each other, and the second finds the first's run); the rest go in one
/// multi-row statement.
pub(crate) async fn insert_many<C: GenericClient>(
    c: &C,
    runs: &[NewRun],
) -> Result<Vec<Inserted>, StoreError> {
    let mut plain = Columns::default();
    let mut done = Vec::with_capacity(runs.len());
    for (index, run) in runs.iter().enumerate() {
        if run.idempotency_key.is_none() && run.unique.is_none() {
            plain.push(run)?;
            done.push(Inserted::New(run.id.clone()));
            continue;
        }
        if let Some(id) = existing_key(c, run, index).await? {
            done.push(Inserted::Existing(id));
            continue;
        }
        if let Some(id) = existing_unique(c, run).await? {
            done.push(Inserted::Existing(id));
            continue;
        }
        let mut one = Columns::default();
        one.push(run)?;
        one.insert(c).await?;
        // At once: a later unique run of this insert compares states with it.
        await_approval(c, run).await?;
        done.push(Inserted::New(run.id.clone()));
    }
    plain.insert(c).await?;
    // Runs without a key or unique check are never compared with: mark them after.
    for run in runs
        .iter()
        .filter(|r| r.idempotency_key.is_none() && r.unique.is_none())
    {
        await_approval(c, run).await?;
    }
    Ok(done)
}

/// Moves a run just inserted `queued` to `awaiting_approval` when it was created needing
/// approval (`NewRun::approval`); does nothing otherwise.
async fn await_approval<C: GenericClient>(c: &C, run: &NewRun) -> Result<(), StoreError> {
    match &run.approval {
        Some(p) => mark_awaiting(c, run.id.as_str(), p, run.created_at).await,
        None => Ok(()),
    }
}

/// Moves a queued run (just inserted or re-queued by a retry, in this transaction) to
/// `awaiting_approval`: approval `pending` with its deadline, the decision fields of an
/// earlier one cleared, and posts its approval request.
pub(crate) async fn mark_awaiting<C: GenericClient>(
    c: &C,
    id: &str,
    p: &crate::run::PendingApproval,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let n = exec(
        c,
        "UPDATE runs SET state = 'awaiting_approval', approval_state = 'pending', \
         approval_deadline = $1, approval_by = NULL, approval_at = NULL, \
         approval_note = NULL, status_text = 'awaiting approval' \
         WHERE id = $2 AND state = 'queued'",
        &[&p.deadline.map(ts), &id],
        "await approval",
    )
    .await?;
    if n != 1 {
        return Err(StoreError::Invalid(format!(
            "run {id}: written, but not found queued to await approval"
        )));
    }
    super::inbox::insert_many(c, &[(&p.message, p.message_data.as_str())], now).await
}

async fn existing_key<C: GenericClient>(
    c: &C,
    run: &NewRun,
    index: usize,
) -> Result<Option<RunId>, StoreError> {
    let Some(key) = &run.idempotency_key else {
        return Ok(None);
    };
    locks::take_named(c, "key", key).await?;
    let Some(row) = query_opt(
        c,
        "SELECT id, tool, args FROM runs WHERE idempotency_key = $1",
        &[key],
        "look up idempotency key",
    )
    .await?
    else {
        return Ok(None);
    };
    let stored = (get(&row, 0)?, get(&row, 1)?, get(&row, 2)?);
    crate::store::keys::same_request(run, index, stored).map(Some)
}

async fn existing_unique<C: GenericClient>(
    c: &C,
    run: &NewRun,
) -> Result<Option<RunId>, StoreError> {
    let Some(u) = &run.unique else {
        return Ok(None);
    };
    locks::take_named(c, "unique", &u.key).await?;
    let since = u.since.map(ts).unwrap_or_default();
    let states: Vec<String> = u.states.iter().map(|s| s.as_str().to_string()).collect();
    let row = query_opt(
        c,
        "SELECT id FROM runs WHERE unique_key = $1 AND state = ANY($2) AND created_at >= $3 \
         ORDER BY created_at DESC, id DESC LIMIT 1",
        &[&u.key, &states, &since],
        "look up unique run",
    )
    .await?;
    row.map(|r| get::<String>(&r, 0).map(RunId::from_db))
        .transpose()
}

/// Active background runs of `session` (`runs.background` = 1): queued or awaiting approval
/// and due at `now`, or running; not `except`; counted up to `cap` through
/// `runs_background_idx` (background runs only).
pub(crate) async fn count_active_background<C: GenericClient>(
    c: &C,
    session: &str,
    except: Option<&str>,
    now: DateTime<Utc>,
    cap: i64,
) -> Result<i64, StoreError> {
    let row = query_one(
        c,
        "SELECT count(*) FROM (SELECT 1 FROM runs WHERE background = 1 AND session_id = $1 \
           AND (state = 'running' OR (state IN ('queued', 'awaiting_approval') AND run_at <= $3)) \
           AND id <> coalesce($2::text, '') LIMIT $4) b",
        &[&session, &except, &ts(now), &cap],
        "count active background runs",
    )
    .await?;
    get(&row, 0)
}

/// Marks a run just inserted as started in the background (`runs.background` = 1).
pub(crate) async fn mark_background<C: GenericClient>(c: &C, id: &str) -> Result<(), StoreError> {
    exec(
        c,
        "UPDATE runs SET background = 1 WHERE id = $1",
        &[&id],
        "mark background run",
    )
    .await?;
    Ok(())
}

/// Reads one run.
pub(crate) async fn get_run<C: GenericClient>(c: &C, id: &str) -> Result<Option<Run>, StoreError> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1");
    query_opt(c, &sql, &[&id], "get run")
        .await?
        .as_ref()
        .map(run_from_row)
        .transpose()
}

/// Runs, newest first.
pub(crate) async fn list<C: GenericClient>(c: &C, f: &ListFilter) -> Result<Vec<Run>, StoreError> {
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE ($1::text IS NULL OR state = $1) \
         AND ($2::text IS NULL OR session_id = $2) AND ($3::text IS NULL OR tool = $3) \
         AND ($4::text IS NULL OR schedule_id = $4) ORDER BY created_at DESC, id DESC LIMIT $5"
    );
    let state = f.state.map(|s| s.as_str());
    let rows = query(
        c,
        &sql,
        &[&state, &f.session, &f.tool, &f.schedule_id, &f.limit],
        "list runs",
    )
    .await?;
    runs_from_rows(&rows)
}

/// Asks a running run to stop.
pub(crate) async fn request_cancel<C: GenericClient>(
    c: &C,
    id: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = exec(
        c,
        "UPDATE runs SET cancel_requested_at = coalesce(cancel_requested_at, $1) \
         WHERE id = $2 AND state = 'running'",
        &[&ts(now), &id],
        "request cancel",
    )
    .await?;
    Ok(n == 1)
}

/// Puts a failed or cancelled run (still in `expected`) back in the queue.
pub(crate) async fn requeue_finished<C: GenericClient>(
    c: &C,
    id: &str,
    expected: RunState,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = exec(
        c,
        "UPDATE runs SET state = 'queued', run_at = $1, finished_at = NULL, error = NULL, \
         internal_error = NULL, cancel_requested_at = NULL, status_text = NULL, progress = NULL, \
         max_attempts = greatest(max_attempts, attempt + 1) WHERE id = $2 AND state = $3",
        &[&ts(now), &id, &expected.as_str()],
        "retry run",
    )
    .await?;
    Ok(n == 1)
}

/// The filter's WHERE terms and values, from `$first` on.
fn conditions(f: &RunFilter, first: usize) -> (String, Vec<String>) {
    let mut terms = Vec::new();
    let mut values: Vec<String> = Vec::new();
    if !f.states.is_empty() {
        // States come from the enum, never from input text.
        let states: Vec<String> = f
            .states
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        terms.push(format!("state IN ({})", states.join(", ")));
    }
    let mut add = |term: &str, v: String| {
        values.push(v);
        terms.push(format!("{term} ${}", first + values.len() - 1));
    };
    if let Some(v) = &f.tool {
        add("tool =", v.clone());
    }
    if let Some(v) = &f.session {
        add("session_id =", v.clone());
    }
    if let Some(v) = &f.schedule_id {
        add("schedule_id =", v.clone());
    }
    if let Some(t) = f.created_before {
        add("created_at <", ts(t));
    }
    if let Some(t) = f.created_after {
        add("created_at >", ts(t));
    }
    if terms.is_empty() {
        terms.push("true".into());
    }
    (terms.join(" AND "), values)
}

/// One keyset page of a bulk operation, in id order.
pub(crate) async fn select<C: GenericClient>(
    c: &C,
    f: &RunFilter,
    after: &str,
    limit: i64,
) -> Result<Vec<Run>, StoreError> {
    let (cond, values) = conditions(f, 3);
    let sql =
        format!("SELECT {RUN_COLUMNS} FROM runs WHERE id > $1 AND {cond} ORDER BY id LIMIT $2");
    let mut params: Vec<P<'_>> = vec![&after, &limit];
    params.extend(values.iter().map(|v| v as P<'_>));
    let rows = query(c, &sql, &params, "select runs").await?;
    runs_from_rows(&rows)
}

/// How many runs match.
pub(crate) async fn count<C: GenericClient>(c: &C, f: &RunFilter) -> Result<i64, StoreError> {
    let (cond, values) = conditions(f, 1);
    let sql = format!("SELECT count(*) FROM runs WHERE {cond}");
    let params: Vec<P<'_>> = values.iter().map(|v| v as P<'_>).collect();
    get(&query_one(c, &sql, &params, "count runs").await?, 0)
}

/// Queues an awaiting run as approved: due now, or at its own later `run_at`.
pub(crate) async fn approve<C: GenericClient>(
    c: &C,
    id: &str,
    by: &str,
    note: Option<&str>,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = exec(
        c,
        "UPDATE runs SET state = 'queued', run_at = GREATEST(run_at, $1), approval_state = 'approved', \
         approval_by = $2, approval_at = $1, approval_note = $3, status_text = NULL \
         WHERE id = $4 AND state = 'awaiting_approval'",
        &[&ts(now), &by, &note, &id],
        "approve run",
    )
    .await?;
    Ok(n == 1)
}

/// Records an approval given before the run was queued.
pub(crate) async fn preapprove<C: GenericClient>(
    c: &C,
    id: &str,
    by: &str,
    note: Option<&str>,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = exec(
        c,
        "UPDATE runs SET approval_state = 'approved', approval_by = $2, approval_at = $1, \
         approval_note = $3 WHERE id = $4 AND state = 'queued'",
        &[&ts(now), &by, &note, &id],
        "preapprove run",
    )
    .await?;
    Ok(n == 1)
}

/// Awaiting runs whose deadline passed, oldest deadline first.
pub(crate) async fn overdue<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<Run>, StoreError> {
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE state = 'awaiting_approval' \
         AND approval_deadline <= $1 ORDER BY approval_deadline LIMIT $2"
    );
    let rows = query(c, &sql, &[&ts(now), &limit], "overdue approvals").await?;
    runs_from_rows(&rows)
}

/// Runs per state (states with none left out), by state name.
pub(crate) async fn count_by_state<C: GenericClient>(
    c: &C,
) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = query(
        c,
        "SELECT state, count(*) FROM runs GROUP BY state ORDER BY state",
        &[],
        "count runs",
    )
    .await?;
    rows.iter().map(|r| Ok((get(r, 0)?, get(r, 1)?))).collect()
}

/// The oldest due queued run's `run_at`.
pub(crate) async fn oldest_queued<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
) -> Result<Option<String>, StoreError> {
    let row = query_one(
        c,
        "SELECT min(run_at) FROM runs WHERE state = 'queued' AND run_at <= $1",
        &[&ts(now)],
        "oldest queued run",
    )
    .await?;
    get(&row, 0)
}

/// Queued, awaiting and running runs.
pub(crate) async fn unfinished<C: GenericClient>(c: &C) -> Result<i64, StoreError> {
    let row = query_one(
        c,
        "SELECT (SELECT count(*) FROM runs WHERE state = 'queued') \
         + (SELECT count(*) FROM runs WHERE state = 'awaiting_approval') \
         + (SELECT count(*) FROM runs WHERE state = 'running')",
        &[],
        "unfinished count",
    )
    .await?;
    get(&row, 0)
}

/// Whether a queued run of `tools` is due, or waits for a retry; paused work left out.
pub(crate) async fn has_work_for<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
    tools: &[String],
) -> Result<bool, StoreError> {
    let paused = super::flow::paused(c).await?;
    if paused.all {
        return Ok(false);
    }
    let tools: Vec<&String> = tools.iter().filter(|t| !paused.tools.contains(t)).collect();
    let row = query_one(
        c,
        "SELECT EXISTS (SELECT 1 FROM runs WHERE state = 'queued' AND (run_at <= $1 OR attempt > 0) \
         AND tool = ANY($2) \
         AND session_id NOT IN (SELECT value FROM pauses WHERE scope = 'session'))",
        &[&ts(now), &tools],
        "work check",
    )
    .await?;
    get(&row, 0)
}

/// The earliest `run_at` after `now` of a queued run of `tools`; paused work left out.
pub(crate) async fn next_due<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
    tools: &[String],
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let paused = super::flow::paused(c).await?;
    if paused.all {
        return Ok(None);
    }
    let tools: Vec<&String> = tools.iter().filter(|t| !paused.tools.contains(t)).collect();
    // One index probe per tool (runs_delayed_idx), as the SQLite engine does.
    let row = query_one(
        c,
        "SELECT min(m) FROM unnest($2::text[]) AS t(tool), LATERAL (SELECT min(run_at) AS m \
         FROM runs r WHERE r.state = 'queued' AND r.run_at > r.created_at AND r.tool = t.tool \
         AND r.run_at > $1) x",
        &[&ts(now), &tools],
        "next delayed run",
    )
    .await?;
    Ok(get::<Option<String>>(&row, 0)?
        .as_deref()
        .and_then(parse_ts))
}

/// Queued runs per tool.
pub(crate) async fn queued_by_tool<C: GenericClient>(
    c: &C,
) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = query(
        c,
        "SELECT tool, count(*) FROM runs WHERE state = 'queued' GROUP BY tool ORDER BY tool",
        &[],
        "queued by tool",
    )
    .await?;
    rows.iter().map(|r| Ok((get(r, 0)?, get(r, 1)?))).collect()
}

/// The dashboard's page of runs: at most `p.limit` matching the filter with an id below
/// `p.before`, newest first (ids are time-ordered, so the key walk needs no sort).
pub(crate) async fn page<C: GenericClient>(
    c: &C,
    p: &crate::store::RunPage,
) -> Result<Vec<Run>, StoreError> {
    let (cond, values) = conditions(&p.filter, 3);
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE id < $1 AND {cond} ORDER BY id DESC LIMIT $2"
    );
    // Past every id ("bg_" + uuid): the first page.
    let before = p.before.clone().unwrap_or_else(|| "~".into());
    let mut params: Vec<P<'_>> = vec![&before, &p.limit];
    params.extend(values.iter().map(|v| v as P<'_>));
    let rows = query(c, &sql, &params, "run page").await?;
    runs_from_rows(&rows)
}

/// Runs finished since `since`, per final state and bucket of `bucket_secs` seconds (one
/// range of runs_final_idx per state; timestamps are fixed-width UTC text, so the range is a
/// string comparison and the bucket a difference of the parsed times).
pub(crate) async fn finished_buckets<C: GenericClient>(
    c: &C,
    since: DateTime<Utc>,
    bucket_secs: i64,
) -> Result<Vec<crate::store::FinishedBucket>, StoreError> {
    let since = ts(since);
    let bucket = bucket_secs.max(1);
    let rows = query(
        c,
        "SELECT state, floor(extract(epoch FROM (finished_at::timestamptz - $1::text::timestamptz))::float8 \
         / $2::float8)::bigint AS b, count(*) FROM runs \
         WHERE state IN ('completed', 'failed', 'cancelled') AND finished_at >= $1::text \
         GROUP BY state, b",
        &[&since, &(bucket as f64)],
        "finished buckets",
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(crate::store::FinishedBucket {
                state: get(r, 0)?,
                bucket: get(r, 1)?,
                count: get(r, 2)?,
            })
        })
        .collect()
}
