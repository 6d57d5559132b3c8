//! IANA time zones: the tz database compiled into the executable (jiff's bundled copy).
//!
//! Every host reads the same bundled database, never its own `/usr/share/zoneinfo`, so hosts
//! that share a Postgres database agree on every fire time whatever their packages.
//!
//! Not chrono-tz: its tables hold a string pointer per transition (66,000 of them), which a
//! position-independent executable relocates at start, so every toolq process kept ~1 MiB of
//! them resident whether it ever named a zone or not (issue 19, BENCHMARKS.md session 11).
//! jiff keeps the database as compact TZif bytes and reads a zone when it is first named.

use std::fmt;

use chrono::{
    DateTime, Datelike, FixedOffset, LocalResult, NaiveDateTime, Offset, TimeDelta, Timelike, Utc,
};
use jiff::tz::{AmbiguousOffset, TimeZone};

/// An IANA time zone (e.g. `America/Chicago`), named as the tz database spells it.
#[derive(Clone)]
pub struct Zone {
    tz: TimeZone,
}

impl Zone {
    /// UTC.
    pub fn utc() -> Zone {
        Zone { tz: TimeZone::UTC }
    }

    /// The zone of this IANA name (letter case is not significant: `america/chicago` is
    /// `America/Chicago`), or None if the tz database has no such zone.
    pub fn parse(name: &str) -> Option<Zone> {
        let name = name.trim();
        if name.is_empty() {
            return None;
        }
        let tz = TimeZone::get(name).ok()?;
        // Only named zones of the database: never a fixed offset or a POSIX TZ string.
        tz.iana_name()?;
        Some(Zone { tz })
    }

    /// The zone's name as the tz database spells it.
    pub fn name(&self) -> &str {
        self.tz.iana_name().unwrap_or("UTC")
    }

    /// The UTC offset in force at instant `t`.
    pub fn offset(&self, t: DateTime<Utc>) -> FixedOffset {
        let secs = timestamp(t).map_or(0, |ts| self.tz.to_offset(ts).seconds());
        fixed(secs)
    }

    /// Instant `t` on this zone's wall clock, with its offset.
    pub fn local(&self, t: DateTime<Utc>) -> DateTime<FixedOffset> {
        t.with_timezone(&self.offset(t))
    }

    /// The zone's abbreviation at instant `t` (`CST`, `CDT`; `-03` where the database has
    /// no letters).
    pub fn abbreviation(&self, t: DateTime<Utc>) -> String {
        match timestamp(t) {
            Some(ts) => self.tz.to_offset_info(ts).abbreviation().to_string(),
            None => self.local(t).format("%:z").to_string(),
        }
    }

