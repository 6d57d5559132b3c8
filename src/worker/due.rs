//! How long the claim loop sleeps: until the next delayed run of its tools is due, or the
//! poll, whichever comes first. A pure function of now, so it is tested without waiting.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The sleep from `now` until `next_due` (zero if it has passed), at most `poll`.
pub(super) fn nap(now: DateTime<Utc>, poll: Duration, next_due: Option<DateTime<Utc>>) -> Duration {
    match next_due {
        // A negative span (the run became due meanwhile) is no sleep at all.
        Some(at) => (at - now).to_std().unwrap_or(Duration::ZERO).min(poll),
        None => poll,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).expect("in range")
    }

    const POLL: Duration = Duration::from_millis(500);

    #[test]
    fn nothing_delayed_sleeps_a_poll() {
        assert_eq!(nap(at(0), POLL, None), POLL);
    }

    #[test]
    fn a_run_due_before_the_poll_ends_the_sleep_at_its_time() {
        assert_eq!(nap(at(0), POLL, Some(at(100))), Duration::from_millis(100));
        assert_eq!(nap(at(37), POLL, Some(at(57))), Duration::from_millis(20));
    }

    #[test]
    fn a_run_due_after_the_poll_leaves_the_poll() {
        assert_eq!(nap(at(0), POLL, Some(at(60_000))), POLL);
    }

    #[test]
    fn a_run_already_due_is_no_sleep() {
        assert_eq!(nap(at(100), POLL, Some(at(100))), Duration::ZERO);
        assert_eq!(nap(at(100), POLL, Some(at(40))), Duration::ZERO);
    }
}
