//! Event-driven wake-ups (Linux): every commit, by any process, `pwrite`s frames to the
//! database's `-wal` file, and inotify reports each such write. The probe thread sleeps in
//! `poll(2)` on the inotify descriptor instead of waking every few milliseconds, so an idle
//! worker costs almost no CPU and another process's enqueue is seen as soon as it is written.
//! The parent directory is watched rather than the file, so a WAL file that is deleted and
//! created again (a journal-mode switch by hand) stays watched.
//!
//! A watch is not free for the writer: the kernel queues an event on every `pwrite` to the
//! watched directory, two per WAL frame, which cost a quarter of a draining worker's commit
//! time (BENCHMARKS.md). So the probe thread [pauses](WalWatch::pause) the watch while commits
//! stream in, and polls instead, until things are quiet again.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use super::woken::Woken;

/// Watches one database's `-wal` file for writes.
#[derive(Debug)]
pub(crate) struct WalWatch {
    inotify: Inotify,
    dir: PathBuf,
    wal_name: OsString,
    /// The directory's watch; `None` while paused.
    watch: Mutex<Option<WatchDescriptor>>,
    stop: EventFd,
}

impl WalWatch {
    /// Starts watching the WAL file of the database at `db_path`.
    pub(crate) fn open(db_path: &Path) -> std::io::Result<WalWatch> {
        // SQLite follows symbolic links to the real file and puts the WAL beside it.
        let real = std::fs::canonicalize(db_path)?;
        let (Some(dir), Some(name)) = (real.parent(), real.file_name()) else {
            return Err(std::io::Error::other(format!(
                "{}: no parent directory to watch",
                real.display()
            )));
        };
        let mut wal_name = name.to_owned();
        wal_name.push("-wal");
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let wd = inotify.add_watch(dir, AddWatchFlags::IN_MODIFY)?;
        let stop = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
        Ok(WalWatch {
            inotify,
            dir: dir.to_path_buf(),
            wal_name,
            watch: Mutex::new(Some(wd)),
            stop,
        })
    }

    fn watch(&self) -> std::sync::MutexGuard<'_, Option<WatchDescriptor>> {
        // The guarded value is replaced whole; a panic elsewhere cannot leave it half-made.
        self.watch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the kernel from reporting writes (writes cost nothing extra meanwhile); the
    /// caller polls instead until [`resume`](Self::resume). Idempotent.
    pub(crate) fn pause(&self) -> std::io::Result<()> {
        if let Some(wd) = self.watch().take() {
            self.inotify.rm_watch(wd)?;
        }
        Ok(())
    }

    /// Watches again after [`pause`](Self::pause), dropping the events queued before it, so
    /// the next [`wait`](Self::wait) reports only new writes. Idempotent.
    pub(crate) fn resume(&self) -> std::io::Result<()> {
        let mut watch = self.watch();
        if watch.is_none() {
            self.drain_events()?;
            *watch = Some(
                self.inotify
                    .add_watch(&self.dir, AddWatchFlags::IN_MODIFY)?,
            );
        }
        Ok(())
    }

    /// Whether the watch is paused.
    #[cfg(test)]
    pub(crate) fn is_paused(&self) -> bool {
        self.watch().is_none()
    }

    /// Makes the current or next [`wait`](Self::wait) return [`Woken::Stop`].
    pub(crate) fn stop(&self) {
        if let Err(e) = self.stop.write(1) {
            tracing::warn!(error = %e, "could not signal the WAL watcher to stop");
        }
    }

    /// Blocks until the WAL file is written, `timeout` passes, or [`stop`](Self::stop) is
    /// called. Writes to other files in the directory are read and ignored.
    pub(crate) fn wait(&self, timeout: Duration) -> std::io::Result<Woken> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ms = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
            let mut fds = [
                PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.stop.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, ms) {
                Ok(0) => return Ok(Woken::Timeout),
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if fds[1].any().unwrap_or(false) {
                return Ok(Woken::Stop);
            }
            if self.drain_events()? {
                return Ok(Woken::Wal);
            }
            if left.is_zero() {
                return Ok(Woken::Timeout);
            }
        }
    }

    /// Reads every queued event; true if one was a write to the WAL file.
    fn drain_events(&self) -> std::io::Result<bool> {
        let mut wal = false;
        loop {
            match self.inotify.read_events() {
                Ok(events) => {
                    wal |= events.iter().any(|e| {
                        e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                            || e.name.as_deref() == Some(self.wal_name.as_os_str())
                    });
                }
                Err(Errno::EAGAIN) => return Ok(wal),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::Store;
    use crate::store::sqlite::probe::tests::create;

    /// A watch on a new database whose own opening writes were already reported; the
    /// directory and the store must outlive it.
    fn quiet_watch() -> (tempfile::TempDir, Store, WalWatch) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("w.db");
        let store = Store::open(&path).expect("open");
        let watch = WalWatch::open(&path).expect("watch");
        // Opening may have written the WAL already; start from a quiet queue.
        while watch.wait(Duration::from_millis(20)).expect("wait") == Woken::Wal {}
        (dir, store, watch)
    }

    #[test]
    fn a_commit_by_another_connection_wakes_the_watcher() {
        let (_dir, store, watch) = quiet_watch();
        let other = Store::open(store.path()).expect("open again");
        create(&other, "t1");
        assert_eq!(
            watch.wait(Duration::from_secs(5)).expect("wait"),
            Woken::Wal
        );
    }

    #[test]
    fn writes_to_other_files_in_the_directory_are_ignored() {
        let (dir, _store, watch) = quiet_watch();
        std::fs::write(dir.path().join("notes.txt"), b"not the database").expect("write");
        assert_eq!(
            watch.wait(Duration::from_millis(50)).expect("wait"),
            Woken::Timeout
        );
    }

    #[test]
    fn stop_ends_a_wait_at_once() {
        let (_dir, _store, watch) = quiet_watch();
        watch.stop();
        assert_eq!(
            watch.wait(Duration::from_secs(60)).expect("wait"),
            Woken::Stop
        );
    }

    #[test]
    fn a_paused_watch_reports_nothing_and_a_resumed_one_reports_new_writes() {
        let (_dir, store, watch) = quiet_watch();
        let other = Store::open(store.path()).expect("open again");
        watch.pause().expect("pause");
        watch.pause().expect("pausing twice is fine");
        assert!(watch.is_paused());
        create(&other, "t1");
        assert_eq!(
            watch.wait(Duration::from_millis(50)).expect("wait"),
            Woken::Timeout
        );
        watch.resume().expect("resume");
        watch.resume().expect("resuming twice is fine");
        assert!(!watch.is_paused());
        assert_eq!(
            watch.wait(Duration::from_millis(20)).expect("wait"),
            Woken::Timeout,
            "nothing was written since the resume"
        );
        create(&other, "t2");
        assert_eq!(
            watch.wait(Duration::from_secs(5)).expect("wait"),
            Woken::Wal
        );
    }

    #[test]
    fn a_missing_database_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let err = WalWatch::open(&dir.path().join("absent.db")).expect_err("no file");
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}
