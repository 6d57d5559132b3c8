//! Cross-process wake-ups: a [`ChangeProbe`] (the WAL-index header in the `-shm` file, or
//! `PRAGMA data_version` as a fallback) is read every few milliseconds and wakes the claim loop
//! when any connection (another process's enqueue, or this process's own writer) committed.
//! The probe only reads, so an idle worker writes nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::store::probe::ChangeProbe;

/// How often the probe runs. The probe itself is one `pread` of 48 bytes; on the benchmark VM
/// each sleep/wake of the thread costs ~60 us of CPU, so 10 ms (100 a second) keeps an idle
/// worker under 1% of a core with a cross-process pickup of ~6 ms (see BENCHMARKS.md).
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(10);

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
    let task = tokio::task::spawn_blocking(move || {
        let mut probe = match ChangeProbe::open(sh.client.store()) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "no change probe; other processes' work is found by polling");
                return;
            }
        };
        while !stop.is_cancelled() {
            if let Err(e) = wake_tick(&sh, &mut probe) {
                tracing::warn!(error = %e, "change probe failed");
            }
            std::thread::sleep(PROBE_EVERY);
        }
    });
    if let Err(e) = task.await {
        tracing::error!(error = %e, "change probe thread failed");
    }
}
