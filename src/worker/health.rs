//! The worker's view of its database's health, as a pure state machine of `now`: storage
//! errors (disk full, I/O errors) move it to failing, the next write that makes progress
//! clears it. Each change is reported once, so a persistent error logs two lines (when it
//! starts and when it clears), not one per retry; a draining worker gives up once writes
//! have failed for `stall_timeout` without progress.

use chrono::{DateTime, Utc};

/// A change worth one log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Writes started failing.
    Failing,
    /// Writes succeed again after failing for this long.
    Cleared(std::time::Duration),
}

/// Whether the database currently takes writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Since when writes fail (None: healthy).
    failing_since: Option<DateTime<Utc>>,
    /// The latest storage error, for the stall message.
    last_error: String,
    /// Failures since the state became failing (drives the backoff).
    failures: u32,
    /// The latest storage error's time, kept after the state clears (see
    /// [`Health::judges_leases`]).
    last_failure: Option<DateTime<Utc>>,
}

impl Health {
    /// A storage error at `now`: [`Change::Failing`] when writes were healthy until now.
    pub fn failed(&mut self, now: DateTime<Utc>, error: &str) -> Option<Change> {
        self.last_error = error.to_string();
        self.last_failure = Some(now);
        self.failures = self.failures.saturating_add(1);
        if self.failing_since.is_some() {
            return None;
        }
        self.failing_since = Some(now);
        Some(Change::Failing)
    }

    /// A write made progress at `now`: [`Change::Cleared`] when writes were failing.
    pub fn progressed(&mut self, now: DateTime<Utc>) -> Option<Change> {
        let since = self.failing_since.take()?;
        self.failures = 0;
        Some(Change::Cleared((now - since).to_std().unwrap_or_default()))
    }

    /// Whether this worker may take runs back because their lease expired, at `now`: only
    /// once a whole `lease` has passed since its own latest storage error. An outage that cut
    /// this worker off cut the others off too (a restarted server, a partition): their leases
    /// ran out for want of a database, not of a live owner, and they need up to a lease to
    /// extend them again once it is back.
    pub fn judges_leases(&self, now: DateTime<Utc>, lease: std::time::Duration) -> bool {
        self.last_failure
            .is_none_or(|at| (now - at).to_std().is_ok_and(|since| since >= lease))
    }

    /// Whether writes are failing.
    pub fn is_failing(&self) -> bool {
        self.failing_since.is_some()
    }

    /// How long to wait before trying again: `base` doubled per failure, at most `max`
    /// (`base` itself while healthy).
    pub fn backoff(
        &self,
        base: std::time::Duration,
        max: std::time::Duration,
    ) -> std::time::Duration {
        let factor = 2u32.saturating_pow(self.failures.saturating_sub(1).min(16));
        base.saturating_mul(factor).min(max.max(base))
    }

    /// Writes have failed without progress for at least `timeout` by `now`: the last error
    /// and how long, for the message of a worker that gives up.
    pub fn stalled(
        &self,
        now: DateTime<Utc>,
        timeout: std::time::Duration,
    ) -> Option<(std::time::Duration, &str)> {
        let since = self.failing_since?;
        let failed_for = (now - since).to_std().unwrap_or_default();
        (failed_for >= timeout).then_some((failed_for, self.last_error.as_str()))
    }
}

