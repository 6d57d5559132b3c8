//! Recurring cron schedules evaluated in an IANA time zone, with an explicit DST contract.
//!
//! Expressions use the standard 5-field (Vixie) syntax `minute hour day-of-month month
//! day-of-week`, or one of the `@yearly`/`@annually`/`@monthly`/`@weekly`/`@daily`/
//! `@midnight`/`@hourly` macros. Fire times are computed on the zone's wall clock:
//!
//! - A *wildcard* schedule, whose minute or hour field starts with `*` (`*`, `*/3`), fires at
//!   every real instant whose wall time matches: wall times inside a spring-forward gap are
//!   skipped, and repeated wall times (fall-back overlap) fire in both copies.
//! - Any other schedule is a *fixed-time* one (numbers, lists, ranges and ranges with a step
//!   such as `0-23/3`): each matching wall time fires once per local day, a wall time inside a
//!   gap at the first valid instant after the gap, a repeated wall time at its first copy only.
//!
//! This is the rule of Vixie cron and cronie, which set `MIN_STAR`/`HR_STAR` from the first
//! character of the minute and hour fields and treat a job as wildcard if either is set; it is
//! about the text, so `0-59 * * * *` is wildcard (hour `*`) but `0-59 1 * * *` is fixed.
//!
//! Fire instants are strictly increasing in UTC; two wall times mapping to one instant fire once.

use super::zone::Zone;
use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, Timelike, Utc};

// Both were defined here; kept at these paths for the library's users.
pub use super::error::ScheduleError;
pub use super::once::parse_one_shot;

/// How far ahead (in days) a schedule is searched for its next fire: about five years.
const HORIZON_DAYS: i64 = 5 * 366;

/// Static description of one cron field.
struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    /// Names accepted for values `min..`, in order (empty if the field takes numbers only).
    names: &'static [&'static str],
    expected: &'static str,
}

impl FieldSpec {
    const fn new(
        name: &'static str,
        min: u32,
        max: u32,
        names: &'static [&'static str],
        expected: &'static str,
    ) -> Self {
        Self {
            name,
            min,
            max,
            names,
            expected,
        }
    }
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const FIELDS: [FieldSpec; 5] = [
    FieldSpec::new("minute", 0, 59, &[], "a number 0-59"),
    FieldSpec::new("hour", 0, 23, &[], "a number 0-23"),
    FieldSpec::new("day-of-month", 1, 31, &[], "a number 1-31"),
    FieldSpec::new("month", 1, 12, &MONTHS, "a number 1-12 or a name JAN-DEC"),
    FieldSpec::new("day-of-week", 0, 7, &DAYS, "a number 0-7 or a name SUN-SAT"),
];

/// A parsed, validated recurring schedule: a 5-field cron expression in an IANA zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: String,
    tz: Zone,
    /// Bit sets of matching values, bit `v` set when value `v` matches.
    minutes: u64,
    hours: u64,
    doms: u64,
    months: u64,
    /// Day-of-week bits, 0 = Sunday (7 is folded into 0).
    dows: u64,
    /// Vixie rule: a day field starting with `*` is unrestricted for the day-of-month/
    /// day-of-week OR rule.
    dom_star: bool,
    dow_star: bool,
    /// Neither the minute nor the hour field starts with `*` (cronie's `MIN_STAR`/`HR_STAR`):
    /// gap/overlap wall times fire exactly once.
    fixed_time: bool,
}

impl CronSchedule {
    /// Parse `expr` (5-field or @macro) for zone `tz` (IANA name, e.g. "America/Chicago"; "UTC" ok).
    /// Rejects expressions that never fire within 5 years of `now` (must answer fast, < 50 ms).
    pub fn parse(expr: &str, tz: &str, now: DateTime<Utc>) -> Result<CronSchedule, ScheduleError> {
        let trimmed = expr.trim();
        let tz = parse_timezone(tz)?;
        let fields: Vec<&str> = expand_macro(trimmed)?.split_whitespace().collect();
        if fields.len() != FIELDS.len() {
            return Err(ScheduleError::FieldCount {
                expr: trimmed.to_string(),
                got: fields.len(),
            });
        }
        let mut bits = [0u64; 5];
        for ((slot, spec), text) in bits.iter_mut().zip(&FIELDS).zip(&fields) {
            *slot = parse_field(trimmed, spec, text)?;
        }
        // Day-of-week 7 is Sunday, same as 0.
        if bits[4] & (1 << 7) != 0 {
            bits[4] = (bits[4] & !(1 << 7)) | 1;
        }
        let schedule = CronSchedule {
            expr: trimmed.to_string(),
            tz,
            minutes: bits[0],
            hours: bits[1],
            doms: bits[2],
            months: bits[3],
            dows: bits[4],
            dom_star: fields[2].starts_with('*'),
            dow_star: fields[4].starts_with('*'),
            fixed_time: !fields[0].starts_with('*') && !fields[1].starts_with('*'),
        };
        if schedule.next_after(now).is_none() {
            return Err(ScheduleError::NeverFires {
                expr: schedule.expr,
            });
        }
        Ok(schedule)
    }

