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

/// Parses a human duration such as `500ms`, `30s`, `10m`, `1h 30m`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("is not a duration like 500ms, 30s, 10m or 2h ({e})"))
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
}
