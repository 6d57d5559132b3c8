//! Where inotify does not exist, there is no WAL watch: [`WalWatch::open`] fails and the
//! probe thread polls every `PROBE_EVERY`.

use std::path::Path;
use std::time::Duration;

use super::woken::Woken;

/// No watch on this platform.
#[derive(Debug)]
pub(crate) struct WalWatch;

impl WalWatch {
    /// Always fails: this platform has no inotify.
    pub(crate) fn open(_db_path: &Path) -> std::io::Result<WalWatch> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "WAL watch needs Linux inotify",
        ))
    }

    /// Nothing to stop.
    pub(crate) fn stop(&self) {}

    /// Never called: [`open`](Self::open) fails.
    pub(crate) fn pause(&self) -> std::io::Result<()> {
        Ok(())
    }

    /// Never called: [`open`](Self::open) fails.
    pub(crate) fn resume(&self) -> std::io::Result<()> {
        Ok(())
    }

    /// Never called: [`open`](Self::open) fails.
    pub(crate) fn wait(&self, _timeout: Duration) -> std::io::Result<Woken> {
        Ok(Woken::Timeout)
    }
}
