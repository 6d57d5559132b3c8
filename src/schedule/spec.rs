//! What a schedule fires on ([`ScheduleSpec`]: a cron expression in a zone, or one instant),
//! its policies for missed ticks and overlap, and the validation of user input into them.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::cron::{CronSchedule, parse_timezone};
use super::error::ScheduleError;
use super::once::parse_one_shot;
use crate::error::{Error, InputError};

/// The seed's message when both a cron expression and a one-shot time are given.
pub const BOTH_MESSAGE: &str =
    "schedule must not include both cron_expression and scheduled_at; provide exactly one";
/// The seed's message when neither a cron expression nor a one-shot time is given.
pub const NEITHER_MESSAGE: &str =
    "schedule must include exactly one of cron_expression (recurring) or scheduled_at (one-shot)";

/// A seed message as an input error on the field `schedule` (displayed as `schedule: ...`).
fn reason(message: &str) -> InputError {
    InputError::about(
        "schedule",
        message.strip_prefix("schedule ").unwrap_or(message),
    )
}

/// When a schedule fires.
#[derive(Debug, Clone)]
pub enum ScheduleSpec {
    /// Recurring: a 5-field cron expression (or @macro) evaluated in an IANA zone.
    Cron(CronSchedule),
    /// One-shot: fires once at this instant, then the schedule is disabled.
    Once(DateTime<Utc>),
}

impl ScheduleSpec {
    /// Validates user input: exactly one of `cron` and `at` (blank counts as absent), a known
    /// zone (default UTC; only meaningful with `cron`), a cron that fires within 5 years, a
    /// one-shot with an explicit offset that lies after `now`.
    pub fn parse(
        cron: Option<&str>,
        at: Option<&str>,
        timezone: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<ScheduleSpec, Error> {
        let cron = cron.map(str::trim).filter(|s| !s.is_empty());
        let at = at.map(str::trim).filter(|s| !s.is_empty());
        let tz = timezone.map(str::trim).filter(|s| !s.is_empty());
        match (cron, at) {
            (Some(_), Some(_)) => Err(reason(BOTH_MESSAGE).into()),
            (None, None) => Err(reason(NEITHER_MESSAGE).into()),
            (Some(expr), None) => Ok(ScheduleSpec::Cron(CronSchedule::parse(
                expr,
                tz.unwrap_or("UTC"),
                now,
            )?)),
            (None, Some(at)) => {
                if let Some(tz) = tz {
                    parse_timezone(tz)?;
                }
                Ok(ScheduleSpec::Once(parse_one_shot(at, now)?))
            }
        }
    }

    /// Rebuilds a stored schedule's spec. Unlike [`ScheduleSpec::parse`], a one-shot in the past
    /// is accepted (it is due); a cron that no longer fires within 5 years of `now` is an error.
    pub fn from_stored(
        cron: Option<&str>,
        at: Option<DateTime<Utc>>,
        timezone: &str,
        now: DateTime<Utc>,
    ) -> Result<ScheduleSpec, ScheduleError> {
        match (cron, at) {
            (Some(expr), _) => Ok(ScheduleSpec::Cron(CronSchedule::parse(
                expr, timezone, now,
            )?)),
            (None, Some(at)) => Ok(ScheduleSpec::Once(at)),
            (None, None) => Err(ScheduleError::InvalidTimestamp {
                value: String::new(),
            }),
        }
    }

    /// The first fire instant strictly after `after`, if any.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            ScheduleSpec::Cron(c) => c.next_after(after),
            ScheduleSpec::Once(at) => (*at > after).then_some(*at),
        }
    }

    /// The next `n` fire instants strictly after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(self.next_after(after), |&t| self.next_after(t))
            .take(n)
            .collect()
    }

    /// `"recurring"` or `"oneshot"` (the seed's schedule types).
    pub fn kind(&self) -> &'static str {
        match self {
            ScheduleSpec::Cron(_) => "recurring",
            ScheduleSpec::Once(_) => "oneshot",
        }
    }

    /// The cron expression (recurring only).
    pub fn cron_expression(&self) -> Option<&str> {
        match self {
            ScheduleSpec::Cron(c) => Some(c.expression()),
            ScheduleSpec::Once(_) => None,
        }
    }

    /// The zone name; one-shots are stored with "UTC" unless one was given.
    pub fn timezone_name(&self) -> Option<String> {
        match self {
            ScheduleSpec::Cron(c) => Some(c.timezone().name().to_string()),
            ScheduleSpec::Once(_) => None,
        }
    }

    /// The one-shot instant.
    pub fn scheduled_at(&self) -> Option<DateTime<Utc>> {
        match self {
            ScheduleSpec::Cron(_) => None,
            ScheduleSpec::Once(at) => Some(*at),
        }
    }
}

