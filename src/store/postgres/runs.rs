//! The `runs` table outside the claim and the end-writer: inserts (idempotency keys, unique
//! runs), reads, cancel requests, retries, approvals, bulk selections and counts.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::codec::{RUN_COLUMNS, run_from_row, runs_from_rows};
use super::{P, exec, get, query, query_one, query_opt};
use crate::clock::{parse_ts, ts};
use crate::error::StoreError;
use crate::run::{ListFilter, Run, RunFilter, RunState};

mod insert;

pub(crate) use insert::*;

/// Reads one run.
pub(crate) async fn get_run<C: GenericClient>(c: &C, id: &str) -> Result<Option<Run>, StoreError> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1");
    query_opt(c, &sql, &[&id], "get run")
        .await?
        .as_ref()
        .map(run_from_row)
        .transpose()
}

/// [`RUN_COLUMNS`] of `runs r`, for statements that join it.
static RUN_COLUMNS_OF_R: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    RUN_COLUMNS
        .split(',')
        .map(|c| format!("r.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
});

/// Runs, newest first.
///
/// The statement names only the filter's terms, and the state as a literal (it comes from the
/// enum): the pool plans each statement once, generically ([`super::session`]), and a term
/// `($1 IS NULL OR state = $1)` would leave that plan no index of the filter's own (a
/// rare state's partial index, a session's rows in `run_order`), only a walk of every run.
pub(crate) async fn list<C: GenericClient>(c: &C, f: &ListFilter) -> Result<Vec<Run>, StoreError> {
    // A batch's, a parent's or a tag's runs are read through their own index, newest id
    // first (ids sort by creation). The rest newest first by creation time through
    // `run_order` (schema 7: each run's created_at, id and session once, so that claims and
    // ends write no index entry in that order), each run read beside its row.
    let by_id = !f.tags.is_empty() || f.batch_id.is_some() || f.parent_run_id.is_some();
    let (from, session, order) = if by_id {
        ("runs r", "r.session_id", "r.id DESC")
    } else {
        (
            "run_order o JOIN runs r ON r.id = o.id",
            "o.session_id",
            "o.created_at DESC, o.id DESC",
        )
    };
    let filter = RunFilter {
        states: f.state.into_iter().collect(),
        tool: f.tool.clone(),
        session: f.session.clone(),
        schedule_id: f.schedule_id.clone(),
        batch_id: f.batch_id.clone(),
        parent_run_id: f.parent_run_id.clone(),
        tags: f.tags.clone(),
        ..RunFilter::default()
    };
    let (cond, values) = conditions_of(&filter, 1, Columns { run: "r.", session });
    let params: Vec<P<'_>> = values.iter().map(|v| v as P<'_>).collect();
    // The limit as a literal, rounded up to a power of two (a few statements per connection,
    // not one per limit asked for): a generic plan with `LIMIT $n` expects a tenth of the
    // rows and starts parallel workers for a page of 50.
    let limit = usize::try_from(f.limit.max(0)).unwrap_or(usize::MAX);
    let bound = limit.max(1).checked_next_power_of_two().unwrap_or(limit);
    let columns = RUN_COLUMNS_OF_R.as_str();
    let sql = format!("SELECT {columns} FROM {from} WHERE {cond} ORDER BY {order} LIMIT {bound}");
    let rows = query(c, &sql, &params, "list runs").await?;
    let mut runs = runs_from_rows(&rows)?;
    runs.truncate(limit);
    Ok(runs)
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

/// The filter's WHERE terms and values, from `$first` on, over `runs` alone.
fn conditions(f: &RunFilter, first: usize) -> (String, Vec<String>) {
    conditions_of(
        f,
        first,
        Columns {
            run: "",
            session: "session_id",
        },
    )
}

/// How a statement names the filtered columns: `run` prefixes those of `runs` (`r.` when it
/// joins), and the session's may come from another table (`o.session_id` of `run_order`).
struct Columns {
    run: &'static str,
    session: &'static str,
}

