//! The SQLite engine: every SQL statement lives under this module. One writer connection (all writes
//! go through it as short `BEGIN IMMEDIATE` transactions), a pool of readers, and pragmas that
//! are read back after being set.

pub mod approvals;
pub mod artifacts;
pub mod bulk;
pub(crate) mod change_feed;
mod checkpointer;
pub mod claim;
pub mod codec;
pub(crate) mod compose;
pub mod dashboard;
pub mod due;
mod engine;
mod errors;
mod fault;
pub mod finish;
pub mod flow;
pub mod gauges;
pub mod inbox;
pub mod inbox_page;
pub(crate) mod journal;
pub(crate) mod migrate;
pub mod occurrences;
mod open;
#[cfg(test)]
mod plans;
mod pragmas;
pub mod probe;
pub mod rescue;
pub mod retention;
mod rows;
pub mod runs;
pub mod schedules;
mod survey;
pub mod wal;
#[cfg(target_os = "linux")]
mod wal_watch;
#[cfg(not(target_os = "linux"))]
#[path = "wal_watch_polling.rs"]
mod wal_watch;
mod woken;
pub mod workers;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use r2d2::Pool;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, DropBehavior, OpenFlags, Transaction, TransactionBehavior};

pub use migrate::SCHEMA_VERSION;

pub(crate) use errors::Ctx;
use errors::{is_read_only, store_error_is_busy};
use pragmas::{read_pragma, set_connection_pragmas};

use crate::error::StoreError;
use crate::store::OpenMode;
use crate::store::{DbInfo, WriteStats};

/// How long SQLite itself waits on a lock before returning SQLITE_BUSY.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long we keep retrying a busy write before giving up.
const BUSY_GIVE_UP: Duration = Duration::from_secs(120);

struct Inner {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Pool<SqliteConnectionManager>,
    busy_retries: AtomicU64,
    write_counters: WriteCounters,
    /// Copies WAL pages into the database file off the writer's path (None: SQLite's own
    /// automatic checkpoint in the commit). Declared last: dropped after the connections.
    checkpointer: Option<checkpointer::Checkpointer>,
}

/// A handle to one toolq database file. Cheap to clone; all clones share the connections.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish()
    }
}

/// Runs blocking store work where it cannot stall other tasks. On a multi-thread runtime the
/// calling worker thread runs it inside [`tokio::task::block_in_place`], which first hands the
/// worker's queued tasks and I/O driver to another thread: the write starts at once and the
/// caller resumes without a thread wake-up. A `spawn_blocking` round trip costs two wake-ups,
/// which on a 2-vCPU VM were a third of a one-at-a-time enqueue (BENCHMARKS.md). On a
/// current-thread runtime, where `block_in_place` is not allowed, it uses `spawn_blocking`.
/// Either way the work runs to completion even if the caller's future is dropped meanwhile.
async fn off_scheduler<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
    if matches!(flavor, Ok(tokio::runtime::RuntimeFlavor::MultiThread)) {
        return tokio::task::block_in_place(f);
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
}

#[derive(Debug, Default)]
struct WriteCounters {
    transactions: AtomicU64,
    statement_ns: AtomicU64,
    commit_ns: AtomicU64,
}

