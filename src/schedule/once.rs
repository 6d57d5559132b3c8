//! One-shot schedules: the instant they fire at, given as RFC 3339 text with an offset.

use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};

use super::error::ScheduleError;

/// Parse a one-shot RFC 3339 instant that must carry an explicit offset (`Z` or `+hh:mm`).
/// Rejects a date-time without offset, non-RFC 3339 text, and a time not after `now`.
pub fn parse_one_shot(s: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, ScheduleError> {
    let value = s.trim();
    let t = match DateTime::parse_from_rfc3339(value) {
        Ok(t) => t.to_utc(),
        Err(_) => {
            let naive = [
                "%Y-%m-%dT%H:%M:%S%.f",
                "%Y-%m-%d %H:%M:%S%.f",
                "%Y-%m-%dT%H:%M",
            ]
            .iter()
            .any(|f| NaiveDateTime::parse_from_str(value, f).is_ok());
            let value = value.to_string();
            return Err(if naive {
                ScheduleError::MissingOffset { value }
            } else {
                ScheduleError::InvalidTimestamp { value }
            });
        }
    };
    if t <= now {
        return Err(ScheduleError::InPast {
            value: value.to_string(),
            now: now.to_rfc3339_opts(SecondsFormat::Secs, true),
        });
    }
    // Stored as fixed-width text: a later instant would sort before every due schedule.
    if t > crate::clock::latest() {
        return Err(ScheduleError::TooLate {
            value: value.to_string(),
        });
    }
    Ok(t)
}
