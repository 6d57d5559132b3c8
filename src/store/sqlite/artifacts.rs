//! The `blob_rows` table: a run's log (and raw output), keyed by session and path. A run's
//! result is `runs.result`; [`get`] reads it by its blob path, as the view `blobs` shows it.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Transaction};

use super::Ctx;
use super::codec::ts;
use crate::error::StoreError;
use crate::run::Blob;

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

/// The blob rows of one run: every path under `/.background/{run_id}/` in its session, a
/// range of the primary key (`?1` session, `?2` run id). The table has no run_id index.
pub(crate) const OF_RUN: &str = "session_id = ?1 AND path >= '/.background/' || ?2 || '/' \
    AND path < '/.background/' || ?2 || '0'";

pub(crate) const PUT: &str = "INSERT INTO blob_rows (session_id, path, run_id, content, size, truncated, created_at, updated_at) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7) \
    ON CONFLICT (session_id, path) DO UPDATE SET content = excluded.content, size = excluded.size, \
    truncated = excluded.truncated, run_id = excluded.run_id, updated_at = excluded.updated_at";

/// The columns [`PUT`] writes, and its conflict clause: shared with [`put_many`].
const PUT_HEAD: &str = "INSERT INTO blob_rows (session_id, path, run_id, content, size, truncated, created_at, updated_at)";
const PUT_TAIL: &str = "ON CONFLICT (session_id, path) DO UPDATE SET content = excluded.content, \
    size = excluded.size, truncated = excluded.truncated, run_id = excluded.run_id, \
    updated_at = excluded.updated_at";

/// [`PUT`] for `rows` blobs, `now` shared as `?1`.
pub(crate) fn put_many_sql(rows: usize) -> &'static str {
    static SQL: super::rows::SqlBySize = super::rows::SqlBySize::new();
    SQL.get(rows, |rows| {
        super::rows::values_sql(PUT_HEAD, "(#, #, #, #, #, #, ?1, ?1)", rows, PUT_TAIL)
    })
}

/// [`put`] for many blobs: one multi-row statement per chunk (see `store::rows`).
pub(crate) fn put_many(
    tx: &Transaction<'_>,
    blobs: &[BlobWrite<'_>],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    super::rows::insert_chunked(
        tx,
        blobs,
        "put blobs",
        put_many_sql,
        &ts(now),
        |stmt, i, b| {
            stmt.raw_bind_parameter(i, b.session_id)?;
            stmt.raw_bind_parameter(i + 1, b.path)?;
            stmt.raw_bind_parameter(i + 2, b.run_id)?;
            stmt.raw_bind_parameter(i + 3, b.content)?;
            stmt.raw_bind_parameter(i + 4, b.content.len() as i64)?;
            stmt.raw_bind_parameter(i + 5, b.truncated as i64)?;
            Ok(i + 6)
        },
    )
}

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

/// A run's result as a blob: `?1` session, `?2` run id, `?3` its path.
pub(crate) const GET_RESULT: &str = "SELECT ?3, result, length(result), 0, \
    coalesce(finished_at, started_at, created_at) FROM runs \
    WHERE id = ?2 AND session_id = ?1 AND result IS NOT NULL";

/// A blob row: `?1` session, `?2` path.
pub(crate) const GET_ROW: &str = "SELECT path, content, size, truncated, updated_at FROM blob_rows \
    WHERE session_id = ?1 AND path = ?2";

/// Reads a blob by session and path: a run's result.json from its run row, any other from
/// the blob rows.
pub fn get(
    conn: &rusqlite::Connection,
    session_id: &str,
    path: &str,
) -> Result<Option<Blob>, StoreError> {
    let (sql, params): (&str, &[&str]) = match crate::store::end_plan::result_run(path) {
        Some(id) => (GET_RESULT, &[session_id, id, path]),
        None => (GET_ROW, &[session_id, path]),
    };
    conn.prepare_cached(sql)
        .ctx("prepare get blob")?
        .query_row(rusqlite::params_from_iter(params), |r| {
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
