//! A cheap change detector. Every commit in WAL mode rewrites the WAL-index header, the first
//! 48 bytes of the `-shm` file (its frame count, salts and checksums; see "WAL-index format" in
//! SQLite's file format documentation), so reading those bytes with one `pread` tells whether
//! any connection, in any process, committed since the last look: no lock, no transaction, no
//! write. A torn read only causes a spurious wake-up. Where the `-shm` file cannot be read, the
//! probe falls back to `PRAGMA data_version` on a dedicated connection, which takes a read
//! lock each time (about 1% of a core at 100 probes a second on the benchmark VM).

use std::fs::File;
use std::os::unix::fs::FileExt;

use rusqlite::Connection;

use super::Store;
use crate::error::StoreError;

/// A dedicated connection that tells whether anything was committed since the last look.
pub struct ChangeProbe {
    conn: Connection,
    last: i64,
    shm: Option<(File, [u8; WAL_INDEX_HEADER])>,
}

/// Bytes of the WAL-index header (two 48-byte copies; the first one is enough to see a change).
const WAL_INDEX_HEADER: usize = 48;

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
        let mut shm_path = store.path().as_os_str().to_owned();
        shm_path.push("-shm");
        // The dedicated connection keeps the database open, so the -shm file exists.
        let shm = File::open(&shm_path).ok().and_then(|f| {
            let mut header = [0u8; WAL_INDEX_HEADER];
            f.read_exact_at(&mut header, 0).ok().map(|()| (f, header))
        });
        Ok(ChangeProbe { conn, last, shm })
    }

    /// True when another connection committed since the previous call (or since `open`).
    pub fn changed(&mut self) -> Result<bool, StoreError> {
        if let Some((file, last)) = &mut self.shm {
            let mut header = [0u8; WAL_INDEX_HEADER];
            if file.read_exact_at(&mut header, 0).is_ok() {
                let changed = header != *last;
                *last = header;
                return Ok(changed);
            }
            self.shm = None;
        }
        let v = Store::data_version(&self.conn)?;
        let changed = v != self.last;
        self.last = v;
        Ok(changed)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Commits a `CREATE TABLE` through `store`: one write to the WAL.
    pub(crate) fn create(store: &Store, table: &str) {
        store
            .write(|tx| {
                tx.execute_batch(&format!("CREATE TABLE {table} (x)"))
                    .map_err(|e| StoreError::sqlite("create", e))
            })
            .expect("write");
    }

    #[test]
    fn reads_the_wal_index_header_and_sees_another_stores_commits() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("p.db");
        let store = Store::open(&path).expect("open");
        let mut probe = ChangeProbe::open(&store).expect("probe");
        assert!(probe.shm.is_some(), "the -shm header is readable");
        assert!(!probe.changed().expect("probe"));
        // Another Store: its own connections, as another process would have.
        let other = Store::open(&path).expect("open again");
        create(&other, "t1");
        assert!(probe.changed().expect("probe"));
        assert!(!probe.changed().expect("probe"));
        create(&other, "t2");
        assert!(probe.changed().expect("probe"));
    }

    #[test]
    fn falls_back_to_data_version() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path().join("p.db")).expect("open");
        let mut probe = ChangeProbe::open(&store).expect("probe");
        probe.shm = None;
        assert!(!probe.changed().expect("probe"));
        create(&store, "t1");
        assert!(probe.changed().expect("probe"));
        assert!(!probe.changed().expect("probe"));
    }

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