    /// The first fire instant strictly after `after`, or None if none within ~5 years.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // A wall time W can only map to an instant t > after if W > after + offset(t), so start
        // at the smallest offset in force around `after` (a fall-back may lie just ahead).
        let soon = after.checked_add_signed(Duration::hours(3))?;
        let back = self.offset_secs(after).min(self.offset_secs(soon));
        let mut wall = after
            .naive_utc()
            .checked_add_signed(Duration::seconds(back))?;
        let mut limit = wall.checked_add_signed(Duration::days(HORIZON_DAYS))?;
        let mut best: Option<DateTime<Utc>> = None;
        while let Some(w) = self.next_wall(wall, limit) {
            for t in self.instants(w).into_iter().flatten() {
                if t > after && best.is_none_or(|b| t < b) {
                    best = Some(t);
                    // Later wall times can only map before `t` through a fall-back just before
                    // it, so scanning up to `t` plus the larger nearby offset is enough.
                    let earlier = t.checked_sub_signed(Duration::hours(3)).unwrap_or(t);
                    let ahead = self.offset_secs(t).max(self.offset_secs(earlier));
                    if let Some(stop) = t.naive_utc().checked_add_signed(Duration::seconds(ahead)) {
                        limit = limit.min(stop);
                    }
                }
            }
            wall = w.checked_add_signed(Duration::minutes(1))?;
        }
        best
    }

    /// The expression as given (trimmed).
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// The zone.
    pub fn timezone(&self) -> &Zone {
        &self.tz
    }

    /// The next `n` fire instants strictly after `after`, in increasing order (fewer if the
    /// schedule stops firing within the search horizon).
    pub fn upcoming(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(self.next_after(after), |&t| self.next_after(t))
            .take(n)
            .collect()
    }

    /// The nominal period: the gap between the next two fires after `after` (used as the
    /// default catch-up window). None if fewer than two fires exist.
    pub fn period(&self, after: DateTime<Utc>) -> Option<Duration> {
        match self.upcoming(after, 2).as_slice() {
            [a, b] => Some(*b - *a),
            _ => None,
        }
    }

    /// UTC offset in seconds in force at instant `t`.
    fn offset_secs(&self, t: DateTime<Utc>) -> i64 {
        i64::from(self.tz.offset(t).local_minus_utc())
    }

    /// Whether `date` matches the day-of-month, month and day-of-week fields (Vixie OR rule).
    fn day_matches(&self, date: NaiveDate) -> bool {
        let dom = has(self.doms, date.day());
        let dow = has(self.dows, date.weekday().num_days_from_sunday());
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first matching wall time at or after `from` (floored to the minute), if not past
    /// `limit`. Skips whole months, days and hours that cannot match.
    fn next_wall(&self, from: NaiveDateTime, limit: NaiveDateTime) -> Option<NaiveDateTime> {
        let mut date = from.date();
        let (mut hour, mut minute) = (from.hour(), from.minute());
        while date <= limit.date() {
            if !has(self.months, date.month()) {
                let (y, m) = (date.year(), date.month());
                date = NaiveDate::from_ymd_opt(y + i32::from(m == 12), m % 12 + 1, 1)?;
                (hour, minute) = (0, 0);
                continue;
            }
            if self.day_matches(date) {
                while let Some(h) = next_bit(self.hours, hour) {
                    let from_minute = if h == hour { minute } else { 0 };
                    if let Some(m) = next_bit(self.minutes, from_minute) {
                        let wall = date.and_hms_opt(h, m, 0)?;
                        return (wall <= limit).then_some(wall);
                    }
                    (hour, minute) = (h + 1, 0);
                }
            }
            date = date.succ_opt()?;
            (hour, minute) = (0, 0);
        }
        None
    }

    /// The fire instants for matching wall time `wall`, per the DST contract.
    fn instants(&self, wall: NaiveDateTime) -> [Option<DateTime<Utc>>; 2] {
        match self.tz.instants(wall) {
            LocalResult::Single(t) => [Some(t), None],
            LocalResult::Ambiguous(a, b) => {
                [Some(a.min(b)), (!self.fixed_time).then_some(a.max(b))]
            }
            LocalResult::None if self.fixed_time => [self.gap_end(wall), None],
            LocalResult::None => [None, None],
        }
    }

    /// For a wall time inside a spring-forward gap: the transition instant, i.e. the first
    /// instant whose wall time is later than `wall`.
    fn gap_end(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        // Offsets lie within -12h..+14h, so 15 hours either side brackets the transition.
        let base = wall.and_utc().timestamp();
        let (mut lo, mut hi) = (base - 15 * 3600, base + 15 * 3600);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let t = DateTime::from_timestamp(mid, 0)?;
            if self.tz.local(t).naive_local() > wall {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        DateTime::from_timestamp(hi, 0)
    }
}

/// Whether bit `v` is set.
fn has(bits: u64, v: u32) -> bool {
    v < 64 && (bits >> v) & 1 == 1
}

/// The smallest set bit at or above `from`, if any.
fn next_bit(bits: u64, from: u32) -> Option<u32> {
    let masked = bits & u64::MAX.checked_shl(from)?;
    (masked != 0).then(|| masked.trailing_zeros())
}

/// The five fields a macro stands for (`@daily` is `0 0 * * *`); any other expression as is.
fn expand_macro(trimmed: &str) -> Result<&str, ScheduleError> {
    if !trimmed.starts_with('@') {
        return Ok(trimmed);
    }
    match trimmed.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => Ok("0 0 1 1 *"),
        "@monthly" => Ok("0 0 1 * *"),
        "@weekly" => Ok("0 0 * * 0"),
        "@daily" | "@midnight" => Ok("0 0 * * *"),
        "@hourly" => Ok("0 * * * *"),
        _ => Err(ScheduleError::UnknownMacro {
            expr: trimmed.to_string(),
        }),
    }
}

