//! Figures read for metrics and `toolq stats` on Postgres: queue depth by session and tool,
//! and the server's own settings.

use deadpool_postgres::GenericClient;

use super::{get, query, query_one};
use crate::error::StoreError;
use crate::store::{DbInfo, QueueDepth};

/// Unfinished runs by session and tool (the `queue_depth` view).
pub(crate) async fn queue_depth<C: GenericClient>(c: &C) -> Result<Vec<QueueDepth>, StoreError> {
    query(
        c,
        "SELECT session_id, tool, queued, awaiting_approval, running FROM queue_depth \
         ORDER BY session_id, tool",
        &[],
        "queue depth",
    )
    .await?
    .iter()
    .map(|r| {
        Ok(QueueDepth {
            session_id: get(r, 0)?,
            tool: get(r, 1)?,
            queued: get(r, 2)?,
            awaiting_approval: get(r, 3)?,
            running: get(r, 4)?,
        })
    })
    .collect()
}

/// The server's version and commit durability, as `toolq stats` shows them.
pub(crate) async fn server_info<C: GenericClient>(c: &C) -> Result<DbInfo, StoreError> {
    let row = query_one(
        c,
        "SELECT current_setting('synchronous_commit'), current_setting('server_version')",
        &[],
        "read server settings",
    )
    .await?;
    let sync: String = get(&row, 0)?;
    let version: String = get(&row, 1)?;
    Ok(DbInfo {
        journal_mode: "postgres".into(),
        synchronous: format!("synchronous_commit={sync}"),
        sqlite_version: String::new(),
        engine: "postgres".into(),
        server_version: Some(version),
    })
}
