//! Flow control's shared types and pure decisions: pauses (what an operator stopped), per-tool
//! limits (`max_running`, `rate`) and the sliding-window arithmetic of a rate.
//!
//! Limits are configuration, so each worker enforces the limits *it* is configured with, and
//! counts against them everything in the database: the running runs of the tool on every
//! worker, and the tool's starts on every worker within the window. Workers with the same
//! config therefore agree; give every worker the same `[limits]` (see OPS.md).

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

/// What a pause covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "scope", content = "value", rename_all = "lowercase")]
pub enum PauseScope {
    /// Every run.
    All,
    /// The runs (and schedules) of one tool.
    Tool(String),
    /// The runs (and schedules) of one session.
    Session(String),
}

impl PauseScope {
    /// The stored scope kind: `all`, `tool` or `session`.
    pub fn kind(&self) -> &'static str {
        match self {
            PauseScope::All => "all",
            PauseScope::Tool(_) => "tool",
            PauseScope::Session(_) => "session",
        }
    }

    /// The stored value: the tool or session, empty for `all`.
    pub fn value(&self) -> &str {
        match self {
            PauseScope::All => "",
            PauseScope::Tool(v) | PauseScope::Session(v) => v,
        }
    }

    /// From the stored kind and value; None for a kind this build does not know.
    pub fn from_stored(kind: &str, value: &str) -> Option<PauseScope> {
        match kind {
            "all" => Some(PauseScope::All),
            "tool" => Some(PauseScope::Tool(value.to_string())),
            "session" => Some(PauseScope::Session(value.to_string())),
            _ => None,
        }
    }
}

impl fmt::Display for PauseScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PauseScope::All => write!(f, "all"),
            PauseScope::Tool(t) => write!(f, "tool {t}"),
            PauseScope::Session(s) => write!(f, "session {s}"),
        }
    }
}

/// One pause as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    /// What it covers.
    #[serde(flatten)]
    pub scope: PauseScope,
    /// Since when.
    pub since: DateTime<Utc>,
    /// Who paused (`--by`).
    pub by: Option<String>,
    /// Why (`--reason`).
    pub reason: Option<String>,
}

impl Pause {
    /// ` by alice: API is down`: who paused and why, each part only when given.
    pub fn by_and_reason(&self) -> String {
        let by = self.by.as_deref().map(|b| format!(" by {b}"));
        let why = self.reason.as_deref().map(|r| format!(": {r}"));
        format!("{}{}", by.unwrap_or_default(), why.unwrap_or_default())
    }
}

/// The answer to a pause.
#[derive(Debug, Clone, Serialize)]
pub struct PauseOutcome {
    /// The pause in force (the earlier one if it was already paused).
    pub pause: Pause,
    /// False when that scope was already paused (nothing changed).
    pub new: bool,
}

/// The pauses in force, as a claim sees them.
#[derive(Debug, Clone, Default)]
pub struct Paused {
    /// Everything is paused.
    pub all: bool,
    /// Paused tools.
    pub tools: Vec<String>,
    /// Paused sessions.
    pub sessions: Vec<String>,
}

impl Paused {
    /// From the stored pauses.
    pub fn of(pauses: &[Pause]) -> Paused {
        let mut p = Paused::default();
        for pause in pauses {
            match &pause.scope {
                PauseScope::All => p.all = true,
                PauseScope::Tool(t) => p.tools.push(t.clone()),
                PauseScope::Session(s) => p.sessions.push(s.clone()),
            }
        }
        p
    }

    /// Whether a run (or schedule tick) of `tool` in `session` is held by a pause.
    pub fn holds(&self, tool: &str, session: &str) -> bool {
        self.all
            || self.tools.iter().any(|t| t == tool)
            || self.sessions.iter().any(|s| s == session)
    }
}

/// At most `count` starts in any `window`: `rate = "10/1m"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Starts allowed per window.
    pub count: u32,
    /// The window's length.
    pub window: Duration,
}

impl Rate {
    /// How far back a claim keeps and reads this rate's start counts: two windows.
    pub(crate) fn horizon(self, now: DateTime<Utc>) -> DateTime<Utc> {
        let twice = self.window.checked_mul(2).unwrap_or(Duration::MAX);
        crate::clock::saturating_sub(now, twice)
    }

