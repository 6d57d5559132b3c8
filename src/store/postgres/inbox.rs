//! The `inbox` and `blobs` tables: messages in id order, acknowledgements, blob reads.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::Row;

use super::{exec, get, query, query_opt};
use crate::clock::ts;
use crate::error::StoreError;
use crate::inbox::{InboxFilter, InboxPage, Message, NewMessage};
use crate::run::Blob;

const MESSAGE_COLUMNS: &str =
    "id, session_id, run_id, kind, body, data, delivery, created_at, read_at, acked_at";

fn message_row(r: &Row) -> Result<Message, StoreError> {
    let data: String = get(r, 5)?;
    Ok(Message {
        id: get(r, 0)?,
        session_id: get(r, 1)?,
        run_id: get(r, 2)?,
        kind: get(r, 3)?,
        body: get(r, 4)?,
        data: serde_json::from_str(&data).unwrap_or(Value::Null),
        delivery: get(r, 6)?,
        created_at: get(r, 7)?,
        read_at: get(r, 8)?,
        acked_at: get(r, 9)?,
    })
}

fn messages(rows: &[Row]) -> Result<Vec<Message>, StoreError> {
    rows.iter().map(message_row).collect()
}

/// The statement of [`insert_many`].
static INSERT_MESSAGES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH lock AS MATERIALIZED (SELECT count(*) FROM ({}) l), \
         note AS MATERIALIZED (SELECT pg_notify('toolq_inbox', '')) \
         INSERT INTO inbox (session_id, run_id, attempt, kind, body, data, delivery, created_at) \
         SELECT s, r, a, k, b, d, v, $8 FROM lock, note, unnest($1::text[], $2::text[], $3::bigint[], \
         $4::text[], $5::text[], $6::text[], $7::text[]) WITH ORDINALITY AS u(s, r, a, k, b, d, v, n) \
         ORDER BY n",
        super::locks::INBOX_LOCKS
    )
});

/// Inserts messages (each with its data encoded) in one statement that first takes the inbox
/// locks of their sessions (see [`super::locks::take_inbox`]): ids follow `msgs`' order and
/// become visible in increasing order within each session. It also notifies [`super::change_feed::INBOX_CHANNEL`], so message
/// feeds (the API's inbox streams and waits) wake at its commit even when the end that wrote
/// it frees no slot (and so does not notify the workers' channel).
pub(crate) async fn insert_many<C: GenericClient>(
    c: &C,
    msgs: &[(&NewMessage, &str)],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if msgs.is_empty() {
        return Ok(());
    }
    let session: Vec<&str> = msgs.iter().map(|(m, _)| m.session_id.as_str()).collect();
    let run: Vec<&str> = msgs.iter().map(|(m, _)| m.run_id.as_str()).collect();
    let attempt: Vec<i64> = msgs.iter().map(|(m, _)| m.attempt).collect();
    let kind: Vec<&str> = msgs.iter().map(|(m, _)| m.kind).collect();
    let body: Vec<&str> = msgs.iter().map(|(m, _)| m.body.as_str()).collect();
    let data: Vec<&str> = msgs.iter().map(|(_, d)| *d).collect();
    let delivery: Vec<&str> = msgs.iter().map(|(m, _)| m.delivery.as_str()).collect();
    exec(
        c,
        // The sessions' inbox locks first (a volatile CTE is evaluated before any row is
        // made), and the notification, in the same round trip.
        &INSERT_MESSAGES,
        &[
            &session,
            &run,
            &attempt,
            &kind,
            &body,
            &data,
            &delivery,
            &ts(now),
        ],
        "insert messages",
    )
    .await?;
    Ok(())
}

/// Inserts a batch's `batch_completed` message (no run: `run_id` NULL; `attempt` is the
/// completion number), taking its session's inbox lock first as [`insert_many`] does, so its
/// id is ordered with every other message's of the session, and notifying as it does.
pub(crate) async fn insert_batch_message<C: GenericClient>(
    c: &C,
    session: &str,
    completion: i64,
    body: &str,
    data: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    exec(
        c,
        "WITH lock AS MATERIALIZED (SELECT pg_advisory_xact_lock(hashtextextended('toolq:inbox:' || $1, 0))), \
         note AS MATERIALIZED (SELECT pg_notify('toolq_inbox', '')) \
         INSERT INTO inbox (session_id, run_id, attempt, kind, body, data, delivery, created_at) \
         SELECT $1, NULL, $2, 'batch_completed', $3, $4, 'when_idle', $5 FROM lock, note",
        &[&session, &completion, &body, &data, &ts(now)],
        "insert batch message",
    )
    .await?;
    Ok(())
}

