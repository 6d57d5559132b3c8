//! Cross-process wake-ups: a [`ChangeProbe`] (the WAL-index header in the `-shm` file, or
//! `PRAGMA data_version` as a fallback) wakes the claim loop when any connection (another
//! process's enqueue, or this process's own writer) committed. On Linux the probe runs when
//! inotify reports a write to the `-wal` file ([`WalWatch`]); elsewhere, or if the watch cannot
//! be set up, it runs every [`PROBE_EVERY`]. The probe only reads, so an idle worker writes
//! nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Store;
use super::probe::ChangeProbe;
use super::wal_watch::WalWatch;
use super::woken::Woken;
use crate::store::engine::OnChange;

/// How often the probe runs while commits keep coming (or always, without a WAL watch). The
/// probe itself is one `pread` of 48 bytes; on the benchmark VM each sleep/wake of the thread
/// costs ~60 us of CPU, so at most 100 probes a second keep the probe under 1% of a core during
/// a drain (a 2 ms pace would allow 500), and a polling-only worker picks up another
/// process's run in ~6 ms.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(10);

/// With a WAL watch, the longest sleep between probes: a safety net for a write the watch did
/// not report, and the bound on how long a dropped runtime waits for the probe thread.
const WATCH_TIMEOUT: Duration = Duration::from_millis(100);

/// [`PROBE_EVERY`] for the message feed (the HTTP API's inbox streams and waits): a pushed
/// message should reach its client within a few ms of its commit (issue 37: p50 <= 5 ms) also
/// while commits stream in, which pauses the watch. At 500 probes a second (~3% of a core on
/// the benchmark VM, only while commits keep coming and only once an API client subscribed).
pub(crate) const MESSAGE_PROBE_EVERY: Duration = Duration::from_millis(2);

/// One probe: wakes this process's claim loop if anything was committed since the last one.
pub(crate) fn wake_tick(
    on_change: &OnChange,
    probe: &mut ChangeProbe,
) -> Result<bool, crate::error::StoreError> {
    let changed = probe.changed()?;
    if changed {
        on_change();
    }
    Ok(changed)
}

/// Runs the probe on its own blocking thread (no DB call on the async runtime's threads) until
/// `stop` fires. If the probe cannot be opened or fails, the claim loop's poll interval
/// remains the fallback.
///
/// `every` paces the probe while commits stream in (or always, without a WAL watch): the
/// workers' feed uses [`PROBE_EVERY`], the message feed [`MESSAGE_PROBE_EVERY`].
pub(super) async fn wake_loop(
    store: Store,
    on_change: OnChange,
    stop: CancellationToken,
    every: Duration,
) {
    // Also stop the thread when this future is dropped (a runtime shutting down without a
    // worker shutdown), or the runtime would wait forever for its blocking thread.
    let stop = stop.child_token();
    let _on_drop = stop.clone().drop_guard();
    let watch = open_watch(&store);
    let thread_stop = stop.clone();
    let thread_watch = watch.clone();
    let mut task = tokio::task::spawn_blocking(move || {
        probe_thread(&store, &on_change, &thread_stop, thread_watch, every)
    });
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

fn open_watch(store: &Store) -> Option<Arc<WalWatch>> {
    match WalWatch::open(store.path()) {
        Ok(w) => Some(Arc::new(w)),
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => None,
        Err(e) => {
            tracing::warn!(error = %e, "no WAL watch; probing every {PROBE_EVERY:?}");
            None
        }
    }
}

fn probe_thread(
    store: &Store,
    on_change: &OnChange,
    stop: &CancellationToken,
    mut watch: Option<Arc<WalWatch>>,
    every: Duration,
) {
    let mut probe = match ChangeProbe::open(store) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "no change probe; other processes' work is found by polling");
            return;
        }
    };
    let mut pacing = Pacing::every(every);
    while !stop.is_cancelled() {
        let changed = match wake_tick(on_change, &mut probe) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "change probe failed");
                false
            }
        };
        let Some(w) = watch.clone() else {
            std::thread::sleep(every);
            continue;
        };
        match act_on(
            pacing.after_probe(changed, std::time::Instant::now()),
            &w,
            every,
        ) {
            Then::Wait => {}
            Then::Probe => continue,
            Then::DropWatch => {
                watch = None;
                continue;
            }
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

/// What the probe loop does next with its watch.
enum Then {
    /// Wait on the watch.
    Wait,
    /// Probe again (after the sleep [`act_on`] took).
    Probe,
    /// The watch failed: poll every [`PROBE_EVERY`] from now on.
    DropWatch,
}

/// Carries out the pacing's verdict `next` on the watch `w`: sleeps (`every`), pauses or
/// resumes it.
fn act_on(next: Next, w: &WalWatch, every: Duration) -> Then {
    match next {
        Next::Wait => Then::Wait,
        Next::LookAgain => {
            std::thread::sleep(LOOK_AGAIN);
            Then::Probe
        }
        Next::Sleep => {
            std::thread::sleep(every);
            Then::Probe
        }
        Next::Pause => {
            if let Err(e) = w.pause() {
                tracing::debug!(error = %e, "could not pause the WAL watch");
            }
            std::thread::sleep(every);
            Then::Probe
        }
        // Probe at once: a commit between the last probe and the new watch is not reported.
        Next::Resume => match w.resume() {
            Ok(()) => Then::Probe,
            Err(e) => {
                tracing::warn!(error = %e, "WAL watch failed; probing every {PROBE_EVERY:?}");
                Then::DropWatch
            }
        },
    }
}

/// Probes that saw a commit, each within [`PROBE_EVERY`] of the previous one (commits
/// streaming in, e.g. this worker's own during a drain), after which the watch is paused and
/// the thread polls every [`PROBE_EVERY`]. A pickup commits two or three times in a burst
/// (another process's enqueue, then this worker's claim and finish); that must not pause.
const BUSY_PROBES: u32 = 8;
/// Consecutive probes that saw nothing after which a paused watch is resumed.
const QUIET_PROBES: u32 = 3;
/// How soon to look again when the watch reported a write the probe did not see yet: the
/// writer updates the `-shm` header microseconds after its last WAL frame.
const LOOK_AGAIN: Duration = Duration::from_millis(1);

/// What the probe thread does after a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Sleep in the watch until a write is reported (or the safety timeout).
    Wait,
    /// Sleep [`LOOK_AGAIN`], then probe.
    LookAgain,
    /// Sleep [`PROBE_EVERY`], then probe.
    Sleep,
    /// Pause the watch (commits keep coming), sleep, probe: polling while busy.
    Pause,
    /// Resume the watch (quiet again) and probe at once.
    Resume,
}