    /// The instants whose wall time here is `wall`: one, two in a fall-back overlap
    /// (earliest first), or none in a spring-forward gap.
    pub fn instants(&self, wall: NaiveDateTime) -> LocalResult<DateTime<Utc>> {
        let Some(civil) = civil(wall) else {
            return LocalResult::None;
        };
        // An instant is one of `wall`'s only if the zone's clock reads `wall` then. The check
        // keeps this direction in agreement with `offset` (instant to wall time) where the
        // database's records would not: jiff reads Nuuk's 2023 switch, which kept -02 and
        // only ended DST, as a fold from -01.
        let at = |offset: jiff::tz::Offset| {
            let t = wall
                .checked_sub_signed(TimeDelta::seconds(i64::from(offset.seconds())))?
                .and_utc();
            (self.offset(t).local_minus_utc() == offset.seconds()).then_some(t)
        };
        match self.tz.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => match at(offset) {
                Some(t) => LocalResult::Single(t),
                None => LocalResult::None,
            },
            AmbiguousOffset::Gap { .. } => LocalResult::None,
            AmbiguousOffset::Fold { before, after } => match (at(before), at(after)) {
                (Some(a), Some(b)) => LocalResult::Ambiguous(a.min(b), a.max(b)),
                (Some(t), None) | (None, Some(t)) => LocalResult::Single(t),
                (None, None) => LocalResult::None,
            },
        }
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Zone {}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Zone({})", self.name())
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `t` for jiff; None outside jiff's years -9999..=9999, where the zone is taken as UTC.
fn timestamp(t: DateTime<Utc>) -> Option<jiff::Timestamp> {
    let nanos = i32::try_from(t.timestamp_subsec_nanos()).ok()?;
    jiff::Timestamp::new(t.timestamp(), nanos).ok()
}

/// A wall time for jiff; None outside its years -9999..=9999.
fn civil(wall: NaiveDateTime) -> Option<jiff::civil::DateTime> {
    jiff::civil::DateTime::new(
        i16::try_from(wall.year()).ok()?,
        i8::try_from(wall.month()).ok()?,
        i8::try_from(wall.day()).ok()?,
        i8::try_from(wall.hour()).ok()?,
        i8::try_from(wall.minute()).ok()?,
        i8::try_from(wall.second()).ok()?,
        i32::try_from(wall.nanosecond().min(999_999_999)).ok()?,
    )
    .ok()
}

/// An offset of the tz database (always within a day) as chrono's.
fn fixed(secs: i32) -> FixedOffset {
    FixedOffset::east_opt(secs).unwrap_or(Utc.fix())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn wall(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M").unwrap()
    }

    #[test]
    fn names_are_the_databases_and_letter_case_does_not_matter() {
        assert_eq!(
            Zone::parse("america/chicago").unwrap().name(),
            "America/Chicago"
        );
        assert_eq!(Zone::parse(" UTC ").unwrap(), Zone::utc());
        assert_eq!(Zone::parse("US/Central").unwrap().name(), "US/Central");
        for bad in [
            "",
            "  ",
            "Mars/Base",
            "+05:00",
            "EST5EDT,M3.2.0,M11.1.0",
            "Z",
        ] {
            assert!(Zone::parse(bad).is_none(), "{bad:?} parsed");
        }
    }

    #[test]
    fn offsets_and_abbreviations_follow_the_dst_rules() {
        let chicago = Zone::parse("America/Chicago").unwrap();
        // Spring-forward 2026-03-08 08:00Z: CST (-6) until then, CDT (-5) from then.
        let before = utc("2026-03-08T07:59:59Z");
        let after = utc("2026-03-08T08:00:00Z");
        assert_eq!(chicago.offset(before).local_minus_utc(), -6 * 3600);
        assert_eq!(chicago.offset(after).local_minus_utc(), -5 * 3600);
        assert_eq!(chicago.abbreviation(before), "CST");
        assert_eq!(chicago.abbreviation(after), "CDT");
        assert_eq!(
            chicago.local(after).to_rfc3339(),
            "2026-03-08T03:00:00-05:00"
        );
        let sao_paulo = Zone::parse("America/Sao_Paulo").unwrap();
        assert_eq!(sao_paulo.abbreviation(after), "-03");
        // The zone's rule goes on past the transitions listed in the database (chrono-tz's
        // tables, used before, stop short of 2100 and read July 2100 as CST).
        let july_2100 = utc("2100-07-01T12:00:00Z");
        assert_eq!(chicago.abbreviation(july_2100), "CDT");
        assert_eq!(chicago.offset(july_2100).local_minus_utc(), -5 * 3600);
        // Far outside the database's years the zone reads as UTC rather than failing.
        let far = DateTime::<Utc>::MAX_UTC;
        assert_eq!(chicago.offset(far).local_minus_utc(), 0);
    }

    #[test]
    fn wall_times_map_to_one_two_or_no_instants() {
        let chicago = Zone::parse("America/Chicago").unwrap();
        assert_eq!(
            chicago.instants(wall("2026-03-07T02:30")),
            LocalResult::Single(utc("2026-03-07T08:30:00Z"))
        );
        // 02:30 does not exist on the spring-forward day.
        assert_eq!(
            chicago.instants(wall("2026-03-08T02:30")),
            LocalResult::None
        );
        // 01:30 happens twice on the fall-back day: CDT first, then CST.
        assert_eq!(
            chicago.instants(wall("2026-11-01T01:30")),
            LocalResult::Ambiguous(utc("2026-11-01T06:30:00Z"), utc("2026-11-01T07:30:00Z"))
        );
        // Lord Howe moves by 30 minutes.
        let lord_howe = Zone::parse("Australia/Lord_Howe").unwrap();
        assert_eq!(
            lord_howe.instants(wall("2026-04-05T01:45")),
            LocalResult::Ambiguous(utc("2026-04-04T14:45:00Z"), utc("2026-04-04T15:15:00Z"))
        );
        assert_eq!(
            lord_howe.instants(wall("2026-10-04T02:15")),
            LocalResult::None
        );
        assert_eq!(Zone::utc().instants(NaiveDateTime::MAX), LocalResult::None);
        // Nuuk kept -02 through its 2023-10-28 change (DST ended, the offset stayed): one
        // instant, as the UTC-to-wall direction says.
        let nuuk = Zone::parse("America/Nuuk").unwrap();
        assert_eq!(
            nuuk.instants(wall("2023-10-28T23:30")),
            LocalResult::Single(utc("2023-10-29T01:30:00Z"))
        );
    }
}
