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
pub mod dashboard;
pub mod due;
mod engine;
mod fault;
pub mod finish;
pub mod flow;
pub mod gauges;
pub mod inbox;
pub mod inbox_page;
pub(crate) mod migrate;
pub mod occurrences;
#[cfg(test)]
mod plans;
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
use rusqlite::{Connection, DropBehavior, ErrorCode, OpenFlags, Transaction, TransactionBehavior};

pub use migrate::SCHEMA_VERSION;

use crate::error::{Fault, StoreError};
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

fn read_only_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI
}

/// Whether a read-only `conn` cannot read `path` for want of a -shm file it may not create,
/// while no -wal file holds commits that are not in the file itself.
fn needs_immutable(conn: &Connection, path: &Path) -> bool {
    let probe = conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0));
    let cannot_read = matches!(&probe, Err(rusqlite::Error::SqliteFailure(f, _))
        if f.code == ErrorCode::ReadOnly || f.code == ErrorCode::CannotOpen);
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal_empty = std::fs::metadata(&wal).map_or(true, |m| m.len() == 0);
    cannot_read && wal_empty
}

/// `file:PATH?immutable=1`, with the characters a URI gives meaning to escaped.
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for c in path.display().to_string().chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Checks the file, switches it to WAL, sets the pragmas and creates or migrates the schema.
/// Every step may be repeated: a retry after SQLITE_BUSY starts here again.
fn setup(writer: &mut Connection, display: &str, read_only: bool) -> Result<(), StoreError> {
    // Inspect before any pragma that writes (journal_mode = WAL rewrites the header).
    let state = migrate::inspect(writer, display)?;
    if read_only {
        // Nothing can be written: no WAL switch, no schema change. A rollback-journal file
        // reads fine; a missing or older schema cannot be fixed from here.
        set_connection_pragmas(writer).map_err(|e| StoreError::sqlite("set pragmas", e))?;
        return match state {
            migrate::FileState::Version(v) if v == SCHEMA_VERSION => Ok(()),
            migrate::FileState::Version(v) => Err(StoreError::ReadOnly {
                path: display.to_string(),
                action: format!("migrate schema version {v} to {SCHEMA_VERSION}"),
            }),
            migrate::FileState::Empty => Err(StoreError::ReadOnly {
                path: display.to_string(),
                action: "create the schema".into(),
            }),
        };
    }
    let mode = read_pragma(writer, "journal_mode")?;
    if !mode.eq_ignore_ascii_case("wal") {
        writer
            .query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .map_err(|e| StoreError::sqlite("set journal_mode = WAL", e))?;
    }
    expect_pragma(writer, "journal_mode", "wal")?;
    set_connection_pragmas(writer).map_err(|e| StoreError::sqlite("set pragmas", e))?;
    expect_pragma(writer, "foreign_keys", "1")?;
    expect_pragma(writer, "synchronous", "1")?;
    expect_pragma(
        writer,
        "busy_timeout",
        &BUSY_TIMEOUT.as_millis().to_string(),
    )?;
    migrate::apply(writer, state).map_err(|e| match e {
        StoreError::NotToolq { reason, .. } => StoreError::NotToolq {
            path: display.to_string(),
            reason,
        },
        other => other,
    })
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

/// The writer's page cache, in KiB: a quarter of SQLite's 2 MiB default.
///
/// The writer touches the right edges of a few indexes and the runs it just claimed. The OS
/// caches the file anyway, and a drain of 1,000,000 queued runs went no slower with this than
/// with the default while its peak RSS fell by 2 MiB (BENCHMARKS.md).
const WRITER_CACHE_KIB: u32 = 512;

/// Each reader's page cache, in KiB. Readers look up single runs and short index ranges, and
/// a scan (a count, a listing) would only fill a bigger cache with pages it reads once: with
/// up to [`READERS`] of them at 512 KiB, they were ~1 MiB of a draining worker's peak RSS for
/// no measurable speed (BENCHMARKS.md, issue 19, session 7).
const READER_CACHE_KIB: u32 = 64;

/// Reader connections at most (opened on demand).
const READERS: u32 = 4;

fn set_cache_size(conn: &Connection, kib: u32) -> rusqlite::Result<()> {
    conn.execute_batch(&format!("PRAGMA cache_size = -{kib}"))
}

fn set_connection_pragmas(conn: &Connection) -> rusqlite::Result<()> {
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

fn read_pragma(conn: &Connection, name: &'static str) -> Result<String, StoreError> {
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

fn expect_pragma(conn: &Connection, name: &'static str, wanted: &str) -> Result<(), StoreError> {
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

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.code == ErrorCode::DatabaseBusy || f.code == ErrorCode::DatabaseLocked)
}

fn is_read_only(e: &StoreError) -> bool {
    matches!(e, StoreError::Sqlite { source, .. }
        if matches!(source.downcast_ref::<rusqlite::Error>(),
            Some(rusqlite::Error::SqliteFailure(f, _)) if f.code == ErrorCode::ReadOnly))
}

fn store_error_is_busy(e: &StoreError) -> bool {
    matches!(e, StoreError::Sqlite { source, .. }
        if source.downcast_ref::<rusqlite::Error>().is_some_and(is_busy))
}

impl StoreError {
    /// Wraps a rusqlite error with the action that failed.
    pub(crate) fn sqlite(action: impl Into<String>, source: rusqlite::Error) -> Self {
        let fault = sqlite_fault(&source);
        Self::Sqlite {
            action: action.into(),
            source: crate::store::EngineError::new(source, fault),
        }
    }
}

/// SQLite's verdict on an error, by its result code.
fn sqlite_fault(e: &rusqlite::Error) -> Fault {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::DatabaseCorrupt | C::NotADatabase) => Fault::Damaged,
        Some(
            C::DiskFull | C::SystemIoFailure | C::ReadOnly | C::CannotOpen | C::PermissionDenied,
        ) => Fault::Storage,
        _ => Fault::Other,
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> Self {
        Self::Pool(crate::store::EngineError::new(e, Fault::Other))
    }
}

#[derive(Debug, Default)]
struct WriteCounters {
    transactions: AtomicU64,
    statement_ns: AtomicU64,
    commit_ns: AtomicU64,
}

/// How long opening keeps retrying setup (WAL switch, schema creation) while another
/// process holds the lock for its own setup.
const SETUP_GIVE_UP: Duration = Duration::from_secs(30);

/// Whether `path` is an empty file with no WAL content beside it: no database yet, which a
/// command that only reads must not turn into one.
fn holds_nothing(path: &Path) -> bool {
    path.metadata().is_ok_and(|m| m.is_file() && m.len() == 0) && wal::wal_bytes(path) == 0
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
        Self::open_file(path, mode).map_err(|e| e.on_file(path))
    }

    fn open_file(path: &Path, mode: OpenMode) -> Result<Store, StoreError> {
        let path = path.to_path_buf();
        let display = path.display().to_string();
        if mode != OpenMode::Create && (!path.exists() || holds_nothing(&path)) {
            return Err(StoreError::Missing { path: display });
        }
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        if mode == OpenMode::Create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        // SQLite opens a file it may not write read-only even when asked for read-write.
        let mut writer = Connection::open_with_flags(&path, flags)
            .map_err(|e| StoreError::sqlite(format!("open {display}"), e))?;
        let read_only = writer
            .is_readonly(rusqlite::MAIN_DB)
            .map_err(|e| StoreError::sqlite("check read-only", e))?;
        if read_only && mode != OpenMode::Read {
            return Err(StoreError::ReadOnly {
                path: display,
                action: "open it for writing".into(),
            });
        }
        // A WAL file read-only to us whose -shm cannot be created (a directory we may not
        // write) cannot be read through the WAL index. With no -wal file (or an empty one),
        // every commit is in the file itself, and since no -shm exists no process has it open
        // in WAL mode: read it as immutable (no locks, no index).
        let mut target = path.clone();
        if read_only && needs_immutable(&writer, &path) {
            target = PathBuf::from(immutable_uri(&path));
            writer = Connection::open_with_flags(&target, read_only_flags())
                .map_err(|e| StoreError::sqlite(format!("open {display} read-only"), e))?;
        }
        writer
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| StoreError::sqlite("set busy_timeout", e))?;
        let started = std::time::Instant::now();
        let mut delay = Duration::from_millis(5);
        loop {
            match setup(&mut writer, &display, read_only) {
                // Another process is switching the new file to WAL or creating the schema;
                // SQLite does not always wait for that (its busy handler is skipped where
                // waiting could deadlock), so wait here and start the setup over.
                Err(e) if store_error_is_busy(&e) && started.elapsed() < SETUP_GIVE_UP => {
                    tracing::debug!(error = %e, "database busy during setup; retrying");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_millis(200));
                }
                other => break other?,
            }
        }
        set_cache_size(&writer, WRITER_CACHE_KIB)
            .map_err(|e| StoreError::sqlite("set cache_size", e))?;
        // A statement that writes many rows inside a transaction keeps a journal of the pages
        // it changes, to undo itself alone; past 64 KiB SQLite spills it to a file in the
        // temporary directory. A batch enqueue's multi-row INSERTs did, once a file held a few
        // thousand runs: half the `pwrite` calls of a 20,000-run batch enqueue (BENCHMARKS.md,
        // issue 19, session 9), and an error when that directory is full or read-only. Every
        // write statement here touches a bounded number of rows (bulk actions and pruning go
        // in batches), so the journal stays small in memory.
        writer
            .execute_batch("PRAGMA temp_store = MEMORY")
            .map_err(|e| StoreError::sqlite("set temp_store", e))?;
        fault::limit_pages(&writer)?;
        // Room for every write statement (~60 sites, plus the batch enqueue's multi-row
        // INSERTs of up to 7 sizes) so a batch does not evict the claim and finish statements.
        writer.set_prepared_statement_cache_capacity(128);
        let checkpointer = if read_only {
            None
        } else {
            checkpointer::Checkpointer::start(&path, &writer)
        };

        let reader_flags = if read_only {
            read_only_flags()
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let manager = SqliteConnectionManager::file(&target)
            .with_flags(reader_flags)
            .with_init(|c| {
                set_connection_pragmas(c)?;
                set_cache_size(c, READER_CACHE_KIB)?;
                c.set_prepared_statement_cache_capacity(32);
                Ok(())
            });
        // r2d2 opens connections and reaps idle ones on a thread pool of its own (3 threads
        // unless told): one thread does that work, and every thread costs a draining worker a
        // stack and a malloc arena.
        let readers = Pool::builder()
            .max_size(READERS)
            .min_idle(Some(0))
            .thread_pool(Arc::new(
                scheduled_thread_pool::ScheduledThreadPool::builder()
                    .num_threads(1)
                    .thread_name_pattern("r2d2-worker-{}")
                    .build(),
            ))
            .build(manager)?;
        Ok(Store {
            inner: Arc::new(Inner {
                path,
                writer: Mutex::new(writer),
                readers,
                busy_retries: AtomicU64::new(0),
                write_counters: WriteCounters::default(),
                checkpointer,
            }),
        })
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

/// Wraps a rusqlite result with the action that failed.
pub(crate) trait Ctx<T> {
    fn ctx(self, action: &str) -> Result<T, StoreError>;
}

impl<T> Ctx<T> for rusqlite::Result<T> {
    fn ctx(self, action: &str) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::sqlite(action, e))
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

/// How the engine classifies SQLite's errors ([`Fault`]), and names a damaged file.
#[cfg(test)]
mod fault_tests {
    use super::*;
    use crate::error::Error;

    fn sqlite(code: std::ffi::c_int) -> StoreError {
        StoreError::sqlite(
            "claim",
            rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None),
        )
    }

    #[test]
    fn sqlite_codes_are_classified_by_what_a_worker_does_about_them() {
        use rusqlite::ffi;
        assert_eq!(sqlite(ffi::SQLITE_CORRUPT).fault(), Fault::Damaged);
        assert_eq!(sqlite(ffi::SQLITE_NOTADB).fault(), Fault::Damaged);
        for code in [ffi::SQLITE_FULL, ffi::SQLITE_IOERR, ffi::SQLITE_READONLY] {
            assert_eq!(sqlite(code).fault(), Fault::Storage, "{code}");
        }
        assert_eq!(sqlite(ffi::SQLITE_BUSY).fault(), Fault::Other);
        assert_eq!(sqlite(ffi::SQLITE_CONSTRAINT).fault(), Fault::Other);
    }

    #[test]
    fn a_damaged_file_is_named_with_what_to_do() {
        let path = std::path::Path::new("/data/q.db");
        let e = sqlite(rusqlite::ffi::SQLITE_CORRUPT).on_file(path);
        assert_eq!(e.fault(), Fault::Damaged);
        let text = e.to_string();
        assert!(
            text.contains("/data/q.db") && text.contains("claim"),
            "{text}"
        );
        assert!(text.contains("toolq --db /data/q.db check"), "{text}");
        assert_eq!(Error::from(e).exit_code(), 1);
        let full = sqlite(rusqlite::ffi::SQLITE_FULL).on_file(path);
        assert!(matches!(full, StoreError::Sqlite { .. }), "{full}");
    }
}

/// The page caches each kind of connection gets (issue 19: a draining worker's memory).
#[cfg(test)]
mod cache_tests {
    use super::*;

    fn cache_size(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA cache_size", [], |r| r.get(0))
            .expect("read cache_size")
    }

    #[test]
    fn readers_get_a_small_page_cache_and_the_writer_a_bigger_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path().join("q.db")).expect("open");
        let reader = store.read(|c| Ok(cache_size(c))).expect("read");
        assert_eq!(reader, -i64::from(READER_CACHE_KIB));
        let writer = store.write(|tx| Ok(cache_size(tx))).expect("write");
        assert_eq!(writer, -i64::from(WRITER_CACHE_KIB));
    }
}