    /// Parses `N/DURATION` (`10/1m`, `100/1h`, `5/30s`; `10/m` means `10/1m`).
    pub fn parse(s: &str) -> Result<Rate, String> {
        let bad = || format!("{s:?} is not a rate like \"10/1m\" (starts per window)");
        let (n, w) = s.split_once('/').ok_or_else(bad)?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 {
            return Err(format!("{s:?}: the count must be at least 1"));
        }
        let w = w.trim();
        let w = if w.starts_with(|c: char| c.is_ascii_digit()) {
            w.to_string()
        } else {
            format!("1{w}")
        };
        let window = crate::clock::parse_duration(&w).map_err(|e| format!("{s:?}: window {e}"))?;
        if window.is_zero() {
            return Err(format!("{s:?}: the window must be longer than zero"));
        }
        let window = Duration::from_std(window).map_err(|_| format!("{s:?}: window too long"))?;
        Ok(Rate { count, window })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.window.num_milliseconds();
        let w = crate::clock::format_duration(std::time::Duration::from_millis(ms.max(0) as u64));
        write!(f, "{}/{}", self.count, w)
    }
}

/// One tool's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolLimit {
    /// At most this many running runs of the tool, over all workers.
    pub max_running: Option<i64>,
    /// At most this many starts per window, over all workers.
    pub rate: Option<Rate>,
}

/// Limits by tool name.
pub type ToolLimits = BTreeMap<String, ToolLimit>;

/// What a rate allows at `now`, given the tool's starts within the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Starts allowed now.
    pub starts: u32,
    /// With no room: when the window next lets one start.
    pub opens_at: Option<DateTime<Utc>>,
}

/// A rate's window is counted in this many slices: starts are recorded per slice (one
/// counter row per tool and slice, not one row per start), and a slice counts until all of it
/// has left the window.
pub const SLICES: i64 = 60;

/// The starts of a tool within one slice of time `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// The slice's first instant.
    pub start: DateTime<Utc>,
    /// Its end (excluded).
    pub end: DateTime<Utc>,
    /// Starts recorded in it.
    pub starts: u64,
}

impl Rate {
    /// The slice of this rate's window that `t` falls in: `[start, start + window / 60)`,
    /// aligned to whole multiples of its width since the epoch (at least 1 ms wide).
    pub fn slice_of(&self, t: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let w = (self.window.num_milliseconds() / SLICES).max(1);
        let ms = t.timestamp_millis();
        let start = ms - ms.rem_euclid(w);
        let at = |ms| DateTime::from_timestamp_millis(ms).unwrap_or(t);
        (at(start), at(start.saturating_add(w)))
    }
}

/// What a rate's window holds at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Starts counted in the window.
    pub starts: u64,
    /// With `starts >= count`: when enough slices have left the window for one more start.
    pub opens_at: Option<DateTime<Utc>>,
}

impl Window {
    /// The window of `rate` at `now` over a tool's slices (any order). A slice counts whole
    /// while any part of it is inside `(now - window, now]`, so the count is never below the
    /// starts really inside: the limit holds for every window, and a full window opens at
    /// most one slice (window / 60) later than an exact count would open it.
    pub fn of_slices(rate: Rate, now: DateTime<Utc>, slices: &[Slice]) -> Window {
        let from = crate::clock::saturating_sub(now, rate.window);
        let mut inside: Vec<Slice> = slices.iter().copied().filter(|s| s.end > from).collect();
        inside.sort_by_key(|s| s.start);
        let total: u64 = inside.iter().map(|s| s.starts).sum();
        let count = u64::from(rate.count);
        if total < count {
            return Window {
                starts: total,
                opens_at: None,
            };
        }
        // Oldest slices leave first; one more start is allowed once fewer than `count` remain.
        let mut left = total;
        let mut opens_at = None;
        for s in &inside {
            left -= s.starts;
            if left < count {
                opens_at = Some(crate::clock::saturating_add(s.end, rate.window));
                break;
            }
        }
        Window {
            starts: total,
            opens_at,
        }
    }

    /// The window of `rate` at `now` over single start times (each recorded in its slice).
    pub fn of(rate: Rate, now: DateTime<Utc>, starts: &[DateTime<Utc>]) -> Window {
        let mut slices: Vec<Slice> = Vec::new();
        for t in starts {
            let (start, end) = rate.slice_of(*t);
            match slices.iter_mut().find(|s| s.start == start) {
                Some(s) => s.starts += 1,
                None => slices.push(Slice {
                    start,
                    end,
                    starts: 1,
                }),
            }
        }
        Window::of_slices(rate, now, &slices)
    }
}

/// What `rate` allows given its window: `count` less the starts counted, or, when full, when
/// it opens.
pub fn room_in(rate: Rate, w: &Window) -> Room {
    let count = u64::from(rate.count);
    if w.starts < count {
        return Room {
            starts: (count - w.starts) as u32,
            opens_at: None,
        };
    }
    Room {
        starts: 0,
        opens_at: w.opens_at,
    }
}

