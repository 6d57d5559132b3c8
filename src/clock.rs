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

/// The longest duration any input may give (36525 days, 100 years): longer ones are refused
/// where they are read, so that no instant computed from one can leave the range that [`ts`]
/// writes.
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(36_525 * 86_400);

/// The units humantime reads that have no fixed length, with how a message names them:
/// `M` (months) is one shift key away from `m` (minutes).
const CALENDAR_UNITS: &[(&str, &str)] = &[
    ("months", "months"),
    ("month", "months"),
    ("M", "months"),
    ("years", "years"),
    ("year", "years"),
    ("yrs", "years"),
    ("yr", "years"),
    ("y", "years"),
];

/// Parses a human duration such as `500ms`, `30s`, `10m`, `1h 30m`, `2d`, of at most
/// [`MAX_DURATION`]. Months and years (`M`, `y`) are refused: they have no fixed length, and
/// `10M` is a typo for `10m` far more often than a wish for ten months. The error says why,
/// without the field: callers name the flag, key or field.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if let Some((unit, what)) = calendar_unit(s) {
        return Err(format!(
            "uses {unit:?} ({what}), which has no fixed length: write minutes as m (e.g. 10m), \
             and longer spans in d, h, m or s (e.g. 30d)"
        ));
    }
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("is not a duration like 500ms, 30s, 10m, 2h or 7d ({e})"))?;
    if d > MAX_DURATION {
        return Err("is longer than 36525 days (100 years)".into());
    }
    Ok(d)
}

/// The first calendar unit written in `s`, read as humantime reads units: a run of letters.
fn calendar_unit(s: &str) -> Option<(&str, &'static str)> {
    s.split(|c: char| !(c.is_ascii_alphabetic() || c == '\u{b5}'))
        .find_map(|word| {
            CALENDAR_UNITS
                .iter()
                .find(|(unit, _)| *unit == word)
                .map(|(_, what)| (word, *what))
        })
}

/// A duration as toolq writes it everywhere people read one: days, hours, minutes, seconds
/// and below, largest first, zero parts left out (`1h 29m`, `2d 3h`, `1s 500ms`, `0s`). Never
/// months or years, so it reads back through [`parse_duration`] as the same duration.
pub fn format_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    let parts = [
        (secs / 86_400, "d"),
        (secs / 3600 % 24, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
        (u64::from(nanos / 1_000_000), "ms"),
        (u64::from(nanos / 1000 % 1000), "us"),
        (u64::from(nanos % 1000), "ns"),
    ];
    let text: Vec<String> = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if text.is_empty() {
        "0s".into()
    } else {
        text.join(" ")
    }
}

/// How long something took (or has taken so far), for people: as [`format_duration`], but
/// rounded to what matters at its size: `350ms`, `4.2s`, `2m 5s`, `1h 3m`, `2d 4h 10m`
/// (milliseconds below a second, tenths below ten seconds, whole seconds below an hour, whole
/// minutes from an hour up).
pub fn format_elapsed(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms < 10_000 {
        return format!("{:.1}s", ms as f64 / 1000.0);
    }
    let secs = d.as_secs();
    let rounded = if secs >= 3600 { secs - secs % 60 } else { secs };
    format_duration(std::time::Duration::from_secs(rounded))
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
        assert_eq!(parse_duration("36525d").map(|d| d.as_secs() > 0), Ok(true));
        let e = parse_duration("36526d").unwrap_err();
        assert_eq!(e, "is longer than 36525 days (100 years)");
        assert!(parse_duration("99999999999d").is_err());
    }

    #[test]
    fn months_and_years_are_refused_with_a_hint_for_minutes() {
        for (text, unit) in [
            ("10M", "\"M\" (months)"),
            ("1month", "\"month\" (months)"),
            ("2 months", "\"months\" (months)"),
            ("1h 10M", "\"M\" (months)"),
            ("1y", "\"y\" (years)"),
            ("3years", "\"years\" (years)"),
            ("2yr 5d", "\"yr\" (years)"),
        ] {
            let e = parse_duration(text).unwrap_err();
            assert!(e.starts_with(&format!("uses {unit}")), "{text}: {e}");
            assert!(e.contains("write minutes as m"), "{text}: {e}");
        }
        // Fixed units still read, weeks included.
        assert_eq!(
            parse_duration("10m"),
            Ok(std::time::Duration::from_secs(600))
        );
        assert_eq!(
            parse_duration("2w"),
            Ok(std::time::Duration::from_secs(14 * 86_400))
        );
        assert_eq!(
            parse_duration(" 1h 30m "),
            Ok(std::time::Duration::from_secs(5400))
        );
        assert!(parse_duration("5 minutes").is_ok());
    }

    #[test]
    fn durations_are_written_in_one_style_that_reads_back() {
        use std::time::Duration as D;
        for (d, text) in [
            (D::ZERO, "0s"),
            (D::from_nanos(1), "1ns"),
            (D::from_millis(1500), "1s 500ms"),
            (D::from_secs(5340), "1h 29m"),
            (D::from_secs(2_630_016), "30d 10h 33m 36s"),
            (D::from_secs(86_400 * 7 + 3600), "7d 1h"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d), "{text}");
        }
        assert_eq!(format_elapsed(D::from_millis(350)), "350ms");
        assert_eq!(format_elapsed(D::from_millis(4200)), "4.2s");
        assert_eq!(format_elapsed(D::from_secs(125)), "2m 5s");
        assert_eq!(format_elapsed(D::from_secs(3600 + 185)), "1h 3m");
        assert_eq!(format_elapsed(D::from_secs(26_300_160 + 37)), "304d 9h 36m");
    }
}
