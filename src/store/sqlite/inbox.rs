//! The `inbox` table: messages for sessions, read in id order and acknowledged.

use chrono::{DateTime, Utc};
use rusqlite::{Transaction, named_params};
use serde_json::Value;

use super::Ctx;
use super::codec::ts;
use crate::error::StoreError;
use crate::inbox::{InboxFilter, Message, NewMessage};

pub(crate) const INSERT: &str = "INSERT INTO inbox (session_id, run_id, attempt, kind, body, data, delivery, created_at) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// Inserts a message and returns its id.
pub fn insert(tx: &Transaction<'_>, m: &NewMessage, now: DateTime<Utc>) -> Result<i64, StoreError> {
    insert_encoded(tx, m, &m.data.to_string(), now)
}

/// [`insert`] with the message's `data` already encoded as JSON text (`data_json`), so a
/// write transaction does not spend its time serializing.
pub fn insert_encoded(
    tx: &Transaction<'_>,
    m: &NewMessage,
    data_json: &str,
    now: DateTime<Utc>,
) -> Result<i64, StoreError> {
    tx.prepare_cached(INSERT)
        .ctx("prepare insert message")?
        .execute(rusqlite::params![
            m.session_id,
            m.run_id,
            m.attempt,
            m.kind,
            m.body,
            data_json,
            m.delivery.as_str(),
            ts(now),
        ])
        .ctx("insert message")?;
    Ok(tx.last_insert_rowid())
}

/// [`INSERT`] for `rows` messages, `created_at` shared as `?1`.
pub(crate) fn insert_many_sql(rows: usize) -> &'static str {
    static SQL: super::rows::SqlBySize = super::rows::SqlBySize::new();
    SQL.get(rows, |rows| {
        super::rows::values_sql(
            // `OR FAIL`, so the statement keeps no statement journal (see `runs::INSERT`).
            "INSERT OR FAIL INTO inbox (session_id, run_id, attempt, kind, body, data, delivery, created_at)",
            "(#, #, #, #, #, #, #, ?1)",
            rows,
            "",
        )
    })
}

/// [`insert_encoded`] for many messages, each with its `data` already encoded: one
/// multi-row statement per chunk (see `store::rows`), so `AUTOINCREMENT`'s sequence row is
/// read and written once per chunk instead of once per message. Ids follow `msgs`' order.
pub(crate) fn insert_many_encoded(
    tx: &Transaction<'_>,
    msgs: &[(&NewMessage, &str)],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    super::rows::insert_chunked(
        tx,
        msgs,
        "insert messages",
        insert_many_sql,
        &ts(now),
        |stmt, i, (m, data)| {
            stmt.raw_bind_parameter(i, &m.session_id)?;
            stmt.raw_bind_parameter(i + 1, &m.run_id)?;
            stmt.raw_bind_parameter(i + 2, m.attempt)?;
            stmt.raw_bind_parameter(i + 3, m.kind)?;
            stmt.raw_bind_parameter(i + 4, &m.body)?;
            stmt.raw_bind_parameter(i + 5, *data)?;
            stmt.raw_bind_parameter(i + 6, m.delivery.as_str())?;
            Ok(i + 7)
        },
    )
}

/// Lists a session's messages in id order.
pub fn list(
    conn: &rusqlite::Connection,
    session: &str,
    f: &InboxFilter,
) -> Result<Vec<Message>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, session_id, run_id, kind, body, data, delivery, created_at, read_at, acked_at \
             FROM inbox WHERE session_id = :session AND id > :after \
             AND (:unacked = 0 OR acked_at IS NULL) ORDER BY id LIMIT :limit",
        )
        .ctx("prepare list inbox")?;
    let rows = stmt
        .query_map(
            named_params! {":session": session, ":after": f.after_id, ":unacked": f.unacked_only as i64, ":limit": f.limit},
            message_row,
        )
        .ctx("list inbox")?;
    rows.collect::<Result<_, _>>().ctx("read inbox")
}

/// The newest message id of any session (0 when none).
pub fn newest_id(conn: &rusqlite::Connection) -> Result<i64, StoreError> {
    conn.prepare_cached("SELECT coalesce(max(id), 0) FROM inbox")
        .ctx("prepare newest message id")?
        .query_row([], |r| r.get(0))
        .ctx("newest message id")
}

/// Maps a row of `id, session_id, run_id, kind, body, data, delivery, created_at, read_at,
/// acked_at` to a message.
pub(crate) fn message_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Message> {
    let data: String = r.get(5)?;
    Ok(Message {
        id: r.get(0)?,
        session_id: r.get(1)?,
        run_id: r.get(2)?,
        kind: r.get(3)?,
        body: r.get(4)?,
        data: serde_json::from_str(&data).unwrap_or(Value::Null),
        delivery: r.get(6)?,
        created_at: r.get(7)?,
        read_at: r.get(8)?,
        acked_at: r.get(9)?,
    })
}

/// Marks messages as read (first read time is kept).
pub fn mark_read(
    tx: &Transaction<'_>,
    session: &str,
    ids: &[i64],
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let ids = serde_json::to_string(ids).map_err(|e| StoreError::Task(e.to_string()))?;
    tx.prepare_cached(
        "UPDATE inbox SET read_at = :now WHERE session_id = :session AND read_at IS NULL \
         AND id IN (SELECT value FROM json_each(:ids))",
    )
    .ctx("prepare mark read")?
    .execute(named_params! {":now": ts(now), ":session": session, ":ids": ids})
    .ctx("mark read")
}

/// Acknowledges messages (and marks them read).
pub fn ack(
    tx: &Transaction<'_>,
    session: &str,
    ids: &[i64],
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let ids = serde_json::to_string(ids).map_err(|e| StoreError::Task(e.to_string()))?;
    tx.prepare_cached(
        "UPDATE inbox SET acked_at = :now, read_at = coalesce(read_at, :now) \
         WHERE session_id = :session AND acked_at IS NULL AND id IN (SELECT value FROM json_each(:ids))",
    )
    .ctx("prepare ack")?
    .execute(named_params! {":now": ts(now), ":session": session, ":ids": ids})
    .ctx("ack messages")
}

/// A session's unacknowledged messages whose delivery is one of `deliveries`, oldest first,
/// at most `limit`.
pub fn unacked_with_delivery(
    conn: &rusqlite::Connection,
    session: &str,
    deliveries: &[&str],
    limit: i64,
) -> Result<Vec<Message>, StoreError> {
    let deliveries =
        serde_json::to_string(deliveries).map_err(|e| StoreError::Task(e.to_string()))?;
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, session_id, run_id, kind, body, data, delivery, created_at, read_at, acked_at \
             FROM inbox WHERE session_id = :session AND acked_at IS NULL \
             AND delivery IN (SELECT value FROM json_each(:deliveries)) ORDER BY id LIMIT :limit",
        )
        .ctx("prepare list deliverable inbox")?;
    let rows = stmt
        .query_map(
            named_params! {":session": session, ":deliveries": deliveries, ":limit": limit},
            message_row,
        )
        .ctx("list deliverable inbox")?;
    rows.collect::<Result<_, _>>().ctx("read deliverable inbox")
}
