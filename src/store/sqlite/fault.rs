//! Fault injection for tests of the storage-error handling, off unless its variable is set.
//!
//! `TOOLQ_MAX_PAGE_COUNT=N` sets `PRAGMA max_page_count = N` on the writer connection: once
//! the file holds N pages, every write that needs another page fails with SQLITE_FULL, as on
//! a full disk, but portably and without root (a small tmpfs would need both). Readers and
//! other processes are unaffected.

use rusqlite::Connection;

use crate::error::StoreError;

/// The variable that caps the writer's database size, in pages.
pub const MAX_PAGE_COUNT_ENV: &str = "TOOLQ_MAX_PAGE_COUNT";

/// Applies [`MAX_PAGE_COUNT_ENV`] to the writer, if set; a value that is not a page count
/// is refused rather than ignored.
pub(super) fn limit_pages(writer: &Connection) -> Result<(), StoreError> {
    let Ok(raw) = std::env::var(MAX_PAGE_COUNT_ENV) else {
        return Ok(());
    };
    let pages: u32 = raw.trim().parse().map_err(|_| StoreError::Pragma {
        name: "max_page_count",
        wanted: format!("{MAX_PAGE_COUNT_ENV}={raw:?} (a page count)"),
        got: "not set".into(),
    })?;
    let got: i64 = writer
        .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
            r.get(0)
        })
        .map_err(|e| StoreError::sqlite("set max_page_count", e))?;
    tracing::warn!(
        max_page_count = got,
        "{MAX_PAGE_COUNT_ENV} is set: writes fail once the file holds this many pages"
    );
    Ok(())
}
