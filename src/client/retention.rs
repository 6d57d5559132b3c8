//! [`Client::prune`]: old finished work deleted in bounded batches (see `core::retention`).

use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::error::Result;
use crate::retention::{PruneOptions, PruneReport};

impl Client {
    /// Deletes finished runs (with their blobs and inbox rows), acknowledged messages, schedule
    /// occurrences and stopped worker rows older than the retention ages, in batches of
    /// `[retention] batch_size` rows, each its own transaction. Never touches unfinished runs,
    /// the latest finished run of an enabled schedule, or runs a kept occurrence points at.
    pub async fn prune(&self, opts: PruneOptions) -> Result<PruneReport> {
        self.core()
            .prune_until(opts, &CancellationToken::new())
            .await
    }
}
