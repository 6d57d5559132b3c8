//! Background WAL checkpoints. SQLite's automatic checkpoint runs inside the commit that
//! crosses 1,000 WAL pages, so every thousandth page a writer copies pages into the database
//! file and waits for two fsyncs before its caller gets an answer. Here the writer only counts
//! WAL pages (a WAL hook on its own thread) and wakes a dedicated thread that checkpoints on
//! its own connection, concurrently with further commits.
//!
//! A checkpoint that runs while commits keep arriving never catches up with the last frame,
//! and SQLite restarts the WAL from its start only when every frame was copied. So the writer
//! keeps a fallback: once the WAL holds [`WRITER_CHECKPOINT_PAGES`] it checkpoints inside its
//! own commit as before, and the thread stands aside (a checkpoint in progress would make the
//! writer's attempt busy) until the WAL has started over. By then the thread has copied nearly
//! everything, the writer's pass finishes the rest, and the next transaction starts the WAL
//! over: the file stays bounded.

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rusqlite::{Connection, OpenFlags};

/// The thread is woken after this many new WAL pages (4 KiB each): about SQLite's own
/// cadence (1,000). Each pass ends with fsyncs of the WAL and the database file, which slow the
/// writer's own writes meanwhile; at 256 pages a 20,000-run batch enqueue paid for four times
/// as many passes and ran ~10 % slower, while drains were level either way (BENCHMARKS.md,
/// issue 19, session 10).
pub const SIGNAL_PAGES: i32 = 1024;

/// At this many WAL pages the writer checkpoints in its own commit (SQLite's default is 1,000).
pub const WRITER_CHECKPOINT_PAGES: i32 = 4_000;

thread_local! {
    /// WAL pages after the last commit on this thread, set by the writer's WAL hook.
    static WAL_PAGES: Cell<i32> = const { Cell::new(-1) };
}

/// The writer connection's WAL hook: remembers the WAL size and, past the fallback size,
/// checkpoints like SQLite's own hook would. Its answer cannot undo the commit, so a busy
/// checkpoint (the thread is in the middle of one) is not an error.
fn on_commit(wal: &rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_PAGES.set(pages);
    if pages >= WRITER_CHECKPOINT_PAGES {
        let _ = wal.checkpoint_v2(rusqlite::hooks::CheckpointMode::PASSIVE);
    }
    Ok(())
}

/// The WAL pages after the last commit on this thread (-1 before the first).
pub(crate) fn take_wal_pages() -> i32 {
    WAL_PAGES.replace(-1)
}

/// The checkpoint thread of one store. Dropping it stops and joins the thread.
pub(crate) struct Checkpointer {
    stop: Arc<AtomicBool>,
    /// Set while the WAL is past [`WRITER_CHECKPOINT_PAGES`]: the writer checkpoints then.
    stand_aside: Arc<AtomicBool>,
    /// Held by the thread while it checkpoints, so the writer can wait for a pass to end.
    pass: Arc<Mutex<()>>,
    /// WAL pages when the thread was last woken.
    signalled_at: AtomicI64,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread with its own connection to `path` and installs the WAL hook on
    /// `writer`. Without a thread (it could not open the file) the writer keeps SQLite's
    /// automatic checkpoint.
    pub(crate) fn start(path: &Path, writer: &Connection) -> Option<Checkpointer> {
        let conn = match Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        ) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "no background checkpoint thread; commits checkpoint");
                return None;
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stand_aside = Arc::new(AtomicBool::new(false));
        let pass = Arc::new(Mutex::new(()));
        let (flag, aside, held) = (stop.clone(), stand_aside.clone(), pass.clone());
        let thread = std::thread::Builder::new()
            .name("toolq-checkpoint".into())
            .spawn(move || run(&conn, &flag, &aside, &held));
        match thread {
            Ok(thread) => {
                writer.wal_hook(Some(on_commit));
                Some(Checkpointer {
                    stop,
                    stand_aside,
                    pass,
                    signalled_at: AtomicI64::new(0),
                    thread: Some(thread),
                })
            }
            Err(e) => {
                tracing::warn!(error = %e, "no background checkpoint thread; commits checkpoint");
                None
            }
        }
    }

    /// Called by the writer after each commit with [`take_wal_pages`]: wakes the thread once
    /// [`SIGNAL_PAGES`] new pages arrived since the last wake-up (or the WAL started over).
    pub(crate) fn committed(&self, pages: i32) {
        if pages < 0 {
            return;
        }
        let past_fallback = pages >= WRITER_CHECKPOINT_PAGES;
        self.stand_aside.store(past_fallback, Ordering::Relaxed);
        if past_fallback {
            // The writer's own checkpoint found the thread mid-pass (busy). A slow pass (a
            // loaded disk) would let the WAL grow without bound meanwhile, so wait for it to
            // end: the thread stands aside from now on, and the next commit's checkpoint runs.
            drop(self.pass.lock().unwrap_or_else(|e| e.into_inner()));
        }
        let pages = i64::from(pages);
        let last = self.signalled_at.load(Ordering::Relaxed);
        if pages < last {
            // The WAL started over; count from its start.
            self.signalled_at.store(0, Ordering::Relaxed);
        } else if pages - last >= i64::from(SIGNAL_PAGES) {
            self.signalled_at.store(pages, Ordering::Relaxed);
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            if t.join().is_err() {
                tracing::error!("the checkpoint thread panicked");
            }
        }
    }
}

/// The thread: sleeps until woken, then copies what it can without blocking anyone.
fn run(conn: &Connection, stop: &AtomicBool, stand_aside: &AtomicBool, pass: &Mutex<()>) {
    loop {
        std::thread::park();
        if stop.load(Ordering::Acquire) {
            return;
        }
        let _pass = pass.lock().unwrap_or_else(|e| e.into_inner());
        // Checked under the lock: a writer that waited for the previous pass has set it.
        if stand_aside.load(Ordering::Relaxed) {
            continue;
        }
        // PASSIVE never waits for readers or the writer; what it cannot copy now the next
        // wake-up (or the writer's fallback) will.
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::debug!(error = %e, "background checkpoint failed; retrying on the next wake-up");
        }
    }
}
