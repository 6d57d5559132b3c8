//! The `blobs` table: a run's log and result, keyed by session and path.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Transaction};

use super::Ctx;
use super::codec::ts;
use crate::error::StoreError;

/// One blob to write.
#[derive(Debug, Clone)]
pub struct BlobWrite<'a> {
    /// Owner session.
    pub session_id: &'a str,
    /// Path, e.g. `/.background/{run_id}/output.log`.
    pub path: &'a str,
    /// The run it belongs to.
    pub run_id: &'a str,
    /// Raw bytes.
    pub content: &'a [u8],
    /// Whether the content was cut at its cap.
    pub truncated: bool,
}

/// A stored blob.
#[derive(Debug, Clone)]
pub struct Blob {
    /// Path.
    pub path: String,
    /// Raw bytes.
    pub content: Vec<u8>,
    /// Size in bytes.
    pub size: i64,
    /// Whether it was cut at its cap.
    pub truncated: bool,
    /// Last write.
    pub updated_at: String,
}

/// The blobs of one run: every path under `/.background/{run_id}/` in its session, a range of
/// the primary key (`?1` session, `?2` run id). The blobs table has no run_id index.
pub(crate) const OF_RUN: &str = "session_id = ?1 AND path >= '/.background/' || ?2 || '/' \
    AND path < '/.background/' || ?2 || '0'";

pub(crate) const PUT: &str = "INSERT INTO blobs (session_id, path, run_id, content, size, truncated, created_at, updated_at) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7) \
    ON CONFLICT (session_id, path) DO UPDATE SET content = excluded.content, size = excluded.size, \
    truncated = excluded.truncated, run_id = excluded.run_id, updated_at = excluded.updated_at";

/// Writes (or replaces) a blob.
pub fn put(tx: &Transaction<'_>, b: &BlobWrite<'_>, now: DateTime<Utc>) -> Result<(), StoreError> {
    tx.prepare_cached(PUT)
        .ctx("prepare put blob")?
        .execute(rusqlite::params![
            b.session_id,
            b.path,
            b.run_id,
            b.content,
            b.content.len() as i64,
            b.truncated as i64,
            ts(now),
        ])
        .ctx("put blob")?;
    Ok(())
}

/// Reads a blob by session and path.
pub fn get(
    conn: &rusqlite::Connection,
    session_id: &str,
    path: &str,
) -> Result<Option<Blob>, StoreError> {
    conn.prepare_cached(
        "SELECT path, content, size, truncated, updated_at FROM blobs WHERE session_id = ?1 AND path = ?2",
    )
    .ctx("prepare get blob")?
    .query_row([session_id, path], |r| {
        Ok(Blob {
            path: r.get(0)?,
            content: r.get(1)?,
            size: r.get(2)?,
            truncated: r.get::<_, i64>(3)? != 0,
            updated_at: r.get(4)?,
        })
    })
    .optional()
    .ctx("get blob")
}

/// Reads the bytes of a blob from `offset` on (for following a growing log).
pub fn read_from(
    conn: &rusqlite::Connection,
    session_id: &str,
    path: &str,
    offset: i64,
) -> Result<Option<Vec<u8>>, StoreError> {
    conn.prepare_cached(
        "SELECT substr(content, ?3 + 1) FROM blobs WHERE session_id = ?1 AND path = ?2",
    )
    .ctx("prepare read blob")?
    .query_row(rusqlite::params![session_id, path, offset], |r| {
        let v: rusqlite::types::Value = r.get(0)?;
        Ok(match v {
            rusqlite::types::Value::Blob(b) => b,
            rusqlite::types::Value::Text(t) => t.into_bytes(),
            _ => Vec::new(),
        })
    })
    .optional()
    .ctx("read blob")
}
