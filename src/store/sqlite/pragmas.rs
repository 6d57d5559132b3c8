//! Connection pragmas: set on every connection, read back after being set (an unknown or
//! refused pragma is silently ignored by SQLite otherwise).

use rusqlite::Connection;

use super::BUSY_TIMEOUT;
use crate::error::StoreError;

pub(super) fn set_connection_pragmas(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Plans must not depend on bound values: otherwise a statement whose WHERE is compared
    // with a partial index's WHERE is re-prepared every time it is re-bound (hot claim path).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;")?;
    Ok(())
}

pub(super) fn read_pragma(conn: &Connection, name: &'static str) -> Result<String, StoreError> {
    conn.query_row(&format!("PRAGMA {name}"), [], |r| {
        let v: rusqlite::types::Value = r.get(0)?;
        Ok(match v {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(s) => s,
            other => format!("{other:?}"),
        })
    })
    .map_err(|e| StoreError::sqlite(format!("read PRAGMA {name}"), e))
}

pub(super) fn expect_pragma(
    conn: &Connection,
    name: &'static str,
    wanted: &str,
) -> Result<(), StoreError> {
    let got = read_pragma(conn, name)?;
    if got.eq_ignore_ascii_case(wanted) {
        Ok(())
    } else {
        Err(StoreError::Pragma {
            name,
            wanted: wanted.to_string(),
            got,
        })
    }
}
