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
//!
//! The thread waits for a lull before it copies: a pass that runs beside a burst of commits
//! (a batch enqueue) slows the writer by a sixth even on another core, and the copy costs the
//! same later. So it copies once the writer has been quiet for [`QUIET`], or at once when the
//! WAL holds [`DEFER_PAGES`], so that a writer that never pauses (a drain) still has its WAL
//! copied long before the fallback.

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

/// The thread is woken after this many new WAL pages (4 KiB each).
pub const SIGNAL_PAGES: i32 = 256;

/// At this many WAL pages the writer checkpoints in its own commit (SQLite's default is 1,000).
pub const WRITER_CHECKPOINT_PAGES: i32 = 4_000;

/// Below this many WAL pages the thread waits for the writer to be quiet before it copies.
pub const DEFER_PAGES: i32 = 2_000;

/// How long without a commit counts as a lull: longer than the gap between the transactions
/// of one burst (a batch enqueue validates its next 1,000 runs in about 1.5 ms), short
/// enough that an idle store has its WAL copied at once.
pub const QUIET: Duration = Duration::from_millis(10);

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

/// What the writer tells the thread: the WAL's size and when it last committed.
struct Progress {
    /// The instant `last_commit_ns` counts from.
    start: Instant,
    /// Nanoseconds from `start` to the writer's last commit.
    last_commit_ns: AtomicU64,
    /// WAL pages after the writer's last commit.
    pages: AtomicI32,
}

impl Progress {
    fn new() -> Progress {
        Progress::since(Instant::now())
    }

    fn since(start: Instant) -> Progress {
        Progress {
            start,
            last_commit_ns: AtomicU64::new(0),
            pages: AtomicI32::new(0),
        }
    }

    fn record(&self, pages: i32) {
        let ns = self.start.elapsed().as_nanos() as u64;
        self.last_commit_ns.store(ns, Ordering::Relaxed);
        self.pages.store(pages, Ordering::Relaxed);
    }

    /// How long the thread should still wait before it copies: zero once the writer has
    /// been quiet for [`QUIET`] or the WAL holds [`DEFER_PAGES`].
    fn wait_left(&self) -> Duration {
        if self.pages.load(Ordering::Relaxed) >= DEFER_PAGES {
            return Duration::ZERO;
        }
        let last = Duration::from_nanos(self.last_commit_ns.load(Ordering::Relaxed));
        QUIET.saturating_sub(self.start.elapsed().saturating_sub(last))
    }
}

/// The checkpoint thread of one store. Dropping it stops and joins the thread.
pub(crate) struct Checkpointer {
    stop: Arc<AtomicBool>,
    /// Set while the WAL is past [`WRITER_CHECKPOINT_PAGES`]: the writer checkpoints then.
    stand_aside: Arc<AtomicBool>,
    /// Held by the thread while it checkpoints, so the writer can wait for a pass to end.
    pass: Arc<Mutex<()>>,
    progress: Arc<Progress>,
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
        let progress = Arc::new(Progress::new());
        let (flag, aside, held, seen) = (
            stop.clone(),
            stand_aside.clone(),
            pass.clone(),
            progress.clone(),
        );
        let thread = std::thread::Builder::new()
            .name("toolq-checkpoint".into())
            .spawn(move || run(&conn, &flag, &aside, &held, &seen));
        match thread {
            Ok(thread) => {
                writer.wal_hook(Some(on_commit));
                Some(Checkpointer {
                    stop,
                    stand_aside,
                    pass,
                    progress,
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
        self.progress.record(pages);
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

/// The thread: sleeps until woken, waits for a lull (see the module doc), then copies what
/// it can without blocking anyone.
fn run(
    conn: &Connection,
    stop: &AtomicBool,
    stand_aside: &AtomicBool,
    pass: &Mutex<()>,
    progress: &Progress,
) {
    loop {
        std::thread::park();
        loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let left = progress.wait_left();
            if left.is_zero() {
                break;
            }
            // A commit that brings the WAL to the next wake-up mark unparks this early.
            std::thread::park_timeout(left);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_waits_while_the_writer_commits_and_the_wal_is_small() {
        let p = Progress::new();
        // A commit stamped an hour ahead stands for "the writer just committed" however slowly
        // this test runs.
        p.last_commit_ns
            .store(3_600 * 1_000_000_000, Ordering::Relaxed);
        p.pages.store(DEFER_PAGES - 1, Ordering::Relaxed);
        assert_eq!(p.wait_left(), QUIET);
        p.pages.store(DEFER_PAGES, Ordering::Relaxed);
        assert_eq!(
            p.wait_left(),
            Duration::ZERO,
            "a large WAL is copied at once"
        );
    }

    #[test]
    fn the_thread_copies_once_the_writer_has_been_quiet() {
        // The last commit at `start`, three lulls ago.
        let start = Instant::now()
            .checked_sub(QUIET * 3)
            .expect("a monotonic clock 30 ms past its origin");
        let p = Progress::since(start);
        p.pages.store(10, Ordering::Relaxed);
        assert_eq!(p.wait_left(), Duration::ZERO);
    }
}
