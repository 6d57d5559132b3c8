//! The change feed on Postgres: `LISTEN toolq_changes` on a connection of its own. Every
//! write that adds work or frees a limit slot notifies in its transaction, so listeners wake
//! when it commits. When the listening connection drops, the feed polls (wakes the worker
//! every [`POLL`]) while it reconnects with backoff.

use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use super::PgStore;
use crate::store::OnChange;

/// The notification channel every writer notifies.
pub(crate) const CHANNEL: &str = "toolq_changes";
/// The channel every inbox insert notifies (see `inbox::insert_many`): only message feeds
/// listen to it, so a busy drain's ends, which free no slot, do not wake the workers.
pub(crate) const INBOX_CHANNEL: &str = "toolq_inbox";
/// What the workers' feed listens to.
pub(crate) const WORKER_CHANNELS: &[&str] = &[CHANNEL];
/// What a message feed (the HTTP API's streams and waits) listens to: every change, and
/// every message.
pub(crate) const MESSAGE_CHANNELS: &[&str] = &[CHANNEL, INBOX_CHANNEL];
/// How often a feed without a connection wakes the worker.
const POLL: Duration = Duration::from_millis(250);
/// Longest wait between two reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Runs until `stop`: listens on `channels`, and polls while it cannot.
pub(crate) async fn listen(
    store: PgStore,
    channels: &'static [&'static str],
    on_change: OnChange,
    stop: CancellationToken,
) {
    let mut backoff = POLL;
    let mut connected_before = false;
    while !stop.is_cancelled() {
        match session(&store, channels, &on_change, &stop, connected_before).await {
            Ok(()) => return,
            Err(e) => {
                if connected_before {
                    tracing::warn!(error = %e, db = store.location(),
                        "lost the Postgres change feed; polling while reconnecting");
                }
                connected_before = false;
            }
        }
        // Polling: wake the worker at least every POLL until the next attempt.
        let until = tokio::time::Instant::now() + backoff;
        loop {
            on_change();
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(POLL) => {}
            }
            if tokio::time::Instant::now() >= until {
                break;
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One listening connection: returns Ok when stopped, Err when the connection failed.
async fn session(
    store: &PgStore,
    channels: &[&str],
    on_change: &OnChange,
    stop: &CancellationToken,
    _was_connected: bool,
) -> Result<(), String> {
    let (client, mut connection) = store
        .pg_config()
        .connect(store.tls())
        .await
        .map_err(|e| e.to_string())?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    // Drives the connection: forwards notifications; ends when the connection does.
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notification(_)) => {
                    if tx.send(()).is_err() {
                        return Ok(());
                    }
                }
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("connection closed".to_string())
    });
    // One channel reads `LISTEN toolq_changes` in pg_stat_activity, as before the inbox
    // channel existed (operators and tests look for it).
    let listen = channels
        .iter()
        .map(|c| format!("LISTEN {c}"))
        .collect::<Vec<_>>()
        .join("; ");
    let listening = client
        .batch_execute(&listen)
        .await
        .map_err(|e| e.to_string());
    if let Err(e) = listening {
        driver.abort();
        return Err(e);
    }
    let out = relay(&mut rx, on_change, stop).await;
    drop(client);
    match out {
        Ok(()) => {
            driver.abort();
            Ok(())
        }
        Err(e) => match driver.await {
            Ok(Err(reason)) => Err(reason),
            _ => Err(e),
        },
    }
}

/// Calls `on_change` once now (for commits made while no one listened) and once per batch of
/// notifications `rx` forwards, until stopped (Ok) or the connection closes (Err).
async fn relay(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<()>,
    on_change: &OnChange,
    stop: &CancellationToken,
) -> Result<(), String> {
    on_change();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            got = rx.recv() => match got {
                Some(()) => {
                    // Many notifications may be queued: one wake-up for all of them.
                    while rx.try_recv().is_ok() {}
                    on_change();
                }
                None => return Err("the listening connection closed".to_string()),
            }
        }
    }
}