/// [`conditions`] in a statement that names its columns as `cols` says.
fn conditions_of(f: &RunFilter, first: usize, cols: Columns) -> (String, Vec<String>) {
    let Columns { run: r, session } = cols;
    let mut terms = Vec::new();
    let mut values: Vec<String> = Vec::new();
    if !f.states.is_empty() {
        // States come from the enum, never from input text.
        let states: Vec<String> = f
            .states
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        terms.push(format!("{r}state IN ({})", states.join(", ")));
    }
    let mut add = |term: String, v: String| {
        values.push(v);
        terms.push(format!("{term} ${}", first + values.len() - 1));
    };
    if let Some(v) = &f.tool {
        add(format!("{r}tool ="), v.clone());
    }
    if let Some(v) = &f.session {
        add(format!("{session} ="), v.clone());
    }
    if let Some(v) = &f.schedule_id {
        add(format!("{r}schedule_id ="), v.clone());
    }
    if let Some(v) = &f.batch_id {
        add(format!("{r}batch_id ="), v.clone());
    }
    if let Some(v) = &f.parent_run_id {
        add(format!("{r}parent_run_id ="), v.clone());
    }
    if let Some(t) = f.created_before {
        add(format!("{r}created_at <"), ts(t));
    }
    if let Some(t) = f.created_after {
        add(format!("{r}created_at >"), ts(t));
    }
    for tag in f.tags.rows() {
        // Each tag's runs through `run_tags_tag_idx` (tag, run_id).
        values.push(tag);
        terms.push(format!(
            "{r}id IN (SELECT run_id FROM run_tags WHERE tag = ${})",
            first + values.len() - 1
        ));
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

/// Queues an awaiting run as approved: due now, or at its own later `run_at`; blocked
/// (waiting for its parents, at the far-future `run_at`) while a parent is unresolved.
pub(crate) async fn approve<C: GenericClient>(
    c: &C,
    id: &str,
    by: &str,
    note: Option<&str>,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let blocked = ts(crate::store::compose_plan::blocked_until());
    let n = exec(
        c,
        "UPDATE runs SET state = 'queued', \
         run_at = CASE WHEN deps_pending > 0 THEN $5 ELSE GREATEST(run_at, $1) END, \
         wait_kind = CASE WHEN deps_pending > 0 THEN 'parents' ELSE wait_kind END, \
         approval_state = 'approved', \
         approval_by = $2, approval_at = $1, approval_note = $3, status_text = NULL \
         WHERE id = $4 AND state = 'awaiting_approval'",
        &[&ts(now), &by, &note, &id, &blocked],
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

/// Queued runs that are suspended (`wait_kind` set): `stats`.
pub(crate) async fn count_waiting<C: GenericClient>(c: &C) -> Result<i64, StoreError> {
    let row = query_one(
        c,
        "SELECT count(*) FROM runs WHERE state = 'queued' AND wait_kind IS NOT NULL",
        &[],
        "count waiting runs",
    )
    .await?;
    get(&row, 0)
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

/// Whether a queued run of `tools` is due, or waits for a retry; paused work left out. A run
/// that waits for an event, for its parents or for its children is not waited for (the ends
/// that release the last two make them due in their own transaction), nor is one at the
/// far-future `run_at` of "no timeout".
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
        "SELECT EXISTS (SELECT 1 FROM runs WHERE state = 'queued' AND (run_at <= $1 \
         OR (run_at < '9999-12-31T23:59:59.999Z' AND CASE WHEN wait_kind IS NULL THEN attempt > 0 \
         ELSE wait_kind NOT IN ('event', 'children', 'parents') END)) \
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
/// `p.before`, newest first (ids are time-ordered, so the key walk needs no sort). A
/// session's page walks that session's `run_order` rows instead, newest first, from the
/// `before` run's creation time on (as the SQLite engine walks its session index), unless
/// it asks for unfinished runs only.
pub(crate) async fn page<C: GenericClient>(
    c: &C,
    p: &crate::store::RunPage,
) -> Result<Vec<Run>, StoreError> {
    // Unfinished runs only: few, whatever the session's history, and in the partial indexes
    // by state (a session's walk would read its finished runs first).
    let unfinished = !p.filter.states.is_empty() && p.filter.states.iter().all(|s| !s.is_final());
    if let Some(session) = p.filter.session.as_deref().filter(|_| !unfinished) {
        return session_page(c, p, session).await;
    }
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

/// [`page`] of one session: its `run_order` rows from the newest down, each run read and
/// filtered beside its row (the filter's names are the run's, inside the lateral read).
async fn session_page<C: GenericClient>(
    c: &C,
    p: &crate::store::RunPage,
    session: &str,
) -> Result<Vec<Run>, StoreError> {
    let created: Option<String> = match &p.before {
        None => Some("~".into()),
        Some(id) => query_opt(
            c,
            "SELECT created_at FROM runs WHERE id = $1",
            &[id],
            "page bound",
        )
        .await?
        .map(|r| get(&r, 0))
        .transpose()?,
    };
    // The `before` run is gone (pruned): nothing older can be placed after it.
    let Some(created) = created else {
        return Ok(Vec::new());
    };
    let rest = RunFilter {
        session: None,
        ..p.filter.clone()
    };
    let (cond, values) = conditions(&rest, 5);
    let sql = format!(
        "SELECT r.* FROM run_order o CROSS JOIN LATERAL \
         (SELECT {RUN_COLUMNS} FROM runs WHERE runs.id = o.id AND {cond}) r \
         WHERE o.session_id = $3 AND (o.created_at, o.id) < ($4, $1) \
         ORDER BY o.created_at DESC, o.id DESC LIMIT $2"
    );
    let before = p.before.clone().unwrap_or_else(|| "~".into());
    let mut params: Vec<P<'_>> = vec![&before, &p.limit, &session, &created];
    params.extend(values.iter().map(|v| v as P<'_>));
    let rows = query(c, &sql, &params, "session run page").await?;
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
