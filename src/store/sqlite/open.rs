//! Opening a database file: the writer connection (falling back to read-only, and to an
//! immutable read of a WAL file whose -shm cannot be made), its setup retried while another
//! process holds the lock for its own, the writer's tuning, and the pool of readers.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use r2d2::Pool;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::pragmas::{expect_pragma, read_pragma, set_connection_pragmas};
use super::{BUSY_TIMEOUT, Inner, SCHEMA_VERSION, Store, WriteCounters, checkpointer, fault};
use super::{migrate, store_error_is_busy, wal};
use crate::error::StoreError;
use crate::store::OpenMode;

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

/// How long opening keeps retrying setup (WAL switch, schema creation) while another
/// process holds the lock for its own setup.
const SETUP_GIVE_UP: Duration = Duration::from_secs(30);

/// Whether `path` is an empty file with no WAL content beside it: no database yet, which a
/// command that only reads must not turn into one.
fn holds_nothing(path: &Path) -> bool {
    path.metadata().is_ok_and(|m| m.is_file() && m.len() == 0) && wal::wal_bytes(path) == 0
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

/// Opens the file at `path` as `mode` allows: the writer, set up and tuned, and its readers.
pub(super) fn open_file(path: &Path, mode: OpenMode) -> Result<Store, StoreError> {
    let path = path.to_path_buf();
    let display = path.display().to_string();
    if mode != OpenMode::Create && (!path.exists() || holds_nothing(&path)) {
        return Err(StoreError::Missing { path: display });
    }
    let (mut writer, target, read_only) = open_writer(&path, &display, mode)?;
    setup_retrying(&mut writer, &display, read_only)?;
    tune_writer(&writer)?;
    let checkpointer = if read_only {
        None
    } else {
        checkpointer::Checkpointer::start(&path, &writer)
    };
    let readers = open_readers(&target, read_only)?;
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

/// The writer connection, the path (or immutable URI) the readers open, and whether the file
/// is read-only to this process (refused unless `mode` only reads).
fn open_writer(
    path: &Path,
    display: &str,
    mode: OpenMode,
) -> Result<(Connection, PathBuf, bool), StoreError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    if mode == OpenMode::Create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    // SQLite opens a file it may not write read-only even when asked for read-write.
    let mut writer = Connection::open_with_flags(path, flags)
        .map_err(|e| StoreError::sqlite(format!("open {display}"), e))?;
    let read_only = writer
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(|e| StoreError::sqlite("check read-only", e))?;
    if read_only && mode != OpenMode::Read {
        return Err(StoreError::ReadOnly {
            path: display.to_string(),
            action: "open it for writing".into(),
        });
    }
    // A WAL file read-only to us whose -shm cannot be created (a directory we may not
    // write) cannot be read through the WAL index. With no -wal file (or an empty one),
    // every commit is in the file itself, and since no -shm exists no process has it open
    // in WAL mode: read it as immutable (no locks, no index).
    let mut target = path.to_path_buf();
    if read_only && needs_immutable(&writer, path) {
        target = PathBuf::from(immutable_uri(path));
        writer = Connection::open_with_flags(&target, read_only_flags())
            .map_err(|e| StoreError::sqlite(format!("open {display} read-only"), e))?;
    }
    writer
        .busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| StoreError::sqlite("set busy_timeout", e))?;
    Ok((writer, target, read_only))
}

/// Runs [`setup`] until it is not refused for a lock another process's setup holds.
fn setup_retrying(
    writer: &mut Connection,
    display: &str,
    read_only: bool,
) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    let mut delay = Duration::from_millis(5);
    loop {
        match setup(writer, display, read_only) {
            // Another process is switching the new file to WAL or creating the schema;
            // SQLite does not always wait for that (its busy handler is skipped where
            // waiting could deadlock), so wait here and start the setup over.
            Err(e) if store_error_is_busy(&e) && started.elapsed() < SETUP_GIVE_UP => {
                tracing::debug!(error = %e, "database busy during setup; retrying");
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// The writer's page cache, journal and statement cache.
fn tune_writer(writer: &Connection) -> Result<(), StoreError> {
    set_cache_size(writer, WRITER_CACHE_KIB)
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
    fault::limit_pages(writer)?;
    // Room for every write statement (~60 sites, plus the batch enqueue's multi-row
    // INSERTs of up to 7 sizes) so a batch does not evict the claim and finish statements.
    writer.set_prepared_statement_cache_capacity(128);
    Ok(())
}

/// The pool of reader connections on `target` (opened on demand).
fn open_readers(
    target: &Path,
    read_only: bool,
) -> Result<Pool<SqliteConnectionManager>, StoreError> {
    let reader_flags = if read_only {
        read_only_flags()
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let manager = SqliteConnectionManager::file(target)
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
    Ok(Pool::builder()
        .max_size(READERS)
        .min_idle(Some(0))
        .thread_pool(Arc::new(
            scheduled_thread_pool::ScheduledThreadPool::builder()
                .num_threads(1)
                .thread_name_pattern("r2d2-worker-{}")
                .build(),
        ))
        .build(manager)?)
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
