//! What a WAL watch reports when its wait ends (shared by the watch and the change feed).

/// Why `WalWatch::wait` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The WAL file was written (or the event queue overflowed, which may hide such a write).
    Wal,
    /// Nothing happened within the timeout.
    Timeout,
    /// `WalWatch::stop` was called.
    Stop,
}
