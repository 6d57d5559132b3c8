//! The only place that reads wall-clock time; everything else takes `now` as a parameter.

use chrono::{DateTime, Duration, NaiveDateTime, Utc};
use std::sync::{Arc, Mutex};

/// A source of the current UTC time. Inject [`ManualClock`] in tests to make time exact.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to: `set` and `advance`. Clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Jump to `t` (backwards too).
    pub fn set(&self, t: DateTime<Utc>) {
        *self.lock() = t;
    }

    /// Move forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut now = self.lock();
        *now += d;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DateTime<Utc>> {
        // A poisoned lock only means a test panicked while holding it; the time is still valid.
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.lock()
    }
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// Instants as stored and shown: fixed-width UTC text.
pub(crate) const TS_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.3fZ";

/// Formats an instant as fixed-width UTC text: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn ts(t: DateTime<Utc>) -> String {
    // Same text as TS_FORMAT, without interpreting a format string on every call (hot path).
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Parses text written by [`ts`] (or any RFC 3339 instant).
pub fn parse_ts(s: &str) -> Option<DateTime<Utc>> {
    // The RFC 3339 parser is hand-written and fast; what ts() writes is RFC 3339.
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
        .or_else(|| {
            NaiveDateTime::parse_from_str(s, TS_FORMAT)
                .map(|n| n.and_utc())
                .ok()
        })
}

/// The longest duration any input may give (100 years): longer ones are refused where they
/// are read, so that no instant computed from one can leave the range that [`ts`] writes.
// 100 of humantime's years (365.25 days each), so "100y" itself is accepted.
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(3_155_760_000);

/// Parses a human duration such as `500ms`, `30s`, `10m`, `1h 30m`, of at most
/// [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("is not a duration like 500ms, 30s, 10m or 2h ({e})"))?;
    if d > MAX_DURATION {
        return Err("is longer than 100 years".into());
    }
    Ok(d)
}

/// The first instant [`ts`] writes as fixed-width text (0001-01-01T00:00:00.000Z).
pub fn earliest() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(-62_135_596_800_000).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The last instant [`ts`] writes as fixed-width text (9999-12-31T23:59:59.999Z). Later
/// instants would be written with a sign and a fifth year digit, and would sort before every
/// other stored time.
pub fn latest() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(253_402_300_799_999).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `t + d`, but no later than [`latest`]: for deadlines and leases that configuration or a
/// tool may set arbitrarily far away, where "later than the year 9999" means "never".
pub fn saturating_add(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t.checked_add_signed(d)
        .map_or(latest(), |t| t.min(latest()))
}

/// `t - d`, but no earlier than [`earliest`].
pub fn saturating_sub(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t.checked_sub_signed(d)
        .map_or(earliest(), |t| t.max(earliest()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let t0 = DateTime::parse_from_rfc3339("2026-03-08T07:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let c = ManualClock::new(t0);
        assert_eq!(c.now(), t0);
        let c2 = c.clone();
        c2.advance(Duration::seconds(90));
        assert_eq!(c.now(), t0 + Duration::seconds(90));
        c.set(t0);
        assert_eq!(c2.now(), t0);
    }

    #[test]
    fn the_storable_range_is_what_ts_writes_with_four_year_digits() {
        assert_eq!(ts(earliest()), "0001-01-01T00:00:00.000Z");
        assert_eq!(ts(latest()), "9999-12-31T23:59:59.999Z");
        assert_eq!(parse_ts(&ts(earliest())), Some(earliest()));
        assert_eq!(parse_ts(&ts(latest())), Some(latest()));
        let t0 = DateTime::parse_from_rfc3339("2026-03-08T07:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            saturating_add(t0, Duration::seconds(5)),
            t0 + Duration::seconds(5)
        );
        assert_eq!(saturating_add(t0, Duration::days(10_000_000)), latest());
        assert_eq!(saturating_add(t0, Duration::MAX), latest());
    }

    #[test]
    fn durations_longer_than_a_century_are_refused() {
        assert_eq!(parse_duration("100y").map(|d| d.as_secs() > 0), Ok(true));
        let e = parse_duration("101y").unwrap_err();
        assert_eq!(e, "is longer than 100 years");
        assert!(parse_duration("99999999999d").is_err());
    }
}