/// A session's messages in id order.
pub(crate) async fn list<C: GenericClient>(
    c: &C,
    session: &str,
    f: &InboxFilter,
) -> Result<Vec<Message>, StoreError> {
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM inbox WHERE session_id = $1 AND id > $2 \
         AND (NOT $3 OR acked_at IS NULL) ORDER BY id LIMIT $4"
    );
    let rows = query(
        c,
        &sql,
        &[&session, &f.after_id, &f.unacked_only, &f.limit],
        "list inbox",
    )
    .await?;
    messages(&rows)
}

/// The newest message id of any session (0 when none).
pub(crate) async fn newest_id<C: GenericClient>(c: &C) -> Result<i64, StoreError> {
    let row = super::query_one(
        c,
        "SELECT coalesce(max(id), 0)::bigint FROM inbox",
        &[],
        "newest message id",
    )
    .await?;
    get(&row, 0)
}

/// A page of a session's messages, newest first.
pub(crate) async fn page<C: GenericClient>(
    c: &C,
    session: &str,
    p: &InboxPage,
) -> Result<Vec<Message>, StoreError> {
    let order = if p.after_id.is_some() { "ASC" } else { "DESC" };
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM inbox WHERE session_id = $1 AND id > $2 AND id < $3 \
         AND (NOT $4 OR acked_at IS NULL) ORDER BY id {order} LIMIT $5"
    );
    let rows = query(
        c,
        &sql,
        &[
            &session,
            &p.after_id.unwrap_or(0),
            &p.before_id.unwrap_or(i64::MAX),
            &p.unacked_only,
            &p.limit,
        ],
        "inbox page",
    )
    .await?;
    let mut page = messages(&rows)?;
    if p.after_id.is_some() {
        page.reverse();
    }
    Ok(page)
}

/// Marks messages read (the first read time is kept), or acknowledges them (and marks read).
pub(crate) async fn mark<C: GenericClient>(
    c: &C,
    session: &str,
    ids: &[i64],
    ack: bool,
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let sql = if ack {
        "UPDATE inbox SET acked_at = $1, read_at = coalesce(read_at, $1) \
         WHERE session_id = $2 AND acked_at IS NULL AND id = ANY($3)"
    } else {
        "UPDATE inbox SET read_at = $1 WHERE session_id = $2 AND read_at IS NULL AND id = ANY($3)"
    };
    let ids = ids.to_vec();
    Ok(exec(c, sql, &[&ts(now), &session, &ids], "mark messages").await? as usize)
}

/// A session's unacknowledged messages of `deliveries`, oldest first (reads only).
pub(crate) async fn deliverable<C: GenericClient>(
    c: &C,
    session: &str,
    deliveries: &[&str],
    limit: i64,
) -> Result<Vec<Message>, StoreError> {
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM inbox WHERE session_id = $1 AND acked_at IS NULL \
         AND delivery = ANY($2) ORDER BY id LIMIT $3"
    );
    let deliveries = deliveries.to_vec();
    let rows = query(
        c,
        &sql,
        &[&session, &deliveries, &limit],
        "list deliverable inbox",
    )
    .await?;
    messages(&rows)
}

/// A blob by session and path: a run's result.json from its run row, any other from the
/// blob rows.
pub(crate) async fn blob<C: GenericClient>(
    c: &C,
    session: &str,
    path: &str,
) -> Result<Option<Blob>, StoreError> {
    let row = match crate::store::end_plan::result_run(path) {
        Some(id) => {
            query_opt(
                c,
                "SELECT $3::text, result, length(result)::bigint, 0::bigint, \
                 coalesce(finished_at, started_at, created_at) FROM runs \
                 WHERE id = $2 AND session_id = $1 AND result IS NOT NULL",
                &[&session, &id, &path],
                "get result",
            )
            .await?
        }
        None => {
            query_opt(
                c,
                "SELECT path, content, size, truncated, updated_at FROM blob_rows \
                 WHERE session_id = $1 AND path = $2",
                &[&session, &path],
                "get blob",
            )
            .await?
        }
    };
    row.map(|r| {
        Ok(Blob {
            path: get(&r, 0)?,
            content: get(&r, 1)?,
            size: get(&r, 2)?,
            truncated: get::<i64>(&r, 3)? != 0,
            updated_at: get(&r, 4)?,
        })
    })
    .transpose()
}

/// The inbox messages about one run, oldest first (at most `limit`).
pub(crate) async fn of_run<C: GenericClient>(
    c: &C,
    run_id: &str,
    limit: i64,
) -> Result<Vec<Message>, StoreError> {
    let sql = format!("SELECT {MESSAGE_COLUMNS} FROM inbox WHERE run_id = $1 ORDER BY id LIMIT $2");
    messages(&query(c, &sql, &[&run_id, &limit], "run messages").await?)
}
