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
    /// The inbox's mark, kept by one task for every stream (see [`Feed::subscribe_inbox`]).
    newest: OnceLock<watch::Sender<i64>>,
    newest_started: Mutex<bool>,
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

    /// A receiver of the inbox's mark, which grows when a message commits. Where ids become
    /// visible in commit order (SQLite) it is the newest message id of any session, read by
    /// one task once per change of [`Feed::subscribe`] for all subscribers, so a stream
    /// reads its own session's messages only when the inbox grew, not at every commit
    /// (claims, heartbeats, log flushes). Where they do only within a session (Postgres), a
    /// message of one session can commit after a newer id of another without moving the
    /// newest id, so the mark counts the feed's changes instead (every message notifies).
    /// The first value may be 0 until that task's first read.
    pub fn subscribe_inbox(&self, client: &Client) -> watch::Receiver<i64> {
        let tx = self.newest.get_or_init(|| watch::channel(0).0);
        let rx = tx.subscribe();
        let mut started = self
            .newest_started
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !*started {
            *started = true;
            let tx = tx.clone();
            let mut changes = self.subscribe(client);
            let client = client.clone();
            let stop = self.stop.clone();
            tokio::spawn(async move {
                let ordered = client.engine().inbox_ids_in_commit_order();
                loop {
                    // Seen before the read: a commit after the read changes it again.
                    changes.borrow_and_update();
                    if !ordered {
                        tx.send_modify(|v| *v = v.wrapping_add(1));
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            changed = changes.changed() => if changed.is_err() { return },
                        }
                        continue;
                    }
                    match client.inbox_newest_id().await {
                        Ok(id) => {
                            tx.send_if_modified(|v| {
                                let grew = id > *v;
                                if grew {
                                    *v = id;
                                }
                                grew
                            });
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "reading the newest inbox id failed; trying again");
                            tokio::select! {
                                _ = stop.cancelled() => return,
                                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
                            }
                        }
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        changed = changes.changed() => if changed.is_err() { return },
                    }
                }
            });
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