/// How long the claim loop waits after `failures` failed turns in a row: the poll interval
/// while healthy; then a doubling retry whose base is the poll interval but at most a second,
/// so a worker with a long poll (it waits for the change feed) still retries a lost
/// connection within seconds rather than at its next poll. It doubles at most twice (4 s with
/// the one-second base), like the change feed's reconnection (5 s at most): the wake-up that
/// says the database is back is one event, and a claim that still fails on it (a connection
/// the pool had not yet seen closed) must not leave the queue waiting half a minute.
pub fn claim_backoff(poll_interval: std::time::Duration, failures: u32) -> std::time::Duration {
    if failures == 0 {
        return poll_interval;
    }
    let base = poll_interval.min(std::time::Duration::from_secs(1));
    base.saturating_mul(2u32.saturating_pow(failures.min(2)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use std::time::Duration;

    fn clock() -> ManualClock {
        ManualClock::new(
            DateTime::parse_from_rfc3339("2026-11-01T12:00:00Z")
                .expect("literal instant")
                .with_timezone(&Utc),
        )
    }

    #[test]
    fn a_persistent_error_changes_state_once_and_clears_once() {
        let clock = clock();
        let mut h = Health::default();
        assert_eq!(h.progressed(clock.now()), None, "healthy stays quiet");
        assert_eq!(h.failed(clock.now(), "disk full"), Some(Change::Failing));
        for _ in 0..50 {
            clock.advance(chrono::Duration::milliseconds(500));
            assert_eq!(h.failed(clock.now(), "disk full"), None);
        }
        assert!(h.is_failing());
        clock.advance(chrono::Duration::seconds(5));
        assert_eq!(
            h.progressed(clock.now()),
            Some(Change::Cleared(Duration::from_secs(30)))
        );
        assert_eq!(h.progressed(clock.now()), None);
        assert!(!h.is_failing());
        assert_eq!(
            h.failed(clock.now(), "io"),
            Some(Change::Failing),
            "a new episode"
        );
    }

    #[test]
    fn backoff_doubles_while_failing_up_to_the_cap_and_resets_on_progress() {
        let clock = clock();
        let (base, max) = (Duration::from_millis(500), Duration::from_secs(30));
        let mut h = Health::default();
        assert_eq!(h.backoff(base, max), base);
        let waits: Vec<_> = (0..8)
            .map(|_| {
                h.failed(clock.now(), "full");
                h.backoff(base, max)
            })
            .collect();
        assert_eq!(waits[0], base);
        assert_eq!(waits[1], base * 2);
        assert_eq!(waits[3], base * 8);
        assert_eq!(waits[7], max);
        h.progressed(clock.now());
        assert_eq!(h.backoff(base, max), base);
    }

    #[test]
    fn stalled_only_after_the_timeout_without_progress() {
        let clock = clock();
        let timeout = Duration::from_secs(60);
        let mut h = Health::default();
        assert_eq!(h.stalled(clock.now(), timeout), None);
        h.failed(clock.now(), "first");
        clock.advance(chrono::Duration::seconds(59));
        h.failed(clock.now(), "database or disk is full");
        assert_eq!(h.stalled(clock.now(), timeout), None);
        clock.advance(chrono::Duration::seconds(1));
        assert_eq!(
            h.stalled(clock.now(), timeout),
            Some((timeout, "database or disk is full"))
        );
        h.progressed(clock.now());
        clock.advance(chrono::Duration::seconds(600));
        assert_eq!(h.stalled(clock.now(), timeout), None);
    }

    #[test]
    fn leases_are_judged_again_only_a_lease_after_the_last_storage_error() {
        let clock = clock();
        let lease = Duration::from_secs(10);
        let mut h = Health::default();
        assert!(
            h.judges_leases(clock.now(), lease),
            "a fresh worker judges leases"
        );
        h.failed(clock.now(), "connection refused");
        clock.advance(chrono::Duration::seconds(20));
        h.failed(clock.now(), "connection refused");
        assert!(!h.judges_leases(clock.now(), lease), "not during an outage");
        h.progressed(clock.now());
        clock.advance(chrono::Duration::seconds(9));
        assert!(
            !h.judges_leases(clock.now(), lease),
            "not within a lease of it"
        );
        clock.advance(chrono::Duration::seconds(1));
        assert!(h.judges_leases(clock.now(), lease));
    }

    #[test]
    fn claim_backoff_retries_within_seconds_even_with_an_hour_long_poll() {
        let hour = Duration::from_secs(3600);
        assert_eq!(claim_backoff(hour, 0), hour);
        assert_eq!(claim_backoff(hour, 1), Duration::from_secs(2));
        assert_eq!(claim_backoff(hour, 2), Duration::from_secs(4));
        assert_eq!(claim_backoff(hour, 9), Duration::from_secs(4));
        let fast = Duration::from_millis(50);
        assert_eq!(claim_backoff(fast, 0), fast);
        assert_eq!(claim_backoff(fast, 2), Duration::from_millis(200));
    }
}
