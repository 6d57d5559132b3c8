//! A cheap change detector. Every commit in WAL mode rewrites the WAL-index header, the first
//! 48 bytes of the `-shm` file (its frame count, salts and checksums; see "WAL-index format" in
//! SQLite's file format documentation), so reading those bytes with one `pread` tells whether
//! any connection, in any process, committed since the last look: no lock, no transaction, no
//! write. A torn read only causes a spurious wake-up. Where the `-shm` file cannot be read, the
//! probe falls back to `PRAGMA data_version` on a dedicated connection, which takes a read
//! lock each time (about 1% of a core at 100 probes a second on the benchmark VM).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use rusqlite::Connection;

use super::Store;
use crate::error::StoreError;

/// A dedicated connection that tells whether anything was committed since the last look.
pub struct ChangeProbe {
    conn: Connection,
    last: i64,
    shm: Option<(Arc<File>, [u8; WAL_INDEX_HEADER])>,
}

/// The `-shm` file of each database this process probes, opened once and never closed.
///
/// Closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
/// included: among them the lock that tells other processes this one has the WAL-index
/// mapped. Without it, the next process to open the database resets the `-shm` file under
/// this process's mapping (SIGBUS, or a WAL-index that no longer matches the WAL). So each
/// descriptor lives as long as the process. They are keyed by file identity (found with
/// `stat`, which opens nothing), so a database deleted and created again at the same path
/// gets a descriptor of its new file.
fn shm_file(path: &Path) -> Option<Arc<File>> {
    /// Open `-shm` descriptors by (device, inode).
    type Descriptors = HashMap<(u64, u64), Arc<File>>;
    static OPEN: OnceLock<Mutex<Descriptors>> = OnceLock::new();
    let meta = std::fs::metadata(path).ok()?;
    let id = (meta.dev(), meta.ino());
    let mut open = OPEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(f) = open.get(&id) {
        return Some(f.clone());
    }
    let f = Arc::new(File::open(path).ok()?);
    open.insert(id, f.clone());
    Some(f)
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
        let shm = shm_file(Path::new(&shm_path)).and_then(|f| {
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

    /// POSIX locks of this process on the file with inode `ino`, from /proc/locks.
    #[cfg(target_os = "linux")]
    fn posix_locks_of_this_process_on(ino: u64) -> usize {
        let me = std::process::id().to_string();
        let ino = format!(":{ino}");
        std::fs::read_to_string("/proc/locks")
            .expect("/proc/locks")
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.len() > 5 && f[1] == "POSIX" && f[4] == me && f[5].ends_with(&ino))
            .count()
    }

    /// Closing any descriptor of a file drops every POSIX lock the process holds on it. A probe
    /// that closed its `-shm` descriptor dropped SQLite's lock that tells other processes the
    /// WAL-index is in use; the next process to open the file then reset it under this
    /// process's mapping (a worker died of SIGBUS in the concurrent first-open test).
    #[cfg(target_os = "linux")]
    #[test]
    fn dropping_a_probe_keeps_sqlites_locks_on_the_shm_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("p.db");
        let store = Store::open(&path).expect("open");
        let ino = std::fs::metadata(dir.path().join("p.db-shm"))
            .expect("-shm")
            .ino();
        let before = posix_locks_of_this_process_on(ino);
        assert!(before > 0, "SQLite holds a lock on the -shm file");
        for _ in 0..3 {
            let mut probe = ChangeProbe::open(&store).expect("probe");
            assert!(probe.shm.is_some());
            assert!(!probe.changed().expect("probe"));
            drop(probe);
            assert_eq!(
                posix_locks_of_this_process_on(ino),
                before,
                "a dropped probe released SQLite's locks on the -shm file"
            );
        }
        create(&store, "t1");
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
