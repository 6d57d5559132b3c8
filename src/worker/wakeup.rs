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
        sh.schedules_changed.notify_one();
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
    let mut pacing = Pacing::default();
    while !stop.is_cancelled() {
        let changed = match wake_tick(sh, &mut probe) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "change probe failed");
                false
            }
        };
        let Some(w) = watch.clone() else {
            std::thread::sleep(PROBE_EVERY);
            continue;
        };
        let wait = match pacing.after_probe(changed) {
            Next::Wait => true,
            Next::SleepThenWait => {
                std::thread::sleep(PROBE_EVERY);
                true
            }
            Next::Sleep => {
                std::thread::sleep(PROBE_EVERY);
                false
            }
            Next::Pause => {
                if let Err(e) = w.pause() {
                    tracing::debug!(error = %e, "could not pause the WAL watch");
                }
                std::thread::sleep(PROBE_EVERY);
                false
            }
            // Probe at once: a commit between the last probe and the new watch is not reported.
            Next::Resume => {
                if let Err(e) = w.resume() {
                    tracing::warn!(error = %e, "WAL watch failed; probing every {PROBE_EVERY:?}");
                    watch = None;
                }
                false
            }
        };
        if !wait {
            continue;
        }
        match w.wait(WATCH_TIMEOUT) {
            Ok(woken) => pacing.woken(woken == Woken::Wal),
            Err(e) => {
                tracing::warn!(error = %e, "WAL watch failed; probing every {PROBE_EVERY:?}");
                watch = None;
            }
        }
    }
}

/// Consecutive probes that saw a commit (commits streaming in, e.g. this worker's own during a
/// drain) after which the watch is paused and the thread polls every [`PROBE_EVERY`].
const BUSY_PROBES: u32 = 3;
/// Consecutive probes that saw nothing after which a paused watch is resumed.
const QUIET_PROBES: u32 = 3;

/// What the probe thread does after a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Sleep in the watch until a write is reported (or the safety timeout).
    Wait,
    /// Sleep [`PROBE_EVERY`], then wait in the watch: paces a stream of commits instead of
    /// probing after every one; the first write after a quiet spell is seen at once.
    SleepThenWait,
    /// Sleep [`PROBE_EVERY`], then probe.
    Sleep,
    /// Pause the watch (commits keep coming), sleep, probe: polling while busy.
    Pause,
    /// Resume the watch (quiet again) and probe at once.
    Resume,
}

/// Decides, probe by probe, between sleeping in the watch and polling.
#[derive(Debug, Default)]
struct Pacing {
    /// A reported write the last probe did not see yet: the writer updates the `-shm` header
    /// just after its WAL frames, so look once more a little later.
    look_again: bool,
    /// Consecutive probes that saw a commit while watching.
    busy: u32,
    /// Consecutive probes that saw nothing while paused.
    quiet: u32,
    paused: bool,
}

impl Pacing {
    fn after_probe(&mut self, changed: bool) -> Next {
        if self.paused {
            self.quiet = if changed { 0 } else { self.quiet + 1 };
            if self.quiet < QUIET_PROBES {
                return Next::Sleep;
            }
            *self = Pacing::default();
            return Next::Resume;
        }
        if changed {
            self.look_again = false;
            self.busy += 1;
            if self.busy < BUSY_PROBES {
                return Next::SleepThenWait;
            }
            self.busy = 0;
            self.quiet = 0;
            self.paused = true;
            return Next::Pause;
        }
        self.busy = 0;
        if std::mem::take(&mut self.look_again) {
            return Next::Sleep;
        }
        Next::Wait
    }

    /// The watch reported a write (`wal`) or timed out.
    fn woken(&mut self, wal: bool) {
        self.look_again = wal;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: &mut Pacing, probes: &[bool]) -> Vec<Next> {
        probes.iter().map(|&c| p.after_probe(c)).collect()
    }

    #[test]
    fn a_lone_commit_is_seen_at_once_and_then_the_thread_sleeps_in_the_watch() {
        let mut p = Pacing::default();
        assert_eq!(run(&mut p, &[false]), [Next::Wait]);
        p.woken(true);
        assert_eq!(run(&mut p, &[true]), [Next::SleepThenWait]);
        p.woken(false);
        assert_eq!(run(&mut p, &[false, false]), [Next::Wait, Next::Wait]);
    }

    #[test]
    fn a_reported_write_not_yet_visible_is_looked_for_once_more() {
        let mut p = Pacing::default();
        p.woken(true);
        assert_eq!(run(&mut p, &[false, false]), [Next::Sleep, Next::Wait]);
    }

    #[test]
    fn streaming_commits_pause_the_watch_and_quiet_resumes_it() {
        let mut p = Pacing::default();
        assert_eq!(
            run(&mut p, &[true, true, true]),
            [Next::SleepThenWait, Next::SleepThenWait, Next::Pause]
        );
        // Paused: poll; a commit restarts the quiet count.
        assert_eq!(
            run(&mut p, &[true, false, false, true, false, false, false]),
            [
                Next::Sleep,
                Next::Sleep,
                Next::Sleep,
                Next::Sleep,
                Next::Sleep,
                Next::Sleep,
                Next::Resume
            ]
        );
        // Watching again, from a clean slate.
        assert_eq!(run(&mut p, &[false]), [Next::Wait]);
        assert_eq!(
            run(&mut p, &[true, false, true, true]),
            [
                Next::SleepThenWait,
                Next::Wait,
                Next::SleepThenWait,
                Next::SleepThenWait
            ]
        );
    }
}
