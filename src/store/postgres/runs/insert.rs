//! Inserting runs on Postgres: keys and unique checks looked up under an advisory lock on the
//! key, the rest in one multi-row statement; approval and background marks.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use crate::clock::ts;
use crate::error::StoreError;
use crate::ids::RunId;
use crate::run::{Inserted, NewRun};
use crate::store::postgres::{P, exec, get, locks, notify, query_one, query_opt};
use crate::store::run_params::{LimitedInsert, RunApprove, RunInsertLimited};

const INSERT_MANY: &str = "INSERT INTO runs (id, session_id, tool, args, title, state, priority, \
    max_attempts, run_at, created_at, idempotency_key, timeout_ms, signal_on_completion, delivery, \
    schedule_id, fire_at, ticks, unique_key, batch_id, parent_run_id, tags, traceparent) \
    SELECT id, session_id, tool, args, title, 'queued', priority, max_attempts, run_at, created_at, \
    idempotency_key, timeout_ms, signal_on_completion, delivery, schedule_id, fire_at, ticks, unique_key, \
    batch_id, parent_run_id, tags, traceparent \
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], \
    $7::bigint[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::bigint[], $13::text[], \
    $14::text[], $15::text[], $16::bigint[], $17::text[], $18::text[], $19::text[], $20::text[], \
    $21::text[]) AS t(id, session_id, tool, args, title, priority, max_attempts, run_at, created_at, \
    idempotency_key, timeout_ms, signal_on_completion, delivery, schedule_id, fire_at, ticks, \
    unique_key, batch_id, parent_run_id, tags, traceparent)";
/// The `run_tags` rows of tagged runs (`key=value` each); an untagged run writes none.
const INSERT_TAGS: &str =
    "INSERT INTO run_tags (run_id, tag) SELECT * FROM unnest($1::text[], $2::text[])";

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
    batch: Vec<Option<String>>,
    parent: Vec<Option<String>>,
    tags: Vec<Option<String>>,
    traceparent: Vec<Option<String>>,
    /// `run_tags` rows: run id and tag, one pair per tag.
    tag_run: Vec<String>,
    tag_text: Vec<String>,
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
        self.batch.push(r.batch_id.as_ref().map(|b| b.to_string()));
        self.parent
            .push(r.parent_run_id.as_ref().map(|p| p.to_string()));
        self.tags.push(r.tags.to_json());
        self.traceparent.push(r.traceparent.clone());
        for tag in r.tags.rows() {
            self.tag_run.push(r.id.to_string());
            self.tag_text.push(tag);
        }
        Ok(())
    }

    async fn insert<C: GenericClient>(&self, c: &C) -> Result<(), StoreError> {
        if self.id.is_empty() {
            return Ok(());
        }
        let params: [P<'_>; 21] = [
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
            &self.batch,
            &self.parent,
            &self.tags,
            &self.traceparent,
        ];
        exec(c, INSERT_MANY, &params, "insert runs").await?;
        if !self.tag_run.is_empty() {
            exec(
                c,
                INSERT_TAGS,
                &[&self.tag_run, &self.tag_text],
                "insert run tags",
            )
            .await?;
        }
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
    crate::store::postgres::inbox::insert_many(c, &[(&p.message, p.message_data.as_str())], now)
        .await
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

/// Inserts one background run (`p.run`, its approval request already dropped when
/// `p.approval` is given) unless its session already has `p.limit` active ones, counted
/// under a lock so two calls cannot both take the last slot
/// ([`crate::store::Engine::run_insert_within_limit`]); with `p.approval`, recorded as
/// approved before it is queued.
pub(crate) async fn insert_within_limit<C: GenericClient>(
    c: &C,
    p: &RunInsertLimited,
) -> Result<LimitedInsert, StoreError> {
    let run = &p.run;
    if let Some(limit) = p.limit {
        locks::take(c, locks::LIMITED_INSERT).await?;
        let session = run.session_id.as_str();
        let except = p.except.as_deref();
        if count_active_background(c, session, except, p.now, limit).await? >= limit {
            return Ok(LimitedInsert::OverSession(limit));
        }
    }
    let inserted = insert(c, run).await?;
    if let Inserted::New(id) = &inserted {
        mark_background(c, id.as_str()).await?;
    }
    if let Some(a) = &p.approval {
        super::preapprove(c, a.id.as_str(), &a.by, a.note.as_deref(), a.now).await?;
    }
    notify(c).await?;
    Ok(LimitedInsert::Inserted(inserted))
}

/// Inserts one run and, with `approval`, records it as approved before it is queued.
pub(crate) async fn insert_preapproved<C: GenericClient>(
    c: &C,
    run: &NewRun,
    approval: Option<&RunApprove>,
) -> Result<(), StoreError> {
    insert(c, run).await?;
    if let Some(a) = approval {
        super::preapprove(c, a.id.as_str(), &a.by, a.note.as_deref(), a.now).await?;
    }
    notify(c).await
}