impl Store {
    /// Opens (creating if needed) the database at `path`, migrating an older schema.
    /// A file with a newer schema, or a file that is not a toolq database, is refused
    /// before anything is written to it.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Self::open_with(path, OpenMode::Create)
    }

    /// Opens the database at `path` as `mode` allows: only [`OpenMode::Create`] creates a
    /// missing file ([`StoreError::Missing`] otherwise); a file this process may not write
    /// is opened read-only under [`OpenMode::Read`] and refused ([`StoreError::ReadOnly`],
    /// naming the file) otherwise. Many processes may open a new file at once: setup that
    /// finds the file locked by another process's setup is retried.
    pub fn open_with(path: impl AsRef<Path>, mode: OpenMode) -> Result<Store, StoreError> {
        let path = path.as_ref();
        // A damaged file can fail any step of opening (its header is read by the first
        // PRAGMA): say so, naming the file, as every later statement does.
        open::open_file(path, mode).map_err(|e| e.on_file(path))
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many times a write had to be retried because the database was busy.
    pub fn busy_retries(&self) -> u64 {
        self.inner.busy_retries.load(Ordering::Relaxed)
    }

    /// Time the writer spent in statements and in commits so far (`workload drain` prints it;
    /// the worker's metrics export it).
    pub fn write_stats(&self) -> WriteStats {
        let c = &self.inner.write_counters;
        WriteStats {
            transactions: c.transactions.load(Ordering::Relaxed),
            statement_secs: c.statement_ns.load(Ordering::Relaxed) as f64 / 1e9,
            commit_secs: c.commit_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction on the writer connection and commits.
    /// SQLITE_BUSY is retried with backoff (and counted) instead of surfacing. Blocking: from
    /// async code use [`Store::write_async`].
    pub fn write<T>(
        &self,
        mut f: impl FnMut(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let started = std::time::Instant::now();
        let mut delay = Duration::from_millis(2);
        loop {
            match self.try_write(&mut f) {
                Err(e) if store_error_is_busy(&e) && started.elapsed() < BUSY_GIVE_UP => {
                    self.inner.busy_retries.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "database busy; retrying write");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_millis(200));
                }
                Err(e) if is_read_only(&e) => {
                    return Err(StoreError::ReadOnly {
                        path: self.inner.path.display().to_string(),
                        action: "write".into(),
                    });
                }
                other => return other.map_err(|e| e.on_file(&self.inner.path)),
            }
        }
    }

    fn try_write<T>(
        &self,
        f: &mut impl FnMut(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // A poisoned writer lock means a writer panicked mid-call; the connection rolled back.
        let mut conn = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        let t0 = std::time::Instant::now();
        let mut tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| StoreError::sqlite("begin write", e))?;
        let value = f(&tx)?;
        let t1 = std::time::Instant::now();
        // COMMIT from the statement cache: `Transaction::commit` parses it on every call (~1,400
        // instructions, ~1 % of a one-at-a-time enqueue). Only a COMMIT that succeeded stops
        // the drop from rolling back, as `commit` does.
        tx.prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]))
            .map_err(|e| StoreError::sqlite("commit", e))?;
        tx.set_drop_behavior(DropBehavior::Ignore);
        drop(tx);
        let c = &self.inner.write_counters;
        c.statement_ns
            .fetch_add((t1 - t0).as_nanos() as u64, Ordering::Relaxed);
        c.commit_ns
            .fetch_add(t1.elapsed().as_nanos() as u64, Ordering::Relaxed);
        c.transactions.fetch_add(1, Ordering::Relaxed);
        let pages = checkpointer::take_wal_pages();
        if let Some(cp) = &self.inner.checkpointer {
            cp.committed(pages);
        }
        Ok(value)
    }

    /// Runs `f` with a reader connection (a consistent snapshot only inside one statement
    /// unless `f` opens a transaction). Blocking.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let conn = self.inner.readers.get()?;
        f(&conn).map_err(|e| e.on_file(&self.inner.path))
    }

    /// [`Store::write`] for async callers, off the async scheduler (see `off_scheduler`).
    pub async fn write_async<T: Send + 'static>(
        &self,
        f: impl FnMut(&Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.clone();
        off_scheduler(move || store.write(f)).await
    }

    /// [`Store::read`] for async callers, off the async scheduler (see `off_scheduler`).
    pub async fn read_async<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.clone();
        off_scheduler(move || store.read(f)).await
    }

    /// Journal mode, synchronous setting and SQLite version, as read back from the database.
    pub fn info(&self) -> Result<DbInfo, StoreError> {
        self.read(|c| {
            let sync = read_pragma(c, "synchronous")?;
            Ok(DbInfo {
                journal_mode: read_pragma(c, "journal_mode")?,
                synchronous: match sync.as_str() {
                    "0" => "OFF",
                    "1" => "NORMAL",
                    "2" => "FULL",
                    "3" => "EXTRA",
                    _ => "unknown",
                }
                .to_string(),
                sqlite_version: rusqlite::version().to_string(),
                engine: "sqlite".into(),
                server_version: None,
            })
        })
    }

    /// `PRAGMA integrity_check`: "ok" for a healthy file.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        self.read(|c| {
            c.query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .map_err(|e| StoreError::sqlite("integrity_check", e))
        })
    }

    /// Every problem `PRAGMA integrity_check` (or, with `quick`, the faster `quick_check`,
    /// which skips index-to-table cross-checks) finds, one line each; empty for a healthy file.
    /// A check SQLite aborts on damage it cannot walk past is reported as one more problem.
    pub fn check(&self, quick: bool) -> Result<Vec<String>, StoreError> {
        let pragma = if quick {
            "quick_check"
        } else {
            "integrity_check"
        };
        let conn = self.inner.readers.get()?;
        let lines = conn.prepare(&format!("PRAGMA {pragma}")).and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()
        });
        match lines {
            Ok(lines) => Ok(lines.into_iter().filter(|l| l != "ok").collect()),
            Err(e) => {
                let err = StoreError::sqlite(pragma, e);
                if err.fault() == crate::error::Fault::Damaged {
                    Ok(vec![format!("{pragma} stopped: {err}")])
                } else {
                    Err(err)
                }
            }
        }
    }

    /// `PRAGMA data_version` on a given connection: changes when another connection commits.
    pub fn data_version(conn: &Connection) -> Result<i64, StoreError> {
        conn.prepare_cached("PRAGMA data_version")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(|e| StoreError::sqlite("read data_version", e))
    }

    /// A dedicated read connection (not from the pool), e.g. for change polling.
    pub fn dedicated_reader(&self) -> Result<Connection, StoreError> {
        let c = Connection::open_with_flags(
            &self.inner.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| StoreError::sqlite("open reader", e))?;
        set_connection_pragmas(&c).map_err(|e| StoreError::sqlite("set pragmas", e))?;
        Ok(c)
    }
}

/// Test support: a reader holding a snapshot of the file at `path` (an open read
/// transaction) until dropped, which keeps checkpoints from copying the WAL past it.
#[cfg(test)]
pub(crate) fn pinned_reader(path: &Path) -> Connection {
    let reader = Connection::open(path).expect("open a test reader");
    reader.execute_batch("BEGIN").expect("begin");
    let _: i64 = reader
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .expect("pin a snapshot");
    reader
}
