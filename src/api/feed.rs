//! One change feed per server, shared by every stream and long poll: the engine's message
//! feed (SQLite: WAL watch; Postgres: LISTEN on the workers' channel and on the one every
//! inbox insert notifies) bumps a counter that waiters watch. A waiter reads
//! the store only when something committed, so a thousand idle streams cost no queries.

use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::store::OnChange;

/// The shared feed; started by the first subscriber, stopped when the server's state drops.
#[derive(Default)]
pub(crate) struct Feed {
    tx: OnceLock<watch::Sender<u64>>,
    stop: CancellationToken,
    started: Mutex<bool>,
}

impl Feed {
    /// A receiver that changes soon after any process commits to the store.
    pub fn subscribe(&self, client: &Client) -> watch::Receiver<u64> {
        let tx = self.tx.get_or_init(|| watch::channel(0).0);
        let rx = tx.subscribe();
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        if !*started {
            *started = true;
            let tx = tx.clone();
            let on_change: OnChange = Arc::new(move || {
                tx.send_modify(|n| *n = n.wrapping_add(1));
            });
            let client = client.clone();
            let stop = self.stop.clone();
            tokio::spawn(async move { client.engine().message_feed(on_change, stop).await });
        }
        rx
    }

    /// Tells waiters that this server itself changed something (no need to wait for the
    /// engine's feed to see it).
    pub fn touch(&self) {
        if let Some(tx) = self.tx.get() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