/// Parse one cron field (a comma-separated list of `*`, `a`, `a-b`, each optionally `/step`)
/// into a bit set.
fn parse_field(expr: &str, spec: &FieldSpec, text: &str) -> Result<u64, ScheduleError> {
    let mut bits = 0u64;
    for item in text.split(',') {
        let (base, step) = split_step(expr, spec, item)?;
        let (lo, hi) = item_range(expr, spec, base, step.is_some())?;
        let step = usize::try_from(step.unwrap_or(1)).unwrap_or(usize::MAX);
        for v in (lo..=hi).step_by(step) {
            bits |= 1 << v;
        }
    }
    Ok(bits)
}

/// A list item's base and its step (`*/15` is `*` and 15): a whole number of at least 1.
fn split_step<'a>(
    expr: &str,
    spec: &FieldSpec,
    item: &'a str,
) -> Result<(&'a str, Option<u32>), ScheduleError> {
    let Some((base, step)) = item.split_once('/') else {
        return Ok((item, None));
    };
    let step = Some(step)
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|&n| n >= 1)
        .ok_or_else(|| ScheduleError::InvalidStep {
            expr: expr.to_string(),
            field: spec.name,
            token: item.to_string(),
        })?;
    Ok((base, Some(step)))
}

/// The values a list item's base spans: `*` the whole field, `a-b` (not starting after it
/// ends), or `a` alone (`a/n` means `a-max/n`, so `stepped` runs it to the field's end).
fn item_range(
    expr: &str,
    spec: &FieldSpec,
    base: &str,
    stepped: bool,
) -> Result<(u32, u32), ScheduleError> {
    if base == "*" {
        return Ok((spec.min, spec.max));
    }
    let Some((a, b)) = base.split_once('-') else {
        let v = field_value(expr, spec, base)?;
        return Ok((v, if stepped { spec.max } else { v }));
    };
    let (lo, hi) = (field_value(expr, spec, a)?, field_value(expr, spec, b)?);
    if lo > hi {
        return Err(ScheduleError::InvalidRange {
            expr: expr.to_string(),
            field: spec.name,
            token: base.to_string(),
        });
    }
    Ok((lo, hi))
}

/// One value of a field: a number, or a name the field accepts (`JAN`, `mon`), in range.
fn field_value(expr: &str, spec: &FieldSpec, token: &str) -> Result<u32, ScheduleError> {
    let v = if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
        token.parse::<u32>().ok()
    } else {
        spec.names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(token))
            .map(|i| spec.min + i as u32)
    };
    match v {
        Some(v) if (spec.min..=spec.max).contains(&v) => Ok(v),
        Some(v) => Err(ScheduleError::OutOfRange {
            expr: expr.to_string(),
            field: spec.name,
            value: v,
            min: spec.min,
            max: spec.max,
        }),
        None => Err(ScheduleError::InvalidValue {
            expr: expr.to_string(),
            field: spec.name,
            token: token.to_string(),
            expected: spec.expected,
        }),
    }
}