/// The window over `recent` start times: see [`Window::of`] and [`room_in`].
pub fn room(rate: Rate, now: DateTime<Utc>, recent: &[DateTime<Utc>]) -> Room {
    room_in(rate, &Window::of(rate, now, recent))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000).expect("in range")
    }

    #[test]
    fn rates_parse_with_and_without_a_window_count() {
        let r = Rate::parse("10/1m").unwrap();
        assert_eq!((r.count, r.window), (10, Duration::minutes(1)));
        assert_eq!(Rate::parse("10/m").unwrap(), r);
        assert_eq!(
            Rate::parse(" 5 / 30s ").unwrap().window,
            Duration::seconds(30)
        );
        assert_eq!(r.to_string(), "10/1m");
        for bad in ["10", "x/1m", "0/1m", "10/0s", "10/fortnight", "-1/1m"] {
            assert!(Rate::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn an_empty_window_allows_the_whole_rate() {
        let r = Rate::parse("3/1m").unwrap();
        assert_eq!(
            room(r, t0(), &[]),
            Room {
                starts: 3,
                opens_at: None
            }
        );
    }

    #[test]
    fn a_full_window_opens_when_the_slice_of_its_oldest_start_leaves() {
        let clock = ManualClock::new(t0());
        let r = Rate::parse("2/1m").unwrap();
        // A minute's slices are a second wide; t0 is on a whole second.
        assert_eq!(r.slice_of(t0()), (t0(), t0() + Duration::seconds(1)));
        clock.advance(Duration::milliseconds(300));
        let first = clock.now();
        clock.advance(Duration::seconds(10));
        let second = clock.now();
        let starts = [first, second];
        clock.advance(Duration::seconds(5));
        assert_eq!(room(r, clock.now(), &starts[..1]).starts, 1);
        let full = room(r, clock.now(), &starts);
        assert_eq!(full.starts, 0);
        // The first start's slice ends at t0 + 1 s; a minute later it has left the window.
        let opens = t0() + Duration::seconds(61);
        assert_eq!(full.opens_at, Some(opens));
        clock.set(opens);
        assert_eq!(room(r, clock.now(), &starts).starts, 1);
        // A millisecond before, its slice still counts (whole: never fewer than really inside).
        clock.set(opens - Duration::milliseconds(1));
        assert_eq!(room(r, clock.now(), &starts).starts, 0);
        clock.set(second + Duration::seconds(61));
        assert_eq!(room(r, clock.now(), &starts).starts, 2);
    }

    #[test]
    fn more_starts_than_the_rate_wait_for_enough_to_leave() {
        // A lowered rate (or a config that differed) may leave more starts in the window than
        // it allows: the next start waits until only count - 1 remain.
        let r = Rate::parse("2/1m").unwrap();
        let s: Vec<_> = (0..4).map(|i| t0() + Duration::seconds(i)).collect();
        let now = t0() + Duration::seconds(30);
        assert_eq!(
            room(r, now, &s),
            Room {
                starts: 0,
                opens_at: Some(s[2] + Duration::seconds(1) + Duration::minutes(1))
            }
        );
    }

    #[test]
    fn starts_in_one_slice_count_together_and_slices_tile_the_time_line() {
        let r = Rate::parse("3/6s").unwrap();
        // 100 ms slices.
        let (a, b) = r.slice_of(t0() + Duration::milliseconds(250));
        assert_eq!(
            (a, b),
            (
                t0() + Duration::milliseconds(200),
                t0() + Duration::milliseconds(300)
            )
        );
        assert_eq!(r.slice_of(b).0, b);
        let s = [t0(), t0(), t0() + Duration::milliseconds(50)];
        let w = Window::of(r, t0() + Duration::seconds(1), &s);
        assert_eq!(w.starts, 3);
        assert_eq!(
            w.opens_at,
            Some(t0() + Duration::milliseconds(100) + Duration::seconds(6))
        );
        // A tiny window still has 1 ms slices.
        assert_eq!(
            Rate::parse("1/10ms").unwrap().slice_of(t0()).1,
            t0() + Duration::milliseconds(1)
        );
    }

    #[test]
    fn pauses_hold_their_tool_session_or_everything() {
        let pause = |scope| Pause {
            scope,
            since: t0(),
            by: None,
            reason: None,
        };
        let p = Paused::of(&[pause(PauseScope::Tool("http".into()))]);
        assert!(p.holds("http", "s1"));
        assert!(!p.holds("echo", "s1"));
        let p = Paused::of(&[pause(PauseScope::Session("s1".into()))]);
        assert!(p.holds("echo", "s1") && !p.holds("echo", "s2"));
        assert!(Paused::of(&[pause(PauseScope::All)]).holds("x", "y"));
    }
}
