//! Event-driven wake-ups (Linux): every commit, by any process, `pwrite`s frames to the
//! database's `-wal` file, and inotify reports each such write. The probe thread sleeps in
//! `poll(2)` on the inotify descriptor instead of waking every few milliseconds, so an idle
//! worker costs almost no CPU and another process's enqueue is seen as soon as it is written.
//! The parent directory is watched rather than the file, so a WAL file that is deleted and
//! created again (a journal-mode switch by hand) stays watched.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::wakeup::Woken;

/// Watches one database's `-wal` file for writes.
#[derive(Debug)]
pub(crate) struct WalWatch {
    inotify: Inotify,
    wal_name: OsString,
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
        inotify.add_watch(dir, AddWatchFlags::IN_MODIFY)?;
        let stop = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
        Ok(WalWatch {
            inotify,
            wal_name,
            stop,
        })
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
    use crate::store::Store;
    use crate::store::probe::tests::create;

    #[test]
    fn a_commit_by_another_connection_wakes_the_watcher() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("w.db");
        let _store = Store::open(&path).expect("open");
        let watch = WalWatch::open(&path).expect("watch");
        // Opening may have written the WAL already; start from a quiet queue.
        while watch.wait(Duration::from_millis(20)).expect("wait") == Woken::Wal {}
        let other = Store::open(&path).expect("open again");
        create(&other, "t1");
        assert_eq!(
            watch.wait(Duration::from_secs(5)).expect("wait"),
            Woken::Wal
        );
    }

    #[test]
    fn writes_to_other_files_in_the_directory_are_ignored() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("w.db");
        let _store = Store::open(&path).expect("open");
        let watch = WalWatch::open(&path).expect("watch");
        while watch.wait(Duration::from_millis(20)).expect("wait") == Woken::Wal {}
        std::fs::write(dir.path().join("notes.txt"), b"not the database").expect("write");
        assert_eq!(
            watch.wait(Duration::from_millis(50)).expect("wait"),
            Woken::Timeout
        );
    }

    #[test]
    fn stop_ends_a_wait_at_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("w.db");
        let _store = Store::open(&path).expect("open");
        let watch = WalWatch::open(&path).expect("watch");
        watch.stop();
        assert_eq!(
            watch.wait(Duration::from_secs(60)).expect("wait"),
            Woken::Stop
        );
    }

    #[test]
    fn a_missing_database_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let err = WalWatch::open(&dir.path().join("absent.db")).expect_err("no file");
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}