/// Parse an IANA zone name; error names the value (`unknown time zone "Mars/Base": ...`).
pub fn parse_timezone(tz: &str) -> Result<Zone, ScheduleError> {
    Zone::parse(tz).ok_or_else(|| ScheduleError::UnknownTimezone(tz.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::SecondsFormat;
    use std::time::Instant;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn now() -> DateTime<Utc> {
        utc("2026-01-01T00:00:00Z")
    }

    fn sched(expr: &str, tz: &str) -> CronSchedule {
        CronSchedule::parse(expr, tz, now()).unwrap()
    }

    fn fires(expr: &str, tz: &str, after: &str, n: usize) -> Vec<String> {
        sched(expr, tz)
            .upcoming(utc(after), n)
            .iter()
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
            .collect()
    }

    fn err(expr: &str) -> String {
        CronSchedule::parse(expr, "UTC", now())
            .unwrap_err()
            .to_string()
    }

    /// Fires of `s` whose local date in its zone is `date`.
    fn fires_on_local_day(s: &CronSchedule, date: &str) -> Vec<DateTime<Utc>> {
        let day: NaiveDate = date.parse().unwrap();
        let start = s
            .timezone()
            .instants(day.pred_opt().unwrap().and_hms_opt(12, 0, 0).unwrap())
            .unwrap();
        s.upcoming(start, 400)
            .into_iter()
            .filter(|t| s.timezone().local(*t).date_naive() == day)
            .collect()
    }

    #[test]
    fn dst_table() {
        // (expr, zone, after, expected fires)
        let table: &[(&str, &str, &str, &[&str])] = &[
            // Chicago spring-forward 2026-03-08 02:00 CST -> 03:00 CDT (08:00Z).
            (
                "30 2 * * *",
                "America/Chicago",
                "2026-03-07T12:00:00Z",
                &["2026-03-08T08:00:00Z", "2026-03-09T07:30:00Z"],
            ),
            (
                "0,30 2 * * *",
                "America/Chicago",
                "2026-03-07T12:00:00Z",
                &[
                    "2026-03-08T08:00:00Z",
                    "2026-03-09T07:00:00Z",
                    "2026-03-09T07:30:00Z",
                ],
            ),
            // A minute field starting with `*` makes the schedule a wildcard one (cronie's
            // MIN_STAR): the gap's wall times are skipped.
            (
                "* 2 * * *",
                "America/Chicago",
                "2026-03-08T07:00:00Z",
                &["2026-03-09T07:00:00Z", "2026-03-09T07:01:00Z"],
            ),
            // A range with a step is a fixed time: 02:00 fires at the end of the gap.
            (
                "0 2-23/3 * * *",
                "America/Chicago",
                "2026-03-08T07:00:00Z",
                &["2026-03-08T08:00:00Z", "2026-03-08T10:00:00Z"],
            ),
            (
                "0 0-23/3 * * *",
                "America/Chicago",
                "2026-03-08T05:00:00Z",
                &[
                    "2026-03-08T06:00:00Z",
                    "2026-03-08T08:00:00Z",
                    "2026-03-08T11:00:00Z",
                ],
            ),
            (
                "0 */3 * * *",
                "America/Chicago",
                "2026-03-08T05:00:00Z",
                &[
                    "2026-03-08T06:00:00Z",
                    "2026-03-08T08:00:00Z",
                    "2026-03-08T11:00:00Z",
                ],
            ),
            // 01:00 CST, then 02:00 (gap) and 03:00 CDT are one instant: it fires once.
            (
                "0 1-3 * * *",
                "America/Chicago",
                "2026-03-08T06:30:00Z",
                &[
                    "2026-03-08T07:00:00Z",
                    "2026-03-08T08:00:00Z",
                    "2026-03-09T06:00:00Z",
                ],
            ),
            (
                "0 1,2 * * *",
                "America/Chicago",
                "2026-03-08T06:30:00Z",
                &[
                    "2026-03-08T07:00:00Z",
                    "2026-03-08T08:00:00Z",
                    "2026-03-09T06:00:00Z",
                ],
            ),
            (
                "0 2,3 * * *",
                "America/Chicago",
                "2026-03-08T07:00:00Z",
                &["2026-03-08T08:00:00Z", "2026-03-09T07:00:00Z"],
            ),
            (
                "0 * * * *",
                "America/Chicago",
                "2026-03-08T06:30:00Z",
                &[
                    "2026-03-08T07:00:00Z",
                    "2026-03-08T08:00:00Z",
                    "2026-03-08T09:00:00Z",
                ],
            ),
            // Chicago fall-back 2026-11-01 02:00 CDT -> 01:00 CST (07:00Z).
            (
                "30 1 * * *",
                "America/Chicago",
                "2026-10-31T12:00:00Z",
                &["2026-11-01T06:30:00Z", "2026-11-02T07:30:00Z"],
            ),
            (
                "30 1 * * *",
                "America/Chicago",
                "2026-11-01T06:45:00Z",
                &["2026-11-02T07:30:00Z"],
            ),
            (
                "0 1-3 * * *",
                "America/Chicago",
                "2026-11-01T05:00:00Z",
                &[
                    "2026-11-01T06:00:00Z",
                    "2026-11-01T08:00:00Z",
                    "2026-11-01T09:00:00Z",
                ],
            ),
            // A range with a step is a fixed time: 01:00 fires in the first copy only.
            (
                "0 1-23/3 * * *",
                "America/Chicago",
                "2026-11-01T05:00:00Z",
                &[
                    "2026-11-01T06:00:00Z",
                    "2026-11-01T10:00:00Z",
                    "2026-11-01T13:00:00Z",
                ],
            ),
            (
                "0 0-23/3 * * *",
                "America/Chicago",
                "2026-11-01T04:00:00Z",
                &[
                    "2026-11-01T05:00:00Z",
                    "2026-11-01T09:00:00Z",
                    "2026-11-01T12:00:00Z",
                ],
            ),
            (
                "0 1,2 * * *",
                "America/Chicago",
                "2026-11-01T05:00:00Z",
                &[
                    "2026-11-01T06:00:00Z",
                    "2026-11-01T08:00:00Z",
                    "2026-11-02T07:00:00Z",
                ],
            ),
            // Minute `*/30` is a wildcard field: both copies of 01:xx fire. `0-59/30` is fixed.
            (
                "*/30 1 * * *",
                "America/Chicago",
                "2026-11-01T05:00:00Z",
                &[
                    "2026-11-01T06:00:00Z",
                    "2026-11-01T06:30:00Z",
                    "2026-11-01T07:00:00Z",
                    "2026-11-01T07:30:00Z",
                    "2026-11-02T07:00:00Z",
                ],
            ),
            (
                "0-59/30 1 * * *",
                "America/Chicago",
                "2026-11-01T05:00:00Z",
                &[
                    "2026-11-01T06:00:00Z",
                    "2026-11-01T06:30:00Z",
                    "2026-11-02T07:00:00Z",
                ],
            ),
            (
                "30 * * * *",
                "America/Chicago",
                "2026-11-01T06:00:00Z",
                &[
                    "2026-11-01T06:30:00Z",
                    "2026-11-01T07:30:00Z",
                    "2026-11-01T08:30:00Z",
                ],
            ),
            (
                "*/15 * * * *",
                "America/Chicago",
                "2026-11-01T06:40:00Z",
                &[
                    "2026-11-01T06:45:00Z",
                    "2026-11-01T07:00:00Z",
                    "2026-11-01T07:15:00Z",
                ],
            ),
            // Berlin spring-forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z).
            (
                "30 2 * * *",
                "Europe/Berlin",
                "2026-03-28T12:00:00Z",
                &["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
            ),
            (
                "*/30 * * * *",
                "Europe/Berlin",
                "2026-03-29T00:00:00Z",
                &["2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z"],
            ),
            (
                "0 2-23/3 * * *",
                "Europe/Berlin",
                "2026-03-28T23:30:00Z",
                &["2026-03-29T01:00:00Z", "2026-03-29T03:00:00Z"],
            ),
            (
                "*/30 2 * * *",
                "Europe/Berlin",
                "2026-03-28T23:30:00Z",
                &["2026-03-30T00:00:00Z", "2026-03-30T00:30:00Z"],
            ),
            (
                "0 1-3 * * *",
                "Europe/Berlin",
                "2026-03-28T23:30:00Z",
                &[
                    "2026-03-29T00:00:00Z",
                    "2026-03-29T01:00:00Z",
                    "2026-03-29T23:00:00Z",
                ],
            ),
            (
                "0 1,2 * * *",
                "Europe/Berlin",
                "2026-03-28T23:30:00Z",
                &[
                    "2026-03-29T00:00:00Z",
                    "2026-03-29T01:00:00Z",
                    "2026-03-29T23:00:00Z",
                ],
            ),
            // Berlin fall-back 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z).
            (
                "0 2-23/3 * * *",
                "Europe/Berlin",
                "2026-10-24T23:30:00Z",
                &["2026-10-25T00:00:00Z", "2026-10-25T04:00:00Z"],
            ),
            (
                "0 0-23/2 * * *",
                "Europe/Berlin",
                "2026-10-24T21:30:00Z",
                &[
                    "2026-10-24T22:00:00Z",
                    "2026-10-25T00:00:00Z",
                    "2026-10-25T03:00:00Z",
                ],
            ),
            (
                "0 */2 * * *",
                "Europe/Berlin",
                "2026-10-24T21:30:00Z",
                &[
                    "2026-10-24T22:00:00Z",
                    "2026-10-25T00:00:00Z",
                    "2026-10-25T01:00:00Z",
                    "2026-10-25T03:00:00Z",
                ],
            ),
            (
                "0 1-3 * * *",
                "Europe/Berlin",
                "2026-10-24T22:30:00Z",
                &[
                    "2026-10-24T23:00:00Z",
                    "2026-10-25T00:00:00Z",
                    "2026-10-25T02:00:00Z",
                    "2026-10-26T00:00:00Z",
                ],
            ),
            (
                "0 1,2 * * *",
                "Europe/Berlin",
                "2026-10-24T22:30:00Z",
                &[
                    "2026-10-24T23:00:00Z",
                    "2026-10-25T00:00:00Z",
                    "2026-10-26T00:00:00Z",
                ],
            ),
            (
                "30 2 * * *",
                "Europe/Berlin",
                "2026-10-24T12:00:00Z",
                &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
            ),
            (
                "*/30 * * * *",
                "Europe/Berlin",
                "2026-10-24T23:30:00Z",
                &[
                    "2026-10-25T00:00:00Z",
                    "2026-10-25T00:30:00Z",
                    "2026-10-25T01:00:00Z",
                    "2026-10-25T01:30:00Z",
                    "2026-10-25T02:00:00Z",
                ],
            ),
            // Lord Howe: 30-minute DST shifts (02:00 -> 02:30 on 2026-10-04, 02:00 -> 01:30 on
            // 2026-04-05); offsets +10:30 / +11:00.
            (
                "15 2 * * *",
                "Australia/Lord_Howe",
                "2026-10-03T00:00:00Z",
                &["2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"],
            ),
            (
                "45 1 * * *",
                "Australia/Lord_Howe",
                "2026-04-04T00:00:00Z",
                &["2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"],
            ),
            // Santiago: spring-forward at midnight (2026-09-06 00:00 -04 -> 01:00 -03, 04:00Z),
            // fall-back from midnight to 23:00 (2026-04-05 00:00 -03 -> 04-04 23:00 -04, 03:00Z).
            (
                "0 0-23/3 * * *",
                "America/Santiago",
                "2026-09-05T23:00:00Z",
                &[
                    "2026-09-06T01:00:00Z",
                    "2026-09-06T04:00:00Z",
                    "2026-09-06T06:00:00Z",
                ],
            ),
            (
                "0 */3 * * *",
                "America/Santiago",
                "2026-09-05T23:00:00Z",
                &[
                    "2026-09-06T01:00:00Z",
                    "2026-09-06T06:00:00Z",
                    "2026-09-06T09:00:00Z",
                ],
            ),
            (
                "30 14-23/3 * * *",
                "America/Santiago",
                "2026-04-04T23:00:00Z",
                &[
                    "2026-04-04T23:30:00Z",
                    "2026-04-05T02:30:00Z",
                    "2026-04-05T18:30:00Z",
                ],
            ),
            (
                "30 */1 * * *",
                "America/Santiago",
                "2026-04-05T01:00:00Z",
                &[
                    "2026-04-05T01:30:00Z",
                    "2026-04-05T02:30:00Z",
                    "2026-04-05T03:30:00Z",
                ],
            ),
        ];
        // Check every row before failing, so one run shows all rows that disagree.
        let wrong: Vec<String> = table
            .iter()
            .filter_map(|(expr, tz, after, want)| {
                let got = fires(expr, tz, after, want.len());
                (got != *want).then(|| format!("{expr} in {tz} after {after}: {got:?}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn fires_per_local_day_across_dst() {
        let cases = [
            ("*/15 * * * *", "America/Chicago", "2026-11-01", 100),
            ("0 * * * *", "America/Chicago", "2026-03-08", 23),
            ("0 * * * *", "America/Chicago", "2026-11-01", 25),
            ("30 2 * * *", "America/Chicago", "2026-03-08", 1),
            ("30 1 * * *", "America/Chicago", "2026-11-01", 1),
            ("*/15 * * * *", "Europe/Berlin", "2026-10-25", 100),
            ("*/15 * * * *", "Europe/Berlin", "2026-03-29", 92),
            ("0,30 2 * * *", "America/Chicago", "2026-03-08", 1),
            ("0,30 2 * * *", "America/Chicago", "2026-03-09", 2),
            ("* 2 * * *", "America/Chicago", "2026-03-08", 0),
            ("0-59 2 * * *", "America/Chicago", "2026-03-08", 1),
            ("* 1 * * *", "America/Chicago", "2026-11-01", 120),
            ("0-59 1 * * *", "America/Chicago", "2026-11-01", 60),
            ("0 0-23/3 * * *", "America/Santiago", "2026-09-06", 8),
            ("0 */3 * * *", "America/Santiago", "2026-09-06", 7),
            ("0 2-23/3 * * *", "Europe/Berlin", "2026-10-25", 8),
            ("0 */2 * * *", "Europe/Berlin", "2026-10-25", 13),
            ("30 14-23/3 * * *", "America/Santiago", "2026-04-04", 4),
        ];
        for (expr, tz, day, n) in cases {
            let got = fires_on_local_day(&sched(expr, tz), day);
            assert_eq!(got.len(), n, "{expr} in {tz} on {day}: {got:?}");
        }
        let s = sched("30 1 * * *", "America/Chicago");
        assert_eq!(
            fires_on_local_day(&s, "2026-11-01"),
            vec![utc("2026-11-01T06:30:00Z")]
        );
        let s = sched("*/30 * * * *", "Europe/Berlin");
        let day = fires_on_local_day(&s, "2026-10-25");
        for t in [
            "2026-10-25T00:00:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T01:30:00Z",
        ] {
            assert!(day.contains(&utc(t)), "missing {t}");
        }
    }

    #[test]
    fn utc_basics() {
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "*/5 * * * *",
                "2026-01-01T12:03:30Z",
                &["2026-01-01T12:05:00Z", "2026-01-01T12:10:00Z"],
            ),
            (
                "* * * * *",
                "2026-01-01T12:00:00Z",
                &["2026-01-01T12:01:00Z", "2026-01-01T12:02:00Z"],
            ),
            (
                "0 9 * * 1-5",
                "2026-01-02T10:00:00Z", // Friday
                &["2026-01-05T09:00:00Z", "2026-01-06T09:00:00Z"],
            ),
            (
                "0 0 * * 0",
                "2026-01-01T00:00:00Z",
                &["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"],
            ),
            (
                "0 0 * * 7",
                "2026-01-01T00:00:00Z",
                &["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"],
            ),
            (
                "0 0 * * 5-7",
                "2026-01-01T00:00:00Z",
                &[
                    "2026-01-02T00:00:00Z",
                    "2026-01-03T00:00:00Z",
                    "2026-01-04T00:00:00Z",
                    "2026-01-09T00:00:00Z",
                ],
            ),
            (
                "0 12 * jan,Jul sun",
                "2026-01-20T00:00:00Z",
                &[
                    "2026-01-25T12:00:00Z",
                    "2026-07-05T12:00:00Z",
                    "2026-07-12T12:00:00Z",
                ],
            ),
            (
                "0 0 1 MAR-MAY MON-FRI",
                "2026-02-27T00:00:00Z",
                &[
                    "2026-03-01T00:00:00Z", // Sunday, but the 1st (OR rule)
                    "2026-03-02T00:00:00Z",
                ],
            ),
            (
                "0 0 13 * *",
                "2026-01-01T00:00:00Z",
                &["2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z"],
            ),
            (
                "0 0 * * FRI",
                "2026-01-01T00:00:00Z",
                &["2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z"],
            ),
            // OR rule: every 13th and every Friday.
            (
                "0 0 13 * FRI",
                "2026-01-01T00:00:00Z",
                &[
                    "2026-01-02T00:00:00Z",
                    "2026-01-09T00:00:00Z",
                    "2026-01-13T00:00:00Z",
                    "2026-01-16T00:00:00Z",
                    "2026-01-23T00:00:00Z",
                    "2026-01-30T00:00:00Z",
                    "2026-02-06T00:00:00Z",
                    "2026-02-13T00:00:00Z",
                    "2026-02-20T00:00:00Z",
                ],
            ),
            // Vixie: a day field starting with `*` (even `*/2`) is unrestricted, so AND applies.
            (
                "0 0 */2 * FRI",
                "2026-01-01T00:00:00Z",
                &["2026-01-09T00:00:00Z", "2026-01-23T00:00:00Z"],
            ),
            (
                "0-30/10 9-17/4 * * *",
                "2026-01-01T00:00:00Z",
                &[
                    "2026-01-01T09:00:00Z",
                    "2026-01-01T09:10:00Z",
                    "2026-01-01T09:20:00Z",
                    "2026-01-01T09:30:00Z",
                    "2026-01-01T13:00:00Z",
                ],
            ),
            (
                "50/5 */12 * * *",
                "2026-01-01T00:00:00Z",
                &[
                    "2026-01-01T00:50:00Z",
                    "2026-01-01T00:55:00Z",
                    "2026-01-01T12:50:00Z",
                ],
            ),
            (
                "0 0 29 2 *",
                "2026-01-01T00:00:00Z",
                &["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"],
            ),
            (
                "0 0 31 * *",
                "2026-01-31T00:00:00Z",
                &["2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z"],
            ),
        ];
        for (expr, after, want) in cases {
            assert_eq!(&fires(expr, "UTC", after, want.len()), want, "{expr}");
        }
    }

    #[test]
    fn macros() {
        let cases = [
            ("@yearly", "2027-01-01T00:00:00Z"),
            ("@annually", "2027-01-01T00:00:00Z"),
            ("@monthly", "2026-02-01T00:00:00Z"),
            ("@weekly", "2026-01-04T00:00:00Z"),
            ("@daily", "2026-01-02T00:00:00Z"),
            ("@MIDNIGHT", "2026-01-02T00:00:00Z"),
            ("@hourly", "2026-01-01T01:00:00Z"),
        ];
        for (m, want) in cases {
            assert_eq!(fires(m, "UTC", "2026-01-01T00:00:00Z", 1), [want], "{m}");
        }
        // @hourly is a wildcard-hour schedule: it fires in both copies of a repeated hour.
        let s = sched("@hourly", "America/Chicago");
        assert_eq!(fires_on_local_day(&s, "2026-11-01").len(), 25);
        // @daily is fixed-hour: midnight in a midnight gap fires at the transition.
        assert_eq!(
            fires("@daily", "America/Santiago", "2026-09-05T12:00:00Z", 2),
            ["2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"]
        );
    }

    #[test]
    fn accessors_and_period() {
        let s = sched("  */15 * * * *  ", "America/Chicago");
        assert_eq!(s.expression(), "*/15 * * * *");
        assert_eq!(s.timezone().name(), "America/Chicago");
        let t = utc("2026-06-01T00:00:00Z");
        assert_eq!(s.period(t), Some(Duration::minutes(15)));
        let daily = sched("0 0 * * *", "America/Chicago");
        assert_eq!(daily.period(t), Some(Duration::days(1)));
        // Across spring-forward the local day is 23 hours long.
        assert_eq!(
            daily.period(utc("2026-03-07T12:00:00Z")),
            Some(Duration::hours(23))
        );
        assert_eq!(sched("@yearly", "UTC").period(t), Some(Duration::days(365)));
        // At the end of representable time there are no further fires.
        assert_eq!(s.next_after(DateTime::<Utc>::MAX_UTC), None);
        assert_eq!(s.period(DateTime::<Utc>::MAX_UTC), None);
        assert!(s.upcoming(t, 0).is_empty());
    }

    #[test]
    fn strictly_increasing_over_a_year() {
        let exprs = [
            "*/15 * * * *",
            "30 2 * * *",
            "0,30 1-3 * * *",
            "*/7 */2 * * *",
            "0 0 13 * FRI",
            "* 2 * * *",
            "0 0-23/3 * * *",
            "30 14-23/3 * * *",
            "0 */3 * * *",
            "0 1-3 * * *",
            "0 1,2 * * *",
            "*/30 1 * * *",
        ];
        let zones = [
            "America/Chicago",
            "Europe/Berlin",
            "Australia/Lord_Howe",
            "America/Santiago",
            "UTC",
        ];
        let start = utc("2026-01-01T00:00:00Z");
        let end = utc("2027-01-01T00:00:00Z");
        for expr in exprs {
            for tz in zones {
                let s = sched(expr, tz);
                let mut prev = start;
                let mut count = 0;
                while let Some(t) = s.next_after(prev) {
                    assert!(t > prev, "{expr} in {tz}: {t} after {prev}");
                    if t > end {
                        break;
                    }
                    prev = t;
                    count += 1;
                }
                assert!(count > 0, "{expr} in {tz}");
                // Fixed times fire once per wall time per local day, gap or repeat.
                let per_day = match expr {
                    "30 2 * * *" => 1,
                    "0 0-23/3 * * *" => 8,
                    "30 14-23/3 * * *" => 4,
                    _ => 0,
                };
                if per_day > 0 {
                    assert_eq!(count, 365 * per_day, "{expr} in {tz}: once per wall time");
                }
            }
        }
    }

    #[test]
    fn next_after_is_strict_at_odd_instants() {
        let s = sched("*/15 * * * *", "America/Chicago");
        let mut t = utc("2026-11-01T05:00:00Z");
        while t < utc("2026-11-01T10:00:00Z") {
            let n = s.next_after(t).unwrap();
            assert!(n > t && n - t <= Duration::minutes(15), "{t} -> {n}");
            t += Duration::seconds(437);
        }
    }

    #[test]
    fn parse_errors() {
        let cases = [
            (
                "61 * * * *",
                r#"cron "61 * * * *": minute 61 is outside 0-59"#,
            ),
            (
                "0 24 * * *",
                r#"cron "0 24 * * *": hour 24 is outside 0-23"#,
            ),
            (
                "0 0 0 * *",
                r#"cron "0 0 0 * *": day-of-month 0 is outside 1-31"#,
            ),
            (
                "0 0 1 13 *",
                r#"cron "0 0 1 13 *": month 13 is outside 1-12"#,
            ),
            (
                "0 0 * * 8",
                r#"cron "0 0 * * 8": day-of-week 8 is outside 0-7"#,
            ),
            (
                "*/0 * * * *",
                r#"cron "*/0 * * * *": minute step in "*/0" must be a whole number of at least 1"#,
            ),
            (
                "*/x * * * *",
                r#"cron "*/x * * * *": minute step in "*/x" must be a whole number of at least 1"#,
            ),
            (
                "* * *",
                "cron \"* * *\": expected 5 fields (minute hour day-of-month month day-of-week), got 3",
            ),
            (
                "* * * * * *",
                "cron \"* * * * * *\": expected 5 fields (minute hour day-of-month month day-of-week), got 6",
            ),
            (
                "",
                "cron \"\": expected 5 fields (minute hour day-of-month month day-of-week), got 0",
            ),
            (
                "abc * * * *",
                r#"cron "abc * * * *": minute "abc" is not valid (expected a number 0-59)"#,
            ),
            (
                "0 0 * FOO *",
                r#"cron "0 0 * FOO *": month "FOO" is not valid (expected a number 1-12 or a name JAN-DEC)"#,
            ),
            (
                "0 0 * * MON-",
                r#"cron "0 0 * * MON-": day-of-week "" is not valid (expected a number 0-7 or a name SUN-SAT)"#,
            ),
            (
                "1,,2 * * * *",
                r#"cron "1,,2 * * * *": minute "" is not valid (expected a number 0-59)"#,
            ),
            (
                "+5 * * * *",
                r#"cron "+5 * * * *": minute "+5" is not valid (expected a number 0-59)"#,
            ),
            (
                "30-10 * * * *",
                r#"cron "30-10 * * * *": minute range "30-10" starts after it ends"#,
            ),
            (
                "@reboot",
                r#"cron "@reboot": unknown macro (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"#,
            ),
            (
                "0 0 30 2 *",
                r#"cron "0 0 30 2 *": never fires in the next 5 years"#,
            ),
        ];
        for (expr, want) in cases {
            assert_eq!(err(expr), want, "{expr:?}");
        }
        assert!(matches!(
            CronSchedule::parse("0 0 * * *", "Mars/Base", now()),
            Err(ScheduleError::UnknownTimezone(tz)) if tz == "Mars/Base"
        ));
    }

    #[test]
    fn impossible_schedules_are_rejected_fast() {
        for expr in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "* * 31 2 *"] {
            let started = Instant::now();
            let result = CronSchedule::parse(expr, "America/Chicago", now());
            assert!(
                matches!(result, Err(ScheduleError::NeverFires { .. })),
                "{expr}"
            );
            assert!(started.elapsed().as_millis() < 50, "{expr} too slow");
        }
    }

    #[test]
    fn timezones() {
        assert_eq!(parse_timezone("UTC"), Ok(Zone::utc()));
        assert_eq!(
            parse_timezone("America/Chicago").map(|z| z.name().to_string()),
            Ok("America/Chicago".to_string())
        );
        assert_eq!(
            parse_timezone("Mars/Base").unwrap_err().to_string(),
            r#"unknown time zone "Mars/Base": give an IANA name such as Europe/Berlin or UTC"#
        );
        assert!(parse_timezone("").is_err());
    }

    #[test]
    fn one_shots() {
        let now = utc("2026-06-01T00:00:00Z");
        assert_eq!(
            parse_one_shot("2026-12-01T10:00:00Z", now),
            Ok(utc("2026-12-01T10:00:00Z"))
        );
        assert_eq!(
            parse_one_shot(" 2026-12-01T10:00:00-06:00 ", now),
            Ok(utc("2026-12-01T16:00:00Z"))
        );
        assert_eq!(
            parse_one_shot("2026-12-01T10:00:00", now)
                .unwrap_err()
                .to_string(),
            r#"time "2026-12-01T10:00:00" has no UTC offset; add Z or an offset such as +02:00 (RFC 3339)"#
        );
        assert!(matches!(
            parse_one_shot("2026-12-01 10:00:00.5", now),
            Err(ScheduleError::MissingOffset { .. })
        ));
        assert_eq!(
            parse_one_shot("next tuesday", now).unwrap_err().to_string(),
            r#"time "next tuesday" is not an RFC 3339 timestamp such as 2026-12-01T10:00:00Z"#
        );
        assert!(matches!(
            parse_one_shot("2026-12-01", now),
            Err(ScheduleError::InvalidTimestamp { .. })
        ));
        assert_eq!(
            parse_one_shot("2026-01-01T00:00:00Z", now)
                .unwrap_err()
                .to_string(),
            r#"time "2026-01-01T00:00:00Z" is in the past (now is 2026-06-01T00:00:00Z)"#
        );
        // 9999-12-31 at -14:00 is the year 10000 in UTC: stored, it would sort first.
        assert_eq!(
            parse_one_shot("9999-12-31T23:59:59-14:00", now)
                .unwrap_err()
                .to_string(),
            r#"time "9999-12-31T23:59:59-14:00" is after the year 9999 in UTC"#
        );
        assert!(parse_one_shot("9999-12-31T23:59:59Z", now).is_ok());
        assert!(matches!(
            parse_one_shot("2026-06-01T00:00:00Z", now),
            Err(ScheduleError::InPast { .. })
        ));
    }
}