/// What happens to ticks that passed while no worker fired them (downtime).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MissedPolicy {
    /// Missed ticks never run; they are recorded as missed.
    Skip,
    /// One catch-up run stands for all missed ticks, if the latest lies within the window.
    #[default]
    Once,
    /// Every missed tick within the window gets its own run.
    All,
}

/// Whether a tick may start a run while the schedule's previous run is still active.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OverlapPolicy {
    /// Record the tick as skipped (the default).
    #[default]
    Skip,
    /// Start another run anyway.
    Allow,
}

macro_rules! policy_strings {
    ($ty:ident, $field:literal, $choices:literal, $($variant:ident => $s:literal),+) => {
        impl $ty {
            /// The policy's name as stored.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $s),+ }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = InputError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s.trim() {
                    $($s => Ok($ty::$variant),)+
                    _ => Err(InputError::new($field, s, concat!("must be one of ", $choices))),
                }
            }
        }
    };
}

policy_strings!(MissedPolicy, "missed", "skip, once, all", Skip => "skip", Once => "once", All => "all");
policy_strings!(OverlapPolicy, "overlap", "skip, allow", Skip => "skip", Allow => "allow");

/// Checks a catch-up window: at least zero, at most 366 days.
pub fn validate_window(window: Duration) -> Result<Duration, InputError> {
    if window < Duration::zero() || window > Duration::days(366) {
        return Err(InputError::new(
            "catchup_window",
            match window.to_std() {
                Ok(w) => crate::clock::format_duration(w),
                Err(_) => format!(
                    "-{}",
                    crate::clock::format_duration(window.abs().to_std().unwrap_or_default())
                ),
            },
            "must be between 0 and 366 days",
        ));
    }
    Ok(window)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-01T12:00:00Z")
            .unwrap()
            .to_utc()
    }

    fn err(cron: Option<&str>, at: Option<&str>, tz: Option<&str>) -> String {
        ScheduleSpec::parse(cron, at, tz, now())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn exactly_one_of_cron_and_at() {
        let both = err(Some("* * * * *"), Some("2027-01-01T00:00:00Z"), None);
        assert_eq!(both, BOTH_MESSAGE.replacen("schedule", "schedule:", 1));
        let neither = err(None, None, None);
        assert_eq!(
            neither,
            NEITHER_MESSAGE.replacen("schedule", "schedule:", 1)
        );
        assert_eq!(err(Some("  "), Some(""), None), neither);
    }

    #[test]
    fn bad_values_are_named() {
        assert_eq!(
            err(Some("61 * * * *"), None, None),
            "cron \"61 * * * *\": minute 61 is outside 0-59"
        );
        assert!(err(Some("0 9 * * *"), None, Some("Mars/Base")).contains("\"Mars/Base\""));
        assert!(err(None, Some("2026-11-01T10:00:00Z"), None).contains("in the past"));
        assert!(err(None, Some("2026-12-01T10:00:00"), None).contains("no UTC offset"));
        assert!(err(Some("0 0 30 2 *"), None, None).contains("never fires"));
    }

    #[test]
    fn specs_know_their_kind_and_next_fire() {
        let s =
            ScheduleSpec::parse(Some("0 9 * * *"), None, Some("America/Chicago"), now()).unwrap();
        assert_eq!(s.kind(), "recurring");
        assert_eq!(s.timezone_name().as_deref(), Some("America/Chicago"));
        assert_eq!(
            s.next_after(now()).unwrap().to_rfc3339(),
            "2026-11-01T15:00:00+00:00"
        );
        let o = ScheduleSpec::parse(None, Some("2026-11-01T14:00:00+01:00"), None, now()).unwrap();
        assert_eq!(o.kind(), "oneshot");
        assert_eq!(o.upcoming(now(), 5).len(), 1);
        assert_eq!(o.next_after(o.scheduled_at().unwrap()), None);
    }

    #[test]
    fn policies_parse_and_name_bad_values() {
        assert_eq!("all".parse::<MissedPolicy>().unwrap(), MissedPolicy::All);
        assert_eq!(
            "allow".parse::<OverlapPolicy>().unwrap(),
            OverlapPolicy::Allow
        );
        let e = "sometimes".parse::<MissedPolicy>().unwrap_err().to_string();
        assert!(
            e.contains("sometimes") && e.contains("skip, once, all"),
            "{e}"
        );
    }
}
