//! A tool's room, the same on every engine: how many more of its runs may start now under
//! its `max_running` and `rate` (both counted over all workers), and the rate's per-slice
//! start counts (`tool_starts`) as the engines read and write them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::clock::{parse_ts, ts};
use crate::flow::{Rate, Room, Slice, ToolLimits, Window, room_in};

/// A tool's room before its rate's window is read: what `max_running` leaves, and the rate
/// whose window may cut it further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoomPlan {
    left: i64,
    rate: Option<Rate>,
}

impl RoomPlan {
    /// `tool`'s room under `limits` while `running` of its runs run on every worker. A tool
    /// without limits has `i64::MAX` and nothing to read.
    pub fn of(limits: &ToolLimits, tool: &str, running: i64) -> RoomPlan {
        match limits.get(tool) {
            None => RoomPlan {
                left: i64::MAX,
                rate: None,
            },
            Some(limit) => RoomPlan {
                left: limit.max_running.map_or(i64::MAX, |max| max - running),
                rate: limit.rate,
            },
        }
    }

    /// The rate whose window the engine reads next (forgetting the slices that left it), if
    /// the room depends on it: not when `max_running` already leaves none.
    pub fn rate_to_read(&self) -> Option<Rate> {
        self.rate.filter(|_| self.left > 0)
    }

    /// The room, given what the rate asked for by [`RoomPlan::rate_to_read`] allows.
    pub fn room(&self, rate: Option<Room>) -> i64 {
        match rate {
            Some(r) => self.left.min(i64::from(r.starts)),
            None => self.left,
        }
    }
}

/// Starts to add to a tool's counter: `n` in the slice (start, end, as stored text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Starts<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The slice's first instant.
    pub slice_start: String,
    /// Its end (excluded).
    pub slice_end: String,
    /// How many started.
    pub n: i64,
}

/// The starts a claim at `now` records: per rate-limited tool among those it claimed (one
/// entry per claimed run), how many started, in the slice of its rate that `now` is in; in
/// tool order.
pub(crate) fn starts_to_record<'a>(
    limits: &ToolLimits,
    claimed_tools: impl IntoIterator<Item = &'a str>,
    now: DateTime<Utc>,
) -> Vec<Starts<'a>> {
    let mut started: BTreeMap<&str, (Rate, i64)> = BTreeMap::new();
    for tool in claimed_tools {
        if let Some(rate) = limits.get(tool).and_then(|l| l.rate) {
            started.entry(tool).or_insert((rate, 0)).1 += 1;
        }
    }
    started
        .into_iter()
        .map(|(tool, (rate, n))| {
            let (start, end) = rate.slice_of(now);
            Starts {
                tool,
                slice_start: ts(start),
                slice_end: ts(end),
                n,
            }
        })
        .collect()
}

/// The oldest slice start a rate's reads keep, as stored text: slices at or before it have
/// left every window.
pub(crate) fn horizon(rate: Rate, now: DateTime<Utc>) -> String {
    ts(rate.horizon(now))
}

/// The window of `rate` at `now` over a tool's stored slices (start, end, starts); a row whose
/// times do not parse is left out.
pub(crate) fn window_of_rows(
    rate: Rate,
    now: DateTime<Utc>,
    rows: impl IntoIterator<Item = (String, String, i64)>,
) -> Window {
    let slices: Vec<Slice> = rows
        .into_iter()
        .filter_map(|(start, end, n)| {
            Some(Slice {
                start: parse_ts(&start)?,
                end: parse_ts(&end)?,
                starts: n.max(0) as u64,
            })
        })
        .collect();
    Window::of_slices(rate, now, &slices)
}

/// What `rate` allows at `now` over a tool's stored slices.
pub(crate) fn room_of_rows(
    rate: Rate,
    now: DateTime<Utc>,
    rows: impl IntoIterator<Item = (String, String, i64)>,
) -> Room {
    room_in(rate, &window_of_rows(rate, now, rows))
}

/// The earliest instant one of `rooms` (full windows) opens again.
pub(crate) fn earliest_open(rooms: impl IntoIterator<Item = Room>) -> Option<DateTime<Utc>> {
    rooms.into_iter().filter_map(|r| r.opens_at).min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::ToolLimit;

    fn limits() -> ToolLimits {
        let rate = Rate::parse("2/1m").unwrap();
        ToolLimits::from([
            (
                "both".to_string(),
                ToolLimit {
                    max_running: Some(3),
                    rate: Some(rate),
                },
            ),
            (
                "max".to_string(),
                ToolLimit {
                    max_running: Some(1),
                    rate: None,
                },
            ),
        ])
    }

    #[test]
    fn max_running_first_then_the_rate_only_while_room_is_left() {
        let l = limits();
        let free = RoomPlan::of(&l, "free", 10);
        assert_eq!((free.rate_to_read(), free.room(None)), (None, i64::MAX));
        let full = RoomPlan::of(&l, "both", 3);
        assert_eq!((full.rate_to_read(), full.room(None)), (None, 0));
        let both = RoomPlan::of(&l, "both", 1);
        assert!(both.rate_to_read().is_some());
        let one = Room {
            starts: 1,
            opens_at: None,
        };
        assert_eq!(both.room(Some(one)), 1);
        assert_eq!(RoomPlan::of(&l, "max", 0).room(None), 1);
    }

    #[test]
    fn starts_are_counted_per_rate_limited_tool() {
        let l = limits();
        let now = DateTime::from_timestamp(90, 0).unwrap();
        let got = starts_to_record(&l, ["both", "max", "both", "free"], now);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].tool, got[0].n), ("both", 2));
        assert_eq!(got[0].slice_start, "1970-01-01T00:01:30.000Z");
        assert_eq!(got[0].slice_end, "1970-01-01T00:01:31.000Z");
    }
}
