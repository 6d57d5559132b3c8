//! The WAL tick: a passive checkpoint while runs execute, a truncating one when the worker is
//! idle, and a warning when a long-lived reader keeps the WAL from being checkpointed.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::error::Result;
use crate::store::{Checkpoint, CheckpointMode, CheckpointTick, WalWatch};

/// Checkpoints seen stalled in a row before the worker warns.
const STALLED_TICKS: u32 = 3;

/// What one WAL tick did.
#[derive(Debug, Clone)]
pub(crate) struct WalTick {
    /// The mode used (truncate when idle).
    pub mode: CheckpointMode,
    /// The checkpoint's answer.
    pub checkpoint: Checkpoint,
    /// Bytes of the `-wal` file afterwards.
    pub wal_bytes: u64,
    /// Set when the WAL looks pinned by a reader.
    pub warning: Option<String>,
}

/// One checkpoint: truncating when nothing of ours runs, else passive. A truncate that finds
/// readers in the way falls back to a passive one, so the watch always sees a backlog.
pub(crate) async fn wal_tick(sh: &Arc<Shared>, watch: &mut WalWatch) -> Result<WalTick> {
    let idle = sh.flights().is_empty();
    let CheckpointTick {
        mode,
        checkpoint: cp,
        wal_bytes,
    } = sh.core.engine().checkpoint(idle).await?;
    let warning = watch.observe(&cp, wal_bytes);
    sh.metrics.wal_checked(cp.backlog(), warning.is_some());
    if let Some(w) = &warning {
        tracing::warn!(wal_bytes, backlog = cp.backlog(), "{w}");
    }
    Ok(WalTick {
        mode,
        checkpoint: cp,
        wal_bytes,
        warning,
    })
}

pub(super) async fn wal_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let cfg = sh.core.config().wal.clone();
    let mut watch = WalWatch::new(cfg.warn_frames, STALLED_TICKS);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(cfg.checkpoint_interval) => {}
            _ = stop.cancelled() => return,
        }
        match wal_tick(&sh, &mut watch).await {
            Ok(t) => tracing::debug!(
                mode = ?t.mode,
                busy = t.checkpoint.busy,
                wal_bytes = t.wal_bytes,
                pinned = t.warning.is_some(),
                "WAL checkpoint"
            ),
            Err(e) => sh.store_failed("WAL checkpoint", e),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::client::{Client, EnqueueRequest};
    use crate::config::Config;
    use crate::tool::RegistryBuilder;

    async fn client(dir: &tempfile::TempDir) -> Client {
        let config = Config {
            db_path: dir.path().join("t.db").display().to_string(),
            ..Config::default()
        };
        let registry = RegistryBuilder::new().with_builtins().build().unwrap();
        let client = Client::open(config, registry).unwrap();
        let reqs = (0..300)
            .map(|i| EnqueueRequest::new("echo", serde_json::json!({"message": i.to_string()})))
            .collect();
        client.enqueue_batch(reqs).await.unwrap();
        client
    }

    #[tokio::test]
    async fn idle_tick_truncates_and_a_pinned_wal_warns_after_repeated_ticks() {
        let dir = tempfile::tempdir().unwrap();
        let client = client(&dir).await;
        let worker = client.worker(Default::default());
        let mut watch = WalWatch::new(1, STALLED_TICKS);
        assert!(client.engine().wal_bytes() > 0);
        let t = wal_tick(&worker.shared, &mut watch).await.unwrap();
        assert_eq!(t.mode, CheckpointMode::Truncate);
        assert_eq!(t.wal_bytes, 0);
        assert!(t.warning.is_none());

        let reader = crate::store::sqlite::pinned_reader(&dir.path().join("t.db"));
        let mut warned = Vec::new();
        for i in 0..STALLED_TICKS {
            let reqs = (0..100)
                .map(|j| {
                    EnqueueRequest::new("echo", serde_json::json!({"message": format!("{i}/{j}")}))
                })
                .collect();
            client.enqueue_batch(reqs).await.unwrap();
            let t = wal_tick(&worker.shared, &mut watch).await.unwrap();
            assert_eq!(
                t.mode,
                CheckpointMode::Passive,
                "the reader blocks truncation"
            );
            assert!(t.checkpoint.backlog() > 0);
            warned.push(t.warning.is_some());
        }
        assert_eq!(warned, vec![false, false, true]);

        drop(reader);
        let t = wal_tick(&worker.shared, &mut watch).await.unwrap();
        assert_eq!(t.mode, CheckpointMode::Truncate);
        assert_eq!(t.wal_bytes, 0);
        assert!(t.warning.is_none());
    }
}
