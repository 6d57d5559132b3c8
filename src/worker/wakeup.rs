//! Cross-process wake-ups: a [`ChangeProbe`] (the WAL-index header in the `-shm` file, or
//! `PRAGMA data_version` as a fallback) wakes the claim loop when any connection (another
//! process's enqueue, or this process's own writer) committed. On Linux the probe runs when
//! inotify reports a write to the `-wal` file ([`WalWatch`]); elsewhere, or if the watch cannot
//! be set up, it runs every [`PROBE_EVERY`]. The probe only reads, so an idle worker writes
//! nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use super::wal_watch::WalWatch;
use crate::store::probe::ChangeProbe;

/// How often the probe runs while commits keep coming (or always, without a WAL watch). The
/// probe itself is one `pread` of 48 bytes; on the benchmark VM each sleep/wake of the thread
/// costs ~60 us of CPU, so at most 100 probes a second keep the probe under 1% of a core during
/// a drain (a 2 ms pace would allow 500), and a polling-only worker picks up another
/// process's run in ~6 ms.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(10);

/// With a WAL watch, the longest sleep between probes: a safety net for a write the watch did
/// not report, and the bound on how long a dropped runtime waits for the probe thread.
const WATCH_TIMEOUT: Duration = Duration::from_millis(100);

/// Why [`WalWatch::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The WAL file was written (or the event queue overflowed, which may hide such a write).
    Wal,
    /// Nothing happened within the timeout.
    Timeout,
    /// [`WalWatch::stop`] was called.
    Stop,
}

/// One probe: wakes this process's claim loop if anything was committed since the last one.
pub(crate) fn wake_tick(sh: &Shared, probe: &mut ChangeProbe) -> crate::error::Result<bool> {
    let changed = probe.changed()?;
    if changed {
        sh.client.wake_workers();
    }
    Ok(changed)
}

/// Runs the probe on its own blocking thread (no DB call on the async runtime's threads) until
/// `stop` fires. If the probe cannot be opened or fails, the claim loop's poll interval
/// remains the fallback.
pub(super) async fn wake_loop(sh: Arc<Shared>, stop: CancellationToken) {
    // Also stop the thread when this future is dropped (a runtime shutting down without a
    // worker shutdown), or the runtime would wait forever for its blocking thread.
    let stop = stop.child_token();
    let _on_drop = stop.clone().drop_guard();
    let watch = open_watch(&sh);
    let thread_stop = stop.clone();
    let thread_watch = watch.clone();
    let mut task =
        tokio::task::spawn_blocking(move || probe_thread(&sh, &thread_stop, thread_watch));
    let ended = tokio::select! {
        ended = &mut task => ended,
        _ = stop.cancelled() => {
            if let Some(w) = &watch {
                w.stop();
            }
            task.await
        }
    };
    if let Err(e) = ended {
        tracing::error!(error = %e, "change probe thread failed");
    }
}

fn open_watch(sh: &Shared) -> Option<Arc<WalWatch>> {
    match WalWatch::open(sh.client.store().path()) {
        Ok(w) => Some(Arc::new(w)),
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => None,
        Err(e) => {
            tracing::warn!(error = %e, "no WAL watch; probing every {PROBE_EVERY:?}");
            None
        }
    }
}

fn probe_thread(sh: &Shared, stop: &CancellationToken, mut watch: Option<Arc<WalWatch>>) {
    let mut probe = match ChangeProbe::open(sh.client.store()) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "no change probe; other processes' work is found by polling");
            return;
        }
    };
    // After a reported write, probe once more a little later if this probe saw nothing: the
    // writer updates the `-shm` header just after its WAL frames.
    let mut look_again = false;
    while !stop.is_cancelled() {
        let changed = match wake_tick(sh, &mut probe) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "change probe failed");
                false
            }
        };
        let Some(w) = &watch else {
            std::thread::sleep(PROBE_EVERY);
            continue;
        };
        if changed || look_again {
            // Pace a stream of commits (this worker's own, during a drain) instead of probing
            // after every one of them; the first write after a quiet spell is seen at once.
            // A reported write this probe did not see yet is looked for once more.
            std::thread::sleep(PROBE_EVERY);
            if !changed {
                look_again = false;
                continue;
            }
        }
        look_again = match w.wait(WATCH_TIMEOUT) {
            Ok(woken) => woken == Woken::Wal,
            Err(e) => {
                tracing::warn!(error = %e, "WAL watch failed; probing every {PROBE_EVERY:?}");
                watch = None;
                false
            }
        };
    }
}
