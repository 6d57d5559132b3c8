//! WAL health for operators: [`Client::wal_health`] checkpoints passively and says whether a long-lived reader keeps the WAL from being checkpointed (for `stats` and `status`).

use crate::client::Client;
use crate::error::Result;
use crate::store::WalHealth;

impl Client {
    /// Runs a passive checkpoint and reports the `-wal` size, the frames it could not copy,
    /// and a warning when `[wal] warn_frames` or more are stuck behind an old snapshot.
    pub async fn wal_health(&self) -> Result<WalHealth> {
        let warn_frames = self.config().wal.warn_frames;
        Ok(self.engine().wal_health(warn_frames).await?)
    }
}
