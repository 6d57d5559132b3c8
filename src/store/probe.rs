//! A cheap change detector: `PRAGMA data_version` on a dedicated connection changes whenever
//! another connection (in this or another process) commits. Reading it touches only the WAL
//! index in shared memory: no transaction, no write.

use rusqlite::Connection;

use super::Store;
use crate::error::StoreError;

/// A dedicated connection that tells whether anything was committed since the last look.
pub struct ChangeProbe {
    conn: Connection,
    last: i64,
}

impl std::fmt::Debug for ChangeProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeProbe")
            .field("last", &self.last)
            .finish()
    }
}

impl ChangeProbe {
    /// Opens the probe's own connection on `store`'s file and records the current version.
    pub fn open(store: &Store) -> Result<ChangeProbe, StoreError> {
        let conn = store.dedicated_reader()?;
        let last = Store::data_version(&conn)?;
        Ok(ChangeProbe { conn, last })
    }

    /// True when another connection committed since the previous call (or since `open`).
    pub fn changed(&mut self) -> Result<bool, StoreError> {
        let v = Store::data_version(&self.conn)?;
        let changed = v != self.last;
        self.last = v;
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_commits_of_other_connections_only_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path().join("p.db")).expect("open");
        let mut probe = ChangeProbe::open(&store).expect("probe");
        assert!(!probe.changed().expect("probe"));
        store
            .write(|tx| {
                tx.execute_batch("CREATE TABLE probe_t (x)")
                    .map_err(|e| StoreError::sqlite("create", e))
            })
            .expect("write");
        assert!(probe.changed().expect("probe"));
        assert!(!probe.changed().expect("probe"));
    }
}
