//! A schedule's fire instants as the schedule pages show them: in UTC and in the schedule's
//! zone (with the zone's abbreviation then), and their table.

use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::Serialize;

use crate::schedule::Zone;

/// A fire instant in UTC and in the schedule's zone.
#[derive(Debug, Serialize)]
pub struct Fire {
    /// In UTC.
    pub utc: DateTime<Utc>,
    /// In the schedule's zone, with its offset (RFC 3339).
    pub local: String,
    /// The zone's abbreviation then (CET, CEST).
    pub zone: String,
}

/// `times` in zone `tz` (in UTC when `tz` is not a zone).
pub fn fires(times: &[DateTime<Utc>], tz: &str) -> Vec<Fire> {
    let zone = Zone::parse(tz);
    times
        .iter()
        .map(|t| match &zone {
            Some(z) => Fire {
                utc: *t,
                local: z.local(*t).format("%Y-%m-%d %H:%M:%S%:z").to_string(),
                zone: z.abbreviation(*t),
            },
            None => Fire {
                utc: *t,
                local: t.format("%Y-%m-%d %H:%M:%S+00:00").to_string(),
                zone: "UTC".into(),
            },
        })
        .collect()
}

/// The fires as a table: local time, zone, UTC.
pub fn fires_table(f: &[Fire]) -> Markup {
    html! {
        table.dense.fires {
            thead { tr { th { "Local" } th { "Zone" } th { "UTC" } } }
            tbody { @for x in f { tr {
                td.mono { (x.local) } td { (x.zone) } td.mono { (x.utc.format("%Y-%m-%d %H:%M:%SZ")) }
            } } }
        }
    }
}
