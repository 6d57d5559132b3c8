//! WAL hygiene: checkpoints (passive while busy, truncating when idle), the size of the
//! `-wal` file, and noticing a long-lived reader that keeps the WAL from being checkpointed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;

use super::{BUSY_TIMEOUT, Ctx, Store};
use crate::error::StoreError;
use crate::store::{Checkpoint, CheckpointMode, CheckpointTick, WalHealth, pinned_warning};

/// How long a truncating checkpoint waits for readers and writers before giving up: short,
/// because it holds the write lock meanwhile and it is only an idle-time nicety.
const TRUNCATE_WAIT: Duration = Duration::from_millis(200);

/// Runs a checkpoint on `conn` (which must not be inside a transaction).
pub fn checkpoint(conn: &Connection, mode: CheckpointMode) -> Result<Checkpoint, StoreError> {
    let run = |sql: &str| {
        conn.query_row(sql, [], |r| {
            Ok(Checkpoint {
                busy: r.get::<_, i64>(0)? != 0,
                log_frames: r.get(1)?,
                checkpointed_frames: r.get(2)?,
            })
        })
        .ctx("wal checkpoint")
    };
    match mode {
        CheckpointMode::Passive => run("PRAGMA wal_checkpoint(PASSIVE)"),
        CheckpointMode::Truncate => {
            conn.busy_timeout(TRUNCATE_WAIT)
                .ctx("shorten busy_timeout")?;
            let res = run("PRAGMA wal_checkpoint(TRUNCATE)");
            conn.busy_timeout(BUSY_TIMEOUT)
                .ctx("restore busy_timeout")?;
            match res {
                // A busy TRUNCATE is an answer, not a failure: someone was reading.
                Err(e) if super::store_error_is_busy(&e) => Ok(Checkpoint::not_done()),
                other => other,
            }
        }
    }
}

/// The `-wal` file next to a database file.
pub fn wal_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}

/// Bytes of the `-wal` file (0 when there is none).
pub fn wal_bytes(db: &Path) -> u64 {
    std::fs::metadata(wal_path(db)).map_or(0, |m| m.len())
}

impl Store {
    /// Runs a checkpoint on a pooled connection. Blocking.
    pub fn checkpoint(&self, mode: CheckpointMode) -> Result<Checkpoint, StoreError> {
        self.read(|c| checkpoint(c, mode))
    }

    /// Bytes of this database's `-wal` file.
    pub fn wal_bytes(&self) -> u64 {
        wal_bytes(self.path())
    }

    /// One checkpoint of the worker's WAL tick: a truncate when `idle`, falling back to a
    /// passive one when readers are in the way (so the caller always sees a backlog), and
    /// the WAL's size after it. Blocking.
    pub(crate) fn checkpoint_tick(&self, idle: bool) -> Result<CheckpointTick, StoreError> {
        let mut done = None;
        if idle {
            let cp = self.checkpoint(CheckpointMode::Truncate)?;
            if !cp.busy {
                done = Some((CheckpointMode::Truncate, cp));
            }
        }
        let (mode, checkpoint) = match done {
            Some(done) => done,
            None => (
                CheckpointMode::Passive,
                self.checkpoint(CheckpointMode::Passive)?,
            ),
        };
        Ok(CheckpointTick {
            mode,
            checkpoint,
            wal_bytes: self.wal_bytes(),
        })
    }

    /// A passive checkpoint, the WAL size, and a warning when `warn_frames` or more frames
    /// cannot be checkpointed (something holds an old snapshot). Blocking.
    pub fn wal_health(&self, warn_frames: i64) -> Result<WalHealth, StoreError> {
        let cp = match self.checkpoint(CheckpointMode::Passive) {
            Ok(cp) => cp,
            // A checkpoint writes the database file: on a full disk or a failing device it
            // fails while every read works. `stats` and `status` are how an operator looks
            // into that incident, so they report it instead of failing with it.
            Err(e) if e.fault() == crate::error::Fault::Storage => {
                return Ok(WalHealth {
                    wal_bytes: self.wal_bytes(),
                    checkpoint: Checkpoint::not_done(),
                    warning: Some(format!("the WAL could not be checkpointed: {e}")),
                });
            }
            Err(e) => return Err(e),
        };
        let bytes = self.wal_bytes();
        let warning = (cp.backlog() >= warn_frames).then(|| pinned_warning(bytes, cp.backlog()));
        Ok(WalHealth {
            wal_bytes: bytes,
            checkpoint: cp,
            warning,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(log: i64, done: i64) -> Checkpoint {
        Checkpoint {
            busy: log != done,
            log_frames: log,
            checkpointed_frames: done,
        }
    }

    #[test]
    fn watch_warns_only_after_repeated_growing_backlog() {
        let mut w = crate::store::WalWatch::new(100, 3);
        assert_eq!(w.observe(&cp(500, 0), 1), None);
        assert_eq!(w.observe(&cp(600, 0), 1), None);
        assert!(w.observe(&cp(700, 0), 1).is_some());
        // Once the reader lets go, the backlog drops and the warning stops.
        assert_eq!(w.observe(&cp(700, 700), 1), None);
        // Small backlogs never warn.
        for _ in 0..10 {
            assert_eq!(w.observe(&cp(50, 0), 1), None);
        }
    }

    #[test]
    fn wal_path_appends_suffix() {
        assert_eq!(
            wal_path(Path::new("/tmp/x/toolq.db")),
            PathBuf::from("/tmp/x/toolq.db-wal")
        );
    }
}
