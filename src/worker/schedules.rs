//! The schedule loop: runs the schedule tick ([`crate::schedule::tick`]) every poll
//! interval, sooner when a tick is due sooner, and again after any commit (a schedule added or
//! changed here or in another process may fire before the current sleep ends).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::schedule::tick::schedule_tick;

pub(super) async fn schedule_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let poll = sh.core.config().worker.poll_interval;
    loop {
        let delay = match schedule_tick(&sh.core).await {
            Ok((r, _)) if r.more => Duration::ZERO,
            Ok((_, Some(next))) => (next - sh.core.now())
                .to_std()
                .unwrap_or(Duration::ZERO)
                .min(poll),
            Ok((_, None)) => poll,
            Err(e) => {
                sh.store_failed("looking for due schedules", e);
                poll
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(delay.max(Duration::from_millis(1))) => {}
            _ = sh.schedules_changed.notified() => {}
            _ = stop.cancelled() => return,
        }
    }
}