/// Decides, probe by probe, between sleeping in the watch and polling.
#[derive(Debug)]
struct Pacing {
    /// The polling pace (and what counts as commits streaming in).
    every: Duration,
    /// A reported write the last probe did not see yet: the writer updates the `-shm` header
    /// just after its WAL frames, so look once more a little later.
    look_again: bool,
    /// Probes in a row that saw a commit, each soon after the previous one, while watching.
    busy: u32,
    /// When the last probe that saw a commit ran.
    last_change: Option<std::time::Instant>,
    /// Consecutive probes that saw nothing while paused.
    quiet: u32,
    paused: bool,
}

impl Default for Pacing {
    fn default() -> Self {
        Pacing::every(PROBE_EVERY)
    }
}

impl Pacing {
    /// Pacing that polls every `every` while commits stream in.
    fn every(every: Duration) -> Self {
        Pacing {
            every,
            look_again: false,
            busy: 0,
            last_change: None,
            quiet: 0,
            paused: false,
        }
    }

    /// After a probe at `now` that saw a commit (`changed`) or not.
    fn after_probe(&mut self, changed: bool, now: std::time::Instant) -> Next {
        if self.paused {
            self.quiet = if changed { 0 } else { self.quiet + 1 };
            if self.quiet < QUIET_PROBES {
                return Next::Sleep;
            }
            *self = Pacing::every(self.every);
            return Next::Resume;
        }
        if changed {
            self.look_again = false;
            let streaming = self
                .last_change
                .is_some_and(|t| now.saturating_duration_since(t) < self.every);
            self.busy = if streaming { self.busy + 1 } else { 1 };
            self.last_change = Some(now);
            if self.busy >= BUSY_PROBES {
                *self = Pacing {
                    paused: true,
                    ..Pacing::every(self.every)
                };
                return Next::Pause;
            }
            return Next::Wait;
        }
        if std::mem::take(&mut self.look_again) {
            return Next::LookAgain;
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
    use std::time::Instant;

    /// Probes at `start`, `start + gap`, `start + 2 gap`, ...
    fn run(p: &mut Pacing, start: Instant, gap: Duration, probes: &[bool]) -> Vec<Next> {
        probes
            .iter()
            .enumerate()
            .map(|(i, &c)| p.after_probe(c, start + gap * i as u32))
            .collect()
    }

    const FAST: Duration = Duration::from_millis(1);

    #[test]
    fn a_commit_is_seen_at_once_and_the_thread_goes_back_to_the_watch_without_sleeping() {
        let mut p = Pacing::default();
        let t = Instant::now();
        assert_eq!(run(&mut p, t, FAST, &[false]), [Next::Wait]);
        p.woken(true);
        // Another process's enqueue, then this worker's claim and finish: no pause.
        assert_eq!(
            run(&mut p, t, FAST, &[true, true, true]),
            [Next::Wait, Next::Wait, Next::Wait]
        );
        p.woken(false);
        assert_eq!(
            run(&mut p, t, FAST, &[false, false]),
            [Next::Wait, Next::Wait]
        );
    }

    #[test]
    fn a_reported_write_not_yet_visible_is_looked_for_once_more_soon() {
        let mut p = Pacing::default();
        p.woken(true);
        assert_eq!(
            run(&mut p, Instant::now(), FAST, &[false, false]),
            [Next::LookAgain, Next::Wait]
        );
    }

    #[test]
    fn commits_spread_out_never_pause_the_watch() {
        let mut p = Pacing::default();
        let slow = PROBE_EVERY * 2;
        let all = run(&mut p, Instant::now(), slow, &[true; 20]);
        assert!(all.iter().all(|&n| n == Next::Wait), "{all:?}");
    }

    #[test]
    fn streaming_commits_pause_the_watch_and_quiet_resumes_it() {
        let mut p = Pacing::default();
        let t = Instant::now();
        let mut expected = vec![Next::Wait; BUSY_PROBES as usize - 1];
        expected.push(Next::Pause);
        assert_eq!(
            run(&mut p, t, FAST, &[true; BUSY_PROBES as usize]),
            expected
        );
        // Paused: poll; a commit restarts the quiet count.
        assert_eq!(
            run(
                &mut p,
                t,
                PROBE_EVERY,
                &[true, false, false, true, false, false, false]
            ),
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
        assert_eq!(
            run(&mut p, t, FAST, &[false, true]),
            [Next::Wait, Next::Wait]
        );
    }
}
